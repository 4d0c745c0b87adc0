"""Sample sizes for a verdict's power (metrics/sample_size.py), against textbook values."""

from __future__ import annotations

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
