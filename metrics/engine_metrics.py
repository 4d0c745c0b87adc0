"""What the engine itself reports: its Prometheus counters and gauges during a run.

``EngineMetricsSampler`` records, every telemetry period, the engine's values under the
common names its adapter maps them to (``running``, ``waiting``, ``kv_cache_usage``,
``prefix_cache_queries``, ``prefix_cache_hits``, ``preemptions``, spec-decode counts ...)
as ``source = 'engine'`` rows of ``telemetry.parquet``.  It also keeps an exact snapshot
at the start and at the end of the load (taken by the harness, not by the timer), from
which ``counter_deltas`` computes the run's own share of each counter.

Definitions (per run, from the start and end snapshots):
- ``engine_prefix_cache_hit_rate`` = Δ prefix_cache_hits / Δ prefix_cache_queries (tokens
  found in the prefix cache over prompt tokens looked up); NaN when nothing was looked up.
- ``engine_spec_decode_acceptance_rate`` = Δ accepted draft tokens / Δ draft tokens.
- ``engine_<counter>`` = end - start, for every counter the engine exposes.
- ``engine_<gauge>_max`` / ``_mean``: over the timer's samples during the run.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

from metrics.telemetry import Sampler

COUNTERS = ("prefix_cache_queries", "prefix_cache_hits", "preemptions", "prompt_tokens", "generation_tokens",
            "spec_decode_drafts", "spec_decode_draft_tokens", "spec_decode_accepted_tokens")
GAUGES = ("running", "waiting", "kv_cache_usage", "prefix_cache_hit_rate", "spec_decode_accept_rate",
          "spec_decode_accept_length")


class EngineMetricsSampler(Sampler):
    """Samples ``read()`` (the adapter's ``server_metrics``: common name -> value)."""

    source = "engine"

    def __init__(self, read: Callable[[], dict], series_names: dict[str, str] | None = None):
        self.read = read
        self.series_names = series_names or {}  # common name -> the engine's series, kept in `detail`
        self.start: dict | None = None
        self.end: dict | None = None
        self.gauges: dict[str, list[float]] = {}

    def available(self) -> tuple[bool, str]:
        try:
            self.read()
        except Exception as e:  # noqa: BLE001 - any failure means: no engine metrics this run
            return False, f"engine metrics page unreadable: {type(e).__name__}: {e}"
        return True, ""

    def sample(self, now_ns: int) -> list[tuple]:
        values = self.read()
        for k in GAUGES:
            if k in values:
                self.gauges.setdefault(k, []).append(values[k])
        return [(now_ns, self.source, k, float(v), self.series_names.get(k)) for k, v in values.items()]

    def snapshot(self, which: str) -> dict | None:
        """Read the engine now and keep it as the run's ``start`` or ``end``; None if unreadable."""
        try:
            values = self.read()
        except Exception:  # noqa: BLE001 - a dead engine has no end snapshot; the deltas say so
            values = None
        if which == "start":
            self.start, self.end, self.gauges = values, None, {}  # one sampler serves every run
        else:
            self.end = values
        return values

    def rows(self, values: dict | None, tag: str) -> list[tuple]:
        """Snapshot rows for ``telemetry.parquet`` (detail = 'start' or 'end')."""
        now = time.perf_counter_ns()
        return [(now, self.source, k, float(v), tag) for k, v in (values or {}).items()]

    def summary(self) -> dict:
        return counter_deltas(self.start, self.end, self.gauges)


def _ratio(num: float, den: float) -> float:
    return num / den if den > 0 else math.nan


def counter_deltas(start: dict | None, end: dict | None, gauges: dict | None = None) -> dict:
    """The run's share of each engine counter and the ratios defined in the module doc."""
    out: dict = {}
    if start is None or end is None:
        out["engine_metrics_complete"] = False
    else:
        out["engine_metrics_complete"] = True
        for k in COUNTERS:
            if k in start and k in end:
                out[f"engine_{k}"] = end[k] - start[k]
        if "engine_prefix_cache_queries" in out and "engine_prefix_cache_hits" in out:
            out["engine_prefix_cache_hit_rate"] = _ratio(out["engine_prefix_cache_hits"],
                                                         out["engine_prefix_cache_queries"])
        if "engine_spec_decode_draft_tokens" in out and "engine_spec_decode_accepted_tokens" in out:
            out["engine_spec_decode_acceptance_rate"] = _ratio(out["engine_spec_decode_accepted_tokens"],
                                                               out["engine_spec_decode_draft_tokens"])
    for k, vals in (gauges or {}).items():
        vals = [v for v in vals if not math.isnan(v)]
        if vals:
            out[f"engine_{k}_max"] = max(vals)
            out[f"engine_{k}_mean"] = sum(vals) / len(vals)
    return out
