"""Experiment orchestration: plan -> engine up -> each load point's steps -> MLflow, report.

``Experiment`` runs the sweep protocol: the plan's load points (``protocols.plan``) against
one engine session (``harness.engine_session``), each point as the named steps of
``harness.point``.  Finished points (a ``summary.json``) are skipped when the same
``output_dir`` is run again, so an interrupted sweep resumes where it stopped.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from conf.overrides import apply_explicit
from conf.schema import ConfigError, validate
from harness import report, results_io
from harness.engine_session import EngineSession
from harness.errors import UserError
from harness.mlflow_log import MlflowLogger, tracking_uri
from harness.multirun import job_subdir
from loadgen.dispatch import LoadSpec
from loadgen.workloads.traces.replay import check_workload
from metrics.cost import check_profile
from protocols.plan import RunSpec, plan_runs


class Experiment:
    """``explicit``: the override keys the user typed (``conf.overrides``); ``swept_keys``: those
    a Hydra multirun sweeps (each job's folder is named after them)."""

    def __init__(self, cfg: DictConfig, swept_keys: frozenset[str] = frozenset(),
                 explicit: frozenset[str] = frozenset()):
        self.cfg = cfg
        try:
            validate(cfg)
            for note in apply_explicit(cfg, explicit):
                print(f"note: {note}", flush=True)
            self.plan: list[RunSpec] = plan_runs(cfg)
            check_profile(OmegaConf.to_container(cfg.cost, resolve=True))
            check_workload(cfg.workload, cfg.engine.max_model_len)  # a bad trace fails before the engine starts
            for r in self.plan:
                LoadSpec.from_load(r.load).validate()
        except (ConfigError, ValueError) as e:
            raise UserError(str(e)) from None
        self.safe_config = results_io.redact(OmegaConf.to_container(cfg, resolve=True))
        out = cfg.output_dir or os.path.join("results", str(cfg.experiment), results_io.new_run_id())
        self.out = Path(out) / job_subdir(swept_keys)
        self.mlflow: MlflowLogger | None = None
        self.session: EngineSession | None = None  # the engine config that is up, while it is

    def run_dir(self, spec: RunSpec) -> Path:
        return self.out / spec.subdir if spec.subdir else self.out

    def run(self) -> Path:
        todo = [r for r in self.plan if not (self.cfg.resume and results_io.run_complete(self.run_dir(r)))]
        done_before = len(self.plan) - len(todo)
        self.out.mkdir(parents=True, exist_ok=True)
        if done_before:
            print(f"resuming {self.out}: {done_before} of {len(self.plan)} load points already complete")
        if len(self.plan) > 1:
            results_io.write_yaml(self.out / "config.yaml", self.safe_config)
        if not todo:
            return self.finish()
        self.start_mlflow()
        self.session = session = EngineSession(self.cfg, self.out, self.mlflow, total_points=len(self.plan))
        status = "FAILED"
        try:
            session.start()
            for i, spec in enumerate(todo):
                session.run_point(spec, last=i == len(todo) - 1)
            status = "FINISHED"
        except KeyboardInterrupt:
            status = "KILLED"
            print(f"\nto resume, run the same command with output_dir={self.out}", file=sys.stderr, flush=True)
            raise
        finally:
            session.stop()
            if self.mlflow:
                self.mlflow.end_parent(status)
        return self.finish()

    def start_mlflow(self) -> None:
        if not self.cfg.mlflow.enabled:
            return
        self.mlflow = MlflowLogger(tracking_uri(self.cfg.mlflow.tracking_uri), str(self.cfg.experiment))
        marker = self.out / "mlflow_parent.txt"
        prev = marker.read_text().strip() if marker.exists() else None
        pid = self.mlflow.start_parent(self.out.name, self.safe_config, tags={"output_dir": str(self.out.resolve())},
                                       run_id=prev)
        results_io.write_atomic(marker, pid + "\n")

    def finish(self) -> Path:
        if self.cfg.report.enabled:
            path = report.render(self.out)
            if self.mlflow:
                self.mlflow.log_parent_artifact(path)
            print(f"report: {path}")
        print(f"results: {self.out}")
        return self.out


def run_experiment(cfg: DictConfig, swept_keys: frozenset[str] = frozenset(),
                   explicit: frozenset[str] = frozenset()) -> Path:
    return Experiment(cfg, swept_keys, explicit).run()
