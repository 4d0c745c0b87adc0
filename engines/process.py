"""Engine processes: started from an argument list, logged to a file, always stopped.

Each engine runs in its own process group so that stopping it also stops the workers it
forked.  Every live process is also registered for ``atexit`` so nothing is orphaned when
the harness exits on an error or Ctrl-C; and where nothing else handles SIGTERM (pytest, a
script that drives an adapter) a handler stops them before the process ends as SIGTERM ends it:
each engine is in a session of its own, so neither the signal nor the default death reaches it.
"""

from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

_LIVE: set[EngineProcess] = set()


def port_in_use(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class EngineProcess:
    def __init__(self, argv: list[str], log_path: str | os.PathLike, env: dict | None = None, cwd=None):
        if isinstance(argv, str):
            raise TypeError("engine commands are argument lists, never shell strings")
        self.argv = [str(a) for a in argv]
        self.log_path = Path(log_path)
        self.env = env
        self.cwd = cwd
        self.proc: subprocess.Popen | None = None
        self.started_ns: int | None = None
        self._stopped = False
        self.owner: int | None = None  # the pid that started it: a forked child does not own it

    def start(self) -> None:
        guard_sigterm()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")
        try:
            self.proc = subprocess.Popen(
                self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env={**os.environ, **(self.env or {})}, cwd=self.cwd, start_new_session=True)
        except FileNotFoundError as e:
            raise RuntimeError(f"cannot start engine: {e.filename or self.argv[0]!r} not found "
                               f"(command: {' '.join(self.argv)})") from None
        finally:
            log.close()
        self.started_ns = time.perf_counter_ns()
        self.owner = os.getpid()
        _LIVE.add(self)

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def poll(self) -> int | None:
        return self.proc.poll() if self.proc else None

    def tail(self, n: int = 40) -> str:
        try:
            lines = self.log_path.read_bytes().decode("utf-8", "replace").splitlines()
        except OSError:
            return ""
        return "\n".join(lines[-n:])

    def stop(self, grace_s: float = 15.0) -> int | None:
        """SIGTERM the process group, wait ``grace_s``, then SIGKILL; returns the exit code."""
        p = self.proc
        if p is None or self._stopped:
            return p.returncode if p else None
        self._stopped = True
        try:
            deadline = time.monotonic() + grace_s
            if p.poll() is None:
                _signal_group(p.pid, signal.SIGTERM)
                try:
                    p.wait(grace_s)
                except subprocess.TimeoutExpired:
                    _signal_group(p.pid, signal.SIGKILL)
                    p.wait(10)
            # Workers (vLLM's engine core, SGLang's scheduler) may outlive their leader by a
            # moment, or for good if the leader died first: wait out the grace, then kill.
            while _group_alive(p.pid) and time.monotonic() < deadline:
                time.sleep(0.1)
            if _group_alive(p.pid):
                _signal_group(p.pid, signal.SIGKILL)
                end = time.monotonic() + 5
                while _group_alive(p.pid) and time.monotonic() < end:
                    time.sleep(0.05)
        finally:
            _LIVE.discard(self)
        return p.returncode


    def kill(self, wait_s: float = 10.0) -> int | None:
        """SIGKILL the process group at once (an engine that failed: hung, stopped or half
        dead gets no grace; SIGTERM would stay pending on a stopped one); waits for the group."""
        p = self.proc
        if p is None:
            return None
        self._stopped = True
        try:
            _signal_group(p.pid, signal.SIGKILL)
            try:
                p.wait(wait_s)
            except subprocess.TimeoutExpired:
                pass
            end = time.monotonic() + wait_s
            while _group_alive(p.pid) and time.monotonic() < end:
                time.sleep(0.05)
        finally:
            _LIVE.discard(self)
        return p.returncode

    def stopped_pids(self) -> list[int]:
        """Processes of the engine (leader and descendants) stopped by a signal (SIGSTOP,
        SIGTSTP) or a tracer: a stopped engine answers nothing and never will by itself."""
        import psutil

        if self.proc is None or self.proc.poll() is not None:
            return []
        try:
            leader = psutil.Process(self.proc.pid)
            procs = [leader, *leader.children(recursive=True)]
        except psutil.Error:
            return []
        out = []
        for proc in procs:
            try:
                if proc.status() in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP):
                    out.append(proc.pid)
            except psutil.Error:
                continue
        return out


class ProcessHolder:
    """The ``stop``, ``kill`` and ``alive`` of whatever holds one engine process as ``process``
    (an engine adapter, Dynamo's frontend and each of its workers, a router), written once so
    that alive means one thing to the watchdog, the deployment's survivors and the point's close.

    ``alive()``: the process tokenfactory started has not exited.  With no process, the answer is
    ``launched``'s: a holder tokenfactory launches (before its start, or a start that failed before
    its process ran) is not alive; an endpoint it did not launch (``engine.base_url``,
    ``launch: false``) is not its to judge by a process (its health checks do), so it is taken as
    alive rather than stopped as dead.
    """

    process = None
    launched = True  # an engine adapter reads it from its config

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()

    def kill(self) -> None:
        """Stop a failed process at once (SIGKILL to its process group; see ``EngineProcess.kill``)."""
        if self.process is not None:
            self.process.kill()

    def alive(self) -> bool:
        if self.process is None:
            return not self.launched
        return self.process.poll() is None


def _group_alive(pgid: int) -> bool:
    """Whether any process of the group is still running (zombies awaiting reaping do not count)."""
    import psutil

    for proc in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.status() != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return False


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


@atexit.register
def _stop_all() -> None:
    """Stop every engine this process started: all are sent SIGTERM at once, then each is waited
    for (its grace, then SIGKILL), so N engines take one grace, not N."""
    mine = [p for p in list(_LIVE) if p.owner == os.getpid()]
    for p in mine:
        if p.proc is not None and p.proc.poll() is None:
            _signal_group(p.proc.pid, signal.SIGTERM)
    for p in mine:
        p.stop(grace_s=5.0)


def _on_sigterm(signum, frame) -> None:
    """SIGTERM with no other handler: stop this process's engines, then end by SIGTERM as the
    default would (exit status -15; Python's default skips ``atexit``, orphaning them)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second one must not cut the clean-up short
    try:
        _stop_all()
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)


def guard_sigterm() -> None:
    """Install ``_on_sigterm`` where SIGTERM still has Python's default action (a program's own
    handler, such as the command line's, is left in place: it stops engines its own way).
    Only the main thread may set a handler: elsewhere nothing is done (the import did it)."""
    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _on_sigterm)


guard_sigterm()  # at import too: a deployment starts its replicas from threads
