"""Telemetry in a process of its own, so sampling never holds the load generator's GIL.

On a host whose every core is busy (a CPU engine), a sampler thread inside the load
generator that gets descheduled while holding the GIL stalls the event loop for as long as
it waits for a core (hundreds of ms were measured), and the client's sends with it.  Here
the samplers run in a child process with its own interpreter: the load generator only
sends it short commands over a pipe (window edges, marks, snapshots), at moments where it
is not sending requests.

``TelemetryProcess`` offers what the harness uses of ``TelemetryCollector`` and writes the
same ``telemetry.parquet`` contract; every ``time_ns`` is ``perf_counter_ns`` (CLOCK_MONOTONIC,
one clock for every process of the host).  The child is forked by multiprocessing's fork server (a
clean interpreter: nothing of the parent's threads or sockets; ``_context``) and lowers its own
priority by ``nice`` so that, when cores are scarce, the load generator and the engine go first.
"""

from __future__ import annotations

import contextlib
import multiprocessing as mp
import os
import signal
import sys
import threading
import traceback
import types

from metrics.telemetry.collector import TelemetryCollector, warm_up
from metrics.telemetry.engine import EngineMetricsSampler, EnginePool
from metrics.telemetry.sources import build_samplers

CHILD_NICE = 5
START_METHOD = "forkserver"  # ``_context``; "spawn" is what benchmarks/telemetry_start.py compares it with


class TelemetryError(RuntimeError):
    """The telemetry process failed; the message carries its traceback."""


class TelemetryProcess:
    """A ``TelemetryCollector`` running in a child process; ``tcfg`` is the ``telemetry``
    config as a plain dict (conf/schema.py's ``Telemetry``)."""

    def __init__(self, tcfg: dict, pids: dict[str, int] | None = None, nice: int = CHILD_NICE):
        ctx = _context()
        self._conn, child = ctx.Pipe()
        self._proc = ctx.Process(target=_child_main, args=(child, tcfg, dict(pids or {}), nice),
                                 name="tokenfactory-telemetry", daemon=True)
        with _bare_main():
            self._proc.start()
        child.close()
        try:
            self.measures_energy, self.unavailable = self._wait_reply()
        except BaseException:  # failed, or interrupted while it started: no one else will stop it
            self._proc.kill()
            self._proc.join(5)
            self._conn.close()
            raise
        self._stopped = False
        self._lock = threading.Lock()  # one command at a time on the pipe (the engine watchdog calls too)

    @property
    def pid(self) -> int | None:
        return self._proc.pid

    def _wait_reply(self):
        try:
            ok, value = self._conn.recv()
        except EOFError:
            raise TelemetryError(f"the telemetry process exited (code {self._proc.exitcode})") from None
        if not ok:
            if isinstance(value, tuple):  # an OSError (a full disk writing telemetry.parquet), as one
                raise OSError(*value)
            raise TelemetryError(f"the telemetry process failed:\n{value}")
        return value

    def _call(self, *msg):
        with self._lock:
            self._conn.send(msg)
            return self._wait_reply()

    # --- what the harness uses of a collector -------------------------------------------
    def start(self, periodic: bool = True) -> TelemetryProcess:
        """Sample every ``interval_s`` from now on; ``periodic=False``: only when told (``sample_now``
        at the window's edges, ``metrics.telemetry.sampling``)."""
        if periodic:
            self._call("start")
        return self

    def sample_now(self) -> int:
        return self._call("sample_now")

    def mark(self, name: str, t_ns: int | None = None, detail: str | None = None) -> int:
        return self._call("mark", name, t_ns, detail)

    def record(self, rows: list[tuple]) -> None:
        self._call("record", rows)

    def watch_process(self, label: str, pid: int) -> None:
        self._call("watch", label, pid)

    def add_engine(self, url: str, metric_map: dict, headers: dict | None = None,
                   replica: str | None = None, source: str | None = None) -> bool:
        """Sample the engine's ``/metrics`` at ``url`` from now on (False: unreadable, recorded).

        Several engines (a deployment's replicas) are sampled in the same rounds, each added
        with its ``replica`` name: its rows have ``source = 'engine:<replica>'``; the one
        engine of a run is added with ``replica=None`` (``source = 'engine'``).  Adding a
        replica already added replaces it (a restarted replica's new page).  ``source`` names
        the rows instead (``router``: the page of the router in front of the workers)."""
        return self._call("add_engine", url, metric_map, headers or {}, replica, source)

    def remove_engine(self, replica: str | None = None) -> None:
        """Stop sampling ``replica``'s page, or every page (the router's too) when ``replica`` is None."""
        self._call("remove_engine", replica)

    def engine_snapshot(self, tag: str) -> None:
        """Exact ``start``/``end`` values of every engine's counters, as rows (``metrics.engine_counters``)."""
        self._call("engine_snapshot", tag)

    def write_window(self, path, start_ns: int, end_ns: int, also: list[tuple[int, int]] = ()) -> str:
        return self._call("write_window", os.fspath(path), start_ns, end_ns, list(also))

    def forget_before(self, t_ns: int, keep: list[tuple[int, int]] = ()) -> int:
        return self._call("forget_before", t_ns, list(keep))

    def close_window(self, path, start_ns: int, end_ns: int, keep: list[tuple[int, int]] = (),
                     wait: bool = False):
        """The window's table now; its file written in the telemetry process after the reply
        (``TelemetryCollector.close_window``), done by ``stop`` at the latest, even on Ctrl-C or when
        this process dies (the child reads the pipe's end and finishes its writes first)."""
        return self._call("close_window", os.fspath(path), start_ns, end_ns, list(keep), wait)

    def flush(self) -> None:
        """Once every closed window's file is on disk (raises a write that failed)."""
        self._call("flush")

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        try:
            self._call("stop")
        except (TelemetryError, OSError, EOFError):
            pass
        self._proc.join(10)
        if self._proc.is_alive():
            self._proc.kill()
            self._proc.join(5)
        self._conn.close()


def _context():
    """``forkserver``: a clean interpreter (nothing of the caller's threads or sockets), started once per
    process with what a child imports (the config's schema, pyarrow's writer, the pandas pyarrow
    converts through) and never the caller's ``__main__``; each session's child is a fork of it:
    0.04 s a start where a spawned interpreter took 0.6 (``benchmarks/telemetry_start.py``).  A child
    has the environment the server started with, which nothing here reads."""
    ctx = mp.get_context(START_METHOD)
    if START_METHOD == "forkserver":
        ctx.set_forkserver_preload([__name__, "conf.schema", "pyarrow.parquet", "pandas"])
    return ctx


@contextlib.contextmanager
def _bare_main():
    """Start without the caller's main module: a child (spawned, or forked by the server) imports the
    parent's ``__main__`` again (as ``__mp_main__``) to unpickle what it defines, and this child needs
    nothing of it: the ``tokenfactory`` command's or a script's imports (Hydra, the harness, a
    benchmark's scipy) took most of its start-up, every session."""
    main = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        yield
    finally:
        sys.modules["__main__"] = main


def _child_main(conn, tcfg: dict, pids: dict[str, int], nice: int) -> None:
    """The telemetry process: one collector, commands from the pipe until ``stop``."""
    # Ctrl-C at a terminal (and a scheduler's SIGTERM) reaches the whole process group: the
    # harness stops this process itself, and it ends on its own when the harness is gone.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        if nice:
            os.nice(nice)
        from conf.schema import Telemetry, typed

        cfg = typed(tcfg, Telemetry)
        col = TelemetryCollector(None, build_samplers(cfg, pids), cfg.interval_s)
        engines = EnginePool()  # every engine added, sampled together (one source of the collector)
        col.add_sampler(engines)
        warm_up()  # before any engine starts: else in the second point's window (issue 43)
        conn.send((True, (col.measures_energy, dict(col.unavailable))))
    except BaseException:  # noqa: BLE001 - reported to the parent, which raises it
        try:
            conn.send((False, traceback.format_exc()))
        except OSError:  # the parent is gone (interrupted while this one started): nobody to tell
            pass
        return
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):  # the parent is gone: nothing left to sample for
            col.stop()
            return
        op, args = msg[0], msg[1:]
        try:
            if op == "start":
                col.start()
                out = None
            elif op == "sample_now":
                out = col.sample_now()
            elif op == "mark":
                out = col.mark(*args)
            elif op == "record":
                col.record(args[0])
                out = None
            elif op == "watch":
                col.watch_process(*args)
                out = None
            elif op == "add_engine":
                url, metric_map, headers, replica, source = args
                engine = EngineMetricsSampler.scraping(url, metric_map, headers, replica=replica, source=source)
                engines.drop(source=engine.source)  # a page added again: its new one replaces the old
                out = col.probe(engine)
                if out:
                    engines.put(engine)
            elif op == "remove_engine":
                engines.drop(args[0], every=args[0] is None)
                out = None
            elif op == "engine_snapshot":
                col.record(engines.snapshot_rows(args[0]))
                out = None
            elif op == "write_window":
                out = col.write_window(*args)
            elif op == "forget_before":
                out = col.forget_before(*args)
            elif op == "close_window":
                out = col.close_window(*args)
            elif op == "flush":
                col.flush()
                out = None
            elif op == "stop":
                col.stop()
                conn.send((True, None))
                return
            else:
                raise ValueError(f"unknown telemetry command {op!r}")
            conn.send((True, out))
        except BaseException as e:  # noqa: BLE001 - reported to the parent, which raises it
            try:
                conn.send((False, (e.errno, e.strerror, e.filename) if isinstance(e, OSError) and e.errno
                           else traceback.format_exc()))
            except OSError:  # the parent is gone
                col.stop()
                return
            if op == "stop":  # a write that failed at the end: said, and the process ends all the same
                return
