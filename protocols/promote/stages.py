"""protocol=promote: the stage loop: the proxy's rows drained, the guards, the gates, the stages
advanced, rolled back or promoted, and the timeline."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from harness import results_io
from harness.proxy.routing import CANDIDATE, INCUMBENT
from metrics.percentiles import percentile
from metrics.promotion_gate import (
    SideSample,
    guard_trips,
)
from protocols.promote.mlflow_log import log_gate
from protocols.promote.plan import Stage

perf_ns = time.perf_counter_ns
SIDES = (INCUMBENT, CANDIDATE)


def measured(rows) -> list:
    """Rows that say something about the engine: a request cancelled (its caller left, the proxy
    stopped, a rollback moved it to the incumbent) is counted apart, not as the engine's error."""
    return [r for r in rows if r.status != "cancelled"]


class RanStage:
    """A stage as it ran: its plan, when it started and ended, its rows per side, its gates."""

    def __init__(self, index: int, plan: Stage, start_ns: int, out: Path):
        self.index, self.plan, self.start_ns, self.end_ns = index, plan, start_ns, None
        self.dir = out / "stages" / f"{index:02d}_{plan.name}"
        self.rows = {s: [] for s in SIDES}
        self.pairs: list = []
        self.gates: list[dict] = []


class StageLoop:
    """The promotion's loop over its stages."""

    # ------------------------------------------------------------------------------------ helpers
    def t(self, ns: int | None = None) -> float:
        """Seconds since the proxy took the first stage's mode (``ns``: a perf_counter_ns reading; None: now)."""
        return ((ns if ns is not None else perf_ns()) - self.t0_ns) / 1e9

    @property
    def stage(self) -> RanStage:
        return self.ran[-1]

    def stage_of(self, arrive_ns: int) -> RanStage | None:
        """The stage a request that arrived at ``arrive_ns`` belongs to (None: between stages, or after)."""
        for st in reversed(self.ran):
            if arrive_ns >= st.start_ns:
                return st if st.end_ns is None or arrive_ns < st.end_ns else None
        return None

    # ------------------------------------------------------------------------------------ the loop
    def loop(self) -> None:
        p = self.cfg.protocol
        tick = float(p.guard.interval_s)
        final_at: float | None = None
        next_tick = perf_ns()
        while True:
            next_tick += int(tick * 1e9)
            time.sleep(max(next_tick - perf_ns(), 0) / 1e9)
            rows, status, gone = self.proxy.drain()
            if rows and not self.rows_total:
                # the first stage starts with the first request (a load generator takes a while to start)
                first = min(r.arrive_ns for r in rows)
                self.ran[0].start_ns = first
                self.machine.started_s = self.t(first)
                self.machine.decisions[0].t_s = self.t(first)
            for r in rows:
                self.add_row(r)
            now = perf_ns()
            t = self.t(now)
            self.maybe_fault(t)
            if not self.machine.done:
                self.check(t, status or {})
            self.tick(t, status or {}, len(rows))
            if self.machine.done and final_at is None:
                final_at = t
            if final_at is not None and t - final_at >= float(p.after_s):
                return
            if gone:
                if not self.machine.done:
                    self.machine.on_end(t, "the proxy process ended")
                return
            if self.traffic is not None and self.traffic.poll() is not None and final_at is None:
                rows, _, _ = self.proxy.drain()
                for r in rows:
                    self.add_row(r)
                self.machine.on_end(t, f"the traffic ended (exit {self.traffic.returncode}) before a final decision; "
                                       f"see {self.out / 'traffic' / 'traffic.log'}")
                print(f"[{t:7.1f} s] {self.machine.decisions[-1].reason}", flush=True)
                return

    def add_row(self, r) -> None:
        self.rows_total += 1
        if not r.shadow:  # what the caller got: ok once any of its rows is; cancelled ones (the caller left,
            # the proxy stopped, a rollback moved it to the incumbent) are not failures
            was = self.callers.get(r.request_id)
            now_ = "ok" if r.status == "ok" else ("cancelled" if r.status == "cancelled" else "failed")
            self.callers[r.request_id] = "ok" if "ok" in (was, now_) else (now_ if was in (None, "cancelled") else was)
        self.window[r.side].append(r)
        st = self.stage_of(r.arrive_ns)
        if st is not None:
            st.rows[r.side].append(r)
        elif self.after is not None and r.arrive_ns >= self.after.start_ns:
            self.after.rows[r.side].append(r)
        if r.side == CANDIDATE and r.status != "ok" and "first_candidate_failure_s" not in self.fault \
                and self.fault.get("injected_s") is not None:
            self.fault["first_candidate_failure_s"] = self.t(r.done_ns or perf_ns())
        if r.compare and self.pairs is not None:
            got = self.pairs.add(r.request_id, r.side, r.text, r.status == "ok")
            if got is not None and st is not None:
                st.pairs.append(got)

    def _window(self, side: str, since_ns: int) -> SideSample:
        w = self.window[side]
        while w and (w[0].done_ns or 0) < since_ns:
            w.popleft()
        return SideSample.from_rows(measured(w))

    def check(self, t: float, status: dict) -> None:
        g = self.cfg.protocol.guard
        since = max(perf_ns() - int(float(g.window_s) * 1e9), self.stage.start_ns)
        inc, cand = self._window(INCUMBENT, since), self._window(CANDIDATE, since)
        trips = guard_trips(inc, cand, min_requests=int(g.min_requests),
                            max_error_rate_increase=float(g.max_error_rate_increase),
                            max_attainment_drop=float(g.max_attainment_drop), max_ttft_ratio=float(g.max_ttft_ratio),
                            stall_s=float(g.stall_s), ttft_floor_ms=float(g.ttft_floor_ms),
                            min_latency_requests=int(g.min_latency_requests),
                            candidate_oldest_wait_s=float((status.get(CANDIDATE) or [0, 0.0])[1]))
        if trips:
            d = self.machine.on_guard(t, trips)
            self.rollback(d)
            return
        st = self.stage
        n_cand = len(st.rows[CANDIDATE])
        if self.machine.gate_due(t, n_cand):
            gate = self.gate(st, t)
            before = self.machine.i
            d = self.machine.on_gate(t, gate["outcome"], gate["reasons"], {"gate": len(st.gates) - 1})
            print(f"[{t:7.1f} s] {st.plan.name}: gate look {gate['look']} ({gate['confidence']:.4g}) -> "
                  f"{d.action if d.action != 'start' else 'advance'}: {'; '.join(gate['reasons'])[:600]}", flush=True)
            log_gate(self.mlflow, self.looks, st.index, st.plan.name, gate)
            if d.action == "rollback":
                self.rollback(d)
            elif self.machine.state == "promoted":
                self.finish_stage(promoted=True)
            elif self.machine.i != before:
                self.next_stage()

    def next_stage(self) -> None:
        prev = self.stage
        plan = self.machine.stage
        st = RanStage(len(self.ran), plan, 0, self.out)
        st.dir.mkdir(parents=True, exist_ok=True)
        self.proxy.rotate(st.dir / results_io.REQUESTS)
        st.start_ns = self.proxy.set_mode(plan.mode, plan.share, plan.mirror)
        prev.end_ns = st.start_ns
        self.machine.started_s = self.t(st.start_ns)
        self.ran.append(st)
        print(f"[{self.t(st.start_ns):7.1f} s] {self.machine.decisions[-1].reason}", flush=True)

    def rollback(self, d) -> None:
        at = self.proxy.set_mode("rollback", 0.0, 0.0)
        d.numbers["applied_t_s"] = self.t(at)
        self.stage.end_ns = at
        self.after = RanStage(len(self.ran), Stage("after_rollback", "rollback", 0, 0, 0, 0, 0), at, self.out)
        self.after.dir.mkdir(parents=True, exist_ok=True)
        self.proxy.rotate(self.after.dir / results_io.REQUESTS)
        if "injected_s" in self.fault:
            self.fault.update(rollback_decided_s=d.t_s, rollback_applied_s=self.t(at),
                              fault_to_rollback_s=self.t(at) - self.fault["injected_s"])
        print(f"[{self.t(at):7.1f} s] ROLLBACK ({d.stage}): {d.reason[:800]}", flush=True)

    def finish_stage(self, promoted: bool) -> None:
        plan = self.stage.plan
        at = self.proxy.set_mode("canary", 1.0, 0.0) if promoted else perf_ns()
        self.stage.end_ns = at
        self.after = RanStage(len(self.ran), Stage("after_promotion", "canary", 1.0, 0, 0, 0, 0), at, self.out)
        self.after.dir.mkdir(parents=True, exist_ok=True)
        self.proxy.rotate(self.after.dir / results_io.REQUESTS)
        print(f"[{self.t(at):7.1f} s] PROMOTED after stage {plan.name}: every caller on the candidate", flush=True)

    def tick(self, t: float, status: dict, n_rows: int) -> None:
        tl = self.timeline
        since = perf_ns() - int(float(self.cfg.protocol.guard.window_s) * 1e9)
        tick_ns = int(float(self.cfg.protocol.guard.interval_s) * 1e9)
        mode, share = (self.machine.stage.mode, self.machine.stage.share)
        if self.machine.state == "rolled_back":
            mode, share = "rollback", 0.0
        elif self.machine.state == "promoted":
            mode, share = "canary", 1.0
        tl["t_s"].append(round(t, 3))
        tl["stage"].append(self.machine.stage.name if self.machine.state == "running" else self.machine.state)
        tl["mode"].append(mode)
        tl["share"].append(share)
        now = perf_ns()
        for side in SIDES:
            rows = measured(r for r in self.window[side] if (r.done_ns or 0) >= since)
            recent = [r for r in rows if (r.done_ns or 0) >= now - tick_ns]
            s = tl[side]
            s["requests"].append(len(recent))
            s["served"].append(sum(not r.shadow for r in recent))
            s["in_flight"].append(int((status.get(side) or [0])[0]))
            n = len(rows)
            ttft = np.array([r.ttft_s for r in rows if r.ttft_s is not None], dtype=np.float64)
            tpot = np.array([r.tpot_s for r in rows if r.tpot_s is not None], dtype=np.float64)
            s["slo_attainment"].append(sum(bool(r.slo_ok) for r in rows) / n if n else None)
            s["error_rate"].append(sum(r.status != "ok" for r in rows) / n if n else None)
            s["p50_ttft_ms"].append(percentile(ttft, 50) * 1e3 if ttft.size else None)
            s["p99_ttft_ms"].append(percentile(ttft, 99) * 1e3 if ttft.size else None)
            s["p50_tpot_ms"].append(percentile(tpot, 50) * 1e3 if tpot.size else None)
