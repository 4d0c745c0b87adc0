"""Cost of the observation window and cost per million good output tokens.

cost_per_mtok_good = 1e6 x (cost of the whole window) / (good output tokens in it).
Rental: the hourly bill only.  Owned: depreciation + energy x price x PUE + operations.
"""

from __future__ import annotations

import math


def window_cost(cost_cfg, window_s: float, energy_j: float | None = None) -> dict:
    """Cost of a window of ``window_s`` seconds under a cost profile (a mapping).

    Returns the total and its lines, so a reader can see what was counted.  An owned
    profile without an energy reading gives ``energy`` as NaN and says so.
    """
    hours = window_s / 3600.0
    model = (cost_cfg or {}).get("model", "rental")
    lines: dict[str, float] = {}
    notes = []
    if model == "rental":
        lines["rental"] = hours * float(cost_cfg.get("hourly_per_gpu", 0.0)) * int(cost_cfg.get("num_gpus", 0))
        lines["hosts"] = hours * float(cost_cfg.get("hourly_per_host", 0.0)) * int(cost_cfg.get("num_hosts", 1))
    elif model == "owned":
        dep_hours = float(cost_cfg.get("depreciation_years", 3)) * 365.25 * 24
        lines["depreciation"] = hours * float(cost_cfg.get("hardware_price", 0.0)) / dep_hours
        lines["operations"] = hours * float(cost_cfg.get("ops_hourly", 0.0))
        if energy_j is None or math.isnan(energy_j):
            lines["energy"] = math.nan
            notes.append("energy unavailable: the owned-hardware cost has no energy line")
        else:
            kwh = energy_j / 3.6e6
            lines["energy"] = kwh * float(cost_cfg.get("electricity_per_kwh", 0.0)) * float(cost_cfg.get("pue", 1.0))
    else:
        raise ValueError(f"cost.model: unknown cost model {model!r} (expected 'rental' or 'owned')")
    for name, hourly in (cost_cfg.get("extra_hourly") or {}).items():
        lines[f"extra.{name}"] = hours * float(hourly)
    total = sum(v for v in lines.values() if not math.isnan(v))
    return {"cost_total": total, "cost_lines": lines, "cost_currency": cost_cfg.get("currency", "USD"),
            "cost_notes": notes}


def per_million(cost_total: float, tokens: float) -> float:
    """1e6 x cost / tokens; +inf when no token was produced (the cost was still paid)."""
    if tokens <= 0:
        return math.inf
    return 1e6 * cost_total / tokens
