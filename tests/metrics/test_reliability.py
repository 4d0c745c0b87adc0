"""The reliability table: bins, the observed share with its interval, the verdict per bin, Brier."""

import pytest

from metrics.reliability import bin_verdict, brier, clopper_pearson, reliability_table


def test_brier_of_certain_and_coin_statements():
    assert brier([0.0, 1.0], [False, True]) == 0.0
    assert brier([0.5, 0.5], [False, True]) == pytest.approx(0.25)
    assert brier([0.2], [True]) == pytest.approx(0.64)


def test_bins_count_mean_and_observed_share():
    stated = [0.05, 0.02, 0.25, 0.25, 0.25, 0.25, 0.25, 0.25, 0.25, 0.25, 1.0]
    wrong = [False, False, True, True, False, False, False, False, False, False, True]
    t = reliability_table(stated, wrong)
    rows = {r["bin"]: r for r in t["bins"]}
    assert rows["[0, 0.1)"]["count"] == 2 and rows["[0, 0.1)"]["verdict"] == "too few"
    mid = rows["[0.1, 0.3)"]
    assert (mid["count"], mid["wrong"]) == (8, 2) and mid["mean_stated"] == pytest.approx(0.25)
    assert mid["observed"] == pytest.approx(0.25) and mid["verdict"] == "holds"
    assert rows["[0.9, 1]"]["count"] == 1                  # the last bin is closed at 1
    assert t["brier"] == pytest.approx(brier(stated, wrong))


def test_a_bin_fails_only_when_its_interval_leaves_the_band():
    # 25 % stated, 0 of 30 wrong: the interval [0, 11.6 %] lies below 15 %: fails
    assert clopper_pearson(0, 30)[1] == pytest.approx(0.1157, abs=1e-3)
    assert bin_verdict(30, 0, 0.25) == "fails"
    # 0 of 8: the share is 25 points off but its interval [0, 36.9 %] reaches the band: open
    assert bin_verdict(8, 0, 0.25) == "open"
    assert bin_verdict(4, 0, 0.25) == "too few"
    assert bin_verdict(20, 5, 0.3) == "holds"
