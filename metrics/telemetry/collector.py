"""The collector: runs samplers on their own thread, off the load generator's loop, keeps
their rows and writes each window's ``telemetry.parquet`` (a closed window's on a writer thread
of its own, so the next window does not wait for the file: ``close_window``)."""

from __future__ import annotations

import math
import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

import pyarrow as pa

from metrics.telemetry.base import MARK, SCHEMA, UNAVAILABLE, Sampler
from metrics.telemetry.host import HostSampler
from resultfiles import parquet


def _table(rows: list[tuple]) -> pa.Table:
    cols = list(zip(*rows)) if rows else [[], [], [], [], []]
    return pa.table({n: list(c) for n, c in zip(SCHEMA.names, cols)}, schema=SCHEMA)


def warm_up() -> None:
    """What the first window's close would otherwise pay for, inside the next window (0.4 to 0.8 s on
    a busy host): pyarrow imports pandas at its first conversion of Python lists, and the writer
    imports pyarrow.parquet.  The telemetry process does it before it says it is ready, before any
    engine starts."""
    import pyarrow.parquet  # noqa: F401

    _table([(0, MARK, "warm_up", math.nan, None)])


def write_table(path: str | os.PathLike, rows: list[tuple] | pa.Table) -> str:
    """``rows`` (or their table) as a ``telemetry.parquet``, whole or not at all."""
    path = os.fspath(path)
    parquet.write_table(path, rows if isinstance(rows, pa.Table) else _table(rows))
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
    ``close_window(path, start, end)`` (or ``write_window``) writes the rows a window needs.
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
        self._writer: ThreadPoolExecutor | None = None  # closed windows' files, one at a time, in order
        self._writes: list[Future] = []

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

    def close_window(self, path: str | os.PathLike, start_ns: int, end_ns: int, keep: list[tuple[int, int]] = (),
                     wait: bool = False) -> pa.Table:
        """A window closed at ``end_ns``: its rows (``window_rows``, with ``keep``) as a table, returned
        at once, and written to ``path`` on the writer thread; then the rows no later window needs are
        forgotten (``forget_before``).  The next window opens at ``end_ns``: with the write off this
        call, it does not pay for the file (issue 43: 0.2 to 0.65 s).  ``wait``: return once the file
        is written (no window follows).  A write that failed raises here, at the next close, or at
        ``flush``; ``flush`` (and ``stop``) wait for every file, so a closed window's is whole on disk
        before the collector goes, also when the run is interrupted."""
        self.flush()  # the previous window's file (it had a whole window's time): its error, if any
        table = _table(self.window_rows(start_ns, end_ns, keep))
        self.forget_before(end_ns, keep=keep)
        if self._writer is None:
            self._writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="telemetry-writer")
        self._writes.append(self._writer.submit(write_table, path, table))
        if wait:
            self.flush()
        return table

    def flush(self) -> None:
        """Wait for the closed windows' files; raises the first write that failed."""
        writes, self._writes = self._writes, []
        for f in writes:
            f.result()

    def table(self) -> pa.Table:
        with self._lock:
            return _table(list(self.rows))

    def stop(self) -> str | None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        for s in self.samplers:
            s.close()
        try:
            self.flush()  # every closed window's file on disk before the collector goes
        finally:
            if self._writer is not None:
                self._writer.shutdown()
        if self.path is None:
            return None
        with self._lock:
            return write_table(self.path, self.rows)
