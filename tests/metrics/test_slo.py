"""metrics/slo.py: the SLO a run is judged by is the one its config names (the percentile too),
and it cannot be changed under a run that holds it (mutants cosmic-ray found alive)."""

from __future__ import annotations

import dataclasses

import pytest

from metrics.slo import SLO
from metrics.summary import summarize
from tests.metrics.test_recompute_summary import ok_row
from tests.telemetry_fixtures import request_table


def test_the_configs_percentile_is_the_one_judged():
    assert SLO.from_config({"ttft_ms": 100, "percentile": 90}).percentile == 90.0
    assert SLO.from_config({"ttft_ms": 100, "percentile": None}).percentile == 99.0     # the schema's default
    assert SLO.from_config({"ttft_ms": 100}).percentile == 99.0
    assert SLO.from_config(None) == SLO(percentile=99.0)
    # through the summary: p90 of TTFTs 100, 200, ..., 1000 ms is 910 ms, over the 900 ms SLO
    rows = [ok_row(i * 1000, 100 * (i + 1), [10], [1, 1]) for i in range(10)]
    s = summarize(request_table(rows), SLO.from_config({"ttft_ms": 900, "percentile": 90}), 0, 20 * 10**9)
    assert s["slo_percentile"] == 90.0
    assert s["slo_ttft_p90_ms"] == pytest.approx(910.0) and s["slo_ttft_met"] is False
    assert s["slo_attainment_ttft"] == pytest.approx(0.9)


def test_an_slo_cannot_change_under_the_runs_that_hold_it():
    slo = SLO(ttft_ms=100.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        slo.ttft_ms = 1e9
    assert {slo: 1}[SLO(ttft_ms=100.0)] == 1                       # hashable: a key of per-SLO results
