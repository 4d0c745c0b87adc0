"""Cost of the observation window and cost per million good output tokens.

cost_per_mtok_good = 1e6 x (cost of the whole window) / (good output tokens in it).

Models (a profile in ``conf/cost/``):
- rental: the hourly bill only, ``hours x (hourly_per_gpu x num_gpus + hourly_per_host x
  num_hosts)``; nothing is added on top (a rental price already holds depreciation and power).
- owned: ``hours x hardware_price / (depreciation_years x 8766 h)`` + ``energy_kWh x
  electricity_per_kwh x pue`` + ``hours x ops_hourly``.  The energy is the measured window
  energy, plus ``unmeasured_power_w x window`` for parts no sensor sees (host CPUs, fans, NICs).
Both: every ``extra_hourly`` line (CPU hosts, network, storage, a draft model's devices,
a deployment's router host) is ``hours x rate``.

A deployment of N replicas (``deployment=replicas|disaggregated``): the profile prices one
replica, so every per-device line (GPUs, hosts, depreciation, operations, unmeasured power)
counts N times over the whole window, idle replicas included; ``extra_hourly`` lines count
once (put the router's host there: ``cost.extra_hourly.router=0.05``).  Measured energy
already covers every device the telemetry sees.

A deployment whose replica count changes during the window (live autoscaling, or a plan's
simulated fleet): the per-replica lines count replica-hours, ``paid_replica_seconds / 3600``
(replicas starting, serving and draining over the window: ``metrics.autoscale_bill``,
``metrics.fleet``), not replicas x window; the ``extra_hourly`` lines still count the whole
window once (``fleet_cost``).  ``cost_replica_seconds`` is the replica-seconds billed.

At one price per device-hour (the report's price control): ``price x device_seconds / 3600``, the
device-seconds being ``num_gpus`` per replica (one where the profile names no GPUs) x the
replica-seconds the run was billed for (``cost_device_seconds``): what a rental profile of
``hourly_per_gpu = price`` alone bills those replicas (``priced_cost``).
"""

from __future__ import annotations

import dataclasses
import math

HOURS_PER_YEAR = 365.25 * 24


def cost_profile(cost_cfg):
    """The typed profile (conf/schema/cost.py's ``RentalCost`` or ``OwnedCost``, by ``cost.model``) of a
    ``cost`` mapping, with the schema's defaults for the fields it leaves out or sets to null;
    ``None``: a rental profile that bills nothing.  Raises ValueError naming the ``cost.<field>``
    at fault: known fields, numbers where numbers go, and their ranges."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from conf.schema import OwnedCost, RentalCost, validate

    if cost_cfg is None:
        return RentalCost()
    model = cost_cfg.get("model") or RentalCost.model  # a profile without a model is a rental
    schema = {"rental": RentalCost, "owned": OwnedCost}.get(model)
    if schema is None:
        raise ValueError(f"cost.model: unknown cost model {model!r} (expected 'rental' or 'owned')")
    given = {k: v for k, v in dict(cost_cfg).items() if v is not None}
    try:
        node = OmegaConf.merge(OmegaConf.structured(schema), given)
    except OmegaConfBaseException as e:
        known = ", ".join(f.name for f in dataclasses.fields(schema))
        raise ValueError(f"cost.{e.full_key}: {str(e.msg).splitlines()[0]} (a {model} cost profile's fields: "
                         f"{known})") from None
    validate(node, "cost")
    return OmegaConf.to_object(node)


def check_profile(cost_cfg) -> None:
    """Raise ValueError naming the ``cost.<field>`` at fault, before a run spends any time
    (``cost_profile``)."""
    cost_profile(cost_cfg)


def window_cost(cost_cfg, window_s: float, energy_j: float | None = None, replicas: int = 1) -> dict:
    """Cost of a window of ``window_s`` seconds under a cost profile (a mapping), for
    ``replicas`` replicas the profile prices one of (see module doc): ``fleet_cost`` with
    ``replicas x window_s`` replica-seconds.

    Returns the total and its lines, so a reader can see what was counted.  An owned
    profile without an energy reading gives the ``energy`` line as NaN, leaves it out of
    ``cost_total``, sets ``cost_complete`` False and says so in ``cost_notes``.
    """
    out = fleet_cost(cost_cfg, int(replicas) * window_s, window_s, energy_j)
    out["cost_replicas"] = int(replicas)
    return out


def fleet_cost(cost_cfg, replica_seconds: float, window_s: float, energy_j: float | None = None) -> dict:
    """Cost of a window of ``window_s`` seconds over which the replicas served
    ``replica_seconds`` in all (module doc): every per-replica line x replica-hours, every
    ``extra_hourly`` line x the window's hours.  ``cost_replicas``: the mean replicas,
    replica_seconds / window_s."""
    p = cost_profile(cost_cfg)
    hours = window_s / 3600.0
    rep_hours = replica_seconds / 3600.0
    lines: dict[str, float] = {}
    notes = []
    if p.model == "rental":
        lines["rental_gpus"] = rep_hours * p.hourly_per_gpu * p.num_gpus
        lines["rental_hosts"] = rep_hours * p.hourly_per_host * p.num_hosts
    else:
        lines["depreciation"] = rep_hours * p.hardware_price / (p.depreciation_years * HOURS_PER_YEAR)
        lines["operations"] = rep_hours * p.ops_hourly
        if energy_j is None or math.isnan(energy_j):
            lines["energy"] = math.nan
            notes.append("energy unavailable: the owned-hardware cost leaves its energy line out, "
                         "so cost_total is a lower bound")
        else:
            joules = energy_j + p.unmeasured_power_w * replica_seconds
            lines["energy"] = joules / 3.6e6 * p.electricity_per_kwh * p.pue
    for name, hourly in p.extra_hourly.items():
        lines[f"extra.{name}"] = hours * hourly
    total = sum(v for v in lines.values() if not math.isnan(v))
    devices = devices_per_replica(p.num_gpus)
    return {"cost_total": total, "cost_lines": lines, "cost_currency": p.currency,
            "cost_model": p.model, "cost_complete": not notes, "cost_notes": notes,
            "cost_replicas": replica_seconds / window_s if window_s > 0 else math.nan,
            "cost_replica_seconds": replica_seconds, "cost_devices": devices,
            "cost_device_seconds": devices * replica_seconds}


def devices_per_replica(num_gpus: int) -> int:
    """The devices one replica bills at a price per device-hour: the profile's ``num_gpus``, or one
    (the replica itself) where it names none (0)."""
    return int(num_gpus) if num_gpus and num_gpus > 0 else 1


def priced_cost(price_per_device_hour: float, device_seconds: float) -> float:
    """The bill at one price per device-hour: price x device_seconds / 3600 (module doc), the same as
    ``fleet_cost`` of a rental profile with ``hourly_per_gpu = price``, no hosts and no extra lines."""
    return price_per_device_hour * device_seconds / 3600.0


def per_million(cost_total: float, tokens: float) -> float:
    """1e6 x cost / tokens; +inf when no token was produced (the cost was still paid)."""
    if tokens <= 0:
        return math.inf
    return 1e6 * cost_total / tokens


def per_unit(cost_total: float, units: float) -> float:
    """cost / units (per good request, per completed session); +inf when there were none."""
    if units <= 0:
        return math.inf
    return cost_total / units
