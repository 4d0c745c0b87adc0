"""Statistics across repeats, checked against scipy, hand computations and brute force."""

from __future__ import annotations

import dataclasses
import math
import warnings

import numpy as np
import pyarrow as pa
import pytest
from scipy import stats

from metrics.percentiles import order_statistic_ci
from metrics.statistics import (
    N_RESAMPLES,
    Difference,
    Estimate,
    PooledQuantile,
    Verdict,
    aggregate_runs,
    bootstrap_ci,
    converged,
    log_ratio_ci,
    mean_ci,
    paired_difference,
    pooled_percentile_ci,
    ratio_ci,
    unpaired_difference,
    verdict,
    within_run_percentile,
)

FEW = 2_000  # resamples: enough for the checks, cheap on a shared 2-core machine


# ------------------------------------------------------------------------------------ the estimate
def test_estimate_defaults_and_relative_half_width_at_its_edges():
    e = Estimate(1.0, 0.5, 1.5, 3, "student-t")
    assert (e.note, e.confidence, e.dropped) == ("", 0.95, 0)
    assert e.rel_half_width == 0.5                                  # 0.5 / |1|
    assert Estimate(-1.0, -1.5, -0.5, 3, "m").rel_half_width == 0.5  # / |value|: a negative value too
    assert Estimate(-2.0, -3.0, -1.0, 3, "m").rel_half_width == 0.5
    assert Estimate(0.0, 0.0, 0.0, 3, "m").rel_half_width == 0.0     # a value of 0: no width is 0
    assert Estimate(0.0, -1.0, 1.0, 3, "m").rel_half_width == math.inf  # any width is infinitely wide
    assert math.isnan(Estimate(0.0, math.nan, math.nan, 1, "m").rel_half_width)  # no interval: unknown
    with pytest.raises(dataclasses.FrozenInstanceError):
        e.value = 2.0

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


def test_mean_ci_of_constant_values_is_the_point_even_at_100_percent():
    # s = 0: the interval is the point itself, not t(1, 2)·0 = inf·0 = NaN; with spread it is (-inf, inf)
    e = mean_ci([2.0, 2.0, 2.0], confidence=1.0)
    assert (e.value, e.low, e.high) == (2.0, 2.0, 2.0)
    spread = mean_ci([1.0, 2.0, 3.0], confidence=1.0)
    assert (spread.low, spread.high) == (-math.inf, math.inf)


def test_mean_ci_of_two_values_of_one_and_of_none():
    e = mean_ci([1.0, 3.0])  # x̄ = 2, s = √2, se = s/√2 = 1: 2 ± t(0.975, 1) = 2 ± 12.7062
    h = stats.t.ppf(0.975, 1)
    assert (e.low, e.high, e.n, e.note) == (pytest.approx(2 - h), pytest.approx(2 + h), 2, "")
    assert mean_ci([5.0]).note == "one repeat: no interval"
    none = mean_ci([math.nan])
    assert (none.n, none.dropped, none.note) == (0, 1, "no values; 1 NaN value(s) dropped")

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


def test_bootstrap_defaults_are_10000_resamples_seed_0_paired():
    x = np.array([3.1, 2.4, 5.0, 4.2, 3.3, 2.9, 4.8, 3.7])
    e = bootstrap_ci(np.mean, (x,))
    ref = stats.bootstrap((x,), np.mean, n_resamples=10_000, random_state=np.random.default_rng(0))
    assert N_RESAMPLES == 10_000 and (e.low, e.high) == (ref.confidence_interval.low, ref.confidence_interval.high)
    # two samples are resampled together by default (a run's numerator with its denominator)
    num, den = np.array([2.0, 3.5, 1.0, 4.0, 2.5]), np.array([1.0, 2.0, 1.0, 2.5, 1.0])

    def ratio(n, d, axis=-1):
        return n.sum(axis) / d.sum(axis)

    e = bootstrap_ci(ratio, (num, den), n_resamples=FEW)
    ref = stats.bootstrap((num, den), ratio, n_resamples=FEW, paired=True, random_state=np.random.default_rng(0))
    assert (e.low, e.high, e.n) == (ref.confidence_interval.low, ref.confidence_interval.high, 5)


def test_unpaired_bootstrap_counts_both_samples_and_drops_nan_per_sample():
    a, b = [1.0, 2.0, math.nan, 4.0, 5.0], [3.0, 4.0, 6.0, 7.0]

    def diff(x, y, axis=-1):
        return np.mean(y, axis) - np.mean(x, axis)

    e = bootstrap_ci(diff, (a, b), paired=False, n_resamples=FEW, seed=2)
    ref = stats.bootstrap(([1.0, 2.0, 4.0, 5.0], b), diff, n_resamples=FEW, random_state=np.random.default_rng(2))
    assert (e.low, e.high) == (ref.confidence_interval.low, ref.confidence_interval.high)
    assert (e.n, e.dropped, e.value, e.note) == (8, 1, 2.0, "1 NaN value(s) dropped")  # 4 + 4; 5 - 3


@pytest.mark.parametrize("method", ["percentile", "basic"])
def test_bootstrap_other_methods_are_named_by_their_method(method):
    x = np.array([3.1, 2.4, 5.0, 4.2, 3.3, 2.9])
    e = bootstrap_ci(np.mean, (x,), n_resamples=FEW, method=method)
    ref = stats.bootstrap((x,), np.mean, n_resamples=FEW, method=method, random_state=np.random.default_rng(0))
    assert e.method == f"{method}-bootstrap" and (e.low, e.high) == tuple(ref.confidence_interval)


def test_bootstrap_hands_the_statistic_every_resample_at_once_by_default():
    # vectorized by default: the statistic is called with axis=-1 (once for the estimate, once a
    # batch), so one that needs its axis keyword works; called resample by resample it would not
    def mean(x, *, axis):
        return np.mean(x, axis=axis)

    x = np.array([3.1, 2.4, 5.0, 4.2, 3.3, 2.9])
    e, ref = bootstrap_ci(mean, (x,), n_resamples=FEW), bootstrap_ci(np.mean, (x,), n_resamples=FEW)
    assert (e.value, e.low, e.high) == (ref.value, ref.low, ref.high)


def test_bootstrap_of_two_values_and_of_none():
    # [1, 3]: every resample's mean is 1, 2 or 3; the 2.5 % and 97.5 % points are 1 and 3
    e = bootstrap_ci(np.mean, ([1.0, 3.0],), n_resamples=FEW)
    assert (e.value, e.low, e.high, e.n) == (2.0, 1.0, 3.0, 2)
    none = bootstrap_ci(np.mean, ([math.nan],), n_resamples=FEW)
    assert (none.n, none.dropped, none.note) == (0, 1, "no values; 1 NaN value(s) dropped")


def _scipy_ratio_interval(num, den, method: str):
    """scipy's paired bootstrap of Σ num / Σ den, 500 resamples drawn with seed 0 (ratio_ci's draws)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return stats.bootstrap((num, den), lambda n, d, axis: n.sum(axis) / d.sum(axis), paired=True,
                               method=method, n_resamples=500, random_state=np.random.default_rng(0))


def test_bca_fallback_notes_say_why():
    # constant data: scipy's DegenerateDataWarning, its first sentence quoted
    e = bootstrap_ci(np.mean, ([4.0, 4.0, 4.0, 4.0],), n_resamples=500)
    assert e.note == ("BCa failed (The BCa confidence interval cannot be calculated); "
                      "percentile interval of the same resamples")
    # a resample of the three runs without good tokens has Σ den = 0: R = inf there; BCa gives a finite
    # lower bound and an infinite upper one without a warning: both are taken from the percentiles
    num, den = np.ones(5), np.array([0.0, 1.0, 2.0, 0.0, 0.0])
    e = ratio_ci(num, den, n_resamples=500)
    ref = _scipy_ratio_interval(num, den, "percentile")
    assert e.method == "percentile-bootstrap" and e.note.startswith("BCa failed (BCa bounds are NaN)")
    assert (e.low, e.high) == (ref.confidence_interval.low, math.inf)
    # asked for the percentile interval itself: no BCa to fail, only the infinite bound is noted
    e = ratio_ci(num, den, n_resamples=500, method="percentile")
    assert e.method == "percentile-bootstrap"
    assert e.note == "the bootstrap distribution has NaN/inf values (statistic undefined on some resamples)"
    assert (e.low, e.high) == (ref.confidence_interval.low, math.inf)
    # the basic interval (2θ̂ - the percentiles) has no BCa to fail either: an infinite bound is kept and noted
    e = ratio_ci(num, den, n_resamples=500, method="basic")
    ref = _scipy_ratio_interval(num, den, "basic")
    assert e.method == "basic-bootstrap"
    assert e.note == "the bootstrap distribution has NaN/inf values (statistic undefined on some resamples)"
    assert (e.low, e.high) == (-math.inf, ref.confidence_interval.high)


def test_paired_bootstrap_of_samples_of_unequal_length_raises_and_says_so():
    with pytest.raises(ValueError, match=r"paired samples differ in length: \[3, 4\]"):
        bootstrap_ci(np.mean, ([1.0, 2.0, 3.0], [1.0, 2.0, 3.0, 4.0]), n_resamples=FEW)


def test_bootstrap_without_dropping_nan_drops_nothing():
    # drop_nan=False (the cluster bootstrap's run indices): nothing is counted as dropped, nothing noted
    x = np.array([3.1, 2.4, 5.0, 4.2, 3.3, 2.9])
    e = bootstrap_ci(np.mean, (x,), n_resamples=FEW, drop_nan=False)
    ref = bootstrap_ci(np.mean, (x,), n_resamples=FEW)
    assert (e.dropped, e.note, e.low, e.high) == (0, "", ref.low, ref.high)


def test_bca_fallback_is_the_percentile_interval_of_the_very_same_resamples():
    # numerators that vary: the lower bound interpolates between distinct resampled ratios, so one resample
    # more (or other draws) would move it; it is scipy's percentile bound of the same 500 resamples, bit for bit
    num, den = np.array([1.3, 0.7, 2.1, 0.4, 1.9]), np.array([0.0, 1.0, 2.0, 0.0, 0.0])
    e = ratio_ci(num, den, n_resamples=500)
    ref = _scipy_ratio_interval(num, den, "percentile")
    assert e.method == "percentile-bootstrap" and e.note.startswith("BCa failed (BCa bounds are NaN)")
    assert (e.low, e.high) == (ref.confidence_interval.low, math.inf)


def test_ratio_ci_defaults_unscaled_seed_0():
    cost, tokens = np.array([2.0, 3.1, 1.9, 2.6, 2.2]), np.array([1.0, 1.4, 1.0, 1.2, 1.1])
    e = ratio_ci(cost, tokens, n_resamples=FEW)
    ref = stats.bootstrap((cost, tokens), lambda c, t, axis: c.sum(axis) / t.sum(axis), paired=True,
                          n_resamples=FEW, random_state=np.random.default_rng(0))
    assert e.value == pytest.approx(11.8 / 5.7)
    assert (e.low, e.high) == (ref.confidence_interval.low, ref.confidence_interval.high)
    doubled = ratio_ci(cost, tokens, n_resamples=FEW, scale=2.0)
    assert (doubled.value, doubled.low, doubled.high) == (2 * e.value, 2 * e.low, 2 * e.high)
    for scale in (0.5, 0.0):  # a scale below 1 scales too, 0 included
        scaled = ratio_ci(cost, tokens, n_resamples=FEW, scale=scale)
        assert (scaled.value, scaled.low, scaled.high) == (scale * e.value, scale * e.low, scale * e.high)

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
    # seeded 0 by default
    default = pooled_percentile_ci(runs, 90, n_resamples=FEW)
    ref = stats.bootstrap((np.arange(len(runs)),), brute, n_resamples=FEW, vectorized=True,
                          random_state=np.random.default_rng(0))
    assert default.low == pytest.approx(ref.confidence_interval.low, rel=1e-12)
    assert default.high == pytest.approx(ref.confidence_interval.high, rel=1e-12)


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


def test_pooled_quantile_interpolates_bit_equal_to_numpy():
    # numpy's lerp: lo + (hi - lo)·g below g = 0.5, hi - (hi - lo)·(1 - g) from it; the two differ
    # in the last bit for these pairs, so only the same rule gives np.percentile's very float
    for (a, b), q in (((1.7275651451716942, 5.247186713758815), 50), ((0.457531994967418, 2.8590376000764186), 25)):
        got = PooledQuantile([np.array([a]), np.array([b])], q)(np.array([[0, 1], [1, 0]]))
        assert got.tolist() == [np.percentile([a, b], q)] * 2
    # g = 0.75 > 0.5: hi - (hi - lo)·0.25 = 0.6270619310689842, lo + (hi - lo)·0.75 one bit above it
    a, b = 0.09778043484747923, 0.8034890964761526
    got = PooledQuantile([np.array([a]), np.array([b])], 75)(np.array([[0, 1]]))
    assert got.tolist() == [np.percentile([a, b], 75)] == [0.6270619310689842]


def test_pooled_quantile_of_nothing_drawn_at_q0_and_of_no_values():
    stat = PooledQuantile([np.empty(0), np.array([1.0, 2.0])], 0)
    np.testing.assert_array_equal(stat(np.array([[0, 0], [1, 0], [1, 1]])), [math.nan, 1.0, 1.0])
    np.testing.assert_array_equal(PooledQuantile([np.empty(0)], 50)(np.array([[0]])), [math.nan])


def test_pooled_quantile_of_several_q_over_resamples_in_two_dimensions():
    # indices of shape (2, 5, R): one percentile per q and resample, q first, as numpy's percentile lays them out
    rng = np.random.default_rng(4)
    runs = _runs(rng, 4, lo=1)
    idx = rng.integers(0, 4, (2, 5, 4))
    got = PooledQuantile(runs, [50, 90])(idx)
    brute = np.array([[np.percentile(np.concatenate([runs[k] for k in row]), [50, 90]) for row in plane]
                      for plane in idx])                      # (2, 5, q)
    assert got.shape == (2, 2, 5)
    np.testing.assert_allclose(got, np.moveaxis(brute, -1, 0), rtol=1e-13, atol=0)


def test_pooled_quantile_of_no_runs_is_nan():
    # no runs: one padding block, no weight column; nothing drawn is NaN
    stat = PooledQuantile([], 50)
    assert (stat.S, stat.B) == (1, 1)
    np.testing.assert_array_equal(stat.from_weights(np.zeros((2, 0))), [[math.nan], [math.nan]])


def test_pooled_quantile_in_chunks_and_several_q():
    # one value a block: B = 2,400 blocks, so 2,000,000 // 2,400 = 833 rows a chunk, 1,000 rows: 2 chunks
    rng = np.random.default_rng(3)
    runs = [rng.lognormal(0, 0.5, 800) for _ in range(3)]
    stat = PooledQuantile(runs, [50, 90], block_size=1)
    idx = rng.integers(0, 3, (1000, 3))
    brute = np.array([np.percentile(np.concatenate([runs[k] for k in row]), [50, 90]) for row in idx]).T
    np.testing.assert_allclose(stat(idx), brute, rtol=1e-13, atol=0)  # shape (q, rows), as scipy wants
    assert stat(np.empty((0, 3), dtype=np.intp)).shape == (2, 0)
    # no q at all: nothing per resample, laid out (q, rows) as for several
    assert PooledQuantile(runs, [])(idx[:4]).shape == (0, 4)


def test_pooled_quantile_past_two_million_blocks_takes_one_row_a_chunk():
    # 2,000,002 values, one a block: 2,000,000 // 2,000,002 = 0 rows a chunk, so at least 1
    x = np.arange(2_000_001.0)
    stat = PooledQuantile([x, np.array([5.5])], 50, block_size=1)
    # x twice: 4,000,002 values, h = 2,000,000.5 -> halfway between 1,000,000 (twice) = 1e6;
    # x and 5.5: the 1,000,001st of 2,000,002 values, 5.5 among them below, halfway 999,999 and 1e6
    np.testing.assert_array_equal(stat(np.array([[0, 0], [0, 1]])), [1_000_000.0, 999_999.5])


def test_pooled_percentile_note_without_anything_dropped():
    rng = np.random.default_rng(1)
    e = pooled_percentile_ci(_runs(rng, 5, lo=3), 50, n_resamples=500)
    assert (e.note, e.dropped) == ("cluster bootstrap: runs resampled, their requests pooled", 0)


def test_pooled_percentile_from_a_callers_generator_is_one_seed_drawn_from_it():
    rng = np.random.default_rng(1)
    runs = _runs(rng, 5, lo=3)
    e = pooled_percentile_ci(runs, 90, n_resamples=500, rng=np.random.default_rng(5))
    seed = int(np.random.default_rng(5).integers(2**63))
    ref = pooled_percentile_ci(runs, 90, n_resamples=500, seed=seed)
    assert (e.low, e.high) == (ref.low, ref.high)

def test_within_run_percentile_uses_order_statistics():
    x = np.arange(1000.0)
    e = within_run_percentile(x, 99)
    assert (e.low, e.high) == order_statistic_ci(x, 99)
    assert e.method == "order-statistic (within run)" and ">= 662" in e.note


def test_within_run_percentile_note_at_its_edges():
    assert "n=662 >= 662 needed for p99" in within_run_percentile(np.arange(662.0), 99).note  # just enough
    assert "n=661 < 662 needed for p99" in within_run_percentile(np.arange(661.0), 99).note
    assert "n=5 >= 1 needed for p100" in within_run_percentile(np.arange(5.0), 100).note   # the maximum

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
    with pytest.raises(ValueError, match="paired samples differ in length: 2 blocks of A, 1 of B"):
        paired_difference([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="paired samples differ in length: 2 blocks of A, 3 of B"):
        paired_difference([1.0, 2.0], [1.0, 2.0, 3.0])


def test_paired_difference_bootstrap_keeps_blocks_together():
    # bootstrap=True: block i of A is resampled with block i of B, as scipy's paired bootstrap of b̄ - ā
    d = paired_difference(A, B, bootstrap=True, n_resamples=FEW)
    ref = stats.bootstrap((A, B), lambda a, b, axis: np.mean(b, axis) - np.mean(a, axis), paired=True,
                          n_resamples=FEW, random_state=np.random.default_rng(0))
    assert (d.bootstrap.low, d.bootstrap.high) == (ref.confidence_interval.low, ref.confidence_interval.high)
    assert (d.bootstrap.n, d.bootstrap.value) == (6, pytest.approx(32 / 6))  # 6 blocks; (637 - 605)/6
    # relative="bootstrap": b̄/ā - 1 resampled by block too
    d = paired_difference(A, B, relative="bootstrap", n_resamples=FEW)
    ref = stats.bootstrap((A, B), lambda a, b, axis: np.mean(b, axis) / np.mean(a, axis) - 1, paired=True,
                          n_resamples=FEW, random_state=np.random.default_rng(0))
    assert (d.relative.low, d.relative.high) == (ref.confidence_interval.low, ref.confidence_interval.high)


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
    z = paired_difference([1.0, 2.0, 3.0], [-1.0, 3.0, 4.0], relative="log")  # nor a negative one of B
    assert (z.relative.method, z.relative.value) == ("delta (student-t)", 0.0)
    # a negative block of A (its mean still positive) has no log of b/a either
    z = paired_difference([-1.0, 3.0, 4.0], [1.0, 2.0, 3.0], relative="log")
    assert (z.relative.method, z.relative.value) == ("delta (student-t)", 0.0)  # 6/6 - 1


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


def test_difference_defaults():
    e = Estimate(1.0, 0.5, 1.5, 3, "m")
    d = Difference(e, e, e, e, True)
    assert (d.dropped, d.bootstrap, d.labels, d.note) == (0, None, ("A", "B"), "")
    with pytest.raises(dataclasses.FrozenInstanceError):  # a result is read, never edited
        d.note = "edited"


def test_which_difference_is_judged():
    assert paired_difference(A, B).judged == "relative"
    assert paired_difference(np.zeros(6), B).judged == "absolute"   # nothing to be relative to
    assert paired_difference(A, np.zeros(6)).judged == "absolute"   # -100 %, zero-width: no evidence


def test_relative_difference_needs_a_positive_baseline():
    zero = paired_difference([0.0, 0.0, 0.0], [0.5, 0.7, 0.6])
    assert math.isnan(zero.relative.value) and zero.relative.note == "relative difference needs a positive mean of A"
    small = paired_difference([0.4, 0.6, 0.5], [0.5, 0.7, 0.6])  # a mean below 1 is a mean like any
    assert small.relative.value == pytest.approx(0.2)


def test_paired_difference_of_one_and_of_two_blocks():
    few = paired_difference([100.0, math.nan], [120.0, 130.0])
    assert few.note == "1 complete block(s): need 2; 1 block(s) with a missing run dropped"
    assert (few.absolute.value, few.relative.value, few.paired, few.dropped) == (20.0, pytest.approx(0.2), True, 1)
    assert math.isnan(paired_difference([0.0], [5.0]).relative.value)  # no relative to a zero
    assert math.isnan(paired_difference([-2.0], [1.0]).relative.value)  # nor to a negative mean
    two = paired_difference([1.0, 2.0], [2.0, 4.0])
    ci = stats.ttest_rel([2.0, 4.0], [1.0, 2.0]).confidence_interval()
    assert (two.absolute.low, two.absolute.high) == (pytest.approx(ci.low), pytest.approx(ci.high))


def test_paired_difference_wants_two_sequences_or_two_mappings():
    with pytest.raises(TypeError, match="two sequences or two mappings"):
        paired_difference({0: 1.0, 1: 2.0}, [1.0, 2.0])
    # lengths are compared by value: 300 blocks each (ints past CPython's small-int cache) are paired
    d = paired_difference(np.arange(1.0, 301.0), np.arange(2.0, 302.0))
    assert (d.absolute.value, d.absolute.low, d.absolute.high, d.absolute.n) == (1.0, 1.0, 1.0, 300)


def test_paired_log_ratio_fallback_for_a_relative_read_from_a_config():
    relative = "".join(["lo", "g"])  # the same text, not the same object as the literal "log"
    z = paired_difference([0.0, 1.0, 2.0], [1.0, 2.0, 3.0], relative=relative)
    assert z.relative.note == "a block's value is not positive: no log ratio"
    assert paired_difference(A, B, relative=relative).relative.method == "paired log ratio (student-t)"
    boot = paired_difference(A, B, relative="".join(["boot", "strap"]), n_resamples=FEW)
    assert boot.relative.method == "bca-bootstrap"


def test_the_delta_method_asked_for_carries_no_log_note():
    # "delta" (the default) is not "log": its note is only the dropped blocks', never the log fallback's
    assert paired_difference(A, B).relative.note == ""
    d = paired_difference([*A, math.nan], [*B, 1.0], relative="delta")
    assert (d.relative.method, d.relative.note) == ("delta (student-t)", "1 block(s) with a missing run dropped")


def test_no_bootstrap_unless_asked():
    assert paired_difference(A, B).bootstrap is None and unpaired_difference(A, B).bootstrap is None


def test_paired_relative_delta_takes_the_wider_spread():
    # s_e > s_d: a = (10, 20, 30), b = (30, 20, 40): r = 1.5, e = (15, -10, -5): s_e² = 350/2 = 175;
    # d = (20, 0, 10): s_d² = 200/2 = 100.  se = √175/(√3·20)
    d = paired_difference([10.0, 20.0, 30.0], [30.0, 20.0, 40.0])
    h = stats.t.ppf(0.975, 2) * math.sqrt(175) / (math.sqrt(3) * 20)
    assert (d.relative.low, d.relative.high) == (pytest.approx(0.5 - h), pytest.approx(0.5 + h))
    # s_e = 0 (B proportional to A): d = (1.59, 0, 0), mean 0.53, s_d² = (1.06² + 2·0.53²)/2 = 0.8427;
    # se = √0.8427/(√3·0.47)
    d = paired_difference([1.41, 0.0, 0.0], [3.0, 0.0, 0.0])
    r, h = 3.0 / 1.41, stats.t.ppf(0.975, 2) * math.sqrt(0.8427) / (math.sqrt(3) * 0.47)
    assert (d.relative.low, d.relative.high) == (pytest.approx(r - 1 - h), pytest.approx(r - 1 + h))


def test_log_ratio_ci_drops_what_has_no_log():
    # kept 0.5 and 2: logs -ln 2, +ln 2, mean 0, s = √2·ln 2, se = ln 2: exp(±t(0.975, 1)·ln 2)
    e = log_ratio_ci([0.0, 0.5, 2.0, None, math.inf, -1.0])
    h = stats.t.ppf(0.975, 1) * math.log(2)
    assert (e.value, e.n, e.dropped) == (1.0, 2, 4)
    assert (e.low, e.high) == (pytest.approx(math.exp(-h)), pytest.approx(math.exp(h)))
    none = log_ratio_ci([0.0])
    assert (none.n, none.dropped, none.note) == (0, 1, "no positive ratio")


def test_unpaired_delta_relative_by_hand():
    a, b = A, np.array([106.0, 115.0, 99.0, 108.0])
    d = unpaired_difference(a, b)
    ma, r = a.mean(), b.mean() / a.mean()
    cb, ca = b.var(ddof=1) / 4 / ma ** 2, r ** 2 * a.var(ddof=1) / 6 / ma ** 2   # B's and A's terms
    nu = (ca + cb) ** 2 / (ca ** 2 / 5 + cb ** 2 / 3)
    h = stats.t.ppf(0.975, nu) * math.sqrt(ca + cb)
    assert (d.relative.low, d.relative.high) == (pytest.approx(r - 1 - h), pytest.approx(r - 1 + h))
    assert (d.relative.method, d.relative.n, d.absolute.n) == ("delta (Welch)", 10, 10)


def test_unpaired_of_two_a_side_of_one_and_of_none():
    two = unpaired_difference([1.0, 2.0], [2.0, 4.0])
    ci = stats.ttest_ind([2.0, 4.0], [1.0, 2.0], equal_var=False).confidence_interval()
    assert (two.absolute.low, two.absolute.high) == (pytest.approx(ci.low), pytest.approx(ci.high))
    one = unpaired_difference([1.0], [2.0, 3.0, 4.0])
    assert one.note == "n_a=1, n_b=3: need 2 each" and math.isnan(one.absolute.low) and one.absolute.value == 2.0
    assert (one.absolute.n, one.relative.n, one.paired) == (4, 4, False)  # every value of both sides, unpaired
    one_b = unpaired_difference([1.0, 2.0, 3.0], [5.0])  # and one value of B
    assert one_b.note == "n_a=3, n_b=1: need 2 each" and math.isnan(one_b.absolute.low) and one_b.absolute.value == 3.0
    small = unpaired_difference([0.5], [1.0])
    assert (small.absolute.value, small.relative.value) == (0.5, 1.0)
    assert math.isnan(unpaired_difference([0.0], [5.0]).relative.value)
    assert math.isnan(unpaired_difference([-2.0], [1.0, 3.0]).relative.value)  # nor to a negative mean
    with warnings.catch_warnings():  # a side without values: NaN, and no numpy warning of an empty mean
        warnings.simplefilter("error")
        none = unpaired_difference([math.nan], [1.0, 3.0])
    assert math.isnan(none.absolute.value) and math.isnan(none.relative.value) and none.absolute.n == 2
    zero = unpaired_difference([0.0, 0.0], [1.0, 2.0])  # no relative to a zero mean: its n counts both sides
    assert (zero.relative.n, zero.relative.note) == (4, "relative difference needs a positive mean of A")


def test_relative_difference_against_a_negative_mean_of_a_is_undefined():
    # two blocks or more: the guard, not the delta method, answers for a negative ā (here -2)
    for diff in (paired_difference, unpaired_difference):
        d = diff([-1.0, -2.0, -3.0], [1.0, 2.0, 3.0])
        assert math.isnan(d.relative.value) and math.isnan(d.relative.low)
        assert d.relative.note == "relative difference needs a positive mean of A"
        assert d.absolute.value == 4.0  # the absolute difference is there: 2 - (-2)
        assert d.judged == "relative"  # judged on B - A only where a mean is exactly 0
        # nor a negative mean of B: -2 against 2 is -200 %, judged relative
        assert diff([1.0, 2.0, 3.0], [-1.0, -2.0, -3.0]).judged == "relative"


def test_unpaired_relative_bootstrap_read_from_a_config():
    relative = "".join(["boot", "strap"])  # the same text, not the same object as the literal
    d = unpaired_difference(A, [106.0, 115.0, 99.0, 108.0], relative=relative, n_resamples=FEW)
    assert d.relative.method == "unpaired bca-bootstrap"


def test_unpaired_relative_bootstrap_resamples_each_side_alone():
    a, b = A, np.array([106.0, 115.0, 99.0, 108.0])
    d = unpaired_difference(a, b, relative="bootstrap", n_resamples=FEW)
    ref = stats.bootstrap((a, b), lambda x, y, axis: np.mean(y, axis) / np.mean(x, axis) - 1, n_resamples=FEW,
                          random_state=np.random.default_rng(0))
    assert (d.relative.low, d.relative.high) == (ref.confidence_interval.low, ref.confidence_interval.high)
    assert (d.relative.method, d.relative.n) == ("unpaired bca-bootstrap", 10)


def test_unpaired_difference_counts_the_nan_of_both_sides():
    # one NaN in A, two in B: 3 dropped (a difference of the counts would say -1)
    d = unpaired_difference([1.0, math.nan, 3.0], [math.nan, 2.0, 4.0, math.nan, 6.0])
    assert (d.dropped, d.absolute.dropped, d.relative.dropped, d.absolute.n) == (3, 3, 3, 5)
    assert d.note == "3 NaN value(s) dropped"


def test_welch_dof_is_infinite_where_the_variances_underflow():
    # (s²/n)² underflows to 0 for spreads of 1e-90: Welch's dof is then taken as infinite (the normal
    # quantile), not 0/0.  c_a = 1e-180/3, c_b = (7/3)e-180/3: se = √(10/9)·1e-90
    d = unpaired_difference([1e-90, 2e-90, 3e-90], [2e-90, 3e-90, 5e-90])
    h = stats.norm.ppf(0.975) * math.sqrt(10 / 9) * 1e-90
    assert (d.absolute.low, d.absolute.high) == (pytest.approx(4e-90 / 3 - h), pytest.approx(4e-90 / 3 + h))

# ------------------------------------------------------------------------------------ verdict
def _rel(v, lo, hi, n=6, conf=0.95):
    return Estimate(v, lo, hi, n, "delta (student-t)", confidence=conf)


def test_verdict_clear_winner_depends_on_direction():
    d = paired_difference(A, B)  # B about +5 %, clearly
    up = verdict(d, higher_is_better=True)
    assert up.outcome == "b_better" and up.text.startswith("B better than A by 5.") and up.significant
    down = verdict(d, higher_is_better=False)  # e.g. latency: B's higher value loses
    assert down.outcome == "a_better" and down.text.startswith("A better than B")
    assert verdict(_rel(-0.10, -0.14, -0.06), higher_is_better=False).outcome == "b_better"
    # numpy's floats judge as Python's (v > 0 is then numpy's bool)
    assert verdict(_rel(np.float64(0.10), 0.06, 0.14)).outcome == "b_better"


def test_verdict_defaults():
    v = Verdict("equivalent", "t", _rel(0.0, -0.01, 0.01), 0.02, True)
    assert (v.significant, v.confidence, v.judged) == (False, 0.95, "relative")


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


def test_verdict_texts_name_the_winner_and_its_gain():
    detail = "at 95%, n=6; margin ±2.0%; higher is better)"
    assert verdict(_rel(0.10, 0.06, 0.14)).text == ("B better than A by 10.0% [6.0%, 14.0%] "
                                                    f"((B - A)/A = +10.0% [+6.0%, +14.0%] {detail}")
    # a fall where higher is better: A wins, its gain the interval turned round
    v = verdict(_rel(-0.10, -0.14, -0.06))
    assert (v.outcome, v.text) == ("a_better", "A better than B by 10.0% [6.0%, 14.0%] "
                                               f"((B - A)/A = -10.0% [-14.0%, -6.0%] {detail}")
    v = verdict(paired_difference(A, B, labels=("base", "new")))
    assert v.text.startswith("new better than base by 5.")
    with pytest.raises(dataclasses.FrozenInstanceError):
        v.outcome = "a_better"


def test_verdict_at_the_edges_of_zero_and_the_margin():
    for lo, hi in ((0.0, 0.1), (-0.1, 0.0)):  # an interval that touches 0 does not exclude it
        v = verdict(_rel((lo + hi) / 2, lo, hi))
        assert (v.outcome, v.significant) == ("no_significant_difference", False)
    assert verdict(_rel(0.0, -0.02, 0.01)).outcome == "equivalent"   # the margin itself is inside
    assert verdict(_rel(0.0, -0.01, 0.02)).outcome == "equivalent"

    # an effect the size of the margin itself, significant: not above the margin, so no winner
    v = verdict(_rel(0.02, 0.01, 0.03))
    assert (v.outcome, v.significant) == ("no_significant_difference", True)
    assert verdict(_rel(-0.02, -0.03, -0.01), higher_is_better=False).outcome == "no_significant_difference"


def test_insufficient_data_is_not_significant():
    v = verdict(_rel(0.1, math.nan, math.nan))
    assert (v.outcome, v.significant) == ("insufficient_data", False)


def test_verdict_on_an_absolute_difference_uses_the_absolute_margin():
    # A never fails, B 11.5 % of the time: B - A = 0.115 [0.094, 0.136], judged in points
    d = paired_difference(np.zeros(4), [0.10, 0.12, 0.11, 0.13])
    assert verdict(d, higher_is_better=False).outcome == "a_better"    # the default: margin, 0.02
    v = verdict(d, higher_is_better=False, absolute_margin=0.2)
    assert (v.outcome, v.margin, v.judged) == ("equivalent", 0.2, "absolute")
    assert v.text.startswith("A and B equivalent within 0.2 (B - A = +0.115 [")

    assert v.text.endswith("; margin ±0.2; lower is better)")
    assert verdict(d, absolute_margin=0.2).text.endswith("; margin ±0.2; higher is better)")


def test_verdict_needs_two_replicates_and_says_why_not():
    assert verdict(_rel(0.1, 0.05, 0.15, n=2)).outcome == "b_better"
    assert verdict(_rel(0.1, 0.05, 0.15, n=1)).outcome == "insufficient_data"
    assert verdict(_rel(0.1, math.nan, math.nan)).text == "insufficient data to compare B with A (no interval)"
    noted = Estimate(0.1, math.nan, math.nan, 1, "m", note="one repeat: no interval")
    assert verdict(noted).text == "insufficient data to compare B with A (one repeat: no interval)"


def test_verdict_confidence_label_rounds_away_float_noise_only():
    # 0.950000004·100 = 95.0000004: float noise at 6 decimals, "95%"; 0.95000004·100 = 95.000004 is not
    for conf, label in ((0.950000004, "95%"), (0.95000004, "95.00%")):
        assert f"at {label}, n=6" in verdict(_rel(0.04, -0.01, 0.09, conf=conf), confidence=conf).text


# ------------------------------------------------------------------------------------ convergence
def test_converged():
    ests = {"tput": Estimate(100.0, 98.0, 102.0, 5, "student-t"),
            "p99": Estimate(50.0, 40.0, 60.0, 5, "student-t"),
            "new": Estimate(7.0, math.nan, math.nan, 1, "student-t")}
    ok, pending = converged(ests, 0.05)
    assert not ok and [m for m, _ in pending] == ["p99", "new"] and pending[0][1] == pytest.approx(0.2)
    assert converged({"tput": ests["tput"]}, 0.05) == (True, [])
    # at the target exactly: (5 - 3)/2 / 4 = 0.25 is "at most" 0.25, converged
    assert converged({"x": Estimate(4.0, 3.0, 5.0, 5, "student-t")}, 0.25) == (True, [])


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
        lo, hi = stats.t.interval(0.95, 2, loc=11.0, scale=stats.sem([10.0, 12.0, 11.0]))  # 95 % by default
        assert (a["output_throughput"].low, a["output_throughput"].high) == (pytest.approx(lo), pytest.approx(hi))
    assert list(aggregate_runs(cols, ["cost_total"], group_by=())) == [()]
    # a ratio named by its two columns only is unscaled: group a's 3.0 / 3.1e5
    plain = aggregate_runs(cols, ratios={"cost_per_tok": ("cost_total", "good_output_tokens")}, n_resamples=500)
    assert plain[("a", 1)]["cost_per_tok"].value == pytest.approx(3.0 / 3.1e5, rel=1e-12)
    # seeded 0 by default, as ratio_ci: the interval is scipy's paired bootstrap of Σ cost / Σ tokens
    cost, tok = np.array([1.0, 1.3, 0.9, 1.7, 1.2, 0.8]), np.array([1.0, 1.2, 0.9, 1.1, 1.3, 1.0])
    e = aggregate_runs({"c": cost, "t": tok}, group_by=(), ratios={"r": ("c", "t")}, n_resamples=500)[()]["r"]
    ref = stats.bootstrap((cost, tok), lambda c, t, axis: c.sum(axis) / t.sum(axis), paired=True, n_resamples=500,
                          random_state=np.random.default_rng(0))
    assert (e.low, e.high) == (pytest.approx(ref.confidence_interval.low, rel=1e-12),
                               pytest.approx(ref.confidence_interval.high, rel=1e-12))
    with pytest.raises(KeyError):
        aggregate_runs(cols, ["nope"])


def test_aggregate_runs_of_no_rows_has_no_group():
    # no run, no group: not one group () of nothing, with no columns at all as with empty ones
    assert aggregate_runs({}, group_by=()) == {}
    assert aggregate_runs({"x": []}, ["x"], group_by=()) == {}
    assert aggregate_runs(pa.table({"config": pa.array([], pa.string())}), group_by=("config",)) == {}
