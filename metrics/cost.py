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
"""

from __future__ import annotations

import dataclasses
import math

HOURS_PER_YEAR = 365.25 * 24


def cost_profile(cost_cfg):
    """The typed profile (conf/schema.py's ``RentalCost`` or ``OwnedCost``, by ``cost.model``) of a
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
    ``replicas`` replicas the profile prices one of (see module doc).

    Returns the total and its lines, so a reader can see what was counted.  An owned
    profile without an energy reading gives the ``energy`` line as NaN, leaves it out of
    ``cost_total``, sets ``cost_complete`` False and says so in ``cost_notes``.
    """
    p = cost_profile(cost_cfg)
    hours = window_s / 3600.0
    n = int(replicas)
    lines: dict[str, float] = {}
    notes = []
    if p.model == "rental":
        lines["rental_gpus"] = hours * p.hourly_per_gpu * p.num_gpus * n
        lines["rental_hosts"] = hours * p.hourly_per_host * p.num_hosts * n
    else:
        lines["depreciation"] = hours * p.hardware_price / (p.depreciation_years * HOURS_PER_YEAR) * n
        lines["operations"] = hours * p.ops_hourly * n
        if energy_j is None or math.isnan(energy_j):
            lines["energy"] = math.nan
            notes.append("energy unavailable: the owned-hardware cost leaves its energy line out, "
                         "so cost_total is a lower bound")
        else:
            joules = energy_j + p.unmeasured_power_w * window_s * n
            lines["energy"] = joules / 3.6e6 * p.electricity_per_kwh * p.pue
    for name, hourly in p.extra_hourly.items():
        lines[f"extra.{name}"] = hours * hourly
    total = sum(v for v in lines.values() if not math.isnan(v))
    return {"cost_total": total, "cost_lines": lines, "cost_currency": p.currency,
            "cost_model": p.model, "cost_complete": not notes, "cost_notes": notes, "cost_replicas": n}


def fleet_cost(cost_cfg, replica_seconds: float, window_s: float, energy_j: float | None = None) -> dict:
    """Cost of a fleet whose replica count changed over a window of ``window_s`` seconds: every
    per-replica line over the ``replica_seconds`` paid for (the integral of replicas over the
    window: replica-hours x rate), every ``extra_hourly`` line over the window once.  Equals
    ``window_cost(cost_cfg, window_s, energy_j, replicas=N)`` for N replicas all window long."""
    p = cost_profile(cost_cfg)
    out = window_cost(cost_cfg, replica_seconds, energy_j, replicas=1)
    lines = dict(out["cost_lines"])
    for name, hourly in p.extra_hourly.items():
        lines[f"extra.{name}"] = window_s / 3600.0 * hourly
    out["cost_lines"] = lines
    out["cost_total"] = sum(v for v in lines.values() if not math.isnan(v))
    out["cost_replicas"] = replica_seconds / window_s if window_s > 0 else math.nan
    out["replica_seconds"] = replica_seconds
    return out


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
