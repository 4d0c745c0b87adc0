"""``protocol=profile``, run: the plan's ladders (``protocols.profile.plan``) on one engine kept
up across them, each step an ordinary load point (its folder: requests.parquet, summary.json,
telemetry ...) with its own fixed lengths (``EngineSession.use_workload``); then the record
(``protocols.profile.record``: profile.json, perf_data.npz), experiment.json and runs.parquet.

Resume: the same command with the same ``output_dir`` skips the steps whose run finished and
rebuilds the record from every folder.
"""

from __future__ import annotations

import os
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from conf.schema import ConfigError, ProfileProtocol, typed, validate
from harness import results_io
from harness.engine_session import EngineSession
from harness.errors import UserError
from harness.experiment_record import experiment_record, run_rows, seven_steps
from harness.lifecycle import Ending, RunRecord, run_lifecycle
from harness.mlflow_log import MlflowLogger
from harness.multirun import default_output_dir
from loadgen.dispatch import LoadSpec
from protocols.designs import design_of
from protocols.profile import record as profile_record
from protocols.profile.plan import Step, describe, profile_steps


def plan(cfg: DictConfig) -> list[Step]:
    """The checked plan: everything that can fail before an engine starts."""
    try:
        validate(cfg)
        if str(cfg.workload.name) != "synthetic":
            raise ValueError(f"protocol=profile sets exact prompt and output lengths: it runs workload=synthetic, "
                             f"not workload={cfg.workload.name}")
        p = typed(cfg.protocol, ProfileProtocol)
        steps = profile_steps(p, OmegaConf.to_container(cfg.load, resolve=True), cfg.engine.get("max_model_len"))
        for s in steps:
            LoadSpec.from_load(s.spec.load).validate()
    except (ConfigError, ValueError) as e:
        raise UserError(str(e)) from None
    return steps


class ProfileRun:
    """The profile's steps on the run lifecycle (``harness.lifecycle``): its ladders on one engine,
    the record (experiment.json and runs.parquet) from its folders, then profile.json and the fits."""

    def __init__(self, cfg: DictConfig, out: Path, steps: list[Step], todo: list[Step], overrides: list[str]):
        self.cfg, self.out, self.steps, self.todo, self.overrides = cfg, out, steps, todo, overrides
        self.rows: list[dict] = []   # the finished runs, as the last record found them

    def run_steps(self, parent: MlflowLogger | None) -> None:
        session = EngineSession(self.cfg, self.out, parent, total_points=len(self.todo))
        try:
            session.start()
            for i, step in enumerate(self.todo):
                session.use_workload(step.workload)
                session.run_point(step.spec, last=i == len(self.todo) - 1)
        finally:
            session.stop()

    def record_as(self, status: str) -> RunRecord:
        rows = self.rows = run_rows(self.out)
        steps = self.steps
        return RunRecord(experiment_record(
            self.cfg, status=status, out=self.out, overrides=self.overrides, configs={"": []}, baseline="",
            steps=seven_steps(self.cfg, design_of(self.cfg), bool(rows), points=len(steps), configs=1),
            load_points=[{"label": s.spec.label, "phase": s.phase, "load": s.spec.load, "workload": s.workload,
                          "repeats": 1} for s in steps],
            runs_planned=len(steps), runs_finished=len(rows), record_files=[profile_record.PROFILE_FILE,
                                                                            profile_record.MOCKER_FILE]), rows)

    def ending(self, status: str) -> Ending | None:
        """profile.json and the mocker's file from the runs, the fits printed (no run: nothing)."""
        if not self.rows:
            return None
        record = profile_record.write_profile(self.out, self.steps, int(self.cfg.protocol.resolution),
                                              str(self.cfg.protocol.source))
        print(summary_lines(record), flush=True)
        return Ending(metrics=profile_record.parent_metrics(record),
                      artifacts=(results_io.EXPERIMENT, results_io.RUNS_TABLE, profile_record.PROFILE_FILE,
                                 profile_record.MOCKER_FILE))


def run_profile(cfg: DictConfig, overrides: list[str]) -> Path:
    steps = plan(cfg)
    out = Path(cfg.output_dir or default_output_dir(cfg)
               or os.path.join("results", str(cfg.experiment), results_io.new_run_id()))
    if cfg.protocol.dry_run:
        print(f"plan ({len(steps)} runs, 1 engine launch):\n{describe(steps)}\nwould write to {out}")
        return out
    out.mkdir(parents=True, exist_ok=True)
    todo = [s for s in steps if not (cfg.resume and results_io.run_complete(out / s.spec.subdir)
                                     and not results_io.run_failed(out / s.spec.subdir))]
    if len(todo) < len(steps):
        print(f"resuming {out}: {len(steps) - len(todo)} of {len(steps)} runs already complete", flush=True)
    results_io.write_yaml(out / results_io.CONFIG, results_io.redact(OmegaConf.to_container(cfg, resolve=True)))
    return run_lifecycle(cfg, out, ProfileRun(cfg, out, steps, todo, overrides), pending=bool(todo))


def summary_lines(record: dict) -> str:
    """The fits for people, at the end of the run."""
    if "fit_error" in record:
        return f"profile: no fit ({record['fit_error']})"
    pre = "engine_prefill_fit" if record["source"] == "engine" else "prefill_fit"
    dec = "engine_decode_fit" if record["source"] == "engine" else "decode_fit"
    p, d = record[pre]["coefficients"], record[dec]["coefficients"]
    return (f"profile ({record['source']}'s figures): prefill_ms = {p['a_ms']:.3g} + {p['b_ms_per_token']:.3g}*L + "
            f"{p['c_ms_per_token2']:.3g}*L^2 "
            f"(rms {record[pre]['rms_ms']:.3g} ms)\n"
            f"         step_ms = {d['alpha_ms']:.3g} + {d['beta_ms_per_seq']:.3g}*B + "
            f"{d['gamma_ms_per_kv_token']:.3g}*KV (rms {record[dec]['rms_ms']:.3g} ms)\n"
            f"         mocker: {record['mocker']['flag']}")
