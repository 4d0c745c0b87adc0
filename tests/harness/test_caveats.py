"""An experiment's warnings (harness.caveats): once per kind with the runs counted, ranked by what
they change; and the console's last lines (harness.answer_record)."""

from __future__ import annotations

from harness.answer_record import answer_fields, console_lines, mlflow_tags
from harness.caveats import CHANGES, DETAILS, LIMITS, collect, from_rows
from metrics.answer import Answer

ENERGY = ("no power or energy source on this host (nvml: NVML did not start; dcgm: telemetry.dcgm.url is not set; "
          "rapl: /sys/class/powercap does not exist)")
RANDOM = {"token_counts_disagree": True, "token_counts_compared": 60, "token_mismatch_rate": 0.05,
          "token_mismatch_mean_abs": 0.15, "token_mismatch_max_abs": 5, "token_mismatch_mean": -0.05}


def _run(label: str, repeat: int = 0, **m) -> dict:
    return {"label": label, "role": "point", "repeat": repeat, "energy_available": False,
            "energy_unavailable_reason": ENERGY, "failed": 0, **m}


def test_one_line_per_kind_counted_and_ranked():
    rows = [_run("rate=2", **RANDOM), _run("rate=2", 1, **RANDOM), _run("rate=4"),
            _run("rate=8", still_filling=True, request_throughput=3.0, achieved_send_rate_rps=15.8,
                 in_flight_second_quarter=14.1, in_flight_last_quarter=46.4, **RANDOM),
            _run("rate=16", still_filling=True, request_throughput=7.7, achieved_send_rate_rps=8.0,
                 in_flight_second_quarter=4.0, in_flight_last_quarter=16.0, failed=3, num_requests=60),
            {"label": "probe", "role": "probe", "saturated": True}]  # a probe is not a load point of the answer
    got = from_rows(rows)
    assert [(c.kind, c.rank) for c in got] == [("still_filling", CHANGES), ("failed_requests", CHANGES),
                                              ("energy_not_measured", LIMITS), ("token_counts_random", DETAILS)]
    assert [c.text for c in got] == [
        "2 of 5 runs still filling (1 a growing backlog, 1 a fill-up): latencies a lower bound, SLO not met",
        "requests failed in 1 of 5 runs: 3 of 60 requests there (never good)",
        "energy not measured in 5 of 5 runs: no power or energy source on this host",
        "token counts: the client's re-tokenization differs from the server's usage in 3 of 5 runs (up to 5% of "
        "requests, both ways); every row took the server's count"]
    assert got[0].detail[0].startswith("rate=8: a growing backlog (completed 3 req/s of 15.8 sent); in flight rose "
                                       "from 14.1 to 46.4")
    assert got[0].detail[1].startswith("rate=16: a fill-up (completed 7.7 req/s of 8 sent)")
    assert got[2].detail == ("nvml: NVML did not start", "dcgm: telemetry.dcgm.url is not set",
                             "rapl: /sys/class/powercap does not exist")
    assert got[3].detail[1] == "rate=2: 5.0% of 60 requests differ; mean |diff| 0.15, max 5, mean server - client -0.05"
    assert got[3].detail[2].startswith("rate=2 repeat 1: ")


def test_what_changes_a_number_in_the_answer():
    got = collect([("a", {"saturated": True, "num_requests_unsent": 340}), ("b", {"client_limited": True}),
                   ("c", {"token_counts_client_only": 12}), ("d", {"point_failed": True, "failure_reason": "killed"}),
                   ("e", {"token_counts_disagree": True, "token_mismatch_mean": 1.0, "token_mismatch_mean_abs": 1.0,
                          "token_mismatch_rate": 1.0, "token_counts_compared": 10})])
    assert [(c.kind, c.rank) for c in got] == [
        ("stopped", CHANGES), ("client_limited", CHANGES), ("engine_fault", CHANGES),
        ("client_token_count", CHANGES), ("token_counts_systematic", LIMITS)]
    assert got[0].text == "1 of 5 runs stopped as over-saturated: 340 planned requests never sent"
    assert got[3].text == "output tokens counted by the client in 1 of 5 runs: no usage on 12 requests"
    assert got[4].text == "token counts differ systematically in 1 of 5 runs: server - client +1.00 a request"
    assert collect([("a", {"energy_available": True})]) == []


def test_the_console_ends_on_the_answer_after_the_ranked_warnings():
    rows = [_run("rate=2"), _run("rate=4", failed=1, num_requests=60)]
    record = answer_fields(Answer("sweep", ("the highest load that met the SLO is rate=2", "knee at rate=4")), rows)
    assert console_lines(record) == [
        "warnings, by what they change:",
        "  [changes the answer] requests failed in 1 of 2 runs: 1 of 60 requests there (never good)",
        "  [limits it] energy not measured in 2 of 2 runs: no power or energy source on this host",
        "answer (sweep):",
        "  the highest load that met the SLO is rate=2",
        "  knee at rate=4"]
    tags = mlflow_tags(record)
    assert tags["tokenfactory.answer"] == "the highest load that met the SLO is rate=2\nknee at rate=4"
    assert tags["mlflow.note.content"].endswith(
        "knee at rate=4\nwarning: requests failed in 1 of 2 runs: 1 of 60 requests there (never good)")
    assert console_lines({}) == [] and mlflow_tags({"warnings": []}) == {}


def test_a_backlog_growing_is_said_once_apart_from_a_fill_up():
    """A run whose wait rose through its arrivals' second half (metrics.filling.backlog_growing) is one line of
    its own, ranked as changing the answer; a run both still filling and growing a backlog is named a backlog there
    (the point's console no longer says either under each point: harness.point)."""
    rows = [_run("rate=8", backlog_growing=True, backlog_wait_rise_s=18.7, backlog_wait_bound_s=13.1),
            _run("rate=8", 1, backlog_growing=True, backlog_wait_rise_s=20.0, backlog_wait_bound_s=13.0),
            _run("rate=16", backlog_growing=True, still_filling=True, request_throughput=7.7,
                 achieved_send_rate_rps=8.0, in_flight_second_quarter=4.0, in_flight_last_quarter=16.0)]
    got = [c for c in from_rows(rows) if c.rank == CHANGES]
    assert [c.kind for c in got] == ["still_filling", "backlog_growing"]
    assert got[0].text == "1 of 3 runs still filling (a growing backlog): latencies a lower bound, SLO not met"
    assert got[1].text == ("2 of 3 runs with a growing backlog: the wait rose through the arrivals' second half, "
                           "latencies grow with the run's length, SLO not met")
    assert got[1].detail[0] == "rate=8: wait rose 18.7 s (bound 13.1 s)"


def test_the_saturation_guards_limit_is_one_limiting_line():
    limit = "any overload may go uncaught (60 requests at 2 req/s, service 10 s, sends' dispersion 1: ...)"
    out = collect([("a rate=2", {"saturation_guard_limit": limit}), ("a rate=4", {"saturation_guard_limit": None})])
    assert [(c.kind, c.rank) for c in out] == [("saturation_guard_limit", LIMITS)]
    assert out[0].text.startswith("the over-saturation guards are weaker in 1 of 2 runs: outside their measured bounds")
    assert out[0].detail == (f"a rate=2: {limit}",)


def test_a_one_sided_difference_with_every_prompt_confirmed_is_a_detail():
    # vLLM serving the embedded random-weight model: the client's re-encode of the output gives
    # more tokens than the server generated on 31 % of requests (never fewer than -1), while every
    # prompt's count matched the server's: the tokenizer is the served model's, and every row took
    # the server's usage, so nothing in the answer is limited by it.
    vllm = {"token_counts_disagree": True, "token_mismatch_mean": -1.108, "token_mismatch_mean_abs": 1.125,
            "token_mismatch_rate": 0.308, "token_counts_compared": 120, "token_mismatch_max_abs": 8,
            "prompt_tokens_mismatch": 0}
    got = collect([("concurrency=4", vllm)])
    assert [(c.kind, c.rank) for c in got] == [("token_counts_random", DETAILS)]
    assert got[0].text == ("token counts: the client's re-tokenization differs from the server's usage in 1 of 1 "
                           "runs (up to 31% of requests, server - client -1.11 a request); every row took the "
                           "server's count")
    assert got[0].detail[0].startswith("every prompt's token count agreed with the server's")
    # The same difference where prompts disagree (another tokenizer) or were not counted still limits it.
    for prompts in ({"prompt_tokens_mismatch": 7}, {"prompt_tokens_mismatch": None}):
        got = collect([("concurrency=4", {**vllm, **prompts})])
        assert [(c.kind, c.rank) for c in got] == [("token_counts_systematic", LIMITS)]


def test_what_a_comparisons_blocks_could_not_find_is_among_the_warnings_it_limits():
    rows = [_run("rate=2"), _run("rate=4", failed=1, num_requests=60)]
    said = ("no winner on p99_ttft_ms: with 3 blocks only a difference above 41 % could be found; "
            "9 blocks would find 10 %")
    record = answer_fields(Answer("compare", ("at rate=2 ...",), {}, (said,)), rows)
    assert [(w["kind"], w["rank"]) for w in record["warnings"]] == [
        ("failed_requests", "changes the answer"), ("energy_not_measured", "limits it"), ("answer_power", "limits it")]
    assert console_lines(record)[3] == f"  [limits it] {said}"
    # several metrics short: one warning of the kind (none twice), every sentence in its detail
    more = "no winner on cost_per_mtok_good: with 3 blocks only a difference of more than tenfold could be found; " \
           "more than 10,000 blocks would find 10 %"
    record = answer_fields(Answer("compare", ("at rate=2 ...",), {}, (said, more)), rows)
    power = [w for w in record["warnings"] if w["kind"] == "answer_power"]
    assert len(power) == 1 and power[0]["detail"] == [said, more]
    assert power[0]["text"] == said + " (and 1 more like it: this warning's detail in experiment.json)"
