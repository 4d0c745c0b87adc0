"""The summary's engine-fault and scenario keys (``add_fault_keys``, part of ``summarise``)."""

from __future__ import annotations

from harness.point.point_run import PointRun
from harness.point.session import PointSession
from metrics.engine_counters import PHASES
from metrics.replicas import forget_engine_values

_COUNTED = ("prefix_cache_", "spec_decode_", "preemptions", "prompt_tokens", "generation_tokens", "mean_",
            *(f"{phase}_time_" for phase in PHASES))


def add_fault_keys(s: PointSession, p: PointRun) -> None:
    """Engine faults and scenarios in ``summary.json`` (part of ``summarise``; in place, as a
    restart takes the engine counters' keys out): whether the point failed and why, the
    failure-recovery figures of a ``scenario.kill_at_s`` point (``metrics.recovery``), and the
    cold-start figures of a session's first point (``metrics.cold_start``)."""
    m, f = p.summary, p.failure
    m["point_failed"] = f is not None
    m["engine_faults"] = len(p.faults)
    lost = [x for x in p.faults if x.extra.get("replica")]
    if lost:  # a deployment's processes that failed (the rest served on, or the point failed)
        m["replica_faults"] = [{"replica": x.extra["replica"], "kind": x.kind, "message": x.message,
                                "detected_after_load_start_s": (x.detected_ns - p.stats["start_ns"]) / 1e9,
                                "injected": bool(x.extra.get("injected"))} for x in lost]
        m["replicas_lost"] = sorted({x.extra["replica"] for x in lost})
    m["requests_failed_by_fault"] = fault_failed(p.requests) if p.faults else 0
    if f is not None:
        planned = p.load.requests_to_send
        m.update({"failure_reason": f.message, "engine_fault_kind": f.kind, "engine_fault_exit_code": f.exit_code,
                  "engine_fault_detected_s": (f.detected_ns - f.last_ok_ns) / 1e9,
                  "requests_not_sent": planned - int(p.stats.get("sent") or 0) if planned is not None else None})
    if any(x.restarted for x in p.faults):  # the engine's counters started again from zero
        for k in [k for k in m if k.startswith("engine_") and k[7:].startswith(_COUNTED)]:
            del m[k]
        forget_engine_values(m)  # each replica's engine values likewise, and the pool shares they gave
        m["engine_metrics_complete"] = False
    inj = s.faults.injector
    if inj is not None:
        m.update(recovery_keys(s, p, inj))
    if s.cold_start and s.points_run == 0:
        from metrics.cold_start import cold_start_figures

        m["scenario_cold_start"] = True
        m.update(cold_start_figures(p.requests, s.engine_launch[0], s.engine_launch[1], p.stats["start_ns"],
                                    p.inputs.scenario.first_window_s))
    if s.restarted_before_s is not None:  # engine.on_failure=restart: this window holds the restart
        m["engine_restart_before_s"] = s.restarted_before_s
        s.restarted_before_s = None



def fault_failed(requests) -> int:
    """Rows that did not end ``ok`` and whose ``error`` names an engine or replica fault."""
    from harness.engine_faults import PREFIX

    return sum(1 for st, err in zip(requests.column("status").to_pylist(), requests.column("error").to_pylist())
               if st != "ok" and (err or "").startswith(PREFIX))



def recovery_keys(s: PointSession, p: PointRun, inj) -> dict:
    """``scenario.kill_at_s``'s figures (``metrics.recovery``) and the kill's own times."""
    from metrics.recovery import outage_cost, recovery_figures

    out = {"scenario_kill_at_s": inj.at_s, "kill_signal": inj.sig_name}
    if inj.kill_ns is None:
        out["kill_skipped"] = "the load ended before scenario.kill_at_s"
        return out
    fault = next((x for x in p.faults if x.extra.get("injected")), None)
    back = fault.restart_healthy_ns if fault is not None and fault.restarted else None  # serving again
    out.update({"kill_at_s": (inj.kill_ns - inj.load_start_ns) / 1e9, "kill_ns": inj.kill_ns,
                "engine_restarted": back is not None,
                "engine_fault_detected_s": (fault.detected_ns - inj.kill_ns) / 1e9 if fault is not None else None,
                # restart begun -> healthy again (the harness's warm-up request after it is not counted)
                "engine_restart_s": ((back - fault.restart_started_ns) / 1e9 if back is not None else None)})
    out.update(recovery_figures(p.requests, s.slo, inj.kill_ns, back, p.inputs.scenario.recovery_window,
                                p.inputs.min_attainment))
    out.update(outage_cost(p.summary, inj.kill_ns, back))
    if back is not None and not (p.stats["end_ns"] > back):
        out["recovery_note"] = "the load ended before the engine was back: raise load.duration_s or load.num_requests"
    return out

