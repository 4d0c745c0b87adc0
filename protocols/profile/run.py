"""``protocol=profile``, run: the plan's ladders (``protocols.profile.plan``) on one engine kept
up across them, each step an ordinary load point (its folder: requests.parquet, summary.json,
telemetry ...) with its own fixed lengths (``EngineSession.use_workload``); then the record
(``protocols.profile.record``: profile.json, perf_data.npz), experiment.json and runs.parquet.

Resume: the same command with the same ``output_dir`` skips the steps whose run finished and
rebuilds the record from every folder.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from conf.schema import ConfigError, ProfileProtocol, typed, validate
from harness import results_io
from harness.engine_session import EngineSession
from harness.errors import UserError
from harness.experiment_record import experiment_record, run_rows, seven_steps, write_runs_table
from harness.finish import finish_run
from harness.multirun import default_output_dir
from harness.parent_run import start_parent
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


def _write_experiment(cfg, out: Path, steps: list[Step], overrides: list[str], status: str) -> list[dict]:
    rows = run_rows(out)
    if rows:
        write_runs_table(out, rows)
    record = experiment_record(
        cfg, status=status, out=out, overrides=overrides, configs={"": []}, baseline="",
        steps=seven_steps(cfg, design_of(cfg), bool(rows), points=len(steps), configs=1),
        load_points=[{"label": s.spec.label, "phase": s.phase, "load": s.spec.load, "workload": s.workload,
                      "repeats": 1} for s in steps],
        runs_planned=len(steps), runs_finished=len(rows), record_files=[profile_record.PROFILE_FILE,
                                                                        profile_record.MOCKER_FILE])
    results_io.write_json(out / results_io.EXPERIMENT, record)
    return rows


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
    _write_experiment(cfg, out, steps, overrides, "running" if todo else "complete")
    mlflow = start_parent(cfg, out) if todo else None
    status = "FAILED"
    try:
        if todo:
            session = EngineSession(cfg, out, mlflow, total_points=len(todo))
            try:
                session.start()
                for i, step in enumerate(todo):
                    session.use_workload(step.workload)
                    session.run_point(step.spec, last=i == len(todo) - 1)
            finally:
                session.stop()
        status = "FINISHED"
    except KeyboardInterrupt:
        status = "KILLED"
        print(f"\nto resume, run the same command with output_dir={out}", file=sys.stderr, flush=True)
        raise
    finally:
        rows = _write_experiment(cfg, out, steps, overrides, {"FINISHED": "complete", "KILLED": "interrupted"}.get(
            status, "failed"))
        if status != "FINISHED" and mlflow:
            mlflow.end_parent(status)
    if not rows:
        return out
    record = profile_record.write_profile(out, steps, int(cfg.protocol.resolution), str(cfg.protocol.source))
    print(summary_lines(record), flush=True)
    return finish_run(cfg, out, mlflow, metrics=profile_record.parent_metrics(record),
                      artifacts=(results_io.EXPERIMENT, results_io.RUNS_TABLE, profile_record.PROFILE_FILE,
                                 profile_record.MOCKER_FILE), end="FINISHED" if mlflow else None)


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
