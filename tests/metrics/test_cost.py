"""Cost model: the seed report's worked examples, the profiles shipped in conf/cost/, and bad input."""

import math
from pathlib import Path

import pytest

from metrics.cost import check_profile, per_million, per_unit, window_cost

CONF_COST = Path(__file__).resolve().parents[2] / "conf" / "cost"
HOUR = 3600.0


def test_worked_example_tokens_per_second():
    # 100/h at 10,000 good tokens/s -> 2.78 per million; 120/h at 15,000 -> 2.22, 20 % less.
    a = per_million(window_cost({"hourly_per_host": 100.0}, HOUR)["cost_total"], 10_000 * HOUR)
    b = per_million(window_cost({"hourly_per_host": 120.0}, HOUR)["cost_total"], 15_000 * HOUR)
    assert a == pytest.approx(2.7778, abs=1e-4)
    assert b == pytest.approx(2.2222, abs=1e-4)
    assert (b - a) / a == pytest.approx(-0.20, abs=1e-9)


def test_worked_example_through_the_window_cost():
    # The same figures through the path a run takes: a one-hour window under a rental profile.
    prof = {"model": "rental", "num_gpus": 1, "hourly_per_gpu": 100.0, "num_hosts": 0}
    c = window_cost(prof, HOUR)
    assert c["cost_total"] == pytest.approx(100.0)
    assert per_million(c["cost_total"], 10_000 * HOUR) == pytest.approx(2.7778, abs=1e-4)


def test_worked_example_good_fraction():
    # System A: 100/h, 1M tokens/h of which 70 % good -> 142.9 per M good.
    # System B: 110/h, 0.9M tokens/h all good -> 122.2: the pricier, slower system is cheaper.
    a = per_million(window_cost({"hourly_per_host": 100.0}, HOUR)["cost_total"], 0.7e6)
    b = per_million(window_cost({"hourly_per_host": 110.0}, HOUR)["cost_total"], 0.9e6)
    assert a == pytest.approx(142.857, abs=1e-3)
    assert b == pytest.approx(122.222, abs=1e-3)
    # counted over all tokens, A would look cheaper: 100 per M against 122.2
    assert per_million(100.0, 1e6) == pytest.approx(100.0)
    assert b < a


def test_nothing_good_is_infinite_not_an_error():
    assert per_million(3.0, 0) == math.inf
    assert per_unit(3.0, 0) == math.inf
    assert per_unit(3.0, 4) == pytest.approx(0.75)


def test_rental_lines_and_extras():
    prof = {"model": "rental", "num_gpus": 2, "hourly_per_gpu": 2.5, "num_hosts": 1, "hourly_per_host": 0.2,
            "extra_hourly": {"network": 0.05, "draft_model_devices": 0.8}}
    c = window_cost(prof, 1800.0)  # half an hour
    assert c["cost_lines"] == pytest.approx({"rental_gpus": 2.5, "rental_hosts": 0.1, "extra.network": 0.025,
                                             "extra.draft_model_devices": 0.4})
    assert c["cost_total"] == pytest.approx(3.025)
    assert c["cost_complete"] is True


def test_owned_depreciation_energy_ops():
    prof = {"model": "owned", "hardware_price": 87_660.0, "depreciation_years": 1, "electricity_per_kwh": 0.10,
            "pue": 1.5, "ops_hourly": 2.0, "unmeasured_power_w": 500.0}
    # 2 h window, 3.6e6 J measured (= 1 kWh) + 500 W x 7200 s (= 1 kWh) unmeasured
    c = window_cost(prof, 7200.0, energy_j=3.6e6)
    lines = c["cost_lines"]
    assert lines["depreciation"] == pytest.approx(2 * 87_660 / 8766)   # 20.0
    assert lines["energy"] == pytest.approx(2.0 * 0.10 * 1.5)          # 0.30
    assert lines["operations"] == pytest.approx(4.0)
    assert c["cost_total"] == pytest.approx(24.30)
    # No depreciation on a rental, and no energy line either.
    r = window_cost({"model": "rental", "hourly_per_host": 1.0}, 7200.0, energy_j=3.6e6)
    assert set(r["cost_lines"]) == {"rental_gpus", "rental_hosts"}
    assert r["cost_total"] == pytest.approx(2.0)


def test_owned_without_energy_is_marked_incomplete():
    prof = {"model": "owned", "hardware_price": 87_660.0, "depreciation_years": 1, "electricity_per_kwh": 0.1}
    c = window_cost(prof, 3600.0, energy_j=None)
    assert math.isnan(c["cost_lines"]["energy"])
    assert c["cost_total"] == pytest.approx(10.0)
    assert c["cost_complete"] is False
    assert "energy unavailable" in c["cost_notes"][0]


def _profile(name: str) -> dict:
    """A shipped profile as a run sees it: composed through Hydra with its schema."""
    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf

    with initialize_config_module("conf", version_base="1.3"):
        return OmegaConf.to_container(compose("config", overrides=[f"cost={name}"]).cost, resolve=True)


@pytest.mark.parametrize("path", sorted(CONF_COST.glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_profiles_are_marked_examples_and_valid(path):
    text = path.read_text()
    assert "EXAMPLE" in text and "assumptions" in text.lower()
    prof = _profile(path.stem)
    check_profile(prof)
    c = window_cost(prof, 3600.0, energy_j=3.6e6)
    assert c["cost_total"] > 0


def test_shipped_profile_figures():
    h100 = _profile("example_h100_rental")
    assert window_cost(h100, 3600.0)["cost_total"] == pytest.approx(2.50 + 0.20 + 0.05 + 0.02)
    owned = _profile("example_8gpu_owned")
    # 8 GPUs at 700 W measured for an hour: 5.6 kWh + 1.2 kWh unmeasured, x 0.12 x 1.3
    c = window_cost(owned, 3600.0, energy_j=5600 * 3600.0)
    assert c["cost_lines"]["depreciation"] == pytest.approx(300_000 / (4 * 8766))
    assert c["cost_lines"]["energy"] == pytest.approx(6.8 * 0.12 * 1.3)
    assert c["cost_total"] == pytest.approx(300_000 / (4 * 8766) + 6.8 * 0.12 * 1.3 + 3.0 + 0.05)


@pytest.mark.parametrize("prof, field", [
    ({"model": "leased"}, "cost.model"),
    ({"model": "rental", "hourly_per_gpus": 2.0}, "cost.hourly_per_gpus"),
    ({"model": "rental", "hourly_per_gpu": -1.0}, "cost.hourly_per_gpu"),
    ({"model": "rental", "hourly_per_gpu": "cheap"}, "cost.hourly_per_gpu"),
    ({"model": "rental", "hourly_per_host": float("inf")}, "cost.hourly_per_host"),
    ({"model": "rental", "extra_hourly": {"network": -0.5}}, "cost.extra_hourly.network"),
    ({"model": "owned", "hardware_price": 1.0, "depreciation_years": 0}, "cost.depreciation_years"),
    ({"model": "owned", "hardware_price": 1.0, "depreciation_years": 3, "pue": 0.8}, "cost.pue"),
    ({"model": "rental", "extra_hourly": {"network": "lots"}}, "cost.extra_hourly.network"),
    ({"model": "rental", "electricity_per_kwh": 0.1}, "cost.electricity_per_kwh"),
])
def test_bad_profiles_name_the_field(prof, field):
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        check_profile(prof)


@pytest.mark.parametrize("name", sorted(p.stem for p in CONF_COST.glob("*.yaml")))
def test_profiles_compose_through_hydra_with_overrides(name):
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    with initialize_config_dir(str(CONF_COST.parent), version_base="1.3"):
        cfg = compose("config", overrides=[f"cost={name}", "++cost.extra_hourly.storage=0.5"])
    prof = OmegaConf.to_container(cfg.cost, resolve=True)
    check_profile(prof)
    assert prof["extra_hourly"]["storage"] == 0.5
    assert window_cost(prof, 3600.0, energy_j=0.0)["cost_lines"]["extra.storage"] == pytest.approx(0.5)


def test_experiment_rejects_a_misspelt_cost_field_before_starting():
    from hydra import compose, initialize_config_dir

    from harness.errors import UserError
    from protocols.registry import protocol_experiment

    with initialize_config_dir(str(CONF_COST.parent), version_base="1.3"):
        cfg = compose("config", overrides=["+cost.hourly_per_gpus=2.0", "output_dir=/tmp/tokenfactory-never-written"])
    with pytest.raises(UserError, match=r"cost\.hourly_per_gpus"):
        protocol_experiment(cfg)


def test_a_deployment_pays_every_replica_and_the_router_once():
    """The profile prices one replica: 3 replicas pay 3 x its device lines over the whole
    window (idle or not); the router's host is an extra line, counted once."""
    prof = {"model": "rental", "num_gpus": 1, "hourly_per_gpu": 2.0, "num_hosts": 1, "hourly_per_host": 0.5,
            "extra_hourly": {"router": 0.1}}
    one = window_cost(prof, 3600.0)
    three = window_cost(prof, 3600.0, replicas=3)
    assert three["cost_lines"] == pytest.approx({"rental_gpus": 6.0, "rental_hosts": 1.5, "extra.router": 0.1})
    assert three["cost_total"] == pytest.approx(7.6)
    assert three["cost_replicas"] == 3 and one["cost_replicas"] == 1
    owned = {"model": "owned", "hardware_price": 8766.0, "depreciation_years": 1, "electricity_per_kwh": 1.0,
             "unmeasured_power_w": 1000.0}
    o = window_cost(owned, 3600.0, energy_j=0.0, replicas=2)
    assert o["cost_lines"]["depreciation"] == pytest.approx(2.0)
    assert o["cost_lines"]["energy"] == pytest.approx(2.0)  # 1 kW unmeasured per replica, 1 h, 1 per kWh


def test_a_fleet_pays_replica_hours_per_replica_and_the_extras_once():
    from metrics.cost import fleet_cost

    prof = {"hourly_per_host": 2.0, "extra_hourly": {"router": 0.5}}
    c = fleet_cost(prof, 1.5 * HOUR, HOUR)  # 1.5 replica-hours served over a one-hour window
    assert c["cost_lines"]["rental_hosts"] == pytest.approx(3.0)
    assert c["cost_lines"]["extra.router"] == pytest.approx(0.5)
    assert c["cost_total"] == pytest.approx(3.5) and c["cost_replicas"] == pytest.approx(1.5)
    fixed = window_cost(prof, HOUR, replicas=2)
    assert fleet_cost(prof, 2 * HOUR, HOUR)["cost_total"] == pytest.approx(fixed["cost_total"])


def test_an_owned_fleet_counts_unmeasured_power_per_replica_second():
    from metrics.cost import fleet_cost

    prof = {"model": "owned", "hardware_price": 0.0, "ops_hourly": 1.0, "unmeasured_power_w": 1000.0,
            "electricity_per_kwh": 1.0, "pue": 1.0}
    c = fleet_cost(prof, 2 * HOUR, HOUR, energy_j=0.0)
    assert c["cost_lines"]["operations"] == pytest.approx(2.0)
    assert c["cost_lines"]["energy"] == pytest.approx(2.0)  # 1 kW x 2 replica-hours
