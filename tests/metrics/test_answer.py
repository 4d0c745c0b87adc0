"""A sweep's answer (metrics.answer) from crafted load-point summaries: the highest load that met the
SLO and the first that missed it, goodput and cost there, the knee, the points still filling."""

from __future__ import annotations

import math

import pytest

from metrics.answer import (
    filling_kind,
    follows,
    knee,
    sweep_answer,
    sweep_points,
    systematic_token_difference,
)

SLO = {"ttft_ms": 1000, "tpot_ms": 150, "e2el_ms": None, "percentile": 99}


def point(rate: float, goodput: float, *, sent: float | None = None, ttft_p99: float = 200.0, repeat: int = 0,
          kind: str = "poisson", cost: float = 0.001, **extra) -> dict:
    """A load point's runs.parquet row: ``goodput`` req/s of 64-token requests over 20 s."""
    label = f"concurrency={rate:g}" if kind == "concurrency" else f"{kind} rate={rate:g}"
    good_tokens = goodput * 64 * 20
    return {"label": label, "role": "point", "repeat": repeat, "offered_load": rate, "load_kind": kind,
            "achieved_send_rate_rps": rate if sent is None else sent, "request_throughput": goodput,
            "goodput_rps": goodput, "good_output_throughput": goodput * 64, "good_output_tokens": good_tokens,
            "cost_total": cost, "completed": 40, "failed": 0, "slo_percentile": 99.0,
            "slo_ttft_met": ttft_p99 <= SLO["ttft_ms"], "slo_ttft_p99_ms": ttft_p99, "slo_tpot_met": True,
            "slo_tpot_p99_ms": 50.0, "saturated": False, "still_filling": False, **extra}


SWEEP = [point(2, 2.0, cost=0.00128), point(4, 3.9, cost=0.001248), point(8, 5.2, ttft_p99=2500.0),
         point(16, 1.0, ttft_p99=6100.0, still_filling=True, in_flight_second_quarter=10.0,
               in_flight_last_quarter=40.0, **{"request_throughput": 3.0})]


def test_the_sweep_answer_names_the_boundary_goodput_cost_knee_and_the_points_still_filling():
    a = sweep_answer(SWEEP, SLO, "USD")
    assert a.lines == (
        "the highest load that met the SLO (p99 TTFT ≤ 1000 ms, TPOT ≤ 150 ms) is poisson rate=4: goodput 3.9 req/s "
        "(250 good tok/s), 0.25 USD per M good tokens",
        "the first that missed it is poisson rate=8: p99 TTFT 2,500 ms > 1,000",
        "goodput follows the offered load up to poisson rate=4 and stops there: 5.2 req/s at poisson rate=8 "
        "(65% of the 8 req/s sent)",
        "stopped or still filling: poisson rate=16 still filling, a growing backlog (its latencies are a lower bound)",
        "one repeat per point: no intervals (protocol.repeats=3 gives them)")
    f = a.to_dict()
    assert f["protocol"] == "sweep" and f["highest_met"] == "poisson rate=4" and f["highest_met_load"] == 4.0
    assert f["first_missed"] == "poisson rate=8" and f["knee"] == "poisson rate=8"
    # 1e6 x cost / good tokens = 1e6 x 0.001248 / (3.9 x 64 x 20)
    assert f["cost_per_mtok_good"]["value"] == pytest.approx(0.25)
    assert [p["met_slo"] for p in f["points"]] == [True, True, False, False]
    assert f["points"][3]["filling_kind"] == "backlog"


def test_goodput_follows_an_open_loop_against_the_rate_sent_not_the_nominal_one():
    # a Poisson draw that sent 3.5 req/s at a nominal 4: goodput 3.3 follows (>= 0.9 x 3.5), though < 0.9 x 4
    pts = sweep_points([point(2, 2.0), point(4, 3.3, sent=3.5)], SLO)
    assert [p.follows for p in pts] == [True, True] and knee(pts) is None
    pts = sweep_points([point(2, 2.0), point(4, 3.1, sent=3.5)], SLO)  # 3.1 < 0.9 x 3.5 = 3.15
    assert [p.follows for p in pts] == [True, False] and knee(pts) == 1


def test_a_closed_loop_knee_is_where_the_gain_falls_under_half_the_proportional_one():
    rows = [point(c, g, kind="concurrency") for c, g in ((1, 1.0), (2, 1.9), (4, 3.5), (8, 3.8))]
    pts = sweep_points(rows, SLO)
    # gains: 0.9 >= 0.5 x 1.0 x 1; 1.6 >= 0.5 x 1.9 x 1; 0.3 < 0.5 x 3.5 x 1
    assert [p.follows for p in pts] == [True, True, True, False]
    assert follows(pts[3], pts[2]) is False
    line = sweep_answer(rows, SLO).lines[1]
    assert line == ("goodput follows the offered load up to concurrency=4 and stops there: 3.8 req/s at "
                    "concurrency=8 (gain under 50% of the offered load's)")


def test_every_point_met_and_none_met():
    a = sweep_answer(SWEEP[:2], SLO, "USD")
    assert a.lines[0] == ("every load point met the SLO (p99 TTFT ≤ 1000 ms, TPOT ≤ 150 ms), up to the highest, "
                          "poisson rate=4: goodput 3.9 req/s (250 good tok/s), 0.25 USD per M good tokens; the sweep "
                          "did not reach the load that misses it (higher load points would)")
    assert a.lines[1] == "goodput follows the offered load at every point, up to 3.9 req/s at poisson rate=4"
    assert a.lines[2] == "every point reached a steady state (none stopped, none still filling)"
    a = sweep_answer(SWEEP[2:], SLO, "USD")
    assert a.lines[0].startswith("no load point met the SLO (p99 TTFT ≤ 1000 ms, TPOT ≤ 150 ms): the lowest, "
                                 "poisson rate=8, missed it: p99 TTFT 2,500 ms > 1,000; at it goodput 5.2 req/s")
    assert a.to_dict()["highest_met"] is None


def test_repeats_give_intervals_and_a_point_meets_only_when_every_repeat_does():
    rows = [point(2, 2.0), point(2, 2.0, repeat=1), point(4, 3.8), point(4, 4.0, repeat=1),
            point(8, 7.5), point(8, 7.6, repeat=1, ttft_p99=1200.0)]
    pts = sweep_points(rows, SLO)
    assert [(p.repeats, p.met, p.meets) for p in pts] == [(2, 2, True), (2, 2, True), (2, 1, False)]
    a = sweep_answer(rows, SLO)
    # mean 3.9, s = 0.1414, se = 0.1, t(0.975, 1) = 12.706: [2.63, 5.17]
    assert "poisson rate=4: goodput 3.9 req/s [2.63, 5.17]" in a.lines[0]
    assert a.lines[1] == "the first that missed it is poisson rate=8: p99 TTFT 1,200 ms > 1,000"
    assert not any("one repeat" in x for x in a.lines)


def test_no_point_finished():
    assert sweep_answer([], SLO).lines == ("no load point finished: nothing to answer yet",)


def test_filling_kind_and_a_systematic_token_difference():
    assert filling_kind({"request_throughput": 3.0, "achieved_send_rate_rps": 15.8}) == "backlog"
    assert filling_kind({"request_throughput": 7.6, "achieved_send_rate_rps": 8.0}) == "fill-up"
    assert filling_kind({}) == "backlog or fill-up"
    # a BOS counted on every request: +1 each; a random-weight model: both ways
    assert systematic_token_difference({"token_mismatch_mean": 1.0, "token_mismatch_mean_abs": 1.0})
    assert not systematic_token_difference({"token_mismatch_mean": -0.13, "token_mismatch_mean_abs": 0.13})
    assert not systematic_token_difference({"token_mismatch_mean": 0.1, "token_mismatch_mean_abs": 2.5})
    assert not systematic_token_difference({"token_mismatch_mean": math.nan})


def _est(v: float, lo: float, hi: float) -> dict:
    return {"value": v, "low": lo, "high": hi, "n": 3, "method": "BCa", "note": "", "confidence": 0.95, "dropped": 0}


def test_a_comparison_answers_at_the_highest_load_every_config_met_the_slo_at():
    from metrics.answer import comparison_answer

    def metrics(goodput_text: str) -> dict:
        return {"goodput_rps": {"per_config": {"a": _est(2.0, 1.9, 2.1), "b": _est(2.2, 2.1, 2.3)},
                                "vs_baseline": {"b": {"verdict": "b_better", "text": goodput_text}}},
                "cost_per_mtok_good": {"per_config": {"a": _est(0.5, 0.45, 0.55), "b": _est(0.49, 0.44, 0.54)},
                                       "vs_baseline": {"b": {"verdict": "equivalent",
                                                             "text": "a and b equivalent within 2% (detail)"}}}}

    comparison = {"configs": ["a", "b"], "baseline": "a", "points": [
        {"label": "poisson rate=2", "metrics": metrics("b better than a by 10.0% [4.0%, 16.0%] (detail)")},
        {"label": "poisson rate=8", "metrics": metrics("b better than a by 30.0% [20.0%, 40.0%] (detail)")}]}
    rows = [{**point(2, 2.0), "config": "a"}, {**point(2, 2.2), "config": "b"},
            {**point(8, 7.9), "config": "a"}, {**point(8, 6.0, ttft_p99=1500.0), "config": "b"}]
    a = comparison_answer(comparison, rows, SLO, "USD")
    assert a.lines == (
        "at poisson rate=2, the highest load every config met the SLO at (p99 TTFT ≤ 1000 ms, TPOT ≤ 150 ms)",
        "goodput_rps: b better than a by 10.0% [4.0%, 16.0%]",
        "cost_per_mtok_good: a and b equivalent within 2%",
        "cost per M good tokens there: a 0.5 USD [0.45, 0.55], b 0.49 USD [0.44, 0.54]")
    f = a.to_dict()
    assert f["equal_slo_point"] == "poisson rate=2" and f["verdicts"]["poisson rate=2"]["goodput_rps"] == {
        "b": "b_better"}
    # no point every config met: compared at the highest, and said so
    rows[0] = {**point(2, 2.0, ttft_p99=1200.0), "config": "a"}
    rows[2] = {**point(8, 7.9, ttft_p99=1200.0), "config": "a"}
    assert comparison_answer(comparison, rows, SLO).lines[0] == (
        "no load point where every config met the SLO (p99 TTFT ≤ 1000 ms, TPOT ≤ 150 ms): compared at the highest, "
        "poisson rate=8")


def test_the_slo_search_answer_with_its_bracket():
    from metrics.answer import search_line

    s = {"max_load_under_slo": 7.5, "bracket": [7.5, 8.0], "note": "bracket within tolerance 10%", "kind": "rate",
         "goodput_rps": 7.2, "cost_per_mtok_good": 0.084, "config": ""}
    assert search_line(s, "USD") == ("the SLO search's highest load under the SLO: 7.5 req/s (bracket [7.5, 8]: "
                                     "bracket within tolerance 10%); goodput 7.2 req/s, 0.084 USD per M good tokens "
                                     "there")
    none = {"max_load_under_slo": 0.0, "bracket": [0.0, 2], "note": "the SLO fails already at the low end 2",
            "kind": "concurrency", "config": "fast"}
    assert search_line(none) == ("fast: the SLO search's highest load under the SLO: 0 concurrent requests "
                                 "(bracket [0, 2]: the SLO fails already at the low end 2)")


def test_the_tune_answer_is_the_pick_as_measured():
    from metrics.answer import tune_answer

    record = {"objective": "cost_per_mtok_good", "evaluated": 8, "feasible": 4,
              "best": {"trial": 3, "params": {"engine.features.max_num_seqs": 8}, "objective": 7.0711,
                       "max_load_under_slo": 4.0, "cost_per_mtok_good": 7.0711}}
    assert tune_answer(record).lines == (
        "the pick is trial 3 (engine.features.max_num_seqs=8): cost_per_mtok_good 7.071, measured: highest load "
        "under the SLO 4, 7.071 per M good tokens there", "4 of 8 trials feasible")
    assert tune_answer({"best": None, "best_note": "no trial evaluated yet"}).lines == (
        "no pick: no trial evaluated yet",)


def test_a_task_workload_answers_completion_and_cost_per_completed_task():
    rows = [{**point(2, 2.0), "num_tasks": 10, "completed_tasks": 8, "cost_total": 0.002},
            {**point(8, 5.2, ttft_p99=2500.0), "num_tasks": 10, "completed_tasks": 3}]
    lines = sweep_answer(rows, SLO, "USD").lines
    # at the highest point that met the SLO: 8 of 10 tasks, 0.002 / 8 per completed task
    assert "tasks at poisson rate=2: 8 of 10 completed (80%), 0.00025 USD per completed task" in lines


def test_the_promotion_answer_names_the_decision_that_decided():
    from metrics.answer import promotion_answer

    rec = {"outcome": "rolled_back", "stages": [{"name": "shadow"}, {"name": "canary 5%"}],
           "callers": {"requests": 400, "failed": 2},
           "decisions": [{"t_s": 3.0, "stage": "shadow", "action": "advance", "reason": "gate passed"},
                         {"t_s": 21.44, "stage": "canary 5%", "action": "rollback",
                          "reason": "p99 TTFT regressed by 40%"}]}
    assert promotion_answer(rec).lines == (
        "the candidate is rolled back at 21.4 s in stage canary 5%: p99 TTFT regressed by 40%",
        "2 stage(s) run; the callers' requests: 2 failed of 400")


def test_a_cost_read_back_with_no_bound_or_no_good_tokens_is_a_figure_not_a_crash():
    """comparison.json keeps a cost with no good tokens as "inf" and a missing bound as null (a quality
    gate that failed every request, one repeat): the answer reads both (was a TypeError at the finish)."""
    from metrics.answer import estimate_of, interval

    e = estimate_of({"value": "inf", "low": None, "high": None, "n": 1, "method": "one repeat"})
    assert e.value == float("inf") and math.isnan(e.low) and math.isnan(e.high) and e.n == 1
    assert interval(e, " USD") == "inf USD"
    e = estimate_of({"value": 2.5, "low": 2.0, "high": 3.0, "n": 3, "method": "t"})
    assert interval(e, " USD") == "2.5 USD [2, 3]"


def test_a_short_point_that_kept_up_follows_though_its_drain_lowers_its_goodput():
    """The default run (60 requests a point, 2026-12-06): rate=8 sent 7.43 req/s, all 60 good, but its
    window holds the drain of the last requests, so goodput_rps 6.39 is 86 % of the send rate: the knee was
    put at rate=8, the highest point that met the SLO. Good requests of those sent say it kept up; rate=16,
    every request good too, was still filling as a growing backlog and is where goodput stops."""
    rows = [point(2, 1.86, sent=1.9, good_requests=60, num_requests=60),
            point(4, 3.61, sent=3.9, good_requests=60, num_requests=60),
            point(8, 6.39, sent=7.43, good_requests=60, num_requests=60),
            point(16, 8.82, sent=14.8, good_requests=60, num_requests=60, still_filling=True, backlog_growing=True,
                  in_flight_second_quarter=12.3, in_flight_last_quarter=41.4)]
    pts = sweep_points(rows, SLO)
    assert [p.good_share for p in pts] == [1.0, 1.0, 1.0, 1.0]
    assert [p.follows for p in pts] == [True, True, True, False] and knee(pts) == 3
    assert sweep_answer(rows, SLO).lines[2] == ("goodput follows the offered load up to poisson rate=8 and stops "
                                                "there: 8.82 req/s at poisson rate=16 (a growing backlog)")
    rows[2] = point(8, 5.0, sent=7.43, good_requests=50, num_requests=60)  # 83 % good: below 90 %
    assert sweep_answer(rows, SLO).lines[2] == ("goodput follows the offered load up to poisson rate=4 and stops "
                                                "there: 5 req/s at poisson rate=8 (83% of its requests good)")


def test_the_first_point_missed_for_still_filling_is_named_a_backlog_where_its_records_tell():
    rows = [point(8, 6.39, sent=7.43, good_requests=60, num_requests=60),
            point(16, 8.82, sent=14.8, good_requests=60, num_requests=60, still_filling=True, backlog_growing=True,
                  in_flight_second_quarter=9.68, in_flight_last_quarter=36.0)]
    assert sweep_answer(rows, SLO).lines[1] == (
        "the first that missed it is poisson rate=16: still filling, a growing backlog: in flight rose from 9.68 to "
        "36 over the arrivals' second and last quarters (its latencies are a lower bound)")


def test_a_comparison_without_a_winner_says_what_its_blocks_could_find_among_its_warnings():
    import pyarrow as pa

    from metrics.answer import comparison_answer
    from metrics.comparison import compare_tables

    # p99 TTFT b/a = 1.00, 1.10, 0.95 over 3 blocks, Bonferroni over the 2 metrics (97.5 % each): no winner, and
    # only 41 % is found 80 % of the time (tests/metrics/test_comparison.py); goodput alike in every block
    def runs(ttft: list[float]) -> pa.Table:
        return pa.table({"label": ["poisson rate=2"] * 3, "block": [0, 1, 2], "p99_ttft_ms": ttft,
                         "goodput_rps": [2.0, 2.1, 1.9]})
    (p,) = compare_tables({"a": runs([25.0, 24.0, 27.0]), "b": runs([25.0, 26.4, 25.65])},
                          ["goodput_rps", "p99_ttft_ms"], "a", paired=True, adjust="bonferroni")
    rows = [{**point(2, 2.0), "config": c, "block": b} for c in "ab" for b in range(3)]
    a = comparison_answer({"configs": ["a", "b"], "baseline": "a", "points": [p]}, rows, SLO)
    assert a.warnings == ("no winner on p99_ttft_ms: with 3 blocks only a difference above 41 % could be found; "
                          "9 blocks would find 10 %",)
    assert a.to_dict()["warnings"] == list(a.warnings)
    # goodput: no spread between the blocks' ratios, any difference found: nothing said
    assert p["metrics"]["goodput_rps"]["vs_baseline"]["b"]["sensitivity"]["detectable"] == 0.0
