"""The collector: runs samplers on their own thread, off the load generator's loop, keeps
their rows and writes each window's ``telemetry.parquet``."""

from __future__ import annotations

import math
import os
import threading
import time

import pyarrow as pa

from metrics.telemetry.base import MARK, SCHEMA, UNAVAILABLE, Sampler
from metrics.telemetry.host import HostSampler
from resultfiles import parquet


def _table(rows: list[tuple]) -> pa.Table:
    cols = list(zip(*rows)) if rows else [[], [], [], [], []]
    return pa.table({n: list(c) for n, c in zip(SCHEMA.names, cols)}, schema=SCHEMA)


def write_table(path: str | os.PathLike, rows: list[tuple]) -> str:
    path = os.fspath(path)
    parquet.write_table(path, _table(rows))
    return path


def _needed(rows: list[tuple], intervals: list[tuple[int, int]]) -> set[int]:
    """Indices of the rows that windows over ``intervals`` need (see ``window_rows``)."""
    keep = set()
    for a, b in intervals:
        before: dict = {}
        after: dict = {}
        for i, r in enumerate(rows):
            key = (r[1], r[2])
            if r[1] == MARK:  # events: only those inside an interval
                if a <= r[0] <= b:
                    keep.add(i)
                continue
            if r[0] < a:
                before[key] = i
            elif r[0] > b:
                after.setdefault(key, i)
            else:
                keep.add(i)
        keep.update(before.values())
        keep.update(after.values())
    for i, r in enumerate(rows):
        if r[2] in (UNAVAILABLE, "sample_error") or (r[4] or "").startswith(UNAVAILABLE):
            keep.add(i)
    return keep


class TelemetryCollector:
    """Runs samplers every ``interval_s`` on a daemon thread.

    Either one collector per run (``stop()`` writes ``path``), or one per experiment that
    outlives several windows: ``sample_now()`` at each window edge, then
    ``write_window(path, start, end)`` writes the rows a window needs.
    """

    def __init__(self, path: str | os.PathLike | None, samplers: list[Sampler], interval_s: float = 0.5):
        self.path = os.fspath(path) if path is not None else None
        self.samplers: list[Sampler] = []
        self.rows: list[tuple] = []
        self.unavailable: dict[str, str] = {}
        self._lock = threading.Lock()
        now = time.perf_counter_ns()
        for s in samplers:
            try:
                ok, why = s.available()
            except Exception as e:  # noqa: BLE001 - a probe that crashes is an unavailable source
                ok, why = False, f"{type(e).__name__}: {e}"
            if ok:
                self.samplers.append(s)
            else:
                self.unavailable[s.source] = why
                self.rows.append((now, s.source, UNAVAILABLE, math.nan, why))
        self.interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="telemetry", daemon=True)

    @property
    def measures_energy(self) -> bool:
        return any(s.measures_energy for s in self.samplers)

    def start(self) -> TelemetryCollector:
        self._thread.start()
        return self

    def sample_now(self) -> int:
        """Take one sample of every source now (a window edge); returns its time."""
        with self._lock:
            now = time.perf_counter_ns()
            for s in self.samplers:
                try:
                    self.rows.extend(s.sample(now))
                except Exception as e:  # noqa: BLE001 - a flaky source must not stop the run
                    self.rows.append((now, s.source, "sample_error", math.nan, f"{type(e).__name__}: {e}"))
        return now

    def add_sampler(self, s: Sampler) -> bool:
        """Add a source once it can be read (an engine's metrics page after the engine is up)."""
        ok = self.probe(s)
        if ok:
            with self._lock:
                self.samplers.append(s)
        return ok

    def probe(self, s: Sampler) -> bool:
        """Whether ``s`` can be read now; when not, it is recorded as unavailable (with why)."""
        try:
            ok, why = s.available()
        except Exception as e:  # noqa: BLE001 - a probe that crashes is an unavailable source
            ok, why = False, f"{type(e).__name__}: {e}"
        if not ok:
            with self._lock:
                self.unavailable[s.source] = why
                self.rows.append((time.perf_counter_ns(), s.source, UNAVAILABLE, math.nan, why))
        return ok

    def remove_sampler(self, s: Sampler) -> None:
        """Stop sampling a source (an engine about to be stopped on purpose)."""
        with self._lock:
            if s in self.samplers:
                self.samplers.remove(s)

    def record(self, rows: list[tuple]) -> None:
        """Rows taken outside the timer (exact snapshots at a run's edges)."""
        with self._lock:
            self.rows.extend(rows)

    def mark(self, name: str, t_ns: int | None = None, detail: str | None = None) -> int:
        t = time.perf_counter_ns() if t_ns is None else int(t_ns)
        with self._lock:
            self.rows.append((t, MARK, name, math.nan, detail))
        return t

    def watch_process(self, label: str, pid: int) -> None:
        for s in self.samplers:
            if isinstance(s, HostSampler):
                s.watch_process(label, pid)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample_now()
            self._stop.wait(self.interval_s)

    def window_rows(self, start_ns: int, end_ns: int, also: list[tuple[int, int]] = ()) -> list[tuple]:
        """Rows inside [start, end] and the ``also`` intervals (marks included), the last sample
        of each series before each interval and the first after it (so edges can be
        interpolated), and every unavailable/failure row."""
        with self._lock:
            rows = list(self.rows)
        return [rows[i] for i in sorted(_needed(rows, [(start_ns, end_ns), *also]), key=lambda i: (rows[i][0], i))]

    def forget_before(self, t_ns: int, keep: list[tuple[int, int]] = ()) -> int:
        """Drop the rows no window from ``t_ns`` on can need, so an experiment's telemetry
        stays the size of one window (plus ``keep``, e.g. the idle baseline every window
        reuses) however long it runs.  Kept: rows from ``t_ns`` on, the last sample of each
        series before it, the ``keep`` intervals with their edges, unavailable/failure rows.
        Returns how many rows were dropped."""
        with self._lock:
            rows = self.rows
            needed = _needed(rows, [(t_ns, 1 << 62), *keep])
            self.rows = [r for i, r in enumerate(rows) if i in needed]
            return len(rows) - len(self.rows)

    def write_window(self, path: str | os.PathLike, start_ns: int, end_ns: int,
                     also: list[tuple[int, int]] = ()) -> str:
        return write_table(path, self.window_rows(start_ns, end_ns, also))

    def table(self) -> pa.Table:
        with self._lock:
            return _table(list(self.rows))

    def stop(self) -> str | None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        for s in self.samplers:
            s.close()
        if self.path is None:
            return None
        with self._lock:
            return write_table(self.path, self.rows)
