"""``protocol=promote`` (``tokenfactory promote``): step 7 of the seed's protocol, run.

One process drives it (``Promotion.run``):

1. the rollback configuration is written (``rollback.json``: the incumbent, and the command
   that serves everything from it) before anything else starts;
2. the two endpoints: URLs (``proxy.incumbent``, ``proxy.candidate``), or engines launched here
   from override lists (``protocol.incumbent``, ``protocol.candidate``), so a rehearsal runs on
   one machine;
3. the proxy, in a child process (``harness.proxy.process``), in the first stage's mode;
4. traffic: tokenfactory's own load generator replaying the configured workload and load
   through the proxy (``tokenfactory run engine=openai engine.base_url=<proxy>`` in a
   subprocess, the command's own workload/load/SLO/client overrides passed on), or real
   callers (``protocol.traffic=live``);
5. every ``protocol.guard.interval_s``: the rows the proxy finished, the guards (a trip rolls
   back at once), the stage's gate when it is due (``protocols.promote.plan.StageMachine``,
   ``metrics.promotion_gate``), a point of the timeline; a rehearsal's fault
   (``protocol.fault``) is injected into a launched candidate at its time;
6. after the final decision, ``protocol.after_s`` more of the timeline, then everything is
   stopped and the record written: ``promote.json`` (stages, every gate with its numbers,
   decisions, the fault and the time to roll back, the timeline), ``experiment.json`` (step 7
   ran), ``stages/NN_<name>/requests.parquet`` (both sides' rows, the requests.parquet
   contract with ``side`` and ``shadow``), and MLflow (a parent run: the gates' numbers per
   look, each decision, the record as artifacts).

The steps, an object each in a module of its own, composed by ``Promotion`` and sharing one
``state.PromotionState`` (the checked settings; the endpoints, the proxy, the stages as they ran,
the callers, the fault and the timeline the run adds, and the clock): ``endpoints.Endpoints`` (2,
3), ``traffic.Traffic`` (4), ``stages.StageLoop`` (5: the loop, guards, stage changes, rollback,
the timeline), ``gate.StageGate`` (a stage's gate), ``faults.Faults`` (the rehearsal's fault),
``record.PromotionRecord`` (rollback.json, promote.json, experiment.json's content); with
``mlflow_log`` as functions.  Here: the checks of the command, the order of the steps and their
cleanup; the parent run, the record's status on finish, interrupt and failure, and the answer
printed last are the run lifecycle's (``harness.lifecycle``: ``Promotion`` is its ``RunSteps``; a
promotion that stopped is finished too, its record written and its parent run ended FAILED).
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from conf.schema import ConfigError, Proxy, typed, validate
from harness import results_io
from harness.errors import UserError
from harness.lifecycle import Ending, Lifecycle, ParentRun, RunRecord, run_lifecycle
from harness.mlflow_log import MlflowLogger
from harness.proxy.routing import CANDIDATE
from harness.proxy.runtime import check_placement
from metrics.promotion_gate import metric_kind
from protocols.promote.endpoints import Endpoints
from protocols.promote.faults import Faults
from protocols.promote.gate import StageGate
from protocols.promote.mlflow_log import log_decisions
from protocols.promote.plan import StageMachine, plan_stages
from protocols.promote.record import PromotionRecord, describe, finish_metrics
from protocols.promote.stages import StageLoop
from protocols.promote.state import SIDES, PromotionState
from protocols.promote.traffic import Traffic


class Promotion:
    """One promotion, its steps run in order: the endpoints and the proxy (``Endpoints``), the traffic
    (``Traffic``), the stage loop (``StageLoop``, with the gate ``StageGate`` and the fault ``Faults``),
    and the record (``PromotionRecord``); they share the promotion's ``PromotionState``.  Here: the
    command's checks, and the lifecycle's steps (``run_steps`` with their cleanup, ``record_as``, ``ending``)."""

    def __init__(self, cfg: DictConfig, overrides: list[str]):
        overrides = list(overrides)
        try:
            validate(cfg)
            stages = plan_stages(cfg.protocol)
            for name in cfg.protocol.gate.margins:
                metric_kind(name)
            check_placement(typed(cfg.proxy, Proxy))  # before any engine starts
        except (ConfigError, ValueError) as e:
            raise UserError(str(e)) from None
        p = cfg.protocol
        pcfg = OmegaConf.to_container(cfg.proxy, resolve=True)
        launch = {s: list(p[s]) if p[s] else None for s in SIDES}
        for s in SIDES:
            if launch[s] is None and not pcfg.get(s):
                raise UserError(f"proxy.{s}: the {s}'s URL is needed (or protocol.{s}=[overrides] to launch it here)")
        if p.fault.kind != "none" and launch[CANDIDATE] is None:
            raise UserError(f"protocol.fault.kind={p.fault.kind} needs a candidate launched here "
                            "(protocol.candidate=[overrides]): a fault is injected into its process")
        if p.fault.stage is not None and p.fault.stage not in {s.name for s in stages}:
            raise UserError(f"protocol.fault.stage={p.fault.stage!r} is not a stage "
                            f"({', '.join(s.name for s in stages)})")
        out = cfg.output_dir or os.path.join("results", str(cfg.experiment), results_io.new_run_id())
        self.safe_config = results_io.redact(OmegaConf.to_container(cfg, resolve=True))
        self.state = PromotionState(
            cfg=cfg, overrides=overrides, out=Path(out), stages=stages, pcfg=pcfg, launch=launch,
            urls={s: pcfg.get(s) for s in SIDES}, machine=StageMachine(stages), fault={"kind": str(p.fault.kind)})
        self.endpoints = Endpoints(self.state)
        self.traffic = Traffic(self.state)
        self.faults = Faults(self.state)
        self.gate = StageGate(self.state)
        self.stage_loop = StageLoop(self.state, self.gate, self.faults, self.traffic)
        self.record = PromotionRecord(self.state)

    # ------------------------------------------------------------------------------------ the steps
    def run(self) -> Path:
        out = self.state.out
        out.mkdir(parents=True, exist_ok=True)
        results_io.write_yaml(out / results_io.CONFIG, self.safe_config)
        self.record.write_rollback()
        # a promotion that stopped (interrupted, failed) is finished too: its decisions so far are its record
        return run_lifecycle(self.state.cfg, out, self, options=Lifecycle(
            parent=ParentRun(tags={"tokenfactory.kind": "promotion"}, strict=True, resume=False),
            resume_hint=None, finish_stopped=True))

    def run_steps(self, parent: MlflowLogger | None) -> None:
        """The endpoints, the proxy, the traffic, then the stages until the final decision and after;
        whatever happens, everything they started is shut down; the gates logged on ``parent``."""
        self.state.mlflow = parent
        try:
            self.endpoints.launch_engines()
            self.endpoints.start_proxy()
            if self.state.cfg.protocol.traffic == "loadgen":
                self.traffic.start()
            self.stage_loop.loop()
        finally:
            self.shutdown()

    def shutdown(self) -> None:
        """Everything the steps started, stopped: the traffic, the proxy (its last rows kept), the engines."""
        ps = self.state
        self.traffic.stop()
        if ps.proxy is not None:
            rows, _, _ = ps.proxy.drain()
            for r in rows:
                self.stage_loop.add_row(r)
            ps.proxy.stop()
            rows, _, _ = ps.proxy.drain()
            for r in rows:
                self.stage_loop.add_row(r)
        for side, eng in ps.engines.items():
            if side == CANDIDATE and ps.fault.get("signal") == "SIGSTOP" and eng.process is not None:
                try:
                    os.killpg(eng.process.pid, signal.SIGCONT)  # a paused engine cannot take SIGTERM
                except ProcessLookupError:
                    pass
            eng.stop()

    def record_as(self, status: str) -> RunRecord:
        """experiment.json; once the steps have stopped, promote.json first, with the outcome (``status``
        where the promotion was interrupted or failed)."""
        if status != "running":
            self.state.status = status
            self.record.write_promotion_record()
        return RunRecord(self.record.experiment_json())

    def ending(self, status: str) -> Ending:
        """The decisions on the parent run and the console; the outcome's metrics and the record's files
        for it, which ends FINISHED where the candidate was promoted or rolled back, else FAILED."""
        rec = self.record.promotion
        log_decisions(self.state.mlflow, rec)
        print(describe(rec), flush=True)
        return Ending(metrics=finish_metrics(rec),
                      artifacts=(results_io.PROMOTION, results_io.ROLLBACK, results_io.EXPERIMENT, results_io.CONFIG),
                      report=self.record.render_report, answer=rec,
                      end="FINISHED" if rec["outcome"] in ("promoted", "rolled_back") else "FAILED")


def run_promotion(cfg: DictConfig, overrides: list[str]) -> Path:
    return Promotion(cfg, overrides).run()
