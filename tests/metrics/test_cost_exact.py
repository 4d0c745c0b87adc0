"""metrics/cost.py's bill to rounding (rel 1e-12), not to pytest.approx's default 1e-6, which does
not see 3.6e6 J per kWh become 3,600,001; and the mean replicas of a window shorter than a second,
or of none; one good request or token is a price, not inf (mutants cosmic-ray found alive,
benchmarks/mutation.py)."""

from __future__ import annotations

import math

import pytest

from metrics.cost import HOURS_PER_YEAR, fleet_cost, per_million, per_unit, window_cost

EXACT = 1e-12
OWNED = {"model": "owned", "hardware_price": 87_660.0, "depreciation_years": 1, "electricity_per_kwh": 0.10,
         "pue": 1.5, "ops_hourly": 2.0, "unmeasured_power_w": 500.0}


def test_owned_lines_to_rounding():
    # 2 h: 3.6e6 J measured (1 kWh) + 500 W x 7200 s (1 kWh) unmeasured, at 0.10 per kWh, PUE 1.5
    lines = window_cost(OWNED, 7200.0, energy_j=3.6e6)["cost_lines"]
    assert HOURS_PER_YEAR == 8766.0
    assert lines["energy"] == pytest.approx(2.0 * 0.10 * 1.5, rel=EXACT)
    assert lines["depreciation"] == pytest.approx(2 * 87_660 / 8766, rel=EXACT)
    assert lines["operations"] == pytest.approx(4.0, rel=EXACT)


def test_rental_lines_to_rounding():
    prof = {"model": "rental", "num_gpus": 3, "hourly_per_gpu": 2.5, "num_hosts": 2, "hourly_per_host": 0.25,
            "extra_hourly": {"router": 0.05}}
    c = fleet_cost(prof, 5400.0, 1800.0)           # 1.5 replica-hours over half an hour
    assert c["cost_lines"] == pytest.approx({"rental_gpus": 1.5 * 7.5, "rental_hosts": 1.5 * 0.5,
                                             "extra.router": 0.5 * 0.05}, rel=EXACT)
    assert c["cost_total"] == pytest.approx(11.25 + 0.75 + 0.025, rel=EXACT)


def test_mean_replicas_of_a_short_window_and_of_none():
    assert fleet_cost({}, 1.5, 0.5)["cost_replicas"] == pytest.approx(3.0, rel=EXACT)   # half a second, 3 replicas
    assert math.isnan(fleet_cost({}, 0.0, 0.0)["cost_replicas"])                      # no window: no mean


def test_one_good_request_or_token_has_a_price():
    assert per_unit(3.0, 1) == 3.0 and per_unit(3.0, 0) == math.inf
    assert per_million(2.0, 1) == 2e6 and per_million(2.0, 0) == math.inf
