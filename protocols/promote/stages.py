"""protocol=promote: the stage loop: the proxy's rows drained, the guards, the gates, the stages
advanced, rolled back or promoted, and the timeline."""

from __future__ import annotations

import time
from collections import deque

import numpy as np

from harness import results_io
from harness.proxy.routing import CANDIDATE, INCUMBENT
from metrics.percentiles import percentile
from metrics.promotion_gate import (
    SideSample,
    guard_trips,
)
from protocols.promote.faults import Faults
from protocols.promote.gate import StageGate, measured
from protocols.promote.mlflow_log import log_gate
from protocols.promote.plan import Stage
from protocols.promote.state import SIDES, PromotionState, RanStage, perf_ns
from protocols.promote.traffic import Traffic


class StageLoop:
    """The promotion's loop over its stages: every tick the proxy's rows taken (the callers' record, each
    stage's rows, the guards' window), the fault (``faults``), the guards, the stage's gate (``gate``)
    and the decision acted on, a point of the timeline; until ``protocol.after_s`` after the final
    decision, or the proxy or the ``traffic`` ended."""

    def __init__(self, state: PromotionState, gate: StageGate, faults: Faults, traffic: Traffic):
        self.state = state
        self.gate = gate
        self.faults = faults
        self.traffic = traffic
        self.window: dict[str, deque] = {s: deque() for s in SIDES}  # the guards' recent rows per side

    def stage_of(self, arrive_ns: int) -> RanStage | None:
        """The stage a request that arrived at ``arrive_ns`` belongs to (None: between stages, or after)."""
        for st in reversed(self.state.ran):
            if arrive_ns >= st.start_ns:
                return st if st.end_ns is None or arrive_ns < st.end_ns else None
        return None

    # ------------------------------------------------------------------------------------ the loop
    def loop(self) -> None:
        ps = self.state
        p = ps.cfg.protocol
        tick = float(p.guard.interval_s)
        final_at: float | None = None
        next_tick = perf_ns()
        while True:
            next_tick += int(tick * 1e9)
            time.sleep(max(next_tick - perf_ns(), 0) / 1e9)
            rows, status, gone = ps.proxy.drain()
            if rows and not ps.rows_total:
                # the first stage starts with the first request (a load generator takes a while to start)
                first = min(r.arrive_ns for r in rows)
                ps.ran[0].start_ns = first
                ps.machine.started_s = ps.t(first)
                ps.machine.decisions[0].t_s = ps.t(first)
            for r in rows:
                self.add_row(r)
            now = perf_ns()
            t = ps.t(now)
            self.faults.maybe_fault(t)
            if not ps.machine.done:
                self.check(t, status or {})
            self.tick(t, status or {}, len(rows))
            if ps.machine.done and final_at is None:
                final_at = t
            if final_at is not None and t - final_at >= float(p.after_s):
                return
            if gone:
                if not ps.machine.done:
                    ps.machine.on_end(t, "the proxy process ended")
                return
            ended = self.traffic.ended()
            if ended is not None and final_at is None:
                rows, _, _ = ps.proxy.drain()
                for r in rows:
                    self.add_row(r)
                ps.machine.on_end(t, f"the traffic ended (exit {ended}) before a final decision; "
                                     f"see {ps.out / 'traffic' / 'traffic.log'}")
                print(f"[{t:7.1f} s] {ps.machine.decisions[-1].reason}", flush=True)
                return

    def add_row(self, r) -> None:
        ps = self.state
        ps.rows_total += 1
        if not r.shadow:  # what the caller got: ok once any of its rows is; cancelled ones (the caller left,
            # the proxy stopped, a rollback moved it to the incumbent) are not failures
            was = ps.callers.get(r.request_id)
            now_ = "ok" if r.status == "ok" else ("cancelled" if r.status == "cancelled" else "failed")
            ps.callers[r.request_id] = "ok" if "ok" in (was, now_) else (now_ if was in (None, "cancelled") else was)
        self.window[r.side].append(r)
        st = self.stage_of(r.arrive_ns)
        if st is not None:
            st.rows[r.side].append(r)
        elif ps.after is not None and r.arrive_ns >= ps.after.start_ns:
            ps.after.rows[r.side].append(r)
        if r.side == CANDIDATE and r.status != "ok" and "first_candidate_failure_s" not in ps.fault \
                and ps.fault.get("injected_s") is not None:
            ps.fault["first_candidate_failure_s"] = ps.t(r.done_ns or perf_ns())
        if r.compare and ps.pairs is not None:
            got = ps.pairs.add(r.request_id, r.side, r.text, r.status == "ok")
            if got is not None and st is not None:
                st.pairs.append(got)

    def _window(self, side: str, since_ns: int) -> SideSample:
        w = self.window[side]
        while w and (w[0].done_ns or 0) < since_ns:
            w.popleft()
        return SideSample.from_rows(measured(w))

    def check(self, t: float, status: dict) -> None:
        ps = self.state
        g = ps.cfg.protocol.guard
        since = max(perf_ns() - int(float(g.window_s) * 1e9), ps.stage.start_ns)
        inc, cand = self._window(INCUMBENT, since), self._window(CANDIDATE, since)
        trips = guard_trips(inc, cand, min_requests=int(g.min_requests),
                            max_error_rate_increase=float(g.max_error_rate_increase),
                            max_attainment_drop=float(g.max_attainment_drop), max_ttft_ratio=float(g.max_ttft_ratio),
                            stall_s=float(g.stall_s), ttft_floor_ms=float(g.ttft_floor_ms),
                            min_latency_requests=int(g.min_latency_requests),
                            candidate_oldest_wait_s=float((status.get(CANDIDATE) or [0, 0.0])[1]))
        if trips:
            d = ps.machine.on_guard(t, trips)
            self.rollback(d)
            return
        st = ps.stage
        n_cand = len(st.rows[CANDIDATE])
        if ps.machine.gate_due(t, n_cand):
            gate = self.gate.gate(st, t)
            before = ps.machine.i
            d = ps.machine.on_gate(t, gate["outcome"], gate["reasons"], {"gate": len(st.gates) - 1})
            print(f"[{t:7.1f} s] {st.plan.name}: gate look {gate['look']} ({gate['confidence']:.4g}) -> "
                  f"{d.action if d.action != 'start' else 'advance'}: {'; '.join(gate['reasons'])[:600]}", flush=True)
            log_gate(ps.mlflow, self.gate.looks, st.index, st.plan.name, gate)
            if d.action == "rollback":
                self.rollback(d)
            elif ps.machine.state == "promoted":
                self.finish_stage(promoted=True)
            elif ps.machine.i != before:
                self.next_stage()

    def next_stage(self) -> None:
        ps = self.state
        prev = ps.stage
        plan = ps.machine.stage
        st = RanStage(len(ps.ran), plan, 0, ps.out)
        st.dir.mkdir(parents=True, exist_ok=True)
        ps.proxy.rotate(st.dir / results_io.REQUESTS)
        st.start_ns = ps.proxy.set_mode(plan.mode, plan.share, plan.mirror)
        prev.end_ns = st.start_ns
        ps.machine.started_s = ps.t(st.start_ns)
        ps.ran.append(st)
        print(f"[{ps.t(st.start_ns):7.1f} s] {ps.machine.decisions[-1].reason}", flush=True)

    def rollback(self, d) -> None:
        ps = self.state
        at = ps.proxy.set_mode("rollback", 0.0, 0.0)
        d.numbers["applied_t_s"] = ps.t(at)
        ps.stage.end_ns = at
        ps.after = RanStage(len(ps.ran), Stage("after_rollback", "rollback", 0, 0, 0, 0, 0), at, ps.out)
        ps.after.dir.mkdir(parents=True, exist_ok=True)
        ps.proxy.rotate(ps.after.dir / results_io.REQUESTS)
        if "injected_s" in ps.fault:
            ps.fault.update(rollback_decided_s=d.t_s, rollback_applied_s=ps.t(at),
                            fault_to_rollback_s=ps.t(at) - ps.fault["injected_s"])
        print(f"[{ps.t(at):7.1f} s] ROLLBACK ({d.stage}): {d.reason[:800]}", flush=True)

    def finish_stage(self, promoted: bool) -> None:
        ps = self.state
        plan = ps.stage.plan
        at = ps.proxy.set_mode("canary", 1.0, 0.0) if promoted else perf_ns()
        ps.stage.end_ns = at
        ps.after = RanStage(len(ps.ran), Stage("after_promotion", "canary", 1.0, 0, 0, 0, 0), at, ps.out)
        ps.after.dir.mkdir(parents=True, exist_ok=True)
        ps.proxy.rotate(ps.after.dir / results_io.REQUESTS)
        print(f"[{ps.t(at):7.1f} s] PROMOTED after stage {plan.name}: every caller on the candidate", flush=True)

    def tick(self, t: float, status: dict, n_rows: int) -> None:
        ps = self.state
        tl = ps.timeline
        since = perf_ns() - int(float(ps.cfg.protocol.guard.window_s) * 1e9)
        tick_ns = int(float(ps.cfg.protocol.guard.interval_s) * 1e9)
        mode, share = (ps.machine.stage.mode, ps.machine.stage.share)
        if ps.machine.state == "rolled_back":
            mode, share = "rollback", 0.0
        elif ps.machine.state == "promoted":
            mode, share = "canary", 1.0
        tl["t_s"].append(round(t, 3))
        tl["stage"].append(ps.machine.stage.name if ps.machine.state == "running" else ps.machine.state)
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
