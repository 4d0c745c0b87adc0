"""One formula per metric, shown and judged (issue 31, item 3), and a baseline of zero judged by
its absolute difference (item 2): ``metrics.comparison.compare_tables`` and
``metrics.statistics.ratio_difference``."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pyarrow as pa
import pytest
from scipy import stats

from metrics.comparison import absolute_margin, compare_tables
from metrics.statistics import ratio_difference, verdict


def runs(label="rate=4", **cols) -> pa.Table:
    n = len(next(iter(cols.values())))
    return pa.table({"label": [label] * n, **cols})


def test_the_cost_difference_is_judged_on_the_ratio_of_totals_it_shows():
    # baseline: 1.0 per M good tokens in every run.  Newest: cheap runs with many tokens and dear
    # runs with few: per run 0.5/0.2 = 2.5 and 1.5/2.0 = 0.75 per M, whose mean 1.625 is +62.5 %,
    # while the ratio of totals (the value shown) is 4 x 2.0 / (4 x 2.2) = 0.90909: -9.09 %
    base = runs(cost_total=[1.0] * 8, good_output_tokens=[1e6] * 8, cost_per_mtok_good=[1.0] * 8)
    new = runs(cost_total=[0.5, 1.5] * 4, good_output_tokens=[0.2e6, 2.0e6] * 4,
               cost_per_mtok_good=[2.5, 0.75] * 4)
    (p,) = compare_tables({"a": base, "b": new}, ["cost_per_mtok_good"], "a", paired=False)
    e = p["metrics"]["cost_per_mtok_good"]
    assert e["per_config"]["b"]["value"] == pytest.approx(2.0 / 2.2)
    rel = e["vs_baseline"]["b"]["difference"]["relative"]
    assert rel["value"] == pytest.approx(2.0 / 2.2 - 1)  # -9.09 %, the shown values' ratio, not +62.5 %
    assert rel["method"].startswith("ratio of totals")
    # the interval is of the same quantity: the shown value's change lies inside it
    assert rel["low"] < 2.0 / 2.2 - 1 < rel["high"] and rel["high"] < 0.625


def test_ratio_difference_by_hand():
    # A: 1/1, 1/1 -> R_A = 1, influences 0, 0.  B: 1.2/1, 1.0/1 -> R_B = 1.1,
    # u = (1.2 - 1.1, 1.0 - 1.1)/(1 x 1.1) = +-0.090909; s_u^2 = 0.016529, /2 = 0.0082645;
    # se(ln) = 0.090909, Welch dof 1, t(0.975, 1) = 12.7062: ln 1.1 = 0.09531 -+ 1.15511
    d = ratio_difference([1, 1], [1, 1], [1.2, 1.0], [1, 1], paired=False, scale=1e6)
    assert d.relative.value == pytest.approx(0.1)
    assert d.relative.low == pytest.approx(math.exp(0.0953102 - 1.1551090) - 1, abs=1e-5)   # -0.65347
    assert d.relative.high == pytest.approx(math.exp(0.0953102 + 1.1551090) - 1, abs=1e-4)  # +2.49181
    assert d.absolute.value == pytest.approx(0.1e6) and d.b.value == pytest.approx(1.1e6)
    # no good tokens on B in either replicate: an infinite cost, +inf in every resample, and A wins
    d = ratio_difference([1, 1], [1, 1], [1, 1], [0, 0], paired=False)
    assert d.b.value == math.inf and d.relative.low == math.inf and "B had a cost and a denominator of 0" in d.note
    assert verdict(d, higher_is_better=False).outcome == "a_better"
    # in one of them only: R_B is finite, and the delta method judges it as any other
    d = ratio_difference([1, 1], [1, 1], [1, 1], [0, 2], paired=False)
    assert d.b.value == 1.0 and d.relative.value == 0.0
    # one replicate on B: no interval
    d = ratio_difference([1, 1], [1, 1], [1], [0], paired=False)
    assert d.b.value == math.inf and math.isnan(d.relative.low) and "denominators sum to 0" in d.note
    assert verdict(d).outcome == "insufficient_data"


def test_an_error_rate_that_was_zero_is_judged_by_its_absolute_difference():
    base = runs(error_rate=[0.0] * 4, output_throughput=[50.0, 50.5, 49.5, 50.0])
    new = runs(error_rate=[0.30, 0.35, 0.40, 0.35], output_throughput=[50.0, 50.5, 49.5, 50.0])
    (p,) = compare_tables({"a": base, "b": new}, ["error_rate", "output_throughput"], "a", paired=False)
    vs = p["metrics"]["error_rate"]["vs_baseline"]["b"]
    # +0.35 [0.35 -+ t(0.975, 3) x 0.040825/sqrt(4)] = [0.28504, 0.41496], beyond 0.02 (2 points)
    assert vs["judged"] == "absolute" and vs["margin"] == 0.02
    assert vs["verdict"] == "a_better"
    ab = vs["difference"]["absolute"]
    assert ab["value"] == pytest.approx(0.35)
    assert ab["low"] == pytest.approx(0.35 - 3.182446 * 0.0408248 / 2, abs=1e-6)
    assert "absolute difference is judged" in vs["text"]
    assert p["metrics"]["output_throughput"]["vs_baseline"]["b"]["verdict"] == "equivalent"


def test_zero_on_both_sides_is_equivalent_not_missing_data():
    zero = runs(error_rate=[0.0] * 3)
    (p,) = compare_tables({"a": zero, "b": zero}, ["error_rate"], "a", paired=False)
    vs = p["metrics"]["error_rate"]["vs_baseline"]["b"]
    assert (vs["judged"], vs["verdict"]) == ("absolute", "equivalent")


def test_the_absolute_margin():
    assert absolute_margin("error_rate", 0.02, 0.35) == 0.02          # 2 points for a rate
    assert absolute_margin("task_completion_rate", 0.05, 0.5) == 0.05
    assert absolute_margin("replica_load_imbalance", 0.02, 0.5) == pytest.approx(0.01)  # 2 % of the side not 0


def test_an_error_rate_that_fell_to_zero_is_no_certain_improvement():
    # one error in one run of the baseline (0.025 of 40 requests), none in the newest: the relative
    # difference is -100 % with a zero-width interval (B never varies); the absolute one is
    # -0.005 [-0.005 -+ t(0.975, 4) x 0.0111803/sqrt(5)] = [-0.01888, +0.00888]: inside 2 points
    base = runs(error_rate=[0.025, 0, 0, 0, 0])
    new = runs(error_rate=[0.0] * 5)
    (p,) = compare_tables({"a": base, "b": new}, ["error_rate"], "a", paired=False)
    vs = p["metrics"]["error_rate"]["vs_baseline"]["b"]
    assert (vs["judged"], vs["verdict"]) == ("absolute", "equivalent")
    assert vs["difference"]["absolute"]["low"] == pytest.approx(-0.005 - 2.776445 * 0.0111803 / 5 ** 0.5, abs=1e-6)


def test_launches_as_replicates_mean_the_repeats_and_sum_the_ratio_totals():
    from metrics.comparison import launch_replicates

    t = pa.table({"label": ["p"] * 4, "block": [0, 0, 1, 1], "p99_ttft_ms": [10.0, 20.0, 30.0, 50.0],
                  "cost_total": [1.0, 1.0, 2.0, 2.0], "good_output_tokens": [1e6, 3e6, 1e6, 1e6]})
    out, collapsed = launch_replicates(t, ["p99_ttft_ms", "cost_per_mtok_good"])
    assert collapsed and out.num_rows == 2
    assert out.column("p99_ttft_ms").to_pylist() == [15.0, 40.0]
    assert out.column("cost_total").to_pylist() == [2.0, 4.0]          # summed: the ratio of totals is kept
    assert out.column("good_output_tokens").to_pylist() == [4e6, 2e6]
    assert out.column("repeats").to_pylist() == [2, 2]
    # one launch: the repeats stay the replicates
    same, collapsed = launch_replicates(t.slice(0, 2), ["p99_ttft_ms"])
    assert not collapsed and same.num_rows == 2


def test_cost_per_good_answer_token_is_a_ratio_of_totals_across_repeats():
    # two repeats: 1.0 over 0.5 M answer tokens (2.0 per M) and 3.0 over 2.5 M (1.2 per M): the mean of
    # the per-run figures is 1.6, the ratio of totals 4.0 / 3.0 M = 1.3333 per M
    t = runs(cost_total=[1.0, 3.0], good_answer_tokens=[0.5e6, 2.5e6], cost_per_mtok_good_answer=[2.0, 1.2])
    (p,) = compare_tables({"a": t, "b": t}, ["cost_per_mtok_good_answer"], "a", paired=False)
    e = p["metrics"]["cost_per_mtok_good_answer"]
    assert e["per_config"]["a"]["value"] == pytest.approx(4.0 / 3.0)


def _influence(num, den):
    """(R, u_i = (num_i - R·den_i)/(mean(den)·R)): the delta method's per-replicate terms, plainly."""
    num, den = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    r = num.sum() / den.sum()
    return r, (num - r * den) / (den.mean() * r)


# A: 6/4 = 1.5, u_A = (-0.5, 0.5, 0)/2 = (-0.25, 0.25, 0); B: 8/5 = 1.6, u_B = (0.4, -1.2, 0.8)/(8/3)
A_NUM, A_DEN, B_NUM, B_DEN = [1.0, 2.0, 3.0], [1.0, 1.0, 2.0], [2.0, 2.0, 4.0], [1.0, 2.0, 2.0]


def test_ratio_difference_unpaired_by_formula():
    d = ratio_difference(A_NUM, A_DEN, B_NUM + [math.nan], B_DEN + [1.0], paired=False)  # B's 4th has no cost
    ra, ua = _influence(A_NUM, A_DEN)
    rb, ub = _influence(B_NUM, B_DEN)
    assert (ra, rb) == (1.5, pytest.approx(1.6)) and ua.tolist() == [-0.25, 0.25, 0.0]
    assert (d.dropped, d.note, d.relative.n) == (1, "1 replicate(s) with a missing value dropped", 6)
    assert d.method == d.relative.method == d.a.method == "ratio of totals, delta on logs (Welch)"
    h = stats.t.ppf(0.975, 2) * ua.std(ddof=1) / math.sqrt(3)                     # A alone: t(n - 1)
    assert (d.a.low, d.a.high) == (pytest.approx(1.5 * math.exp(-h)), pytest.approx(1.5 * math.exp(h)))
    ca, cb = ua.var(ddof=1) / 3, ub.var(ddof=1) / 3
    nu = (ca + cb) ** 2 / (ca ** 2 / 2 + cb ** 2 / 2)
    h = stats.t.ppf(0.975, nu) * math.sqrt(ca + cb)
    assert (d.relative.low, d.relative.high) == (pytest.approx(rb / ra * math.exp(-h) - 1),
                                                 pytest.approx(rb / ra * math.exp(h) - 1))
    ca, cb = ca * ra ** 2, cb * rb ** 2                                             # on R itself
    nu = (ca + cb) ** 2 / (ca ** 2 / 2 + cb ** 2 / 2)
    h = stats.t.ppf(0.975, nu) * math.sqrt(ca + cb)
    assert (d.absolute.low, d.absolute.high) == (pytest.approx(rb - ra - h), pytest.approx(rb - ra + h))


def test_ratio_difference_paired_by_formula():
    d = ratio_difference(A_NUM + [4.0], A_DEN + [math.nan], B_NUM + [1.0], B_DEN + [1.0], paired=True)
    ra, ua = _influence(A_NUM, A_DEN)
    rb, ub = _influence(B_NUM, B_DEN)
    assert (d.dropped, d.relative.n, d.paired) == (1, 3, True)
    assert d.method == d.relative.method == d.a.method == "ratio of totals, delta on logs (paired)"
    h = stats.t.ppf(0.975, 2) * (ub - ua).std(ddof=1) / math.sqrt(3)
    assert (d.relative.low, d.relative.high) == (pytest.approx(rb / ra * math.exp(-h) - 1),
                                                 pytest.approx(rb / ra * math.exp(h) - 1))
    h = stats.t.ppf(0.975, 2) * (ub * rb - ua * ra).std(ddof=1) / math.sqrt(3)
    assert (d.absolute.low, d.absolute.high) == (pytest.approx(rb - ra - h), pytest.approx(rb - ra + h))
    with pytest.raises(ValueError, match="paired samples differ in length"):
        ratio_difference([1, 1], [1, 1], [1, 1, 1], [1, 1, 1], paired=True)
    # lengths compared by value: 300 replicates a side (past CPython's small-int cache) pair; B costs
    # twice A in each, every influence is 0: r = +100 % with a zero-width interval
    d = ratio_difference([1.0] * 300, [1.0] * 300, [2.0] * 300, [1.0] * 300, paired=True)
    assert (d.relative.n, d.relative.value, d.relative.low) == (300, 1.0, pytest.approx(1.0))


def test_ratio_difference_of_two_replicates_a_side():
    # A: 1/1, 3/1: R_A = 2, u = (1 - 2, 3 - 2)/(1 x 2) = (-0.5, +0.5), s_u = sqrt(0.5), se = 0.5;
    # t(0.975, 1) = 12.7062: R_A in 2 exp(-+6.3531)
    d = ratio_difference([1, 3], [1, 1], [2, 2], [1, 1], paired=False)
    h = stats.t.ppf(0.975, 1) * 0.5
    assert (d.a.value, d.a.n) == (2.0, 2)
    assert (d.a.low, d.a.high) == (pytest.approx(2 * math.exp(-h)), pytest.approx(2 * math.exp(h)))


def test_ratio_difference_without_an_interval_says_why():
    d = ratio_difference([1, 1], [1, 1], [3], [2], paired=False)        # one replicate of B, a finite ratio
    assert (d.b.value, d.b.n, d.b.dropped) == (1.5, 1, 0) and d.note == "n_a=2, n_b=1: need 2 each"
    assert (d.relative.value, d.absolute.value) == (0.5, 0.5) and math.isnan(d.relative.low)
    assert ratio_difference([3], [2], [1, 1], [1, 1], paired=False).note == "n_a=1, n_b=2: need 2 each"
    d = ratio_difference([0, 0], [1, 1], [1, 1], [1, 1], paired=False)  # R_A = 0: nothing to be relative to
    assert math.isnan(d.relative.value) and d.note == "a ratio of 0: no log ratio"
    d = ratio_difference([1, 1], [1, 1], [0, 0], [1, 1], paired=False)  # R_B = 0: -100 %, no log of it
    assert (d.relative.value, d.note) == (-1.0, "a ratio of 0: no log ratio") and math.isnan(d.relative.low)
    d = ratio_difference([-1, -2], [1, 1], [1, 1], [1, 1], paired=False)  # a negative ratio has no log either
    assert math.isnan(d.a.low) and d.note == "a ratio of 0: no log ratio"
    assert math.isnan(d.relative.value) and d.absolute.value == 2.5  # no relative to a negative R_A; 1 - (-1.5)
    d = ratio_difference([1, 1], [1, 1], [-1, -2], [1, 1], paired=False)  # on B's side too: R_B = -1.5
    assert (d.b.value, d.relative.value, d.absolute.value) == (-1.5, -2.5, -2.5)  # -1.5/1 - 1, -1.5 - 1
    assert d.note == "a ratio of 0: no log ratio" and math.isnan(d.relative.low)
    d = ratio_difference([1, 2], [-1, -1], [1, 1], [1, 1], paired=False)  # so has a negative Σ den: -1.5, not inf
    assert (d.a.value, d.note) == (-1.5, "a ratio of 0: no log ratio")
    # a negative denominator is no good token bought: A is not "a positive one in each" against a B that bought nothing
    d = ratio_difference([1, 1], [-1, -1], [1, 1], [0, 0], paired=False)
    assert (d.a.value, d.note) == (-1.0, "B: the denominators sum to 0 (infinite or undefined ratio)")
    # nor is a refund (a negative cost) over no token a cost paid for nothing: undefined, not -100 %
    d = ratio_difference([1, 1], [1, 1], [-1, -1], [0, 0], paired=False)
    assert math.isnan(d.b.value) and d.note == "B: the denominators sum to 0 (infinite or undefined ratio)"
    d = ratio_difference([1, 1], [0.5, 0.5], [1, 1], [1, 1], paired=False)  # Σ den = 1 is a ratio like any
    assert (d.a.value, d.relative.value) == (2.0, -0.5)
    # nothing paid and nothing bought on B: 0/0, undefined, not infinite
    d = ratio_difference([1, 1], [1, 1], [0, 0], [0, 0], paired=False)
    assert math.isnan(d.b.value) and math.isnan(d.absolute.value) and d.b.n == 0  # no influence terms
    assert d.note == "B: the denominators sum to 0 (infinite or undefined ratio)"
    # B paid in one replicate and bought nothing in either: R_B = inf, no replicate has an influence on it
    d = ratio_difference([1, 1], [1, 1], [1, 0], [0, 0], paired=False)
    assert (d.b.value, d.b.n, d.absolute.value) == (math.inf, 0, math.inf)
    # one replicate of B bought nothing: R_B = inf, B - A = +inf, no interval
    assert ratio_difference([1, 1], [1, 1], [1], [0], paired=False).absolute.value == math.inf


def test_who_bought_nothing_is_named():
    d = ratio_difference([1, 1], [1, 1], [0.25, 0.25], [0, 0], paired=False, labels=("base", "new"))
    assert d.b.value == math.inf and d.relative.value == math.inf and d.absolute.value == math.inf
    assert d.note == ("new had a cost and a denominator of 0 in every replicate (no good tokens: an infinite "
                      "ratio), base a positive one in each: new/base - 1 is +inf in every resample")
    d = ratio_difference([1, 1], [0, 0], [0.25, 0.25], [1, 1], paired=False, labels=("base", "new"))
    assert (d.relative.value, d.relative.low, d.absolute.value) == (-1.0, -1.0, -math.inf)
    assert d.note == ("base had a cost and a denominator of 0 in every replicate (no good tokens: an infinite "
                      "ratio), new a positive one in each: new/base - 1 is -100 % in every resample")


def test_a_side_that_bought_nothing_in_one_replicate_only_is_not_a_positive_one_in_each():
    # A bought nothing in either replicate (R_A = inf); B bought 2 tokens in one and none in the other:
    # R_B = 2/2 = 1 is finite here, but a resample of B's second replicate alone is 1/0: not -100 % in every
    # resample, so no interval, and A's ratio is named as undefined
    d = ratio_difference([1, 1], [0, 0], [1, 1], [0, 2], paired=False)
    assert (d.a.value, d.b.value) == (math.inf, 1.0)
    assert math.isnan(d.relative.value) and math.isnan(d.relative.low) and math.isnan(d.absolute.value)
    assert d.note == "A: the denominators sum to 0 (infinite or undefined ratio)"


def test_a_side_of_one_replicate_has_no_interval_and_no_numpy_warning():
    with warnings.catch_warnings():  # no standard deviation of one value is taken (ddof=1: 0/0)
        warnings.simplefilter("error")
        d = ratio_difference([1, 1], [1, 1], [3], [2], paired=False)
    assert (d.b.value, d.b.n, d.b.note) == (1.5, 1, "") and math.isnan(d.b.low) and math.isnan(d.b.high)


def test_paired_ratio_difference_of_unequal_lengths_raises_and_says_so():
    with pytest.raises(ValueError, match="paired samples differ in length: 3 blocks of A, 2 of B"):
        ratio_difference([1, 2, 3], [1, 1, 1], [1, 2], [1, 1], paired=True)
    with pytest.raises(ValueError, match="paired samples differ in length: 2 blocks of A, 3 of B"):
        ratio_difference([1, 2], [1, 1], [1, 2, 3], [1, 1, 1], paired=True)
