"""Engine faults during a session: the watchdog's handler, the load point it stops, the
requests it names, and restarts.

The watchdog (``engines.watchdog``) looks at a launched engine every
``engine.health_interval_s`` from when it is ready until the harness stops it on purpose.
On a fault (killed, out of memory, exited, stopped, hung), from the watchdog's thread:

- in a point of ``scenario.kill_at_s`` (recovery in place): the engine is killed outright and
  started again on the same port while the load goes on; the point is not failed (a
  restart that fails makes it so);
- otherwise: the point's load is aborted (nothing more is sent; requests in flight are
  cancelled, their ``error`` says why), the engine is killed (a hung or stopped one never
  comes back by itself), and the point is failed: ``point_failed`` and ``failure_reason``
  in ``summary.json``, ``status: failed`` and ``error`` (with the engine log's last lines)
  in ``run.json``.  Then ``engine.on_failure``: ``stop`` ends the sweep with that error
  (rerun the same command: finished points are kept, the failed one runs again) or
  ``restart`` starts the engine again and goes on with the next point (the restart lies
  in the next point's observation window, so its cost is counted).

Requests that failed between the fault and its detection (a killed engine resets its
connections at once; the watchdog looks every interval) are named after the run
(``attribute``): every non-``ok`` row that ended after the engine was last seen well (or
after the injected kill) and before it was back gets the fault in its ``error``.
"""

from __future__ import annotations

import asyncio
import os
import sys
import threading
import time

import pyarrow as pa

from conf.schema import Scenario, typed
from engines.base import EngineError
from engines.watchdog import EngineFault, EngineWatchdog
from harness import results_io
from harness.errors import UserError
from loadgen.records import write_requests

perf_ns = time.perf_counter_ns
PREFIX = "engine failure"


def reason(fault: EngineFault) -> str:
    """The ``error`` of a request the fault ended (one line)."""
    return f"{PREFIX} ({fault.kind}): {fault.message}"


class EngineFaults:
    """A session's faults: its watchdog, the point being dispatched, and what went wrong."""

    def __init__(self, session):
        self.s = session
        engine = session.cfg.engine  # a union of the adapters' schemas: the watchdog's two keys are in each
        self.health_interval_s = float(engine.health_interval_s)  # 0: no watchdog
        self.hang_timeout_s = float(engine.hang_timeout_s)
        self.scenario = typed(session.cfg.scenario, Scenario)
        self.watchdog: EngineWatchdog | None = None
        self.member_watchdogs: list[EngineWatchdog] = []  # a deployment: one per replica and the router
        self.degraded: list[EngineFault] = []     # replicas lost while their pool served on
        self.injector = None                      # scenario.kill_at_s of the point in progress
        self.recover = False                      # this point restarts the engine in place
        self.failed: EngineFault | None = None    # a fault not recovered: the engine is down
        self.point_faults: list[EngineFault] = []
        self._dispatch: tuple | None = None       # (loop, dispatcher) of the point in progress
        self._lock = threading.Lock()

    # --- the watchdog ---------------------------------------------------------------------
    def start_watch(self) -> None:
        eng = self.s.engine
        if self.health_interval_s <= 0:
            return  # no watchdog wanted
        members = getattr(eng, "members", None)
        if members is not None:  # a deployment: each process its own watchdog, named in its faults
            self.degraded = []
            self.member_watchdogs = [
                EngineWatchdog(m, self.health_interval_s, self.hang_timeout_s,
                               lambda fault, m=m: self.on_member_fault(m, fault)).start()
                for m in members()]
            return
        if eng.process is None:
            return  # an endpoint we did not launch
        self.watchdog = EngineWatchdog(eng, self.health_interval_s, self.hang_timeout_s, self.on_fault).start()

    def watch_member(self, member) -> None:
        """A replica that live autoscaling added: watched like the deployment's first ones."""
        if self.health_interval_s <= 0:
            return
        wd = EngineWatchdog(member, self.health_interval_s, self.hang_timeout_s,
                            lambda fault, m=member: self.on_member_fault(m, fault)).start()
        self.member_watchdogs.append(wd)

    def unwatch(self, replica: str) -> None:
        """A replica about to be stopped on purpose (scaled down): no more looks at it."""
        for wd in [w for w in self.member_watchdogs if getattr(w.engine, "replica", None) == replica]:
            wd.stop()
            self.member_watchdogs.remove(wd)

    def stop_watch(self) -> None:
        if self.watchdog is not None:
            self.watchdog.stop()
            self.watchdog = None
        for wd in self.member_watchdogs:
            wd.stop()
        self.member_watchdogs = []

    def watchdogs(self) -> list[EngineWatchdog]:
        return [self.watchdog] if self.watchdog is not None else list(self.member_watchdogs)

    def on_member_fault(self, member, fault: EngineFault) -> bool:
        """A deployment's process failed: a replica whose pool has others running is lost and
        the load goes on against the rest (the router's business; the requests it ended are
        named); the router, or a pool's last replica, fails the deployment as one engine's
        death would.  Never restarted in place: the watchdog of that process ends."""
        with self._lock:
            down = self.failed is not None
        if down:  # the deployment is already down (killed on purpose after another's fault)
            return False
        fault.extra["replica"] = member.replica or "router"
        survivors = self.s.engine.survivors(member.replica) if member.replica else []
        if not survivors:
            return self.on_fault(fault)
        inj = self.injector
        if inj is not None and inj.kill_ns is not None and not any(f.extra.get("injected") for f in self.point_faults):
            fault.extra.update(injected=True, kill_ns=inj.kill_ns)
            fault.message = (fault.message.split("; the kernel's OOM killer")[0]
                             + f" (scenario.kill_at_s={inj.at_s:g}: {inj.sig_name} sent by the harness)")
        fault.extra["survivors"] = survivors
        fault.message += f"; the deployment serves on with {', '.join(survivors)}"
        self.point_faults.append(fault)
        self.degraded.append(fault)
        print(f"replica fault: {fault.message}", file=sys.stderr, flush=True)
        self._mark("replica_fault", fault.detected_ns, f"{fault.extra['replica']}: {fault.kind}")
        return False

    def settle(self) -> None:
        """After a point's load: a fault being handled (a restart in place) is over, and one
        more look is taken (the load may have ended, on the fault itself, before the
        watchdog's next look).  After the scenario's kill, looks go on until the watchdog has
        seen it: a killed process can close its sockets (ending the load) a while before it
        can be reaped, longer on a busy host."""
        wds, inj = self.watchdogs(), self.injector
        if not wds:
            return
        deadline = time.monotonic() + self.hang_timeout_s + 2 * self.health_interval_s
        while True:
            for wd in wds:
                wd.look_now()
            seen = self.failed is not None or any(f.extra.get("injected") for f in self.point_faults)
            if inj is None or inj.kill_ns is None or seen or time.monotonic() > deadline:
                return
            time.sleep(0.05)

    # --- the point in progress ------------------------------------------------------------
    def arm(self, kill_at_s, signal_name: str) -> None:
        """Before a point's load: the scenario's kill, and recovery in place, where configured."""
        from harness.scenarios import KillInjector

        self.point_faults = []
        replica = self.scenario.kill_replica
        target = self.s.engine
        if kill_at_s is not None and replica is None and hasattr(target, "members"):
            raise UserError("scenario.kill_at_s with a deployment kills one of its processes: name it with "
                            f"scenario.kill_replica (one of {', '.join(target.roles())})")
        if replica is not None and kill_at_s is not None:  # one replica of a deployment, not restarted
            target = next((m for m in getattr(target, "members", list)() if m.replica == replica), None)
            if target is None:
                raise UserError(f"scenario.kill_replica={replica}: no such launched replica (the deployment has "
                                  f"{', '.join(getattr(self.s.engine, 'roles', dict)()) or 'one engine'})")
        self.recover = kill_at_s is not None and replica is None
        who = "engine" if replica is None else target.name
        self.injector = KillInjector(target, kill_at_s, signal_name, who) if kill_at_s is not None else None

    def attach(self, dispatcher) -> None:
        """Called on the dispatch loop once the point's ``Dispatcher`` exists."""
        with self._lock:
            self._dispatch = (asyncio.get_running_loop(), dispatcher)
            failed = self.failed
        if failed is not None:  # the engine went down before the load began
            dispatcher.abort(reason(failed))
        elif self.injector is not None:
            self.injector.arm(dispatcher)

    def detach(self) -> None:
        with self._lock:
            self._dispatch = None
        if self.injector is not None:
            self.injector.disarm()

    # --- a fault --------------------------------------------------------------------------
    def on_fault(self, fault: EngineFault) -> bool:
        """The watchdog's handler (its thread); True: restarted in place, keep watching."""
        inj = self.injector
        if inj is not None and inj.kill_ns is not None and not any(f.extra.get("injected") for f in self.point_faults):
            fault.extra.update(injected=True, kill_ns=inj.kill_ns)
            fault.message = (fault.message.split("; the kernel's OOM killer")[0]  # we know who sent it
                             + f" (scenario.kill_at_s={inj.at_s:g}: {inj.sig_name} sent by the harness)")
        self.point_faults.append(fault)
        print(f"engine fault: {fault.message}", file=sys.stderr, flush=True)
        self._mark("engine_fault", fault.detected_ns, fault.kind)
        if self.recover:
            fault.restart_started_ns = perf_ns()
            try:
                self.s.restart_engine(f"{fault.kind}: {fault.message}")
                fault.restarted = True
                fault.restart_healthy_ns, fault.restart_ready_ns = self.s.engine.healthy_ns, self.s.engine.ready_ns
                print(f"engine restarted in {(fault.restart_ready_ns - fault.restart_started_ns) / 1e9:.1f} s; "
                      "the load goes on", flush=True)
                return True
            except (EngineError, OSError) as e:
                fault.restart_error = str(e)
                fault.kind, fault.message = "restart_failed", f"{fault.message}; the restart failed: {e}"
        with self._lock:
            self.failed = fault
            d = self._dispatch
        if d is not None:
            loop, dispatcher = d
            try:
                loop.call_soon_threadsafe(dispatcher.abort, reason(fault))
            except RuntimeError:  # the loop has just closed: the load was over anyway
                pass
        self.s.engine.kill()
        return False

    def _mark(self, name: str, t_ns: int, detail: str) -> None:
        tel = self.s.telemetry
        if tel is not None:
            try:
                tel.mark(name, t_ns, detail)
            except Exception:  # noqa: BLE001 - a telemetry hiccup must not hide the fault
                pass

    def take_failed(self) -> EngineFault | None:
        """The unrecovered fault, if any (cleared: the engine is restarted or the sweep ends)."""
        with self._lock:
            f, self.failed = self.failed, None
        return f


def attribute(path, faults: list[EngineFault]) -> int:
    """Put each fault in the ``error`` of the non-``ok`` rows of ``requests.parquet`` that
    ended while it lasted (see module doc); rewrites the file under a temp name.  Returns the
    rows changed."""
    spans = []
    for f in faults:
        lo = f.extra.get("kill_ns") or f.last_ok_ns
        hi = f.restart_healthy_ns if f.restarted else None
        spans.append((lo, hi, reason(f)))
    if not spans or not os.path.exists(path):
        return 0
    t = results_io.read_parquet(path)
    status = t.column("status").to_pylist()
    errors = t.column("error").to_pylist()
    ends = [d if d is not None else (e if e is not None else s) for d, e, s in
            zip(t.column("done_ns").to_pylist(), t.column("end_ns").to_pylist(), t.column("sent_ns").to_pylist())]
    changed = 0
    for i, (st, err, end) in enumerate(zip(status, errors, ends)):
        if st == "ok" or end is None or (err or "").startswith(PREFIX):
            continue
        for lo, hi, why in spans:
            if end >= lo and (hi is None or end <= hi):
                errors[i] = f"{why}; the client saw: {err}" if err else why
                changed += 1
                break
    if changed:
        t = t.set_column(t.schema.get_field_index("error"), t.schema.field("error"), pa.array(errors, pa.string()))
        write_requests(path, t)
    return changed
