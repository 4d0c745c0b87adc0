"""Statistics across repeats, checked against scipy, hand computations and brute force."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest
from scipy import stats

from metrics.percentiles import order_statistic_ci
from metrics.statistics import (
    Estimate,
    PooledQuantile,
    aggregate_runs,
    bootstrap_ci,
    converged,
    mean_ci,
    paired_difference,
    pooled_percentile_ci,
    ratio_ci,
    unpaired_difference,
    verdict,
    within_run_percentile,
)

FEW = 2_000  # resamples: enough for the checks, cheap on a shared 2-core machine


# ------------------------------------------------------------------------------------ mean_ci
def test_mean_ci_matches_scipy_t_interval():
    x = np.array([101.0, 97.5, 104.2, 99.9, 102.3])
    e = mean_ci(x, confidence=0.9)
    lo, hi = stats.t.interval(0.9, len(x) - 1, loc=x.mean(), scale=stats.sem(x))
    assert (e.value, e.n, e.method, e.confidence) == (pytest.approx(x.mean()), 5, "student-t", 0.9)
    assert (e.low, e.high) == (pytest.approx(lo, rel=1e-12), pytest.approx(hi, rel=1e-12))
    assert e.half_width == pytest.approx((hi - lo) / 2)
    assert e.rel_half_width == pytest.approx((hi - lo) / 2 / x.mean())


def test_mean_ci_drops_nan_and_counts_them_one_value_has_no_interval():
    e = mean_ci([1.0, math.nan, 3.0, None])
    assert (e.n, e.dropped, e.value) == (2, 2, 2.0) and "2 NaN" in e.note
    one = mean_ci([5.0, math.nan])
    assert one.value == 5.0 and math.isnan(one.low) and math.isnan(one.high) and one.n == 1
    assert math.isnan(one.rel_half_width)
    assert math.isnan(mean_ci([]).value)
    flat = mean_ci([2.0, 2.0, 2.0])  # no spread: the interval is the point, not NaN
    assert (flat.low, flat.high, flat.rel_half_width) == (2.0, 2.0, 0.0)


# ------------------------------------------------------------------------------------ bootstrap
def test_bca_matches_scipy_directly():
    x = np.random.default_rng(3).lognormal(0, 0.6, 25)
    e = bootstrap_ci(np.mean, (x,), n_resamples=FEW, seed=7)
    ref = stats.bootstrap((x,), np.mean, n_resamples=FEW, method="BCa", random_state=np.random.default_rng(7))
    assert e.method == "bca-bootstrap" and e.note == ""
    assert (e.low, e.high) == (ref.confidence_interval.low, ref.confidence_interval.high)
    assert e.value == pytest.approx(x.mean())


def test_bootstrap_is_seeded():
    x = np.random.default_rng(0).normal(10, 2, 12)
    a = bootstrap_ci(np.mean, (x,), n_resamples=FEW, seed=11)
    b = bootstrap_ci(np.mean, (x,), n_resamples=FEW, seed=11)
    c = bootstrap_ci(np.mean, (x,), n_resamples=FEW, rng=np.random.default_rng(11))
    d = bootstrap_ci(np.mean, (x,), n_resamples=FEW, seed=12)
    assert (a.low, a.high) == (b.low, b.high) == (c.low, c.high)
    assert (a.low, a.high) != (d.low, d.high)


def test_bca_failure_falls_back_to_percentile_and_says_so():
    e = bootstrap_ci(np.mean, ([4.0, 4.0, 4.0, 4.0],), n_resamples=500)
    assert e.method == "percentile-bootstrap" and "BCa failed" in e.note
    assert (e.low, e.high) == (4.0, 4.0)


def test_bootstrap_too_few_observations():
    e = bootstrap_ci(np.mean, ([3.0, math.nan],), n_resamples=100)
    assert e.value == 3.0 and math.isnan(e.low) and e.n == 1 and "fewer than 2" in e.note and e.dropped == 1


def test_ratio_ci_is_ratio_of_totals_paired_bca():
    rng = np.random.default_rng(5)
    tokens = rng.uniform(0.9e6, 1.1e6, 8)
    cost = tokens * 2e-6 * rng.uniform(0.95, 1.05, 8)
    e = ratio_ci(cost, tokens, scale=1e6, n_resamples=FEW, seed=1)
    assert e.value == pytest.approx(cost.sum() / tokens.sum() * 1e6)
    ref = stats.bootstrap((cost, tokens), lambda c, t, axis: c.sum(axis) / t.sum(axis), paired=True,
                          vectorized=True, n_resamples=FEW, random_state=np.random.default_rng(1))
    assert e.low == pytest.approx(ref.confidence_interval.low * 1e6)
    assert e.high == pytest.approx(ref.confidence_interval.high * 1e6)
    assert e.low < e.value < e.high and e.method == "bca-bootstrap"
    # a repeat missing its denominator is dropped from both sides
    e2 = ratio_ci(np.append(cost, 9.0), np.append(tokens, math.nan), scale=1e6, n_resamples=FEW, seed=1)
    assert (e2.n, e2.dropped, e2.low) == (8, 1, e.low)


# ------------------------------------------------------------------------------------ pooled percentiles
def _runs(rng, n_runs, lo=0, hi=40):
    runs = [rng.lognormal(0, 0.5, rng.integers(lo, hi)) * rng.lognormal(0, 0.2) for _ in range(n_runs)]
    runs[1] = np.round(runs[1], 1)  # ties
    return runs


@pytest.mark.parametrize("block", [1, 3, 64])
@pytest.mark.parametrize("q", [0, 1, 50, 90, 99, 99.9, 100])
def test_pooled_quantile_equals_brute_force(q, block):
    rng = np.random.default_rng(int(q * 10) + block)
    runs = _runs(rng, 6, lo=1)
    stat = PooledQuantile(runs, q, block_size=block)
    idx = rng.integers(0, len(runs), (200, len(runs)))
    brute = [np.percentile(np.concatenate([runs[k] for k in row]), q) for row in idx]
    np.testing.assert_allclose(stat(idx), brute, rtol=1e-13, atol=0)
    assert stat(np.arange(len(runs))) == pytest.approx(np.percentile(np.concatenate(runs), q), rel=1e-13)


def test_pooled_quantile_of_empty_runs_only_is_nan():
    stat = PooledQuantile([np.empty(0), np.array([1.0, 2.0])], 50)
    np.testing.assert_array_equal(stat(np.array([[0, 0], [0, 1], [1, 1]])), [math.nan, 1.5, 1.5])


def test_cluster_bootstrap_matches_brute_force_with_scipy():
    rng = np.random.default_rng(9)
    runs = _runs(rng, 8, lo=5)
    e = pooled_percentile_ci(runs, 90, n_resamples=FEW, seed=4)

    def brute(idx, axis=-1):  # the pooled requests materialised, resample by resample
        idx = np.atleast_2d(idx)
        return np.array([np.percentile(np.concatenate([runs[k] for k in row]), 90) for row in idx]).squeeze()

    ref = stats.bootstrap((np.arange(len(runs)),), brute, n_resamples=FEW, vectorized=True,
                          random_state=np.random.default_rng(4))
    assert e.low == pytest.approx(ref.confidence_interval.low, rel=1e-12)
    assert e.high == pytest.approx(ref.confidence_interval.high, rel=1e-12)
    assert e.value == pytest.approx(np.percentile(np.concatenate(runs), 90))
    assert e.method == "cluster bca-bootstrap" and "runs resampled" in e.note and e.n == 8


def test_cluster_bootstrap_is_wider_than_a_request_bootstrap_when_runs_drift():
    rng = np.random.default_rng(2)
    runs = [rng.lognormal(np.log(0.2) + rng.normal(0, 0.2), 0.3, 500) for _ in range(10)]
    e = pooled_percentile_ci(runs, 50, n_resamples=FEW)
    # the within-run bound on all requests pooled treats them as independent: far narrower
    lo, hi = order_statistic_ci(np.concatenate(runs), 50)
    assert e.high - e.low > 3 * (hi - lo)


def test_pooled_percentile_several_q_nan_and_one_run():
    rng = np.random.default_rng(1)
    runs = _runs(rng, 5, lo=3)
    runs[0] = np.append(runs[0], math.nan)
    p50, p99 = pooled_percentile_ci(runs, [50, 99], n_resamples=500)
    alone = pooled_percentile_ci(runs, 99, n_resamples=500)
    assert (p99.low, p99.high) == (alone.low, alone.high) and p50.value < p99.value
    assert p50.dropped == 1 and "1 NaN request" in p50.note
    with_empty = pooled_percentile_ci([*runs, np.array([math.nan])], 50, n_resamples=500)
    assert (with_empty.low, with_empty.n) == (p50.low, 5) and "1 run(s) without values" in with_empty.note
    one = pooled_percentile_ci(runs[:1], 50, n_resamples=500)
    assert math.isnan(one.low) and "fewer than 2" in one.note


def test_within_run_percentile_uses_order_statistics():
    x = np.arange(1000.0)
    e = within_run_percentile(x, 99)
    assert (e.low, e.high) == order_statistic_ci(x, 99)
    assert e.method == "order-statistic (within run)" and ">= 662" in e.note


# ------------------------------------------------------------------------------------ differences
A = np.array([100.0, 104.0, 98.0, 101.0, 103.0, 99.0])
B = np.array([106.0, 109.0, 103.0, 105.0, 110.0, 104.0])


def test_paired_difference_matches_ttest_rel():
    d = paired_difference(A, B, confidence=0.9)
    ci = stats.ttest_rel(B, A).confidence_interval(0.9)
    assert d.absolute.value == pytest.approx((B - A).mean())
    assert (d.absolute.low, d.absolute.high) == (pytest.approx(ci.low), pytest.approx(ci.high))
    assert d.paired and d.method == "paired student-t" and d.absolute.n == 6
    assert d.relative.value == pytest.approx(B.mean() / A.mean() - 1)
    assert d.a.value == pytest.approx(A.mean()) and d.b.value == pytest.approx(B.mean())


def test_paired_relative_delta_by_hand_and_constant_baseline():
    d = paired_difference(A, B)
    r = B.mean() / A.mean()
    se = max((B - r * A).std(ddof=1), (B - A).std(ddof=1)) / (math.sqrt(6) * A.mean())
    t = stats.t.ppf(0.975, 5)
    assert (d.relative.low, d.relative.high) == (pytest.approx(r - 1 - t * se), pytest.approx(r - 1 + t * se))
    # A constant: the relative interval is the absolute one divided by A
    c = paired_difference(np.full(6, 50.0), B)
    assert c.relative.low == pytest.approx(c.absolute.low / 50)
    assert c.relative.high == pytest.approx(c.absolute.high / 50)


def test_paired_difference_drops_incomplete_blocks_and_bootstraps():
    a = {0: 100.0, 1: 104.0, 2: 98.0, 3: 101.0, 4: 103.0}
    b = {0: 106.0, 1: 109.0, 2: 103.0, 4: 110.0, 5: 120.0}
    d = paired_difference(a, b, bootstrap=True, relative="bootstrap", n_resamples=FEW)
    assert d.absolute.n == 4 and d.dropped == 2 and "2 block(s)" in d.note
    ci = stats.ttest_rel([106, 109, 103, 110], [100, 104, 98, 103]).confidence_interval()
    assert d.absolute.low == pytest.approx(ci.low)
    assert d.bootstrap.method in ("bca-bootstrap", "percentile-bootstrap")
    assert d.relative.method.endswith("bootstrap") and d.relative.value == pytest.approx(428 / 405 - 1)
    assert d.to_dict()["relative"]["n"] == 4
    with pytest.raises(ValueError):
        paired_difference([1.0, 2.0], [1.0])


def test_paired_log_ratio_by_hand_and_its_fallback():
    # a busy block slows both configs by a factor: the ratios are steady, the differences are not
    a, b = [1577.6, 1425.3, 2229.5], [161.2, 274.5, 156.9]
    d = paired_difference(a, b, relative="log")
    lr = np.log(np.array(b) / np.array(a))
    h = stats.t.ppf(0.975, 2) * lr.std(ddof=1) / math.sqrt(3)
    assert d.relative.value == pytest.approx(math.exp(lr.mean()) - 1)
    assert (d.relative.low, d.relative.high) == (pytest.approx(math.exp(lr.mean() - h) - 1),
                                                 pytest.approx(math.exp(lr.mean() + h) - 1))
    assert d.relative.method == "paired log ratio (student-t)" and d.relative.high < 0
    z = paired_difference([0.0, 1.0, 2.0], [1.0, 2.0, 3.0], relative="log")  # a zero: no log
    assert z.relative.method == "delta (student-t)" and "not positive" in z.relative.note


def test_paired_relative_not_zero_width_when_b_is_proportional_to_a():
    # Real case: p50 TPOT per block (1.41, 3.0), (0, 0), (0, 0); e_i = b_i - r a_i vanishes.
    d = paired_difference([1.41, 0.0, 0.0], [3.0, 0.0, 0.0])
    assert d.relative.high - d.relative.low > 0.5
    assert d.relative.low < 0 < d.relative.high
    assert verdict(d, higher_is_better=False).outcome == "no_significant_difference"
    # Not wider than needed when A does not vary: equals the absolute interval over ā.
    d = paired_difference([100.0, 100.0, 100.0], [104.0, 106.0, 105.0])
    assert d.relative.low == pytest.approx(d.absolute.low / 100.0)


def test_unpaired_welch_matches_scipy_and_hand():
    a, b = A, np.array([106.0, 115.0, 99.0, 108.0])
    d = unpaired_difference(a, b, bootstrap=True, n_resamples=FEW)
    ci = stats.ttest_ind(b, a, equal_var=False).confidence_interval()
    assert (d.absolute.low, d.absolute.high) == (pytest.approx(ci.low), pytest.approx(ci.high))
    ca, cb = a.var(ddof=1) / 6, b.var(ddof=1) / 4
    nu = (ca + cb) ** 2 / (ca ** 2 / 5 + cb ** 2 / 3)
    h = stats.t.ppf(0.975, nu) * math.sqrt(ca + cb)
    assert d.absolute.high == pytest.approx(b.mean() - a.mean() + h)
    assert d.method == "unpaired (Welch)" and not d.paired
    assert d.bootstrap.method.startswith("unpaired")
    assert d.relative.value == pytest.approx(b.mean() / a.mean() - 1) and d.relative.low < d.relative.value


# ------------------------------------------------------------------------------------ verdict
def _rel(v, lo, hi, n=6, conf=0.95):
    return Estimate(v, lo, hi, n, "delta (student-t)", confidence=conf)


def test_verdict_clear_winner_depends_on_direction():
    d = paired_difference(A, B)  # B about +5 %, clearly
    up = verdict(d, higher_is_better=True)
    assert up.outcome == "b_better" and up.text.startswith("B better than A by 5.")
    down = verdict(d, higher_is_better=False)  # e.g. latency: B's higher value loses
    assert down.outcome == "a_better" and down.text.startswith("A better than B")
    assert verdict(_rel(-0.10, -0.14, -0.06), higher_is_better=False).outcome == "b_better"


def test_verdict_tiny_significant_effect_is_not_a_winner():
    v = verdict(_rel(0.005, 0.002, 0.008))
    assert v.outcome == "equivalent" and v.significant
    v = verdict(_rel(0.015, 0.005, 0.03))  # significant, below the margin, not inside it
    assert v.outcome == "no_significant_difference" and v.significant and "below the margin" in v.text
    assert verdict(_rel(0.03, 0.01, 0.05), margin=0.04).outcome == "no_significant_difference"
    assert verdict(_rel(0.03, 0.01, 0.05), margin=0.05).outcome == "equivalent"


def test_verdict_equivalence_no_difference_insufficient():
    assert verdict(_rel(0.001, -0.012, 0.015)).outcome == "equivalent"
    assert "equivalent within 2%" in verdict(_rel(0.001, -0.012, 0.015)).text
    v = verdict(_rel(0.04, -0.01, 0.09))
    assert v.outcome == "no_significant_difference" and "no significant difference at 95%" in v.text
    few = paired_difference([100.0, math.nan], [120.0, 130.0])
    assert verdict(few).outcome == "insufficient_data"
    with pytest.raises(ValueError):
        verdict(_rel(0.1, 0.05, 0.15, conf=0.9))


# ------------------------------------------------------------------------------------ convergence
def test_converged():
    ests = {"tput": Estimate(100.0, 98.0, 102.0, 5, "student-t"),
            "p99": Estimate(50.0, 40.0, 60.0, 5, "student-t"),
            "new": Estimate(7.0, math.nan, math.nan, 1, "student-t")}
    ok, pending = converged(ests, 0.05)
    assert not ok and [m for m, _ in pending] == ["p99", "new"] and pending[0][1] == pytest.approx(0.2)
    assert converged({"tput": ests["tput"]}, 0.05) == (True, [])


# ------------------------------------------------------------------------------------ many runs
def test_aggregate_runs_groups_means_and_ratios():
    cols = {"config": ["a", "a", "a", "b", "b", "b"], "load_point": [1, 1, 1, 1, 1, 1],
            "output_throughput": [10.0, 12.0, 11.0, 20.0, None, 22.0],
            "cost_total": [1.0, 1.1, 0.9, 2.0, 2.1, 1.9], "good_output_tokens": [1e5, 1.2e5, 0.9e5, 2e5, 2e5, 2e5]}
    for runs in (cols, pa.table(cols)):
        out = aggregate_runs(runs, ["output_throughput"], ratios={"cost_per_mtok_good":
                             ("cost_total", "good_output_tokens", 1e6)}, n_resamples=500)
        assert list(out) == [("a", 1), ("b", 1)]
        a = out[("a", 1)]
        assert a["output_throughput"].value == pytest.approx(11.0) and a["output_throughput"].method == "student-t"
        assert a["cost_per_mtok_good"].value == pytest.approx(3.0 / 3.1e5 * 1e6)
        assert out[("b", 1)]["output_throughput"].dropped == 1
    assert list(aggregate_runs(cols, ["cost_total"], group_by=())) == [()]
    with pytest.raises(KeyError):
        aggregate_runs(cols, ["nope"])
