"""protocol=promote: a rehearsal's fault (``protocol.fault``) injected into the launched candidate."""

from __future__ import annotations

import math
import os
import signal

from harness.proxy.routing import CANDIDATE
from protocols.promote.state import PromotionState, perf_ns


class Faults:
    """The promotion's fault injection: once, at its time, into the launched candidate; what it did is
    kept in the state's ``fault``."""

    def __init__(self, state: PromotionState):
        self.state = state

    def maybe_fault(self, t: float) -> None:
        ps = self.state
        f = ps.cfg.protocol.fault
        if f.kind == "none" or "injected_s" in ps.fault:
            return
        base = ps.t(ps.ran[0].start_ns) if ps.rows_total else math.inf  # from the first request
        if f.stage is not None:
            st = next((s for s in ps.ran if s.plan.name == f.stage), None)
            if st is None:
                return
            base = ps.t(st.start_ns)
        if t < base + float(f.at_s) or ps.machine.done:
            return
        eng = ps.engines[CANDIDATE]
        pid = eng.process.pid if eng.process is not None else None
        if pid is None:
            return
        sig = signal.SIGKILL if f.kind == "kill" else signal.SIGSTOP
        at = perf_ns()
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            pass
        ps.fault.update(injected_s=ps.t(at), stage=ps.stage.plan.name, pid=pid,
                          signal="SIGKILL" if f.kind == "kill" else "SIGSTOP")
        print(f"[{ps.t(at):7.1f} s] fault: {f.kind} the candidate (process group {pid})", flush=True)
