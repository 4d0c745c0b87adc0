"""summary.json's numbers computed twice: by metrics/summary.py and by the plain second
implementation in tests/recompute.py, on generated request tables (hypothesis) with the edge cases
that break formulas: empty runs, every request failed, no good tokens, NaN latencies, multi-token
chunks, zero gaps, warm-up rows, rejections, requests never sent; rows whose schedule, slot and
send differ (queueing, the client's own lag), connects, reasoning and tool-call tokens, LoRA
adapters, sessions with and without the workload's planned turns, and older files without the
newer columns."""

from __future__ import annotations

import math

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from metrics.slo import SLO
from metrics.summary import summarize
from tests.recompute import summary_by_hand
from tests.telemetry_fixtures import request_table

MS = 1_000_000
FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
# columns a file written before them lacks (summarize falls back: metrics/summary.py's _col_or ...)
NEWER_COLUMNS = ("reasoning_tokens", "tool_call_tokens", "ttfa_s", "slot_ns", "tokens_source", "connect_s", "lora",
                 "session_id")


def same(a, b) -> bool:
    """Equal to rounding; NaN equals NaN, inf only inf; a flag only the same flag; mappings key by key."""
    if isinstance(b, dict):
        return isinstance(a, dict) and a.keys() == b.keys() and all(same(a[k], b[k]) for k in b)
    if isinstance(b, bool):
        return a is b
    if isinstance(b, str):                  # a reason: the summary says it, in its own words
        return isinstance(a, str) and b in a
    if isinstance(a, (str, dict, list)):    # "missing", or a number where a mapping belongs
        return False
    if isinstance(a, float) and math.isnan(a) or isinstance(b, float) and math.isnan(b):
        return isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b)
    if math.isinf(a) or math.isinf(b):
        return a == b
    return a == pytest.approx(b, rel=1e-9, abs=1e-9)


def ok_row(sent_ms: int, ttft_ms: int, gaps_ms: list[int], tokens: list[int], tail_ms: int = 0, **kw) -> dict:
    """A completed request: chunks at sent + ttft, then after each gap, carrying ``tokens``."""
    sent = sent_ms * MS
    chunks = [sent + ttft_ms * MS]
    for g in gaps_ms:
        chunks.append(chunks[-1] + g * MS)
    n = sum(tokens)
    ttft, e2el = (chunks[0] - sent) / 1e9, (chunks[-1] - sent) / 1e9
    row = {"sent": sent_ms / 1e3, "status": "ok", "sent_ns": sent, "scheduled_ns": sent, "slot_ns": sent,
           "chunk_ns": chunks, "chunk_tokens": tokens, "first_token_ns": chunks[0], "end_ns": chunks[-1],
           "done_ns": chunks[-1] + tail_ms * MS, "output_tokens": n, "ttft_s": ttft, "e2el_s": e2el,
           "tpot_s": (e2el - ttft) / (n - 1) if n > 1 else None, "http_status": 200}
    row.update(kw)
    return row


def failed_row(sent_ms: int, status: str, http: int | None, partial: int | None, lasted_ms: int | None, **kw):
    sent = sent_ms * MS
    row = {"sent": sent_ms / 1e3, "status": status, "sent_ns": sent, "scheduled_ns": sent, "slot_ns": sent,
           "chunk_ns": [], "chunk_tokens": [], "first_token_ns": None, "end_ns": None,
           "done_ns": None if lasted_ms is None else sent + lasted_ms * MS, "output_tokens": partial,
           "ttft_s": None, "tpot_s": None, "e2el_s": None, "http_status": http}
    row.update(kw)
    return row


@st.composite
def load_and_groups(draw, sent_ms: int) -> dict:
    """A row's schedule (the client's lag after its slot; the wait for the slot; a slot never
    recorded), its connect, adapter, session and how its token counts were known."""
    lag, wait = draw(st.integers(0, 30)), draw(st.one_of(st.just(0), st.integers(1, 500)))
    no_slot = draw(st.integers(0, 9)) == 0
    return {"scheduled_ns": (sent_ms - lag - wait) * MS, "slot_ns": None if no_slot else (sent_ms - lag) * MS,
            "connect_s": draw(st.one_of(st.none(), st.none(), st.integers(0, 40).map(lambda c: c / 1e3))),
            "lora": draw(st.sampled_from([None, None, "a", "b"])),
            "session_id": draw(st.sampled_from([None, "s1", "s2", "s3"])),
            "tokens_source": draw(st.sampled_from(["usage", "usage_continuous", "usage+tokenizer_split"])),
            "warmup": draw(st.sampled_from([False] * 5 + [True]))}


@st.composite
def ok_rows(draw):
    k = draw(st.integers(1, 6))
    ttft = draw(st.one_of(st.integers(1, 3000), st.sampled_from([100, 500, 1500, 3000])))   # limits: inclusive
    sent = draw(st.integers(0, 60_000))
    tokens = draw(st.lists(st.integers(1, 3), min_size=k, max_size=k))
    row = ok_row(sent, ttft, draw(st.lists(st.integers(0, 400), min_size=k - 1, max_size=k - 1)), tokens,
                 draw(st.integers(0, 50)), **draw(load_and_groups(sent)))
    # reasoning and tool-call tokens (null: never told apart); TTFA at one of the chunks, or none
    row["reasoning_tokens"] = draw(st.one_of(st.none(), st.integers(0, sum(tokens))))
    row["tool_call_tokens"] = draw(st.one_of(st.none(), st.integers(0, sum(tokens))))
    answer = draw(st.one_of(st.none(), st.integers(0, k - 1)))
    row["ttfa_s"] = None if answer is None else (row["chunk_ns"][answer] - row["sent_ns"]) / 1e9
    if draw(st.integers(0, 9)) == 0:        # records without latencies (NaN): left out, fail TTFT/E2EL SLOs
        row.update(ttft_s=None, tpot_s=None, e2el_s=None)
    return row


@st.composite
def failed_rows(draw):
    sent = draw(st.integers(0, 60_000))
    row = failed_row(sent, draw(st.sampled_from(["http_error", "timeout", "connection_error", "truncated"])),
                     draw(st.sampled_from([None, 429, 503, 500])), draw(st.sampled_from([None, 0, 3])),
                     draw(st.sampled_from([None, 0, 20, 900])), **draw(load_and_groups(sent)))
    if draw(st.integers(0, 9)) == 0:        # cancelled before it was sent (waiting for its slot at the end)
        row.update(status="cancelled", sent_ns=None, slot_ns=None, done_ns=None, http_status=None, connect_s=None)
    return row


rows_st = st.lists(st.one_of(ok_rows(), failed_rows()), max_size=25)
slo_st = st.fixed_dictionaries({"ttft_ms": st.sampled_from([None, 100, 500, 1500, 3000]),
                                "tpot_ms": st.sampled_from([None, 0, 20, 100, 400]),
                                "e2el_ms": st.sampled_from([None, 1000, 2500]),
                                "ttfa_ms": st.sampled_from([None, 500, 1500]),
                                "percentile": st.sampled_from([50, 90, 99])})
cost_st = st.fixed_dictionaries({"model": st.just("rental"), "num_gpus": st.integers(0, 8),
                                 "hourly_per_gpu": st.sampled_from([0.0, 1.5, 2.75]), "num_hosts": st.integers(1, 2),
                                 "hourly_per_host": st.sampled_from([0.0, 0.2]),
                                 "extra_hourly": st.sampled_from([{}, {"network": 0.1}])})
dropped_st = st.one_of(st.just(()), st.lists(st.sampled_from(NEWER_COLUMNS), unique=True))
# the workload's planned turns: s1 and s2 of the drawn ones, s4 never sent; s3 not planned
planned_st = st.one_of(st.none(), st.fixed_dictionaries({"s1": st.integers(1, 3), "s2": st.integers(1, 3),
                                                          "s4": st.just(1)}))
lag_limit_st = st.sampled_from([None, 0.0, 5.0, 10.0, 20.0])      # None: summarize's default


def both(rows, slo, cost, window=(0, 70_000 * MS), dropped=(), planned=None, lag_limit=None):
    table = request_table(rows).drop_columns(list(dropped))
    limit = {} if lag_limit is None else {"max_schedule_lag_ms": lag_limit}
    got = summarize(table, SLO.from_config(slo), *window, cost_cfg=cost, expected_turns=planned, **limit)
    want = summary_by_hand(table.to_pylist(), slo, *window, cost, expected_turns=planned, **limit)
    return got, want


def check(got, want):
    got = dict(got)
    if "per_adapter" in got:    # the by-hand adapters leave out the percentiles' intervals and std
        keys = next(iter(want.get("per_adapter", {}).values()), {}).keys()
        got["per_adapter"] = {a: {k: v for k, v in row.items() if k in keys} for a, row in got["per_adapter"].items()}
    wrong = {k: (got.get(k, "missing"), v) for k, v in want.items() if not same(got.get(k, "missing"), v)}
    assert wrong == {}, f"metrics/ vs by hand: {wrong}"
    for key in ("per_adapter", "cost_per_mtok_good_reason", "spec_tokens_per_step_hist"):
        assert (key in got) == (key in want), f"{key} in summary.json: {key in got}"


@FAST
@given(rows_st, slo_st, cost_st, dropped_st, planned_st, lag_limit_st)
@example([], {"ttft_ms": 100, "tpot_ms": None, "e2el_ms": None, "percentile": 99},
         {"model": "rental", "num_gpus": 1, "hourly_per_gpu": 1.5, "num_hosts": 1, "hourly_per_host": 0.0,
          "extra_hourly": {}}, (), None, None)
def test_summary_agrees_with_the_plain_implementation(rows, slo, cost, dropped, planned, lag_limit):
    if "session_id" in dropped:
        planned = None          # planned turns come with a live run, whose rows have the column
    check(*both(rows, slo, cost, dropped=dropped, planned=planned, lag_limit=lag_limit))


RENTAL = {"model": "rental", "num_gpus": 2, "hourly_per_gpu": 1.8, "num_hosts": 1, "hourly_per_host": 0.0,
          "extra_hourly": {}}          # 3.6 per hour: 0.07 for the 70 s window
SLO_500 = {"ttft_ms": 500, "tpot_ms": None, "e2el_ms": None, "percentile": 99}


def test_a_run_still_filling_agrees():
    # 80 requests sent every 50 ms, each 5 s: all in flight to the last send (3.95 s).  Second
    # quarter [987.5, 1975] ms: 20 in flight throughout, 20 sent inside for 975 - 50k ms each:
    # (19,750 + 19,500 - 9,500) / 987.5 = 30.13; last [2962.5, 3950]: (59,250 + 9,500) / 987.5
    # = 69.62; a rise of 39.5 above 3 x sqrt(99.75) = 30.0
    rows = [ok_row(50 * i, 5000, [], [1]) for i in range(80)]
    got, want = both(rows, SLO_500, RENTAL)
    check(got, want)
    assert got["in_flight_second_quarter"] == pytest.approx(29_750 / 987.5)
    assert got["in_flight_last_quarter"] == pytest.approx(68_750 / 987.5) and got["still_filling"] is True
    # the first 10 of them 5 s, the rest 100 ms: 10 + 2 in flight throughout both quarters
    got, want = both([ok_row(50 * i, 5000 if i < 10 else 100, [], [1]) for i in range(80)], SLO_500, RENTAL)
    check(got, want)
    assert got["in_flight_second_quarter"] == got["in_flight_last_quarter"] == 12.0
    assert got["still_filling"] is False


def test_empty_run_has_nan_rates_and_infinite_cost():
    got, want = both([], SLO_500, RENTAL)
    check(got, want)
    assert got["num_requests"] == 0 and math.isnan(got["request_throughput"]) and math.isnan(got["slo_attainment"])
    assert got["cost_total"] == pytest.approx(0.07) and got["cost_per_mtok_good"] == math.inf


def test_every_request_failed():
    rows = [failed_row(i * 100, "http_error", 503, None, 5) for i in range(4)]
    got, want = both(rows, SLO_500, RENTAL)
    check(got, want)
    assert (got["completed"], got["error_rate"], got["goodput_rps"]) == (0, 1.0, 0.0)
    assert got["cost_per_mtok_good"] == math.inf and got["cost_per_mtok_all"] == math.inf
    assert got["request_throughput"] == 0.0 and got["duration_s"] == pytest.approx(0.305)


def test_no_good_tokens_is_an_infinite_cost_not_a_number():
    rows = [ok_row(i * 100, 900, [10, 10], [1, 1, 1]) for i in range(3)]     # every TTFT over 500 ms
    got, want = both(rows, SLO_500, RENTAL)
    check(got, want)
    assert got["good_requests"] == 0 and got["good_output_tokens"] == 0
    assert got["cost_per_mtok_good"] == math.inf
    assert got["cost_per_mtok_all"] == pytest.approx(1e6 * 0.07 / 9)


def test_nan_latencies_are_left_out_of_the_statistics_and_fail_the_ttft_slo():
    rows = [ok_row(0, 100, [20], [1, 1]), ok_row(100, 300, [40], [1, 1], ttft_s=None, tpot_s=None, e2el_s=None)]
    got, want = both(rows, SLO_500, RENTAL)
    check(got, want)
    assert got["mean_ttft_ms"] == pytest.approx(100.0) and got["p99_ttft_ms"] == pytest.approx(100.0)
    assert got["good_requests"] == 1 and got["slo_attainment"] == 0.5
    assert got["completed"] == 2 and got["output_throughput"] == pytest.approx(4 / 0.44)


def test_multi_token_chunks_and_zero_gaps_in_the_itl():
    # chunks of 2, 1, 3 tokens 0, 30 and 0 ms apart: ITLs 0 | 30 | 0, 0, 0 (ms)
    rows = [ok_row(0, 50, [30, 0], [2, 1, 3])]
    got, want = both(rows, SLO_500, RENTAL)
    check(got, want)
    assert got["mean_itl_ms"] == pytest.approx(30 / 5) and got["p90_itl_ms"] == pytest.approx(18.0)
    assert got["mean_tpot_ms"] == pytest.approx(30 / 5)


def test_a_file_written_before_the_newer_columns():
    # three completed requests of 5 one-token chunks, TTFT 200 ms, sent on schedule at 0, 1 and 2 s
    rows = [ok_row(i * 1000, 200, [10] * 4, [1] * 5, tokens_source="usage") for i in range(3)]
    slo = {"ttft_ms": None, "tpot_ms": None, "e2el_ms": None, "ttfa_ms": 250, "percentile": 99}
    new, _ = both(rows, slo, RENTAL)
    assert new["spec_decode_steps"] == 12                # 4 decode steps each, counted by the server
    got, want = both(rows, slo, RENTAL, dropped=NEWER_COLUMNS)
    check(got, want)
    # no reasoning column: nothing was reasoning, TTFA is TTFT (all three pass 250 ms); no token
    # source: no decode step counted; no slot: the schedule; no connect, adapter or session
    assert got["total_reasoning_tokens"] == 0 and got["total_tool_call_tokens"] == 0
    assert got["mean_ttfa_ms"] == pytest.approx(200.0) and got["slo_attainment_ttfa"] == 1.0
    assert got["good_answer_tokens"] == got["good_output_tokens"] == 15
    assert got["spec_decode_steps"] == 0 and got["schedule_lag_max_ms"] == 0.0 and got["num_queued"] == 0
    assert got["num_connects"] == 0 and "per_adapter" not in got and got["num_sessions"] == 0


def test_a_percentile_at_the_limit_meets_it_and_none_misses():
    # three one-token answers, TTFT exactly 100 ms: p99 100 ms meets a 100 ms limit; no TPOT at all
    rows = [ok_row(i * 1000, 100, [], [1]) for i in range(3)]
    slo = {"ttft_ms": 100, "tpot_ms": 50, "e2el_ms": None, "percentile": 99}
    got, want = both(rows, slo, RENTAL)
    check(got, want)
    assert got["slo_ttft_p99_ms"] == 100.0 and got["slo_ttft_met"] is True
    # no request has a TPOT: none can miss it, so the run meets it vacuously and says so (metrics.slo's rule)
    assert math.isnan(got["slo_tpot_p99_ms"]) and got["slo_tpot_met"] is True and got["slo_tpot_vacuous"] is True
    assert got["slo_attainment_tpot"] == 1.0       # per request a one-token output passes TPOT


def test_one_good_token_is_a_finite_cost_with_no_reason():
    got, want = both([ok_row(0, 100, [], [1])], SLO_500, RENTAL)
    check(got, want)
    assert got["cost_per_mtok_good"] == pytest.approx(1e6 * 0.07)
    assert "cost_per_mtok_good_reason" not in got
