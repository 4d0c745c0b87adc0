"""Experiment orchestration: plan -> engine sessions -> each load point's steps -> record, report.

A protocol's plan is a list of engine sessions (``protocols.compare.SessionPlan``): the
sweep has one, a comparison one per (block, config).  Each session launches its engine
(``harness.engine_session``), runs its load points as the named steps of ``harness.point``
and stops it.  Finished runs (a ``summary.json``) are skipped when the same ``output_dir``
is run again, so an interrupted experiment resumes where it stopped; the record
(``experiment.json``, ``runs.parquet``, and for a comparison ``comparison.json``) is written
from the run folders (``harness.experiment_record``, ``harness.comparison``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from conf.overrides import apply_explicit
from conf.schema import ConfigError, validate
from harness import experiment_record, report, results_io
from harness.engine_session import EngineSession
from harness.errors import UserError
from harness.mlflow_log import MlflowLogger, tracking_uri
from harness.multirun import job_subdir
from loadgen.dispatch import LoadSpec
from loadgen.workloads.traces.replay import check_workload
from metrics.cost import check_profile
from protocols.compare import SessionPlan, describe_plan, named_configs, plan_sessions
from protocols.plan import RunSpec, plan_runs


def compose_config(overrides: list[str]) -> DictConfig:
    """The root config with ``overrides``, composed by Hydra (inside a running Hydra app or not)."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():
        cfg = compose("config", overrides=list(overrides))
    else:
        with initialize_config_module("conf", version_base="1.3"):
            cfg = compose("config", overrides=list(overrides))
    return cfg


def check_config(cfg: DictConfig) -> list[RunSpec]:
    """Everything that can be checked before an engine starts; returns the load points."""
    validate(cfg)
    runs = plan_runs(cfg, repeats=1 if cfg.protocol.name == "compare" else None)
    check_profile(OmegaConf.to_container(cfg.cost, resolve=True))
    check_workload(cfg.workload, cfg.engine.max_model_len)  # a bad trace fails before the engine starts
    for r in runs:
        LoadSpec.from_load(r.load).validate()
    return runs


class Experiment:
    """``explicit``: the override keys the user typed (``conf.overrides``); ``overrides``: the
    overrides themselves (a comparison composes each config on top of them); ``swept_keys``:
    those a Hydra multirun sweeps (each job's folder is named after them)."""

    def __init__(self, cfg: DictConfig, swept_keys: frozenset[str] = frozenset(),
                 explicit: frozenset[str] = frozenset(), overrides: list[str] | None = None):
        self.cfg = cfg
        self.base_overrides = list(overrides or [])
        self.configs: dict[str, DictConfig] = {}   # comparison: name -> its composed config
        try:
            validate(cfg)
            for note in apply_explicit(cfg, explicit):
                print(f"note: {note}", flush=True)
            self.plan: list[RunSpec] = check_config(cfg)
            if cfg.protocol.name == "compare":
                self.sessions = self._compare_sessions()
            else:
                self.sessions = [SessionPlan(config="", block=0, position=0, overrides=[], runs=self.plan)]
        except (ConfigError, ValueError) as e:
            raise UserError(str(e)) from None
        self.safe_config = results_io.redact(OmegaConf.to_container(cfg, resolve=True))
        out = cfg.output_dir or os.path.join("results", str(cfg.experiment), results_io.new_run_id())
        self.out = Path(out) / job_subdir(swept_keys)
        self.mlflow: MlflowLogger | None = None
        self.session: EngineSession | None = None  # the engine config that is up, while it is
        self.convergence: str | None = None         # why a converging comparison stopped adding blocks

    def _compare_sessions(self) -> list[SessionPlan]:
        named = named_configs(self.cfg.protocol)
        baseline = self.cfg.protocol.baseline
        if baseline is not None and baseline not in {c.name for c in named}:
            raise ValueError(f"protocol.baseline={baseline!r} is not one of protocol.configs "
                             f"({', '.join(c.name for c in named)})")
        # The command's own overrides, but its protocol.configs: Hydra keeps overrides without
        # their quotes, and the override strings inside would not parse a second time.
        base = [o for o in self.base_overrides if not o.lstrip("+~").startswith("protocol.configs")]
        for c in named:
            try:
                sub = compose_config(base + c.overrides)
            except Exception as e:  # noqa: BLE001 - Hydra's composition errors, with the config named
                raise ValueError(f"protocol.configs.{c.name}: {e} {e.__cause__ or ''}".strip()) from None
            try:
                runs = check_config(sub)
            except (ConfigError, ValueError) as e:
                raise ValueError(f"protocol.configs.{c.name}: {e}") from None
            if [r.load for r in runs] != [r.load for r in self.plan]:
                raise ValueError(f"protocol.configs.{c.name} changes the load points; every config runs the same ones")
            self.configs[c.name] = sub
        return plan_sessions(named, self.plan, int(self.cfg.protocol.repeats), int(self.cfg.seed))

    # ------------------------------------------------------------------------------------
    def session_dir(self, s: SessionPlan) -> Path:
        return self.out / s.subdir if s.config else self.out

    def run_dir(self, s: SessionPlan, spec: RunSpec) -> Path:
        d = self.session_dir(s)
        return d / spec.subdir if spec.subdir else d

    def todo(self, s: SessionPlan) -> list[RunSpec]:
        return [r for r in s.runs if not (self.cfg.resume and results_io.run_complete(self.run_dir(s, r)))]

    def describe(self) -> str:
        if self.cfg.protocol.name == "compare":
            return describe_plan(self.sessions, self.base_overrides)
        return f"load points ({len(self.plan)}): " + ", ".join(r.label for r in self.plan)

    def run(self) -> Path:
        total = sum(len(s.runs) for s in self.sessions)
        todo = {id(s): self.todo(s) for s in self.sessions}
        left = sum(len(t) for t in todo.values())
        if self.cfg.protocol.dry_run:
            print(f"plan ({total} runs, {len(self.sessions)} engine launches):\n{self.describe()}")
            print(f"would write to {self.out}" + (f"; {total - left} runs already complete" if left < total else ""))
            return self.out
        self.out.mkdir(parents=True, exist_ok=True)
        if left < total:
            print(f"resuming {self.out}: {total - left} of {total} runs already complete")
        if len(self.sessions) > 1:
            print(f"plan ({total} runs, {len(self.sessions)} engine launches):\n{self.describe()}", flush=True)
        if total > 1:
            results_io.write_yaml(self.out / "config.yaml", self.safe_config)
        experiment_record.write_plan(self, status="running" if left else "complete")
        if not left:
            return self.finish()
        self.start_mlflow()
        status = "FAILED"
        try:
            for s in self.sessions:
                if todo[id(s)]:
                    self.run_session(s, todo[id(s)])
            if self.cfg.protocol.name == "compare" and self.cfg.protocol.target_rel_halfwidth:
                self.converge()
            status = "FINISHED"
        except KeyboardInterrupt:
            status = "KILLED"
            print(f"\nto resume, run the same command with output_dir={self.out}", file=sys.stderr, flush=True)
            raise
        finally:
            if self.mlflow:
                self.mlflow.end_parent(status)
            experiment_record.write_plan(self, status={"FINISHED": "complete", "KILLED": "interrupted"}.get(
                status, "failed"))
        return self.finish()

    def converge(self) -> None:
        """Add blocks until every ``protocol.converge_metrics`` interval (each config, each load
        point) is within ``protocol.target_rel_halfwidth`` of its estimate, or
        ``protocol.max_repeats`` blocks have run; ``experiment.json`` says which stopped it."""
        from harness.experiment_record import run_rows, runs_table
        from metrics.statistics import converged, mean_ci

        p = self.cfg.protocol
        target, most = float(p.target_rel_halfwidth), int(p.max_repeats or p.repeats)
        while True:
            table = runs_table(run_rows(self.out))
            metrics = [m for m in p.converge_metrics if m in table.column_names]
            values: dict[tuple, list[float]] = {}
            for r in table.select(["config", "label", *metrics]).to_pylist():
                for m in metrics:
                    values.setdefault((r["config"], r["label"], m), []).append(
                        float("nan") if r[m] is None else float(r[m]))
            estimates = {" ".join(k): mean_ci(v, float(p.confidence)) for k, v in values.items()}
            done, wide = converged(estimates, target)
            blocks = 1 + max(s.block for s in self.sessions)
            if done:
                self.convergence = f"converged after {blocks} blocks: every interval within +-{target:.1%}"
                return
            if blocks >= most:
                worst = ", ".join(f"{k} +-{w:.1%}" for k, w in sorted(wide, key=lambda x: -x[1])[:3])
                self.convergence = f"stopped at protocol.max_repeats={most} blocks, not converged: {worst}"
                return
            print(f"not converged after {blocks} blocks (widest: {max(w for _, w in wide):.1%} > {target:.1%}): "
                  "one more block", flush=True)
            more = plan_sessions(named_configs(p), self.plan, 1, int(self.cfg.seed), first_block=blocks)
            self.sessions += more
            experiment_record.write_plan(self, status="running")
            for s in more:
                left = self.todo(s)
                if left:
                    self.run_session(s, left)

    def run_session(self, s: SessionPlan, todo: list[RunSpec]) -> None:
        cfg = self.configs.get(s.config, self.cfg)
        if s.config:
            print(f"block {s.block}, config {s.config} ({s.position + 1} of {len(self.configs)} in the block)",
                  flush=True)
        self.session = EngineSession(cfg, self.session_dir(s), self.mlflow, total_points=len(s.runs),
                                     name=s.config or None, block=s.block)
        try:
            self.session.start()
            for i, spec in enumerate(todo):
                self.session.run_point(spec, last=i == len(todo) - 1)
        finally:
            self.session.stop()

    def start_mlflow(self) -> None:
        if not self.cfg.mlflow.enabled:
            return
        self.mlflow = MlflowLogger(tracking_uri(self.cfg.mlflow.tracking_uri), str(self.cfg.experiment))
        marker = self.out / "mlflow_parent.txt"
        prev = marker.read_text().strip() if marker.exists() else None
        pid = self.mlflow.start_parent(self.out.name, self.safe_config,
                                       tags={"output_dir": str(self.out.resolve()),
                                             "tokenfactory.protocol": str(self.cfg.protocol.name)}, run_id=prev)
        results_io.write_atomic(marker, pid + "\n")

    def finish(self) -> Path:
        """The experiment's record from its run folders, then the report."""
        aggregates = experiment_record.write_record(self)
        if self.mlflow and aggregates:
            self.mlflow.log_parent_metrics(aggregates)
        if self.cfg.report.enabled:
            path = report.render(self.out)
            if self.mlflow:
                self.mlflow.log_parent_artifact(path)
            print(f"report: {path}")
        print(f"results: {self.out}")
        return self.out


def run_experiment(cfg: DictConfig, swept_keys: frozenset[str] = frozenset(),
                   explicit: frozenset[str] = frozenset(), overrides: list[str] | None = None) -> Path:
    return Experiment(cfg, swept_keys, explicit, overrides).run()
