"""The engine watchdog: a thread that looks at a launched engine every ``engine.health_interval_s``.

Each look (``check``), in this order:

- the process has exited: ``killed`` (a signal; SIGKILL is also what the kernel's OOM killer
  sends), ``oom`` (its log's last lines say it ran out of memory) or ``exited`` (a code);
- a process of the engine is stopped (SIGSTOP, SIGTSTP, a tracer): ``stopped``; it answers
  nothing and never will by itself, so this is not left to a timeout;
- ``GET liveness_path`` (default ``health_path``) unanswered, or not 200, for
  ``engine.hang_timeout_s`` since the last good answer: ``hung``.

Looks start at a fixed rate and a health request waits half an interval at most, so a death
or a stop is noticed within one interval (plus the look itself, milliseconds); a hang without
a stop within ``hang_timeout_s`` plus one interval.  On a fault the watchdog calls ``on_fault(fault)`` from
its thread; when that returns True (the engine was restarted in place) it goes on watching
the new process, else it ends.
"""

from __future__ import annotations

import re
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

perf_ns = time.perf_counter_ns

# What engines print when memory runs out (PyTorch, CUDA, ROCm, vLLM's KV-cache check, Python).
OOM_PATTERN = re.compile(r"out of memory|OutOfMemoryError|MemoryError|CUDA error: out of memory|"
                         r"HIP out of memory|Cannot allocate memory|insufficient memory|not enough memory", re.I)
LOG_TAIL_LINES = 40


@dataclass
class EngineFault:
    """What the watchdog found wrong with the engine, and when."""

    kind: str                    # killed | oom | exited | stopped | hung | restart_failed
    message: str                 # one line for the user
    last_ok_ns: int              # the last look that found the engine well (the fault is after it)
    detected_ns: int
    exit_code: int | None = None
    log_tail: str = ""
    restarted: bool = False      # the engine was started again in place (scenario recovery)
    restart_started_ns: int | None = None
    restart_healthy_ns: int | None = None   # the restarted engine answered its health route
    restart_ready_ns: int | None = None     # ... and its warm-up request
    restart_error: str | None = None
    extra: dict = field(default_factory=dict)

    def error(self) -> str:
        """The message with the engine log's last lines (what run.json and the user see)."""
        tail = f"\nlast lines of the engine's log:\n{self.log_tail}" if self.log_tail else ""
        return self.message + tail

    def as_dict(self) -> dict:
        return {"kind": self.kind, "message": self.message, "last_ok_ns": self.last_ok_ns,
                "detected_ns": self.detected_ns, "exit_code": self.exit_code, "restarted": self.restarted,
                "restart_started_ns": self.restart_started_ns, "restart_healthy_ns": self.restart_healthy_ns,
                "restart_ready_ns": self.restart_ready_ns,
                "restart_error": self.restart_error, "log_tail": self.log_tail, **self.extra}


def exit_fault(name: str, code: int, log_tail: str, last_ok_ns: int, now: int) -> EngineFault:
    """Classify an exit: a signal, an out-of-memory message in the log, or a plain code."""
    oom = OOM_PATTERN.search(log_tail or "")
    if code < 0:
        try:
            sig = signal.Signals(-code).name
        except ValueError:
            sig = f"signal {-code}"
        kind = "oom" if oom else "killed"
        why = f"engine={name} was killed by {sig} (exit {code})"
        if sig == "SIGKILL" and not oom:
            why += "; the kernel's OOM killer sends SIGKILL too (see dmesg)"
    else:
        kind = "oom" if oom else "exited"
        why = f"engine={name} exited with code {code}"
    if oom:
        why += f" after running out of memory ({oom.group(0)!r} in its log)"
    return EngineFault(kind=kind, message=why, last_ok_ns=last_ok_ns, detected_ns=now, exit_code=code,
                       log_tail=log_tail)


class EngineWatchdog:
    """Watches ``engine`` (an ``EngineAdapter`` it launched) from a daemon thread."""

    def __init__(self, engine, interval_s: float, hang_timeout_s: float,
                 on_fault: Callable[[EngineFault], bool]):
        self.engine = engine
        self.interval_s = float(interval_s)
        self.hang_timeout_s = float(hang_timeout_s)
        self.on_fault = on_fault
        self.last_ok_ns = perf_ns()
        self.faults: list[EngineFault] = []
        self._stop = threading.Event()
        self._busy = threading.Lock()   # held while a fault is being handled (a restart, say)
        self._thread: threading.Thread | None = None

    def check(self) -> EngineFault | None:
        """One look at the engine (see module doc); None when it is well."""
        eng, proc = self.engine, self.engine.process
        now = perf_ns()
        if proc is None:
            return None
        code = proc.poll()
        if code is not None:
            return exit_fault(eng.name, code, proc.tail(LOG_TAIL_LINES), self.last_ok_ns, now)
        stopped = proc.stopped_pids()
        if stopped:
            return EngineFault(kind="stopped", message=f"engine={eng.name} is stopped (process "
                               f"{', '.join(map(str, stopped))} in state T: SIGSTOP or a tracer); "
                               "a stopped engine answers nothing", last_ok_ns=self.last_ok_ns, detected_ns=now,
                               log_tail=proc.tail(LOG_TAIL_LINES))
        # half an interval at most, so the next look is on time; a slow answer is not yet a hang
        if eng.health_ok(timeout=max(self.interval_s / 2, 0.1), path=eng.liveness_path):
            self.last_ok_ns = perf_ns()
            return None
        now = perf_ns()
        silent = (now - self.last_ok_ns) / 1e9
        if silent >= self.hang_timeout_s:
            path = eng.liveness_path or eng.health_path
            return EngineFault(kind="hung", message=f"engine={eng.name} is hung: GET {path} unanswered (or not 200) "
                               f"for {silent:.1f} s (engine.hang_timeout_s={self.hang_timeout_s:g})",
                               last_ok_ns=self.last_ok_ns, detected_ns=now, log_tail=proc.tail(LOG_TAIL_LINES))
        return None

    def start(self) -> EngineWatchdog:
        self.last_ok_ns = perf_ns()
        self._thread = threading.Thread(target=self._run, name="tokenfactory-watchdog", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        due = time.monotonic() + self.interval_s
        while not self._stop.wait(max(due - time.monotonic(), 0.0)):
            due = max(due + self.interval_s, time.monotonic())  # looks at a fixed rate, whatever one takes
            with self._busy:
                if self._stop.is_set():
                    return
                fault = self.check()
                if fault is None:
                    continue
                self.faults.append(fault)
                if not self.on_fault(fault):
                    return
                self.last_ok_ns = perf_ns()  # restarted: watch the new process from now
                due = time.monotonic() + self.interval_s

    def look_now(self) -> None:
        """One look from the caller's thread (the load may end before the next one is due), the
        fault handled as the watchdog's own would be."""
        with self._busy:
            if self._stop.is_set() or (self._thread is not None and not self._thread.is_alive()):
                return  # stopped, or already ended on a fault
            fault = self.check()
            if fault is not None:
                self.faults.append(fault)
                if not self.on_fault(fault):
                    self._stop.set()
                else:
                    self.last_ok_ns = perf_ns()

    def wait_idle(self) -> None:
        """Until a fault being handled (a restart) is over."""
        with self._busy:
            pass

    def stop(self) -> None:
        """No more looks (before the harness stops the engine on purpose); waits for a fault
        being handled."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
