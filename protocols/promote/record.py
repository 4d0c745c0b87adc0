"""protocol=promote: the record: rollback.json, promote.json, and from them experiment.json, the console's
summary and the parent run's metrics (as the run lifecycle asks: ``protocols.promote.run.Promotion.record_as``,
``ending``)."""

from __future__ import annotations

import time

from omegaconf import OmegaConf

from harness import results_io
from harness.experiment_record import experiment_record, run_rows, seven_steps
from harness.proxy.routing import CANDIDATE, INCUMBENT
from metrics.answer import promotion_answer
from protocols.designs import design_of
from protocols.promote.state import SIDES, PromotionState


class PromotionRecord:
    """The promotion's record: rollback.json, promote.json and what experiment.json says of them (once
    promote.json is written: ``promotion`` and ``promotion_how`` keep it)."""

    def __init__(self, state: PromotionState):
        self.state = state
        self.promotion: dict | None = None
        self.promotion_how: str | None = None

    def write_rollback(self) -> None:
        """Before the first stage: how to serve everything from the incumbent again."""
        ps = self.state
        inc = ps.urls[INCUMBENT]
        cmd = ["tokenfactory", "proxy", f"proxy.incumbent={inc or '<the incumbent launched from protocol.incumbent>'}",
               "proxy.mode=rollback", f"proxy.host={ps.pcfg['host']}", f"proxy.port={ps.pcfg['port']}"]
        results_io.write_json(ps.out / results_io.ROLLBACK, {
            "proxy_mode": "rollback", "incumbent_url": inc, "incumbent_launch_overrides": ps.launch[INCUMBENT],
            "incumbent_model": ps.pcfg.get("incumbent_model"), "command": cmd,
            "written_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "note": "everything to the incumbent, nothing copied to the candidate; a promotion's guards apply "
                    "this mode to its running proxy at once"})

    def promotion_record(self) -> dict:
        ps = self.state
        state = ps.status if ps.status in ("interrupted", "failed") else ps.machine.state  # stopped: says so
        stages = []
        for st in ps.ran:
            d = {**{k: getattr(st.plan, k) for k in ("name", "mode", "share", "mirror", "min_requests",
                                                      "min_duration_s", "max_duration_s")},
                 "dir": str(st.dir.relative_to(ps.out)), "started_s": ps.t(st.start_ns),
                 "ended_s": ps.t(st.end_ns) if st.end_ns else None,
                 "requests": {s: len(st.rows[s]) for s in SIDES},
                 "served": {s: sum(not r.shadow for r in st.rows[s]) for s in SIDES},
                 "compared_pairs": len(st.pairs), "gates": st.gates}
            stages.append(d)
        failed_callers = sum(v == "failed" for v in ps.callers.values())
        return {
            "outcome": state, "incumbent": {"url": ps.urls[INCUMBENT], "launch": ps.launch[INCUMBENT]},
            "candidate": {"url": ps.urls[CANDIDATE], "launch": ps.launch[CANDIDATE]},
            "proxy": {k: ps.pcfg.get(k) for k in ("sticky", "compare", "incumbent_model", "candidate_model")},
            "traffic": ps.cfg.protocol.traffic, "stages_planned": [s.name for s in ps.stages],
            "stages": stages, "decisions": [d.to_dict() for d in ps.machine.decisions],
            "fault": ps.fault, "failovers": ps.proxy.failovers if ps.proxy else {},
            "callers": {"requests": len(ps.callers), "failed": failed_callers,
                        "cancelled": sum(v == "cancelled" for v in ps.callers.values())},
            "rows": ps.rows_total, "agreement_unit": ps.pairs.unit if ps.pairs else None,
            "gate": OmegaConf.to_container(ps.cfg.protocol.gate, resolve=True),
            "guard": OmegaConf.to_container(ps.cfg.protocol.guard, resolve=True),
            "rollback_config": results_io.ROLLBACK, "timeline": ps.timeline,
        }

    def write_promotion_record(self) -> dict:
        """``promote.json``: the promotion as it ran (with its answer); also kept for experiment.json."""
        ps = self.state
        rec = self.promotion_record()
        self.promotion = rec
        last = ps.machine.decisions[-1] if ps.machine.decisions else None
        self.promotion_how = (f"{rec['outcome']}: {len(rec['stages'])} of {len(ps.stages)} stage(s) run, "
                              f"{sum(len(s['gates']) for s in rec['stages'])} gate(s); last decision "
                              f"{last.action if last else 'none'} ({last.stage if last else ''}) (promote.json)")
        rec["answer"] = promotion_answer(rec).to_dict()
        results_io.write_json(ps.out / results_io.PROMOTION, rec)
        return rec

    def render_report(self) -> None:
        """The promotion's timeline figure (printed, not logged: None)."""
        try:
            from harness.report import figures_promotion
        except ImportError:  # a report package without the figure
            return
        try:
            print(f"promotion timeline: {figures_promotion.write(self.state.out)}", flush=True)
        except (OSError, ValueError, ImportError) as e:
            print(f"note: promotion timeline not drawn: {e}", flush=True)

    def experiment_json(self) -> dict:
        """experiment.json of the promotion (step 7 ran, once promote.json is written)."""
        ps = self.state
        runs = run_rows(ps.out) if ps.out.exists() else []
        status = ("complete" if self.promotion and self.promotion["outcome"] in ("promoted", "rolled_back")
                  else ("running" if self.promotion is None else str(self.promotion["outcome"])))
        steps = seven_steps(ps.cfg, design_of(ps.cfg), bool(runs), points=1, configs=len(SIDES),
                            promotion_how=self.promotion_how)
        rec = experiment_record(
            ps.cfg, status=status, out=ps.out, overrides=ps.overrides,
            configs={s: ps.launch[s] if ps.launch[s] else [ps.urls[s]] for s in SIDES}, baseline=INCUMBENT,
            steps=steps, stages=[s.__dict__ for s in ps.stages],
            promotion=None if self.promotion is None else {
                k: self.promotion[k] for k in ("outcome", "decisions", "fault", "callers", "failovers")})
        if self.promotion is not None and self.promotion.get("answer"):
            rec["answer"] = self.promotion["answer"]
        return rec


def describe(rec: dict) -> str:
    """The promotion's outcome and decisions on the console."""
    lines = [f"promotion {rec['outcome'].upper()}: callers {rec['callers']['requests']} requests, "
             f"{rec['callers']['failed']} failed; failovers {rec['failovers']}"]
    for d in rec["decisions"]:
        lines.append(f"  {d['t_s']:7.1f} s  {d['stage']:<14} {d['action']:<8} {d['reason'][:300]}")
    if rec["fault"].get("fault_to_rollback_s") is not None:
        lines.append(f"  fault ({rec['fault']['kind']}) at {rec['fault']['injected_s']:.1f} s -> rollback applied "
                     f"at {rec['fault']['rollback_applied_s']:.1f} s: {rec['fault']['fault_to_rollback_s']:.2f} s")
    return "\n".join(lines)


def finish_metrics(rec: dict) -> dict:
    """The promotion's outcome as metrics of its parent run."""
    fault = rec["fault"]
    return {"promoted": float(rec["outcome"] == "promoted"), "rolled_back": float(rec["outcome"] == "rolled_back"),
            "stages_run": float(len(rec["stages"])), "callers_failed": float(rec["callers"]["failed"]),
            **({"fault_to_rollback_s": fault["fault_to_rollback_s"]} if "fault_to_rollback_s" in fault else {})}
