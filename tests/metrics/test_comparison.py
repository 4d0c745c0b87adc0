"""``metrics.comparison``'s numbers by hand where the property tests (test_recompute_comparison.py)
do not reach: ``compare_runs`` (pairing, the role filter, searches, the quality gate, fixed
conditions), the MLflow keys, the Bonferroni level, the margins and the printed figures.  Each
test kills mutants that survived ``benchmarks/mutation.py metrics/comparison.py``
(docs/measured/mutation.md)."""

from __future__ import annotations

import json
import math

import numpy as np
import pyarrow as pa
import pytest
from omegaconf import OmegaConf

from metrics.comparison import (
    SEARCH_LABEL,
    absolute_margin,
    comparable,
    compare_runs,
    compare_tables,
    difference_confidence,
    direction,
    fixed_differences,
    format_comparison,
    launch_replicates,
    mlflow_metrics,
    point_aggregates,
)
from metrics.statistics import ratio_ci


def runs(label="rate=4", **cols) -> pa.Table:
    n = len(next(iter(cols.values())))
    return pa.table({"label": [label] * n, **cols})


def runtime(text: str) -> str:
    """``text`` built at run time, as a value read from YAML or JSON is: not the interned literal
    (an ``is`` comparison with a literal fails on it, ``==`` does not)."""
    return "".join(list(text))


# ------------------------------------------------------------------------------ ratios of totals
# A: 1.0 and 1.2 per M good tokens, B: 1.2 and 1.0: R_A = R_B = 1.1, u_A = -+1/11, u_B = +-1/11
RATIO_A = {"cost_total": [1.0, 1.2], "good_output_tokens": [1e6, 1e6], "block": [0, 1]}
RATIO_B = {"cost_total": [1.2, 1.0], "good_output_tokens": [1e6, 1e6], "block": [0, 1]}


def test_a_ratio_of_totals_between_separate_runs_is_welch_and_between_blocks_paired():
    (p,) = compare_tables({"a": runs(**RATIO_A), "b": runs(**RATIO_B)}, ["cost_per_mtok_good"], "a", paired=False)
    rel = p["metrics"]["cost_per_mtok_good"]["vs_baseline"]["b"]["difference"]["relative"]
    # unpaired: se^2 = s_uA^2/2 + s_uB^2/2 = 2 x 0.0082645, se 0.128565, Welch dof 2, t = 4.302653:
    # exp(0 -+ 0.553170) - 1
    assert rel["method"] == "ratio of totals, delta on logs (Welch)"
    assert rel["low"] == pytest.approx(-0.4248762166, abs=1e-9)
    assert rel["high"] == pytest.approx(0.7387561232, abs=1e-9)
    (p,) = compare_tables({"a": runs(**RATIO_A), "b": runs(**RATIO_B)}, ["cost_per_mtok_good"], "a", paired=True)
    rel = p["metrics"]["cost_per_mtok_good"]["vs_baseline"]["b"]["difference"]["relative"]
    # paired by block: z = u_B - u_A = +-2/11, se = 0.181818, dof 1, t = 12.706205: exp(0 -+ 2.310219) - 1
    assert rel["method"] == "ratio of totals, delta on logs (paired)"
    assert rel["low"] == pytest.approx(-0.9007604885, abs=1e-9)
    assert rel["high"] == pytest.approx(9.0766316283, abs=1e-7)


def test_the_ratio_scale_is_exactly_a_million_for_every_per_m_cost():
    # 4.0 over 3 M tokens: 1.3333... per M to the last digit (a scale of 999999 is 1e-6 off)
    for metric, den in (("cost_per_mtok_good", "good_output_tokens"), ("cost_per_mtok_all", "all_output_tokens"),
                        ("cost_per_mtok_good_answer", "good_answer_tokens"),
                        ("cost_per_mtok_good_task", "good_task_output_tokens")):
        t = runs(cost_total=[1.0, 3.0], **{den: [0.5e6, 2.5e6]})
        (p,) = compare_tables({"a": t}, [metric], "a", paired=False)
        assert p["metrics"][metric]["per_config"]["a"]["value"] == pytest.approx(4.0 / 3.0, rel=1e-12), metric
    for metric, den in (("cost_per_completed_task", "completed_tasks"), ("cost_per_task_attempt", "task_attempts")):
        t = runs(cost_total=[1.0, 3.0], **{den: [2.0, 2.0]})
        (p,) = compare_tables({"a": t}, [metric], "a", paired=False)
        assert p["metrics"][metric]["per_config"]["a"]["value"] == pytest.approx(1.0, rel=1e-12), metric
    # attempts over completed tasks: (3 + 5) / (2 + 2) = 2 attempts a task, unscaled
    t = runs(task_attempts=[3.0, 5.0], completed_tasks=[2.0, 2.0])
    (p,) = compare_tables({"a": t}, ["attempts_per_completed_task"], "a", paired=False)
    assert p["metrics"]["attempts_per_completed_task"]["per_config"]["a"]["value"] == pytest.approx(2.0, rel=1e-12)


def test_which_runs_have_a_metric():
    plain = ["cost_total", "good_output_tokens"]  # runs without tasks
    assert comparable("cost_per_mtok_good", plain)                 # by its denominator's column
    assert not comparable("cost_per_completed_task", plain)        # no completed_tasks: no task metric
    assert comparable("output_throughput", ["output_throughput"]) and not comparable("output_throughput", plain)


def test_a_ratio_metric_without_its_denominator_is_the_mean_of_its_own_column():
    # cost_total is there but not good_output_tokens: the per-run figures' mean, 1.5
    t = runs(cost_total=[1.0, 1.0], cost_per_mtok_good=[1.0, 2.0])
    (p,) = compare_tables({"a": t}, ["cost_per_mtok_good"], "a", paired=False)
    est = p["metrics"]["cost_per_mtok_good"]["per_config"]["a"]
    assert (est["value"], est["method"]) == (1.5, "student-t")
    # and its difference is that of the means (Welch), as the values shown: 3.0 / 1.5 - 1 = +100 %, 3.0 - 1.5
    b = runs(cost_total=[1.0, 1.0], cost_per_mtok_good=[2.0, 4.0])
    (p,) = compare_tables({"a": t, "b": b}, ["cost_per_mtok_good"], "a", paired=False)
    d = p["metrics"]["cost_per_mtok_good"]["vs_baseline"]["b"]["difference"]
    assert (d["relative"]["value"], d["absolute"]["value"], d["relative"]["method"]) == (1.0, 1.5, "delta (Welch)")


def test_a_cheaper_good_answer_token_wins():
    # B pays half per good answer token in both runs: -50 % with no spread, lower is better
    a = runs(cost_total=[1.0, 2.0], good_answer_tokens=[1e6, 2e6])
    b = runs(cost_total=[0.5, 1.0], good_answer_tokens=[1e6, 2e6])
    (p,) = compare_tables({"a": a, "b": b}, ["cost_per_mtok_good_answer"], "a", paired=False)
    vs = p["metrics"]["cost_per_mtok_good_answer"]["vs_baseline"]["b"]
    assert vs["difference"]["relative"]["value"] == pytest.approx(-0.5, abs=1e-12)
    assert vs["verdict"] == "b_better"
    assert direction("cost_per_mtok_good_answer") == (False, "per M good answer tok")


def test_every_config_but_the_baseline_is_compared_with_it_whatever_the_names_order():
    t = runs(output_throughput=[10.0, 12.0])
    (p,) = compare_tables({"a": t, "b": t, "c": t}, ["output_throughput"], "b", paired=False)
    assert list(p["metrics"]["output_throughput"]["vs_baseline"]) == ["a", "c"]
    # protocol.baseline comes from YAML: equal to the config's name, not the same object
    (p,) = compare_tables({"a": t, "b": t, "c": t}, ["output_throughput"], runtime("b"), paired=False)
    assert list(p["metrics"]["output_throughput"]["vs_baseline"]) == ["a", "c"]


def test_blocks_pair_by_their_number_not_by_their_rows_order():
    # B's rows in the order block 1, block 0: block 0 is A 10 against B 12, block 1 A 12 against B 10 (as in
    # experiment() below): log ratios ln(12/10), ln(10/12), mean 0, se 0.182322, t(0.975, 1) = 12.706205;
    # paired by row it would be 10 against 10 and 12 against 12, a zero-width interval
    a = runs(block=[0, 1], output_throughput=[10.0, 12.0])
    b = runs(block=[1, 0], output_throughput=[10.0, 12.0])
    (p,) = compare_tables({"A": a, "B": b}, ["output_throughput"], "A", paired=True)
    rel = p["metrics"]["output_throughput"]["vs_baseline"]["B"]["difference"]["relative"]
    assert rel["low"] == pytest.approx(-0.9013931975, abs=1e-9)
    assert rel["high"] == pytest.approx(9.1412881688, abs=1e-7)


def test_the_bootstrap_seed_defaults_to_zero():
    # the interval of a ratio of totals is a BCa bootstrap: seed 0 unless told, so a rerun prints
    # the same bounds
    t = runs(cost_total=[1.0, 1.3, 0.9, 1.1], good_output_tokens=[1e6, 1.1e6, 0.8e6, 1.2e6])
    (p,) = compare_tables({"a": t}, ["cost_per_mtok_good"], "a", paired=False)
    est = p["metrics"]["cost_per_mtok_good"]["per_config"]["a"]
    seed0 = ratio_ci(t.column("cost_total").to_numpy(), t.column("good_output_tokens").to_numpy(), scale=1e6, seed=0)
    seed1 = ratio_ci(t.column("cost_total").to_numpy(), t.column("good_output_tokens").to_numpy(), scale=1e6, seed=1)
    assert (est["low"], est["high"]) == (seed0.low, seed0.high)
    assert (seed1.low, seed1.high) != (seed0.low, seed0.high)  # the seed matters: the default is what is held


# ------------------------------------------------------------------------------ margins and levels
def test_which_metrics_are_better_lower():
    lower = {m for m in (
        "output_throughput", "request_throughput", "goodput_rps", "good_output_throughput", "slo_attainment",
        "cost_per_mtok_good", "cost_per_mtok_all", "cost_per_mtok_good_answer", "energy_per_good_token_j",
        "error_rate", "max_load_under_slo", "engine_prefix_cache_hit_rate", "replica_load_imbalance",
        "replica_kv_usage_imbalance", "replica_queue_imbalance", "replica_hit_rate_spread", "task_completion_rate",
        "task_slo_attainment", "task_censored_rate", "attempts_per_completed_task", "cost_per_completed_task",
        "cost_per_task_attempt", "cost_per_mtok_good_task", "p99_ttft_ms", "draft_acceptance_rate")
        if not direction(m)[0]}
    # costs, energy, errors, unevenness, censoring, attempts and latencies
    assert lower == {"cost_per_mtok_good", "cost_per_mtok_all", "cost_per_mtok_good_answer", "energy_per_good_token_j",
                     "error_rate", "replica_load_imbalance", "replica_kv_usage_imbalance", "replica_queue_imbalance",
                     "replica_hit_rate_spread", "task_censored_rate", "attempts_per_completed_task",
                     "cost_per_completed_task", "cost_per_task_attempt", "cost_per_mtok_good_task", "p99_ttft_ms"}


def test_the_absolute_margin_of_a_rate_not_in_the_fractions_table():
    # task_censored_rate is (lower is better, no unit) but not in FRACTIONS: still a share, 2 points
    assert absolute_margin("task_censored_rate", 0.02, 0.5) == 0.02
    assert absolute_margin("draft_acceptance_rate", 0.02, 0.5) == 0.02      # unknown: (True, "") by its name
    assert absolute_margin("p99_ttft_ms", 0.02, 0.5) == pytest.approx(0.01)  # a latency: 2 % of 0.5 ms
    assert absolute_margin("replica_load_imbalance", 0.02, -0.5) == pytest.approx(0.01)  # |scale|
    assert absolute_margin("replica_load_imbalance", 0.02, math.inf) == 0.02


def test_the_bonferroni_level_from_a_config_string():
    # protocol.adjust comes from YAML: a string made at run time, not the literal
    assert difference_confidence(0.95, 4, runtime("bonferroni")) == pytest.approx(0.9875, abs=1e-15)
    assert difference_confidence(0.95, 4, runtime("none")) == 0.95
    assert difference_confidence(0.95, 1, runtime("bonferroni")) == 0.95
    assert difference_confidence(0.95, 2, runtime("bonferroni")) == pytest.approx(0.975, abs=1e-15)  # 1 - 0.05/2
    # one verdict: the level as asked, bit for bit, at any level (1 - (1 - 0.1) is 0.09999999999999998)
    assert difference_confidence(0.1, 1, runtime("bonferroni")) == 0.1
    # no metric compared: no family, the level as asked (not a division by zero)
    assert difference_confidence(0.95, 0, runtime("bonferroni")) == 0.95
    (p,) = compare_tables({"a": runs(x=[1.0])}, [], "a", paired=False, adjust="bonferroni")
    assert (p["family"], p["difference_confidence"]) == (0, 0.95)
    text = format_comparison({"kind": "paired", "confidence": 0.95, "baseline": "a", "min_effect": 0.02, "points": [p]})
    assert text.splitlines()[2:] == ["load point rate=4 (replicates: 1 of a)"]
    # kind as read back from comparison.json: a string made at run time
    text = format_comparison(json.loads(json.dumps({"kind": "paired", "method_note": "blocks paired: ...",
                                                     "confidence": 0.95, "baseline": "a", "min_effect": 0.02,
                                                     "points": [p]})))
    assert text.splitlines()[0] == "comparison (paired by block), 95% intervals, baseline a, margin 2%"
    for other in ("Bonferroni", "holm", "sidak"):  # before "bonferroni" in string order, before and after "none"
        with pytest.raises(ValueError, match=f"protocol.adjust must be bonferroni or none, not '{other}'"):
            difference_confidence(0.95, 4, other)


def test_launches_are_the_replicates_where_a_point_has_three():
    # the launch column, not the block, names the launch; NaN repeats are left out of a launch's mean
    t = pa.table({"label": ["p"] * 6, "block": [0] * 6, "launch": [0, 0, 1, 1, 2, 2], "offered_load": [4.0] * 6,
                  "p99_ttft_ms": [10.0, 20.0, 30.0, math.nan, math.nan, math.nan]})
    out, collapsed = launch_replicates(t, ["p99_ttft_ms"])
    assert collapsed
    assert out.column("launch").to_pylist() == [0, 1, 2]
    assert out.column("p99_ttft_ms").to_pylist() == [15.0, 30.0, None]
    assert out.column("offered_load").to_pylist() == [4.0, 4.0, 4.0]
    assert launch_replicates(t.slice(0, 0), ["p99_ttft_ms"]) == (t.slice(0, 0), False)


# ------------------------------------------------------------------------------ one experiment
def experiment() -> dict:
    """Two configs in two blocks; B's throughput 12 then 10 against A's 10 then 12; a warm-up row of
    A (role ``warmup``) that would move A's mean to 344 if it counted; B fails the quality gate."""
    rows = [{"config": c, "block": b, "role": "point", "label": "rate=4", "offered_load": 4.0,
             "output_throughput": v, "goodput_rps": g}
            for c, b, v, g in (("A", 0, 10.0, 2.0), ("A", 1, 12.0, 2.2), ("B", 0, 12.0, 2.4), ("B", 1, 10.0, 2.2))]
    rows.append({"config": "A", "block": 0, "role": "warmup", "label": "rate=4", "offered_load": 4.0,
                 "output_throughput": 1010.0, "goodput_rps": 0.0})
    protocol = OmegaConf.create({"metrics": ["output_throughput", "goodput_rps", "p99_ttft_ms"], "confidence": 0.95,
                                 "min_effect": 0.02})
    record = {"configs": {"A": {}, "B": {}}, "blocks": [{"block": 1}, {"block": 0}, {"block": 1}], "seed": 0,
              "fixed_conditions": {"A": {"model": "m", "workload": "short"}, "B": {"model": "m", "workload": "long"}}}
    searches = [{"config": c, "block": b, "max_load_under_slo": m, "goodput_rps": m / 2,
                 "good_output_throughput": 10 * m, "cost_total": 1.0, "good_output_tokens": 1e6}
                for c, b, m in (("A", 0, 4.0), ("A", 1, 6.0), ("B", 0, 5.0), ("B", 1, 5.0))]
    quality = {"configs": {"A": {"passed": True, "reason": ""}, "B": {"passed": False, "reason": "accuracy 0.2 < 0.5"}}}
    return compare_runs(pa.Table.from_pylist(rows), protocol, record, searches, quality=quality)


def test_compare_runs_pairs_blocks_and_leaves_out_other_roles():
    c = experiment()
    assert (c["kind"], c["baseline"], c["blocks"], c["configs"]) == ("paired", "A", [0, 1], ["A", "B"])
    assert (c["confidence"], c["min_effect"], c["adjust"]) == (0.95, 0.02, "none")
    assert [p["label"] for p in c["points"]] == [SEARCH_LABEL, "rate=4"]
    search, point = c["points"]
    assert list(point["metrics"]) == ["output_throughput", "goodput_rps"]  # no p99_ttft_ms column
    assert point["replicates"] == {"A": 2, "B": 2} and point["offered_load"] == 4.0
    thr = point["metrics"]["output_throughput"]
    assert thr["per_config"]["A"]["value"] == 11.0  # the warm-up row left out
    # paired by block, log ratio: ln(12/10), ln(10/12); mean 0, se 0.182322, t(0.975, 1) = 12.706205
    rel = thr["vs_baseline"]["B"]["difference"]["relative"]
    assert rel["method"] == "paired log ratio (student-t)"
    assert rel["low"] == pytest.approx(-0.9013931975, abs=1e-9)
    assert rel["high"] == pytest.approx(9.1412881688, abs=1e-7)
    assert thr["vs_baseline"]["B"]["verdict"] == "no_significant_difference"  # not gated
    assert list(thr["vs_baseline"]) == ["B"]  # the baseline is not compared with itself
    # the search point: max load 5 and 5 against 4 and 6, paired
    ml = search["metrics"]["max_load_under_slo"]
    assert ml["per_config"]["A"]["value"] == 5.0 and ml["per_config"]["B"]["value"] == 5.0
    assert ml["vs_baseline"]["B"]["difference"]["relative"]["method"] == "paired log ratio (student-t)"
    assert search["metrics"]["cost_per_mtok_good"]["per_config"]["A"]["value"] == pytest.approx(1.0, rel=1e-12)


def test_a_config_that_fails_the_quality_gate_loses_every_good_token_metric():
    c = experiment()
    assert c["quality_gate_failed"] == {"B": "accuracy 0.2 < 0.5"}
    search, point = c["points"]
    for p, m in ((point, "goodput_rps"), (search, "max_load_under_slo"), (search, "goodput_rps"),
                 (search, "good_output_throughput"), (search, "cost_per_mtok_good")):
        vs = p["metrics"][m]["vs_baseline"]["B"]
        assert vs["verdict"] == "a_better", m
        assert vs["text"] == "B fails the quality gate (accuracy 0.2 < 0.5): no good tokens"
    assert point["metrics"]["output_throughput"]["vs_baseline"]["B"]["verdict"] == "no_significant_difference"


def test_fixed_conditions_that_differ_and_the_mlflow_keys():
    c = experiment()
    assert c["fixed_condition_differences"] == {"workload": {"A": "short", "B": "long"}}
    assert fixed_differences({}) == {} and fixed_differences({"A": {"model": "m"}}) == {}
    keys = c["mlflow_metrics"]
    assert keys["A.p1.output_throughput.value"] == 11.0 and keys["A.p1.output_throughput.n"] == 2.0
    assert keys["B.p0.max_load_under_slo.value"] == 5.0
    # B's max load never varies: its interval is the point, kept; a NaN bound is left out
    assert keys["B.p0.max_load_under_slo.low"] == 5.0
    assert mlflow_metrics([{"metrics": {"m": {"per_config": {"": {"value": 1.5, "low": math.nan, "n": 1}}}}}]) == {
        "p0.m.value": 1.5, "p0.m.n": 1.0}


def test_compare_runs_takes_the_protocols_baseline_and_the_records_seed():
    # costs 1.0, 1.3, 0.9, 1.1 over 1, 1.1, 0.8, 1.2 M good tokens a block: a BCa interval, which the seed moves
    cost, good = [1.0, 1.3, 0.9, 1.1], [1e6, 1.1e6, 0.8e6, 1.2e6]
    table = pa.Table.from_pylist([{"config": c, "block": b, "label": "rate=4", "cost_total": x, "good_output_tokens": g}
                                  for c in ("A", "B") for b, (x, g) in enumerate(zip(cost, good))])

    def cmp(protocol: dict, record: dict, **kw) -> dict:
        protocol = OmegaConf.create({"metrics": ["cost_per_mtok_good"], "confidence": 0.95, "min_effect": 0.02,
                                     **protocol})
        return compare_runs(table, protocol, {"configs": {"A": {}, "B": {}}, **record}, **kw)

    c = cmp({"baseline": "B"}, {})
    assert c["baseline"] == "B" and list(c["points"][0]["metrics"]["cost_per_mtok_good"]["vs_baseline"]) == ["A"]
    assert cmp({}, {}, baseline="B")["baseline"] == "B" and cmp({}, {})["baseline"] == "A"
    for record, seed in (({}, 0), ({"seed": 7}, 7)):
        est = cmp({}, record)["points"][0]["metrics"]["cost_per_mtok_good"]["per_config"]["A"]
        want = ratio_ci(cost, good, scale=1e6, seed=seed)
        assert (est["low"], est["high"]) == (want.low, want.high), record
    assert ratio_ci(cost, good, scale=1e6, seed=0).low != ratio_ci(cost, good, scale=1e6, seed=7).low


def test_point_aggregates_of_a_sweep():
    t = pa.Table.from_pylist([{"label": "rate=4", "role": r, "output_throughput": v}
                              for r, v in (("point", 10.0), ("point", 12.0), ("warmup", 100.0))])
    agg = point_aggregates(t, ["output_throughput", "goodput_rps"])
    # mean 11 -+ t(0.975, 1) x 1 = 12.706205: the warm-up row and the absent metric left out
    assert agg == pytest.approx({"p0.output_throughput.value": 11.0, "p0.output_throughput.low": 11.0 - 12.7062047362,
                                 "p0.output_throughput.high": 11.0 + 12.7062047362, "p0.output_throughput.n": 2.0})
    assert point_aggregates(t.slice(0, 0), ["output_throughput"]) == {}
    # a ratio of totals: its BCa bootstrap with seed 0 unless told, Σ cost / Σ good = 4.3 / 4.1 per M
    cost, good = [1.0, 1.3, 0.9, 1.1], [1e6, 1.1e6, 0.8e6, 1.2e6]
    agg = point_aggregates(runs(cost_total=cost, good_output_tokens=good), ["cost_per_mtok_good"])
    want = ratio_ci(cost, good, scale=1e6, seed=0)
    assert agg == {"p0.cost_per_mtok_good.value": pytest.approx(4.3 / 4.1, rel=1e-12),
                   "p0.cost_per_mtok_good.low": want.low, "p0.cost_per_mtok_good.high": want.high,
                   "p0.cost_per_mtok_good.n": 4.0}


# ------------------------------------------------------------------------------ the printed table
def test_the_printed_comparison_rounds_shares_to_3_digits_and_the_rest_to_4():
    a = runs(error_rate=[0.123456, 0.123456], output_throughput=[123.456, 123.456], p99_ttft_ms=[1.23456] * 2,
             replica_load_imbalance=[2.345678] * 2, slo_attainment=[0.987654] * 2)
    points = compare_tables({"A": a, "B": a.slice(0, 1)}, ["error_rate", "output_throughput", "p99_ttft_ms",
                                                          "replica_load_imbalance", "slo_attainment"], "A",
                            paired=False, adjust="bonferroni")
    # as read back from comparison.json: the strings are made at run time
    comparison = json.loads(json.dumps({"kind": "unpaired", "confidence": 0.95, "baseline": "A", "min_effect": 0.02,
                                        "fixed_condition_differences": {"workload": {"A": "short", "B": "long"}},
                                        "points": points}))
    lines = format_comparison(comparison).splitlines()
    assert lines[0] == "comparison (unpaired (Welch)), 95% intervals, baseline A, margin 2%"
    assert lines[1] == "  fixed condition workload differs: A=short, B=long"
    assert lines[3] == "load point rate=4 (replicates: 2 of A, 1 of B)"
    assert lines[4] == ("  (differences at 99.00% each: Bonferroni over the 5 metrics below, 95% for all of them "
                        "together)")
    # a share to 3 significant digits, anything with a unit (or beyond 1.5) to 4; one replicate: no bounds
    assert lines[5] == "  error_rate               A 0.123 [0.123, 0.123]; B 0.123 [n/a, n/a]"
    assert lines[7] == "  output_throughput        A 123.5 [123.5, 123.5]; B 123.5 [n/a, n/a]"
    assert lines[9] == "  p99_ttft_ms              A 1.235 [1.235, 1.235]; B 1.235 [n/a, n/a]"
    assert lines[11] == "  replica_load_imbalance   A 2.346 [2.346, 2.346]; B 2.346 [n/a, n/a]"
    assert lines[13] == "  slo_attainment           A 0.988 [0.988, 0.988]; B 0.988 [n/a, n/a]"
    comparison["points"][0]["adjust"] = "none"
    assert format_comparison(comparison).splitlines()[4] == (
        "  (5 verdicts at 95% each: between identical configs about 1 in 20 is a false winner; "
        "protocol.adjust=bonferroni holds the level for all of them together)")
    # two metrics are a family: 1 - 0.05/2 = 97.50 % each
    two = json.loads(json.dumps({**comparison, "points": compare_tables({"A": a, "B": a}, ["error_rate", "p99_ttft_ms"],
                                                                         "A", paired=False, adjust="bonferroni")}))
    assert format_comparison(two).splitlines()[4] == (
        "  (differences at 97.50% each: Bonferroni over the 2 metrics below, 95% for all of them together)")
    two["points"][0]["adjust"] = "none"
    assert format_comparison(two).splitlines()[4] == (
        "  (2 verdicts at 95% each: between identical configs about 1 in 20 is a false winner; "
        "protocol.adjust=bonferroni holds the level for all of them together)")
    # one metric: nothing to adjust, no family line
    one = json.loads(json.dumps({**comparison, "points": compare_tables({"A": a, "B": a}, ["error_rate"], "A",
                                                                         paired=False, adjust="bonferroni")}))
    assert format_comparison(one).splitlines()[4].startswith("  error_rate ")
    # a comparison.json written before points carried their family: one verdict each, no family line
    del comparison["points"][0]["family"], comparison["points"][0]["adjust"]
    assert format_comparison(comparison).splitlines()[4].startswith("  error_rate ")


# ------------------------------------------------------------------------------ what the blocks can find
def _sensitivity(a: list[float], b: list[float], metric: str = "p50_ttft_ms", family: int = 11) -> dict:
    (p,) = compare_tables({"a": runs(block=list(range(len(a))), **{metric: a}),
                           "b": runs(block=list(range(len(b))), **{metric: b})}, [metric], "a", paired=True,
                          adjust="bonferroni", family=family)
    return p["metrics"][metric]["vs_baseline"]["b"]


def test_what_three_blocks_can_find_from_the_spread_of_their_log_ratios():
    from scipy.stats import nct
    from scipy.stats import t as student
    # b/a = 1.00, 1.10, 0.95: the log ratios' sd from numpy, the power from scipy's noncentral t (both tails)
    a, b = [25.0, 24.0, 27.0], [25.0, 26.4, 25.65]
    vs = _sensitivity(a, b)
    sens = vs["sensitivity"]
    logs = np.log(np.array(b) / np.array(a))
    sd, level = float(np.std(logs, ddof=1)), 1 - 0.05 / 11
    assert vs["verdict"] == "no_significant_difference" and sens["level"] == pytest.approx(level, abs=1e-15)
    assert (sens["blocks"], sens["scale"]) == (3, "log")
    assert sens["spread"] == pytest.approx(sd, rel=1e-9) and sd == pytest.approx(0.07439, abs=1e-5)
    crit = student.ppf(1 - (1 - level) / 2, 2)

    def power(d: float, n: int) -> float:
        ncp = math.log1p(d) / (sd / math.sqrt(n))
        return float(nct.sf(crit if n == 3 else student.ppf(1 - (1 - level) / 2, n - 1), n - 1, ncp)
                     + nct.cdf(-(crit if n == 3 else student.ppf(1 - (1 - level) / 2, n - 1)), n - 1, ncp))
    # the smallest difference found 80 % of the time at 3 blocks (t(2) at 99.55 % is 14.8): 124 % longer
    assert power(sens["detectable"], 3) == pytest.approx(0.8, abs=1e-6)
    assert sens["detectable"] == pytest.approx(1.2434, abs=1e-4)
    # the blocks 5 % and 10 % need: the first n at 80 % (scipy's power just under it at n - 1)
    need5, need10 = sens["blocks_for"]["0.05"], sens["blocks_for"]["0.1"]
    assert (need5, need10) == (36, 13)
    assert power(0.05, need5) >= 0.8 > power(0.05, need5 - 1) and power(0.10, need10) >= 0.8 > power(0.10, need10 - 1)
    assert sens["power_at"]["0.1"] == pytest.approx(power(0.10, 3), abs=2e-5)  # the far tail (1.4e-5) left out


def test_the_edges_of_what_blocks_can_find():
    # one block: no spread to size from, said
    one = _sensitivity([25.0], [27.0])["sensitivity"]
    assert (one["blocks"], one["detectable"], one["blocks_for"]["0.1"]) == (1, None, None)
    assert one["note"].startswith("1 block(s): no spread between blocks")
    # zero spread (b/a 1.1 in every block): any difference is found at 2 blocks
    flat = _sensitivity([20.0, 25.0, 30.0], [22.0, 27.5, 33.0])["sensitivity"]
    assert (flat["spread"], flat["detectable"], flat["blocks_for"]) == (0.0, 0.0, {"0.05": 2, "0.1": 2})
    assert flat["note"] == "no spread between blocks: any difference would be found"
    # a NaN and an inf block are left out, as the interval leaves them: 2 blocks of log ratios ln 1.1 and ln 0.9
    odd = _sensitivity([20.0, 20.0, math.nan, 20.0], [22.0, 18.0, 20.0, math.inf])["sensitivity"]
    assert odd["blocks"] == 2
    assert odd["spread"] == pytest.approx(float(np.std(np.log([1.1, 0.9]), ddof=1)), rel=1e-9)
    # both sides 0 (no error anywhere): nothing relative to size
    zero = _sensitivity([0.0, 0.0, 0.0], [0.0, 0.0, 0.0], metric="error_rate")["sensitivity"]
    assert (zero["detectable"], zero["note"]) == (None, "both sides 0: no relative difference to size")
    # one side 0: judged by its absolute difference
    half = _sensitivity([0.0, 0.0, 0.0], [0.01, 0.0, 0.02], metric="error_rate")["sensitivity"]
    assert half["detectable"] is None and half["note"].startswith("a side's mean is 0")


def test_what_runs_made_separately_can_find_welch_with_each_sides_spread_over_as_mean():
    from scipy.stats import nct
    from scipy.stats import t as student

    from metrics.comparison import power_warnings
    # tokenfactory compare: A 20, 22, 24 (mean 22, sd 2), B 23, 26, 23, 24 (sd 1.414); 3 replicates a side (the fewer)
    a, b = [20.0, 22.0, 24.0], [23.0, 26.0, 23.0, 24.0]
    (p,) = compare_tables({"a": runs(x_ms=a), "b": runs(x_ms=b)}, ["x_ms", "y_ms"], "a", paired=False,
                          adjust="bonferroni")
    sens = p["metrics"]["x_ms"]["vs_baseline"]["b"]["sensitivity"]
    sa, sb = 2.0 / 22.0, float(np.std(b, ddof=1)) / 22.0
    assert (sens["unit"], sens["blocks"], sens["scale"]) == ("replicates a side", 3, "relative")
    assert (sens["spread_a"], sens["spread_b"]) == (pytest.approx(sa, rel=1e-9), pytest.approx(sb, rel=1e-9))
    # Welch's power at 97.5 % (2 metrics) with 3 a side, from scipy: dof (va + vb)² / ((va² + vb²)/2)
    va, vb = sa ** 2 / 3, sb ** 2 / 3
    df = (va + vb) ** 2 / ((va ** 2 + vb ** 2) / 2)
    crit = student.ppf(1 - 0.025 / 2, df)
    assert sens["power_at"]["0.1"] == pytest.approx(float(nct.sf(crit, df, 0.1 / math.sqrt(va + vb))), abs=1e-12)
    assert sens["power_at"]["0.1"] == pytest.approx(0.1234, abs=1e-4)
    assert sens["detectable"] == pytest.approx(0.3112, abs=1e-4) and sens["blocks_for"] == {"0.05": 49, "0.1": 14}
    assert power_warnings(p, ["x_ms"]) == ["no winner on x_ms: with 3 replicates a side only a difference above 31 % "
                                           "could be found; 14 replicates a side would find 10 %"]
    # a metric no run has: nothing to size
    assert p["metrics"]["y_ms"]["vs_baseline"]["b"]["sensitivity"]["note"].startswith("0 replicate(s) a side")


def test_a_metric_with_no_winner_says_what_its_blocks_could_find():
    from metrics.comparison import power_warnings
    a, b = [25.0, 24.0, 27.0], [25.0, 26.4, 25.65]
    (p,) = compare_tables({"a": runs(block=[0, 1, 2], p50_ttft_ms=a, p99_ttft_ms=a),
                           "b": runs(block=[0, 1, 2], p50_ttft_ms=b, p99_ttft_ms=[22.0, 22.0, 24.0])},
                          ["p50_ttft_ms", "p99_ttft_ms"], "a", paired=True, adjust="bonferroni")
    # over 2 metrics, each at 97.5 %: p50 has no winner and 3 blocks find only 41 % 80 % of the time; p99 has a
    # winner (b 10.5 % [3.4 %, 17.1 %] faster): nothing to say of it
    assert power_warnings(p, ["p50_ttft_ms", "p99_ttft_ms"]) == [
        "no winner on p50_ttft_ms: with 3 blocks only a difference above 41 % could be found; 9 blocks would find 10 %"]
    assert p["metrics"]["p99_ttft_ms"]["vs_baseline"]["b"]["verdict"] == "b_better"
    # a winner, or a small detectable difference, says nothing
    p["metrics"]["p50_ttft_ms"]["vs_baseline"]["b"]["verdict"] = "a_better"
    assert not any(s.startswith("no winner on p50_ttft_ms") for s in power_warnings(p, ["p50_ttft_ms"]))
    assert power_warnings(p, ["p50_ttft_ms"], size=10.0) == []
    # a spread that finds only an absurd factor (2.4e15 % in a CI run) is said as more than tenfold
    p["metrics"]["p50_ttft_ms"]["vs_baseline"]["b"]["verdict"] = "same"
    p["metrics"]["p50_ttft_ms"]["vs_baseline"]["b"]["sensitivity"]["detectable"] = 2.35e15
    assert power_warnings(p, ["p50_ttft_ms"])[0].startswith(
        "no winner on p50_ttft_ms: with 3 blocks only a difference of more than tenfold could be found; ")
    # one block: said once
    (p,) = compare_tables({"a": runs(block=[0], x_ms=[1.0]), "b": runs(block=[0], x_ms=[2.0])}, ["x_ms"], "a",
                          paired=True)
    assert power_warnings(p, ["x_ms"]) == ["one block: no spread between blocks, so no difference can be found "
                                           "(protocol.repeats of 2 or more; a small difference needs many more)"]
