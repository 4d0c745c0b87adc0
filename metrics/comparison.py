"""Which way is better for each compared metric, and the metrics estimated as ratios of totals.

Shared by every verdict that compares configs (the comparison, the ablation's effects)."""

from __future__ import annotations

# metric -> (higher is better, unit)
METRICS = {
    "output_throughput": (True, "tok/s"), "request_throughput": (True, "req/s"),
    "goodput_rps": (True, "req/s"), "good_output_throughput": (True, "tok/s"), "slo_attainment": (True, ""),
    "cost_per_mtok_good": (False, "per M good tok"), "cost_per_mtok_all": (False, "per M tok"),
    "energy_per_good_token_j": (False, "J/tok"), "error_rate": (False, ""), "max_load_under_slo": (True, "load"),
}
# Ratios across repeats are ratios of totals (BCa bootstrap), not means of per-run ratios.
RATIOS = {"cost_per_mtok_good": ("cost_total", "good_output_tokens", 1e6),
          "cost_per_mtok_all": ("cost_total", "all_output_tokens", 1e6)}


def direction(metric: str) -> tuple[bool, str]:
    """(higher is better, unit) of ``metric``: the table above, else a latency for ``*_ms``,
    else higher is better."""
    if metric in METRICS:
        return METRICS[metric]
    if metric.endswith("_ms"):  # latencies
        return False, "ms"
    return True, ""
