"""Experiment orchestration: plan -> engine sessions -> each load point's steps -> record, report.

A protocol's plan is a list of engine sessions (``protocols.blocks.SessionPlan``): the
sweep has one, a comparison one per (block, config).  Each session launches its engine
(``harness.engine_session``), runs its load points as the named steps of ``harness.point``
and stops it; between runs, a probe may place the load points and a search find the highest
load under the SLO (``protocols.sweep.run``).  Finished runs (a ``summary.json``) are skipped
when the same ``output_dir`` is run again, so an interrupted experiment resumes where it
stopped; the record
(``experiment.json``, ``runs.parquet``, and the protocol's own: a comparison's
``comparison.json`` ...) is written from the run folders (``harness.experiment_record``, and
the protocol's ``record`` module, which the registry hands the experiment).  The parent run,
the status on finish, interrupt and failure and the ending are the run lifecycle's
(``harness.lifecycle``): ``Experiment`` is its ``RunSteps``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from conf.compose import compose_config
from conf.load_point import RunSpec
from conf.overrides import apply_explicit
from conf.schema import ConfigError, validate
from engines.dynamo import emulation_of
from harness import experiment_record, quality_gate, results_io
from harness.engine_session import EngineSession
from harness.errors import UserError
from harness.experiment_record import ProtocolRecord, run_rows
from harness.lifecycle import Ending, RunRecord, run_lifecycle
from harness.mlflow_log import MlflowLogger
from harness.multirun import default_output_dir, job_subdir
from harness.otlp_export import OtlpExporter
from harness.quality_gate import QUALITY_FILE, gate_enabled
from harness.report.build import render
from loadgen.dispatch import LoadSpec
from loadgen.workloads.traces.replay import check_workload
from metrics.cost import check_profile
from metrics.emulation import kind_of, refusal
from protocols.blocks import SessionPlan, describe_plan, plan_sessions
from protocols.designs import design_of
from protocols.sweep.load_points import plan_runs
from protocols.sweep.run import probe_load_points, search_slo


def check_config(cfg: DictConfig) -> list[RunSpec]:
    """Everything that can be checked before an engine starts; returns the load points."""
    validate(cfg)
    runs = plan_runs(cfg, repeats=1 if design_of(cfg).in_blocks else None)  # in blocks, a block is a repeat
    check_profile(OmegaConf.to_container(cfg.cost, resolve=True))
    check_workload(cfg.workload, cfg.engine.max_model_len)  # a bad trace fails before the engine starts
    if cfg.quality.prompts_path:
        quality_gate.prompt_set(cfg.quality, None)  # a bad prompt file fails here too
    seen = set()
    for r in runs:  # each distinct point once: its repeats share its load
        key = json.dumps(r.load, sort_keys=True, default=str)
        if key not in seen:
            seen.add(key)
            LoadSpec.from_load(r.load).validate()
    return runs


class Experiment:
    """``explicit``: the override keys the user typed (``conf.overrides``); ``overrides``: the
    overrides themselves (a comparison composes each config on top of them); ``swept_keys``:
    those a Hydra multirun sweeps (each job's folder is named after them); ``records``: the
    protocol's own records, written after experiment.json (its protocol's, in
    ``protocols.registry``)."""

    def __init__(self, cfg: DictConfig, swept_keys: frozenset[str] = frozenset(),
                 explicit: frozenset[str] = frozenset(), overrides: list[str] | None = None, *,
                 records: tuple[ProtocolRecord, ...]):
        self.cfg = cfg
        self.records = records
        self.base_overrides = list(overrides or [])
        self.configs: dict[str, DictConfig] = {}   # comparison: name -> its composed config
        try:
            validate(cfg)
            self.design = design_of(cfg)
            for note in apply_explicit(cfg, explicit):
                print(f"note: {note}", flush=True)
            self.plan: list[RunSpec] = check_config(cfg)
            if self.multi:
                self.sessions = self._compare_sessions()
            else:
                self.sessions = [SessionPlan(config="", block=0, position=0, overrides=[], runs=self.plan)]
        except (ConfigError, ValueError) as e:
            raise UserError(str(e)) from None
        self.safe_config = results_io.redact(OmegaConf.to_container(cfg, resolve=True))
        out = (cfg.output_dir or default_output_dir(cfg)  # a multirun's jobs share one root, wherever they run
               or os.path.join("results", str(cfg.experiment), results_io.new_run_id()))
        self.out = Path(out) / job_subdir(swept_keys)
        self.mlflow: MlflowLogger | None = None
        self.otlp: OtlpExporter | None = None      # export.otlp_endpoint: each run's summary as OTLP metrics
        self.session: EngineSession | None = None  # the engine config that is up, while it is
        self.convergence: str | None = None         # why a converging comparison stopped adding blocks

    @property
    def multi(self) -> bool:
        """Several configs in blocks: a comparison, or an ablation's arms."""
        return self.design.in_blocks

    @property
    def baseline(self) -> str:
        return self.design.baseline(self.cfg.protocol, list(self.configs)) if self.multi else ""

    def named_configs(self) -> list:
        return self.design.configs(self.cfg.protocol)

    def _compare_sessions(self) -> list[SessionPlan]:
        named = self.named_configs()
        baseline = self.design.baseline(self.cfg.protocol, [c.name for c in named])
        if baseline not in {c.name for c in named}:
            raise ValueError(f"protocol.baseline={baseline!r} is not one of protocol.configs "
                             f"({', '.join(c.name for c in named)})")
        # The command's own overrides, but its protocol.configs: Hydra keeps overrides without
        # their quotes, and the override strings inside would not parse a second time.
        base = [o for o in self.base_overrides if not o.lstrip("+~").startswith(
            ("protocol.configs", "protocol.baseline", "protocol.optimisations", "protocol.pairs"))]
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
        kinds = {n: kind_of(**{k: v for k, v in emulation_of(sub.engine).items() if k in ("emulated", "timing_source")})
                 for n, sub in self.configs.items()}
        refused = None if self.cfg.protocol.get("allow_emulated") else refusal(kinds, "protocol.allow_emulated=true")
        if refused:  # before any engine starts: an emulated config is never a measured one's rival unasked
            raise ValueError(refused)
        return plan_sessions(named, self.plan, int(self.cfg.protocol.repeats), int(self.cfg.seed))

    # ------------------------------------------------------------------------------------
    def session_dir(self, s: SessionPlan) -> Path:
        return self.out / s.subdir if s.config else self.out

    def run_dir(self, s: SessionPlan, spec: RunSpec) -> Path:
        d = self.session_dir(s)
        return d / spec.subdir if spec.subdir else d

    def todo(self, s: SessionPlan) -> list[RunSpec]:
        return [r for r in s.runs if not (self.cfg.resume and results_io.run_complete(self.run_dir(s, r))
                                          and not results_io.run_failed(self.run_dir(s, r)))]

    def needs_search(self, s: SessionPlan) -> bool:
        return self.cfg.protocol.search == "slo" and not (self.session_dir(s) / "search.json").exists()

    def describe(self) -> str:
        if self.multi:
            return describe_plan(self.sessions, self.base_overrides)
        points = experiment_record.load_points(self.plan)
        repeats = {p["repeats"] for p in points}
        return (f"load points ({len(points)}): " + ", ".join(p["label"] for p in points)
                + (f"; {repeats.pop()} repeats of each" if repeats != {1} and len(repeats) == 1 else ""))

    def run(self) -> Path:
        if self.cfg.protocol.probe and not self.cfg.protocol.dry_run:
            probe_load_points(self)
        total = sum(len(s.runs) for s in self.sessions)
        todo = {id(s): self.todo(s) for s in self.sessions}
        left = sum(len(t) for t in todo.values()) + sum(self.needs_search(s) for s in self.sessions)
        if self.cfg.protocol.dry_run:
            print(f"plan ({total} runs, {len(self.sessions)} engine launches):\n{self.describe()}")
            print(f"would write to {self.out}" + (f"; {total - left} runs already complete" if left < total else ""))
            return self.out
        self.otlp = OtlpExporter.from_config(self.cfg)  # before any folder: a missing package stops it here
        self.out.mkdir(parents=True, exist_ok=True)
        if left < total:
            print(f"resuming {self.out}: {total - left} of {total} runs already complete")
        if len(self.sessions) > 1:
            print(f"plan ({total} runs, {len(self.sessions)} engine launches):\n{self.describe()}", flush=True)
        if total > 1:
            results_io.write_yaml(self.out / results_io.CONFIG, self.safe_config)
        return run_lifecycle(self.cfg, self.out, self, pending=bool(left))

    # ------------------------------------------------------------------ the lifecycle's steps
    def run_steps(self, parent: MlflowLogger | None) -> None:
        """Each engine session with runs (or a search) left, then more blocks until converged."""
        self.mlflow = parent
        try:
            for s in self.sessions:
                todo = self.todo(s)
                if todo or self.needs_search(s):
                    self.run_session(s, todo)
            if self.multi and self.cfg.protocol.target_rel_halfwidth:
                self.converge()
        finally:
            if self.otlp:
                self.otlp.close()

    def record_as(self, status: str) -> RunRecord:
        return RunRecord(experiment_record.experiment_json(self, status, run_rows(self.out)))

    def ending(self, status: str) -> Ending:
        """The experiment's record from its run folders (``harness.experiment_record.write_record``)
        and the protocol's own (``self.records``)."""
        aggregates = experiment_record.write_record(self)
        return Ending(metrics=aggregates, answer=results_io.read_json(self.out / results_io.EXPERIMENT, {}),
                      artifacts=(results_io.EXPERIMENT, results_io.RUNS_TABLE,
                                 *(f for r in self.records for f in r.files)),
                      report=self.render_report)

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
            for r in table.select(["config", "label", "role", *metrics]).to_pylist():
                if r["role"] != "point":
                    continue
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
            more = plan_sessions(self.named_configs(), self.plan, 1, int(self.cfg.seed), first_block=blocks)
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
                                     name=s.config or None, block=s.block, otlp=self.otlp)
        search = self.needs_search(s)
        # after the points (no cold start or cache state disturbed), before the engine stops
        gate = gate_enabled(self.cfg, self.design) and not (self.session_dir(s) / QUALITY_FILE).exists()
        try:
            self.session.start(points=todo)
            for i, spec in enumerate(todo):
                self.session.run_point(spec, last=i == len(todo) - 1 and not search and not gate)
            if search:
                search_slo(self, s, cfg)
            if gate:
                quality_gate.collect(self.session, self.session_dir(s))
        finally:
            self.session.stop()

    def render_report(self) -> Path:
        path = render(self.out, static_figures=self.cfg.report.get("static"), log=print)
        print(f"report: {path}")
        return path
