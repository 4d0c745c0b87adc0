"""What the engine itself reports: its Prometheus counters and gauges during a run.

``EngineMetricsSampler`` records, every telemetry period, the engine's values under the
common names its adapter maps them to (``running``, ``waiting``, ``kv_cache_usage``,
``prefix_cache_queries``, ``prefix_cache_hits``, ``preemptions``, spec-decode counts ...)
as ``source = 'engine'`` rows of ``telemetry.parquet`` (``detail``: the engine's own series).
Exact snapshots at the start and the end of the load (taken on request, not by the timer)
are rows with ``detail = 'start'`` / ``'end'``; ``metrics.engine_counters`` computes the
run's own share of each counter from them.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from engines import prometheus
from engines.http import http_get
from metrics.telemetry.base import Sampler


class EngineMetricsSampler(Sampler):
    """Samples ``read()`` (common name -> value)."""

    source = "engine"

    def __init__(self, read: Callable[[], dict], series_names: dict[str, str] | None = None):
        self.read = read
        self.series_names = series_names or {}  # common name -> the engine's series, kept in `detail`

    @classmethod
    def scraping(cls, url: str, metric_map: dict, headers: dict | None = None,
                 timeout_s: float = 5.0) -> EngineMetricsSampler:
        """A sampler that GETs ``url`` (the engine's ``/metrics``) and maps it with ``metric_map``
        (common name -> (series, labels or None), the adapter's ``server_metric_map``)."""
        def read() -> dict:
            status, body = http_get(url, timeout=timeout_s, headers=headers)
            if status != 200:
                raise RuntimeError(f"GET {url} answered HTTP {status}")
            return prometheus.common_values(body.decode("utf-8", "replace"), metric_map)

        return cls(read, {k: v[0] for k, v in metric_map.items()})

    def available(self) -> tuple[bool, str]:
        try:
            self.read()
        except Exception as e:  # noqa: BLE001 - any failure means: no engine metrics this run
            return False, f"engine metrics page unreadable: {type(e).__name__}: {e}"
        return True, ""

    def sample(self, now_ns: int) -> list[tuple]:
        return [(now_ns, self.source, k, float(v), self.series_names.get(k)) for k, v in self.read().items()]

    def snapshot_rows(self, tag: str) -> list[tuple]:
        """The engine's values now, as rows with ``detail = tag`` (``start``/``end``); none when
        the page cannot be read (a dead engine has no end snapshot: the deltas say so)."""
        try:
            values = self.read()
        except Exception:  # noqa: BLE001 - recorded as a missing snapshot
            return []
        now = time.perf_counter_ns()
        return [(now, self.source, k, float(v), tag) for k, v in values.items()]
