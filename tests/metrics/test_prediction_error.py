"""Prediction errors: relative for latencies and goodput, points for attainment, against the aim."""

import math

import pytest

from metrics.prediction_error import error, residuals


def test_errors_by_hand():
    assert error("p90_ttft_ms", 110.0, 100.0) == pytest.approx(0.10)
    assert error("goodput_rps", 1.9, 2.0) == pytest.approx(-0.05)
    assert error("slo_attainment", 0.91, 0.95) == pytest.approx(-4.0)      # points
    assert error("p50_tpot_ms", 5.0, 0.0) is None
    assert error("p50_tpot_ms", math.nan, 5.0) is None


def test_residual_records_and_the_aim():
    rows = residuals("knee", {"p50_ttft_ms": 120.0, "slo_attainment": 0.80, "goodput_rps": 3.0},
                     {"p50_ttft_ms": 100.0, "slo_attainment": 0.84, "goodput_rps": 3.1},
                     metrics=("p50_ttft_ms", "slo_attainment", "goodput_rps"))
    assert [(r["case"], r["metric"], r["within"]) for r in rows] == [
        ("knee", "p50_ttft_ms", False), ("knee", "slo_attainment", True), ("knee", "goodput_rps", True)]
    assert rows[0]["error"] == pytest.approx(0.20) and rows[0]["error_kind"] == "relative"
    assert rows[1]["error"] == pytest.approx(-4.0) and rows[1]["error_kind"] == "points"
    assert rows[0]["predicted"] == 120.0 and rows[0]["measured"] == 100.0
