"""summary.json's headline numbers computed twice: by metrics/summary.py and by the plain second
implementation in tests/recompute.py, on generated request tables (hypothesis) with the edge cases
that break formulas: empty runs, every request failed, no good tokens, NaN latencies, multi-token
chunks, zero gaps, warm-up rows, rejections."""

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
HEADLINE = ("num_requests", "completed", "good_requests", "duration_s", "window_s", "completion_rate", "error_rate",
            "slo_attainment", "request_throughput", "output_throughput", "goodput_rps", "good_output_throughput",
            "good_output_tokens", "all_output_tokens", "cost_total", "cost_per_mtok_good", "cost_per_mtok_all",
            *(f"{s}_{k}_ms" for k in ("ttft", "tpot", "e2el", "itl") for s in ("mean", "median", "p90", "p99")))


def same(a, b) -> bool:
    """Equal to rounding; NaN equals NaN, inf only inf."""
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
def ok_rows(draw):
    k = draw(st.integers(1, 6))
    ttft = draw(st.one_of(st.integers(1, 3000), st.sampled_from([100, 500, 1500, 3000])))   # limits: inclusive
    row = ok_row(draw(st.integers(0, 60_000)), ttft, draw(st.lists(st.integers(0, 400),
                 min_size=k - 1, max_size=k - 1)), draw(st.lists(st.integers(1, 3), min_size=k, max_size=k)),
                 draw(st.integers(0, 50)), warmup=draw(st.sampled_from([False] * 5 + [True])))
    if draw(st.integers(0, 9)) == 0:        # records without latencies (NaN): left out, fail TTFT/E2EL SLOs
        row.update(ttft_s=None, tpot_s=None, e2el_s=None)
    return row


@st.composite
def failed_rows(draw):
    return failed_row(draw(st.integers(0, 60_000)),
                      draw(st.sampled_from(["http_error", "timeout", "connection_error", "truncated"])),
                      draw(st.sampled_from([None, 429, 503, 500])), draw(st.sampled_from([None, 0, 3])),
                      draw(st.sampled_from([None, 0, 20, 900])), warmup=draw(st.sampled_from([False] * 5 + [True])))


rows_st = st.lists(st.one_of(ok_rows(), failed_rows()), max_size=25)
slo_st = st.fixed_dictionaries({"ttft_ms": st.sampled_from([None, 100, 500, 1500, 3000]),
                                "tpot_ms": st.sampled_from([None, 0, 20, 100, 400]),
                                "e2el_ms": st.sampled_from([None, 1000, 2500]), "percentile": st.just(99)})
cost_st = st.fixed_dictionaries({"model": st.just("rental"), "num_gpus": st.integers(0, 8),
                                 "hourly_per_gpu": st.sampled_from([0.0, 1.5, 2.75]), "num_hosts": st.integers(1, 2),
                                 "hourly_per_host": st.sampled_from([0.0, 0.2]),
                                 "extra_hourly": st.sampled_from([{}, {"network": 0.1}])})


def both(rows, slo, cost, window=(0, 70_000 * MS)):
    table = request_table(rows)
    got = summarize(table, SLO.from_config(slo), *window, cost_cfg=cost)
    want = summary_by_hand(table.to_pylist(), slo, *window, cost)
    return got, want


def check(got, want):
    keys = [k for k in HEADLINE if k in want] + [k for k in want if k.startswith("slo_attainment_")]
    wrong = {k: (got.get(k), want[k]) for k in keys if not same(got.get(k, math.nan), want[k])}
    assert wrong == {}, f"metrics/ vs by hand: {wrong}"


@FAST
@given(rows_st, slo_st, cost_st)
@example([], {"ttft_ms": 100, "tpot_ms": None, "e2el_ms": None, "percentile": 99},
         {"model": "rental", "num_gpus": 1, "hourly_per_gpu": 1.5, "num_hosts": 1, "hourly_per_host": 0.0,
          "extra_hourly": {}})
def test_summary_headline_numbers_agree_with_the_plain_implementation(rows, slo, cost):
    check(*both(rows, slo, cost))


RENTAL = {"model": "rental", "num_gpus": 2, "hourly_per_gpu": 1.8, "num_hosts": 1, "hourly_per_host": 0.0,
          "extra_hourly": {}}          # 3.6 per hour: 0.07 for the 70 s window
SLO_500 = {"ttft_ms": 500, "tpot_ms": None, "e2el_ms": None, "percentile": 99}


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
