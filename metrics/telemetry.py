"""Background telemetry: samplers that run on their own thread, off the load generator's loop.

Each sampler returns rows ``(time_ns, source, name, value)``; the collector appends them to
``telemetry.parquet``.  A source that cannot be read on this host is recorded once as
unavailable with the reason (``name = 'unavailable'``, ``value`` NaN, reason in ``detail``),
never as zeros.
"""

from __future__ import annotations

import math
import os
import threading
import time

import pyarrow as pa
import pyarrow.parquet as pq

SCHEMA = pa.schema([("time_ns", pa.int64()), ("source", pa.string()), ("name", pa.string()),
                    ("value", pa.float64()), ("detail", pa.string())])


class Sampler:
    source = "base"

    def available(self) -> tuple[bool, str]:
        return True, ""

    def sample(self, now_ns: int) -> list[tuple]:
        raise NotImplementedError


class HostSampler(Sampler):
    """CPU per core, memory, and the CPU of given processes (load generator, engine) via psutil."""

    source = "host"

    def __init__(self, pids: dict[str, int] | None = None):
        import psutil

        self.psutil = psutil
        self.procs = {}
        for label, pid in (pids or {}).items():
            try:
                p = psutil.Process(pid)
                p.cpu_percent(None)
                self.procs[label] = p
            except psutil.Error:
                pass
        psutil.cpu_percent(None, percpu=True)

    def sample(self, now_ns: int) -> list[tuple]:
        ps = self.psutil
        rows = [(now_ns, "host", f"cpu_percent.core{i}", float(v), None)
                for i, v in enumerate(ps.cpu_percent(None, percpu=True))]
        vm = ps.virtual_memory()
        rows.append((now_ns, "host", "mem_used_bytes", float(vm.total - vm.available), None))
        for label, p in self.procs.items():
            try:
                cpu = p.cpu_percent(None)
                rss = p.memory_info().rss
                for child in p.children(recursive=True):
                    try:
                        rss += child.memory_info().rss
                    except ps.Error:
                        pass
                rows.append((now_ns, label, "cpu_percent", float(cpu), None))
                rows.append((now_ns, label, "rss_bytes", float(rss), None))
            except ps.Error:
                pass
        return rows


class TelemetryCollector:
    """Runs samplers every ``interval_s`` on a daemon thread; ``stop()`` writes the parquet file."""

    def __init__(self, path: str | os.PathLike, samplers: list[Sampler], interval_s: float = 0.5):
        self.path = os.fspath(path)
        self.samplers = []
        self.rows: list[tuple] = []
        now = time.perf_counter_ns()
        for s in samplers:
            ok, why = s.available()
            if ok:
                self.samplers.append(s)
            else:
                self.rows.append((now, s.source, "unavailable", math.nan, why))
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="telemetry", daemon=True)

    def start(self) -> "TelemetryCollector":
        self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.is_set():
            now = time.perf_counter_ns()
            for s in self.samplers:
                try:
                    self.rows.extend(s.sample(now))
                except Exception as e:  # noqa: BLE001 - a flaky source must not stop the run
                    self.rows.append((now, s.source, "sample_error", math.nan, f"{type(e).__name__}: {e}"))
            self._stop.wait(self.interval_s)

    def stop(self) -> str:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        cols = list(zip(*self.rows)) if self.rows else [[], [], [], [], []]
        table = pa.table({n: list(c) for n, c in zip(SCHEMA.names, cols)}, schema=SCHEMA)
        tmp = self.path + ".partial"
        pq.write_table(table, tmp)
        os.replace(tmp, self.path)
        return self.path
