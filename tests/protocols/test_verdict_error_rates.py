"""The verdicts' error rates, live (benchmarks/verdicts.py, docs/measured/verdicts.md), in small:
a few trials of each row against fake engines launched as processes.  A small sample cannot
prove a rate within its level, but it can disprove it: each test fails when the lower end of
the rate's Clopper-Pearson 95 % interval is above the stated level."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _bench():
    spec = importlib.util.spec_from_file_location("verdicts_bench", REPO / "benchmarks" / "verdicts.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclass looks its module up
    spec.loader.exec_module(mod)
    return mod


bench = _bench()


def test_clopper_pearson_interval():
    assert bench.clopper_pearson(0, 20) == pytest.approx((0.0, 0.1684), abs=1e-4)
    assert bench.clopper_pearson(2, 2)[0] == pytest.approx(0.1581, abs=1e-4)  # 0.025 ** (1/2)
    assert bench.Row("x", 0.05, 2, 2).judged()[3] == "fail"      # 2 of 2: the level is disproved
    assert bench.Row("x", 0.05, 1, 1).judged()[3] == "open"      # 1 of 1 cannot tell
    assert bench.Row("x", 0.05, 80, 0).judged()[3] == "pass"     # 0 of 80: [0, 4.5 %]


def test_true_max_rate_of_the_slot_limited_engine():
    # 2 slots, 100 ms a request: capacity 20 req/s; over 2 s the p99 TTFT (100 ms: 50 ms of
    # slack) is met a little above it, while the queue has not yet grown by 50 ms
    truth = bench.true_max_rate()
    assert 20.0 <= truth < 21.0
    ttft = bench.queue_ttft_ms(25.0, 2, 0.1, 50.0, 50)
    assert ttft[:2] == [50.0, 50.0] and ttft[-1] > 100


def test_the_searches_row_counts_the_misses_a_remeasurement_overturned():
    # protocol.search_recheck: a search whose miss at 13 met the SLO when re-measured answered
    # within a step; one at 5.69 (before the re-measurement) did not
    found = [{"max_load_under_slo": 19.75, "rechecked": [{"load": 22.0, "confirmed": True},
                                                         {"load": 13.0, "confirmed": False}]},
             {"max_load_under_slo": 5.69}]
    (row,) = bench.slo_rows(found)
    assert (row.trials, row.wrong) == (2, 1)
    assert "2 misses re-measured, 1 met the SLO when re-measured [13.0]" in row.note
    three = [{"load": 40.0, "passed": False}, {"load": 4.0, "passed": False},
             {"load": 4.0, "passed": True, "recheck": 1}]
    (row,) = bench.slo_rows([{"max_load_under_slo": 19.75, "probes": three,
                              "note": "13 met the SLO only at its last re-measurement"}, {"max_load_under_slo": 19.75}])
    assert "probes a search 1.5 (0.5 of them re-measurements); 1 said a load met the SLO only at its last" in row.note


def test_the_true_interaction_of_two_added_delays():
    # +4 and +6 ms on 20: r_a = 24/20, r_b = 26/20, r_ab = 30/20; I = 30 x 20 / (24 x 26)
    assert bench.true_interaction(20.0, {"a": 4.0, "b": 6.0}) == pytest.approx(0.961538, abs=1e-6)
    # the row's factors, +40 and +80 ms: far from 1 and from what a broken formula gives (its inverse,
    # the singles' sum for their product) wherever the client's share puts the baseline's TTFT
    assert bench.true_interaction(21.0) == pytest.approx(141 * 21 / (61 * 101), abs=1e-9)
    for base in (20.0, 25.0, 30.0):
        truth = bench.true_interaction(base)
        r_a, r_b, r_ab = (base + 40) / base, (base + 80) / base, (base + 120) / base
        assert truth < 0.6 and 1 / truth > 1.6 and r_ab / (r_a + r_b) > 1.3 * truth
    covered = {"interaction": {"value": 0.99, "low": 0.9, "high": 1.1}, "truth": 0.96}
    missed = {"interaction": {"value": 1.2, "low": 1.1, "high": 1.3}, "truth": 0.96}
    (row,) = bench.ablation_rows([covered, missed, covered])
    assert (row.level, row.trials, row.wrong) == (pytest.approx(0.05), 3, 1)
    assert "1 of 3 intervals exclude 1" in row.note  # the missed one


@pytest.mark.slow
@pytest.mark.parametrize("row, trials", [("compare", 1), ("gate", 2), ("slo_search", 2)])
def test_the_verdicts_error_rate_is_not_above_its_level(row, trials):
    rows = bench.measure(row, "identical", trials, seed=7)
    for r in rows:
        rate, low, high, status = r.judged()
        assert r.trials >= trials and low <= r.level, r.line()
    if row == "slo_search":  # protocol.search_recheck's default: each miss below 40 measured three times
        assert " 0 misses re-measured" not in rows[0].note, rows[0].line()


@pytest.mark.slow
def test_the_ablations_interaction_interval_covers_its_truth():
    # 2 ablations of 2 blocks (4 arms each: 16 engine launches, about 55 s at load 5 on this 2-core
    # host) where the factors add 40 and 80 ms of TTFT: the interaction's true value is about 0.48,
    # far from 1, so an interval misses it when the interaction is computed wrongly (inverted, 2.1;
    # the singles' sum for their product, 0.87: both missed in 2 of 2, failing this test) or when
    # it is too narrow for the blocks' spread.  Fails when both miss: 2 of 2, [15.8 %, 100 %].
    (row,) = bench.measure("ablation", "identical", 2, seed=7, repeats=2)
    rate, low, high, status = row.judged()
    assert row.trials == 2 and low <= row.level, row.line()
