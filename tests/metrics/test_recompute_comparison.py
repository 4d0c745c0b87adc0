"""comparison.json's numbers computed twice: ``metrics.comparison.compare_tables`` and the plain
second implementation in tests/recompute.py, for two configs paired by block, on generated run
tables (hypothesis): one repeat, missing runs (NaN), zero baselines, runs without good tokens."""

from __future__ import annotations

import math

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from metrics.comparison import compare_tables
from tests.metrics.test_recompute_summary import same
from tests.recompute import plain_judged, plain_mean_interval, plain_paired, plain_ratio_of_totals, plain_verdict

FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PLAIN = {"output_throughput": True, "goodput_rps": True, "slo_attainment": True, "error_rate": False,
         "p99_ttft_ms": False}                                 # metric -> higher is better
CONF, MARGIN = 0.95, 0.02
nan = math.nan

value = st.one_of(st.integers(1, 4000).map(lambda i: i / 4), st.just(0.0), st.just(nan))
run = st.fixed_dictionaries({"output_throughput": value, "goodput_rps": value, "slo_attainment": value,
                             "error_rate": value, "p99_ttft_ms": value,
                             "cost_total": st.integers(1, 1000).map(lambda i: i / 1000),
                             "good_output_tokens": st.one_of(st.just(0), st.integers(1, 10**6))})


@st.composite
def two_configs(draw):
    n = draw(st.integers(1, 5))
    return [draw(st.lists(run, min_size=n, max_size=n)) for _ in range(2)]


def table(runs: list[dict], config: str) -> pa.Table:
    rows = []
    for b, r in enumerate(runs):
        g = r["good_output_tokens"]
        rows.append({**r, "label": "p0", "config": config, "block": b,
                     "cost_per_mtok_good": 1e6 * r["cost_total"] / g if g else math.inf})
    return pa.Table.from_pylist(rows)


def compare(a_runs, b_runs, metrics):
    return compare_tables({"A": table(a_runs, "A"), "B": table(b_runs, "B")}, metrics, "A", paired=True,
                          confidence=CONF, margin=MARGIN)[0]["metrics"]


@FAST
@given(two_configs())
def test_estimates_differences_and_verdicts_agree_with_the_plain_implementation(configs):
    a_runs, b_runs = configs
    got = compare(a_runs, b_runs, list(PLAIN))
    wrong = {}
    for m, higher in PLAIN.items():
        for name, runs in (("A", a_runs), ("B", b_runs)):
            est = got[m]["per_config"][name]
            want = plain_mean_interval([r[m] for r in runs], CONF)
            if not all(same(x, y) for x, y in zip((est["value"], est["low"], est["high"]), want)):
                wrong[f"{m} {name}"] = ((est["value"], est["low"], est["high"]), want)
        vs = got[m]["vs_baseline"]["B"]
        p = plain_paired({i: r[m] for i, r in enumerate(a_runs)}, {i: r[m] for i, r in enumerate(b_runs)}, CONF)
        d = vs["difference"]
        for k in ("absolute", "relative"):
            mine = (d[k]["value"], d[k]["low"], d[k]["high"])
            if not all(same(x, y) for x, y in zip(mine, p[k])):
                wrong[f"{m} {k}"] = (mine, p[k])
        judged, margin = plain_judged(p, m, MARGIN)
        want_verdict = plain_verdict(judged, p["n"], margin, higher)
        if vs["verdict"] != want_verdict:
            wrong[f"{m} verdict"] = (vs["verdict"], want_verdict, p)
    assert wrong == {}


@FAST
@given(two_configs())
def test_cost_shown_is_the_ratio_of_totals(configs):
    a_runs, b_runs = configs
    got = compare(a_runs, b_runs, ["cost_per_mtok_good"])["cost_per_mtok_good"]["per_config"]
    for name, runs in (("A", a_runs), ("B", b_runs)):
        want = plain_ratio_of_totals([r["cost_total"] for r in runs], [r["good_output_tokens"] for r in runs], 1e6)
        assert same(got[name]["value"], want), (name, got[name]["value"], want)


@FAST
@given(two_configs())
def test_cost_difference_judged_is_the_ratio_of_totals(configs):
    """The difference judged for a cost-type metric is the ratio of totals, (Σ cost_B / Σ good_B) /
    (Σ cost_A / Σ good_A) - 1; inf without good tokens."""
    a_runs, b_runs = configs
    vs = compare(a_runs, b_runs, ["cost_per_mtok_good"])["cost_per_mtok_good"]["vs_baseline"]["B"]["difference"]
    tot = [plain_ratio_of_totals([r["cost_total"] for r in rs], [r["good_output_tokens"] for r in rs], 1e6)
           for rs in (a_runs, b_runs)]
    if math.isinf(tot[0]) and math.isinf(tot[1]):       # both paid for nothing: no relative difference
        assert math.isnan(vs["relative"]["value"])
        return
    elif math.isinf(tot[0]):
        return                                             # an infinite baseline: the test below
    else:
        want_rel, want_abs = tot[1] / tot[0] - 1, tot[1] - tot[0]
    assert same(vs["relative"]["value"], want_rel) and same(vs["absolute"]["value"], want_abs)


def test_a_zero_baseline_is_judged_on_the_absolute_difference():
    """No relative difference against a zero mean: B - A is judged, in points for a rate."""
    a = [{**r, "error_rate": 0.0} for r in _runs(4)]
    b = [{**r, "error_rate": e} for r, e in zip(_runs(4), (0.10, 0.12, 0.11, 0.13))]
    vs = compare(a, b, ["error_rate"])["error_rate"]["vs_baseline"]["B"]
    assert vs["difference"]["absolute"]["value"] == pytest.approx(0.115)
    assert vs["verdict"] == "a_better"                      # B fails 11.5 points more often than A's zero


def _runs(n):
    return [{"output_throughput": 100.0, "goodput_rps": 1.0, "slo_attainment": 1.0, "error_rate": 0.0,
             "p99_ttft_ms": 50.0, "cost_total": 0.1, "good_output_tokens": 1000} for _ in range(n)]


def test_one_repeat_has_a_value_and_no_interval():
    got = compare(_runs(1), [{**r, "output_throughput": 150.0} for r in _runs(1)], ["output_throughput"])
    m = got["output_throughput"]
    assert m["per_config"]["B"]["value"] == 150.0 and math.isnan(m["per_config"]["B"]["low"])
    assert m["vs_baseline"]["B"]["difference"]["absolute"]["value"] == 50.0
    assert m["vs_baseline"]["B"]["difference"]["relative"]["value"] == pytest.approx(0.5)
    assert m["vs_baseline"]["B"]["verdict"] == "insufficient_data"


def test_a_baseline_that_bought_nothing_loses_on_cost():
    a = [{**r, "good_output_tokens": 0} for r in _runs(3)]
    vs = compare(a, _runs(3), ["cost_per_mtok_good"])["cost_per_mtok_good"]["vs_baseline"]["B"]
    rel = vs["difference"]["relative"]
    assert (rel["value"], rel["low"], rel["high"]) == (-1.0, -1.0, -1.0)  # B/inf - 1 in every resample
    assert vs["difference"]["absolute"]["value"] == -math.inf
    assert vs["verdict"] == "b_better"


def test_a_config_that_bought_nothing_loses_to_its_baseline_on_cost():
    b = [{**r, "good_output_tokens": 0} for r in _runs(3)]
    vs = compare(_runs(3), b, ["cost_per_mtok_good"])["cost_per_mtok_good"]["vs_baseline"]["B"]
    assert vs["difference"]["relative"]["value"] == math.inf and vs["verdict"] == "a_better"


def test_no_good_tokens_in_some_replicates_only_is_a_finite_ratio_of_totals():
    # one of A's three repeats bought good tokens: R_A = 3 x 0.1 / 1,000 tokens, three times B's
    a = [{**r, "good_output_tokens": g} for r, g in zip(_runs(3), (0, 0, 1000))]
    vs = compare(a, _runs(3), ["cost_per_mtok_good"])["cost_per_mtok_good"]["vs_baseline"]["B"]
    assert vs["difference"]["relative"]["value"] == pytest.approx(1 / 3 - 1)
    assert vs["verdict"] == "no_significant_difference"  # two repeats of nothing: a wide interval
    # and one repeat a side is no evidence either way
    vs = compare([{**_runs(1)[0], "good_output_tokens": 0}], _runs(1), ["cost_per_mtok_good"])
    assert vs["cost_per_mtok_good"]["vs_baseline"]["B"]["verdict"] == "insufficient_data"
