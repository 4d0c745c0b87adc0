"""What the engine itself reports: its Prometheus counters and gauges during a run.

``EngineMetricsSampler`` records, every telemetry period, the engine's values under the
common names its adapter maps them to (``running``, ``waiting``, ``kv_cache_usage``,
``prefix_cache_queries``, ``prefix_cache_hits``, ``preemptions``, spec-decode counts ...)
as ``source = 'engine'`` rows of ``telemetry.parquet``.  It also keeps an exact snapshot
at the start and at the end of the load (taken by the harness, not by the timer), from
which ``metrics.engine_counters`` computes the run's own share of each counter.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from metrics.engine_counters import GAUGES, counter_deltas
from metrics.telemetry.base import Sampler


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
