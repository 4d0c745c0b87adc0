"""Sample sizes for a verdict's power (metrics/sample_size.py), against textbook values."""

from __future__ import annotations

import math

import numpy as np
import pytest

from metrics.sample_size import replicates_for_power, requests_for_rate_rise, welch_power


def test_replicates_for_an_effect_of_one_sd_match_the_textbook():
    # a two-sample t test, d = 1, alpha 5 % two-sided, 80 % power: 17 a group (G*Power, Cohen)
    assert replicates_for_power(1.0, 1.0, 1.0) == 17
    assert welch_power(1.0, 1.0, 1.0, 17) >= 0.8 > welch_power(1.0, 1.0, 1.0, 16)
    # d = 0.5: 64 a group
    assert replicates_for_power(0.5, 1.0, 1.0) == 64


def test_a_ten_percent_rise_at_the_gates_bonferroni_level():
    # a spread of 5 % of the mean a replicate, 10 % to find: 6 a side at 95 %, 9 at the gate's
    # 1 - 0.05/11 over eleven metrics; at 3 repeats it is found 8 % of the time there
    assert replicates_for_power(0.10, 0.05, 0.05) == 6
    assert replicates_for_power(0.10, 0.05, 0.05, 1 - 0.05 / 11) == 9
    assert welch_power(0.10, 0.05, 0.05, 3, 1 - 0.05 / 11) == pytest.approx(0.083, abs=0.002)
    assert replicates_for_power(0.0, 0.05, 0.05) is None
    assert replicates_for_power(1e-6, 1.0, 1.0, max_n=100) is None


def test_requests_for_an_error_rate_from_0_to_5_percent():
    # (1.96 sqrt(2 .025 .975) + 0.8416 sqrt(.0475))² / .05² = 151.9
    assert requests_for_rate_rise(0.0, 0.05) == 152
    assert requests_for_rate_rise(0.0, 0.05, 1 - 0.05 / 11) == 263
    # Fleiss' table: 10 % -> 20 % at 5 %, 80 %: 199 (without continuity correction)
    assert requests_for_rate_rise(0.10, 0.20) == 199
    with pytest.raises(ValueError, match="must differ"):
        requests_for_rate_rise(0.05, 0.05)


def test_a_paired_t_power_matches_the_textbook_and_scipy_and_a_simulation():
    from scipy.stats import nct, ttest_1samp
    from scipy.stats import t as student

    from metrics.sample_size import blocks_for_power, paired_t_power
    # a one-sample (paired) t test, d = 0.5 and d = 1, alpha 5 % two-sided, 80 % power: 34 and 10 pairs (G*Power)
    assert blocks_for_power(0.5, 1.0) == 34 and blocks_for_power(1.0, 1.0) == 10
    # against scipy with both tails: a log sd of 0.105 a block, 10 % at Bonferroni's 99.55 % over 26 blocks
    level, sd, delta, n = 1 - 0.05 / 11, 0.105, math.log(1.10), 26
    crit = student.ppf(1 - (1 - level) / 2, n - 1)
    ncp = delta / (sd / math.sqrt(n))
    both = nct.sf(crit, n - 1, ncp) + nct.cdf(-crit, n - 1, ncp)
    assert paired_t_power(delta, sd, n, level) == pytest.approx(both, abs=1e-12)
    assert paired_t_power(delta, sd, n, level) == pytest.approx(0.9208, abs=5e-4)
    # and against 40,000 simulated comparisons of 5 blocks at 95 %: the share whose t test rejects
    rng = np.random.default_rng(0)
    d = rng.normal(0.06, 0.05, size=(40_000, 5))
    share = float(np.mean(ttest_1samp(d, 0.0, axis=1).pvalue < 0.05))
    assert paired_t_power(0.06, 0.05, 5) == pytest.approx(share, abs=0.01)
    assert paired_t_power(0.06, 0.05, 5) == pytest.approx(0.5302, abs=5e-4)


def test_the_blocks_the_comparisons_spread_needs():
    from metrics.sample_size import blocks_for_power, paired_t_power
    # docs/measured/verdicts.md: a block log sd of 0.105, Bonferroni over 11 metrics: 4.3 % needs 89 blocks,
    # 8.7 % 26; at 0.056 (a quieter host) 29 and 11
    level = 1 - 0.05 / 11
    assert [blocks_for_power(math.log(1 + d), sd, level) for sd in (0.105, 0.056) for d in (0.043, 0.087)] == \
        [89, 26, 29, 11]
    assert paired_t_power(math.log(1.087), 0.105, 26, level) >= 0.8 > paired_t_power(math.log(1.087), 0.105, 25, level)
    # no difference, no spread, too many, not finite
    assert blocks_for_power(0.0, 0.1) is None and blocks_for_power(0.1, 0.0) == 2
    assert blocks_for_power(1e-6, 1.0, max_n=100) is None and blocks_for_power(0.1, math.inf) is None
    assert paired_t_power(0.1, 0.1, 1) == 0.0 and paired_t_power(0.1, math.nan, 5) == 0.0


def test_the_smallest_difference_a_comparisons_blocks_find():
    from metrics.sample_size import detectable_difference, paired_t_power
    level = 1 - 0.05 / 11
    # 3 blocks of log sd 0.105 at 99.55 %: t(2) = 14.8, only a log ratio of 1.140 (a factor 3.13) is found 80 % of
    # the time
    found = detectable_difference(0.105, 3, level)
    assert found == pytest.approx(1.14040, abs=1e-4)
    assert paired_t_power(found, 0.105, 3, level) == pytest.approx(0.8, abs=1e-9)
    assert detectable_difference(0.105, 26, level) == pytest.approx(0.08247, abs=1e-5)  # 8.6 %
    assert detectable_difference(0.0, 3, level) == 0.0          # no spread: any difference
    assert detectable_difference(0.1, 1, level) is None          # one block: no spread to size from
    assert detectable_difference(math.inf, 3) is None and detectable_difference(math.nan, 3) is None
