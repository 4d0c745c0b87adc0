"""protocol=promote: a rehearsal's fault (``protocol.fault``) injected into the launched candidate."""

from __future__ import annotations

import math
import os
import signal

from harness.proxy.routing import CANDIDATE
from protocols.promote.stages import perf_ns


class Faults:
    """The promotion's fault injection."""

    def maybe_fault(self, t: float) -> None:
        f = self.cfg.protocol.fault
        if f.kind == "none" or "injected_s" in self.fault:
            return
        base = self.t(self.ran[0].start_ns) if self.rows_total else math.inf  # from the first request
        if f.stage is not None:
            st = next((s for s in self.ran if s.plan.name == f.stage), None)
            if st is None:
                return
            base = self.t(st.start_ns)
        if t < base + float(f.at_s) or self.machine.done:
            return
        eng = self.engines[CANDIDATE]
        pid = eng.process.pid if eng.process is not None else None
        if pid is None:
            return
        sig = signal.SIGKILL if f.kind == "kill" else signal.SIGSTOP
        at = perf_ns()
        try:
            os.killpg(pid, sig)
        except ProcessLookupError:
            pass
        self.fault.update(injected_s=self.t(at), stage=self.stage.plan.name, pid=pid,
                          signal="SIGKILL" if f.kind == "kill" else "SIGSTOP")
        print(f"[{self.t(at):7.1f} s] fault: {f.kind} the candidate (process group {pid})", flush=True)
