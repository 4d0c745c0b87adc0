"""What the engine itself reports: its Prometheus counters and gauges during a run.

``EngineMetricsSampler`` records, every telemetry period, the engine's values under the
common names its adapter maps them to (``running``, ``waiting``, ``kv_cache_usage``,
``prefix_cache_queries``, ``prefix_cache_hits``, ``preemptions``, spec-decode counts ...)
as ``source = 'engine'`` rows of ``telemetry.parquet`` (``detail``: the engine's own series);
a replica of a deployment's rows have ``source = 'engine:<replica>'`` (``engine:r0``,
``engine:p1``; ``replica_source``).  A router with a page of its own in front of the workers
(Dynamo's frontend) is sampled in the same rounds as ``source = 'router'`` (``ROUTER_SOURCE``:
the source its process's CPU and memory rows have too), under the names its adapter gives.
Exact snapshots at the start and the end of the load (taken on request, not by the timer)
are rows with ``detail = 'start'`` / ``'end'``; ``metrics.engine_counters`` computes the
run's own share of each counter from them.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from engines import prometheus
from engines.http import http_get
from metrics.telemetry.base import Sampler

ENGINE_SOURCE = "engine"
ROUTER_SOURCE = "router"


def replica_source(replica: str | None) -> str:
    """The telemetry ``source`` of an engine's rows: ``engine`` for the one engine of a run
    (replica None), ``engine:<replica>`` for a replica of a deployment."""
    return ENGINE_SOURCE if replica is None else f"{ENGINE_SOURCE}:{replica}"


def source_replica(source: str) -> str | None:
    """The replica an engine source names (None: the run's one engine; not an engine source either)."""
    return source[len(ENGINE_SOURCE) + 1:] if source.startswith(ENGINE_SOURCE + ":") else None


def is_engine_source(source: str) -> bool:
    return source == ENGINE_SOURCE or source.startswith(ENGINE_SOURCE + ":")


class EngineMetricsSampler(Sampler):
    """Samples ``read()`` (common name -> value); ``replica`` labels its rows (``replica_source``),
    or ``source`` names them (``ROUTER_SOURCE``)."""

    source = ENGINE_SOURCE

    def __init__(self, read: Callable[[], dict], series_names: dict[str, str] | None = None,
                 replica: str | None = None, source: str | None = None):
        self.read = read
        self.series_names = series_names or {}  # common name -> the engine's series, kept in `detail`
        self.replica = replica
        self.source = source or replica_source(replica)

    @classmethod
    def scraping(cls, url: str, metric_map: dict, headers: dict | None = None,
                 timeout_s: float = 5.0, replica: str | None = None,
                 source: str | None = None) -> EngineMetricsSampler:
        """A sampler that GETs ``url`` (the engine's ``/metrics``) and maps it with ``metric_map``
        (common name -> (series, labels or None), the adapter's ``server_metric_map``)."""
        def read() -> dict:
            status, body = http_get(url, timeout=timeout_s, headers=headers)
            if status != 200:
                raise RuntimeError(f"GET {url} answered HTTP {status}")
            return prometheus.common_values(body.decode("utf-8", "replace"), metric_map)

        return cls(read, {k: v[0] for k, v in metric_map.items()}, replica, source)

    def available(self) -> tuple[bool, str]:
        try:
            self.read()
        except Exception as e:  # noqa: BLE001 - any failure means: no engine metrics this run
            return False, f"engine metrics page unreadable: {type(e).__name__}: {e}"
        return True, ""

    def sample(self, now_ns: int) -> list[tuple]:
        return [(now_ns, self.source, k, float(v), self.series_names.get(k)) for k, v in self.read().items()]

    def snapshot_rows(self, tag: str, now_ns: int | None = None, values: dict | None = None) -> list[tuple]:
        """The engine's values now (or ``values`` read already), as rows with ``detail = tag``
        (``start``/``end``) stamped ``now_ns`` (default: after the read); none when the page
        cannot be read (a dead engine has no end snapshot: the deltas say so)."""
        if values is None:
            values = self.snapshot_values()
        if values is None:
            return []
        now = time.perf_counter_ns() if now_ns is None else now_ns
        return [(now, self.source, k, float(v), tag) for k, v in values.items()]

    def snapshot_values(self) -> dict | None:
        """The page's values, or None when it cannot be read."""
        try:
            return self.read()
        except Exception:  # noqa: BLE001 - recorded as a missing snapshot
            return None


class EnginePool(Sampler):
    """Every engine of a run as one source of the collector: each round reads all their pages
    at once (one thread each when there are several, so N replicas cost one page's latency,
    not N), every row stamped with the round's time and labelled with its engine's source.
    One engine whose page fails gives a ``sample_error`` row under its own source; the others
    are still read."""

    source = ENGINE_SOURCE

    def __init__(self):
        self.engines: dict[str, EngineMetricsSampler] = {}  # its rows' source -> sampler
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None

    def put(self, engine: EngineMetricsSampler) -> None:
        """Sample ``engine`` from now on, in place of any page sampled under its source."""
        with self._lock:
            self.engines[engine.source] = engine

    def drop(self, replica: str | None = None, every: bool = False, source: str | None = None) -> None:
        """Stop sampling ``replica``'s page (or the page of ``source``), or every page."""
        with self._lock:
            for key in (list(self.engines) if every else [source or replica_source(replica)]):
                self.engines.pop(key, None)

    def _read_all(self) -> list[tuple[EngineMetricsSampler, dict | None, Exception | None]]:
        with self._lock:
            engines = list(self.engines.values())

        def one(e: EngineMetricsSampler):
            try:
                return e, e.read(), None
            except Exception as err:  # noqa: BLE001 - a flaky page is recorded, the others still read
                return e, None, err

        if len(engines) <= 1:
            return [one(e) for e in engines]
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="engine-scrape")
        return list(self._pool.map(one, engines))

    def sample(self, now_ns: int) -> list[tuple]:
        rows: list[tuple] = []
        for e, values, err in self._read_all():
            if err is not None:
                rows.append((now_ns, e.source, "sample_error", math.nan, f"{type(err).__name__}: {err}"))
            else:
                rows += [(now_ns, e.source, k, float(v), e.series_names.get(k)) for k, v in values.items()]
        return rows

    def snapshot_rows(self, tag: str) -> list[tuple]:
        """Every engine's values, read at once and stamped with one time (after the reads), so
        the replicas' snapshots bound the same sample rounds; none for a page that fails."""
        read = self._read_all()
        now = time.perf_counter_ns()
        return [r for e, values, _ in read if values is not None for r in e.snapshot_rows(tag, now, values)]

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False)
            self._pool = None
