"""protocol=tune: one trial: a suggestion reused, resumed or run as a sweep, and judged."""

from __future__ import annotations

import hashlib
import json
import sys
import time
import traceback
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from harness import results_io
from harness.errors import UserError
from metrics import tune_verdict
from protocols.experiment import Experiment
from protocols.sweep.record import SWEEP_RECORD
from protocols.tune import plan
from protocols.tune.configs import trial_config, with_params
from protocols.tune.mlflow_log import log_trial
from protocols.tune.quality import TrialQuality, quality_verdict
from protocols.tune.state import TuneState

TRIALS_DIR = "trials"
TRIAL_FILE = "trial.json"
BASE_FILE = "tune_base.json"
# Protocol keys that steer the search, not what a trial measures: changing them keeps the trials.
SEARCH_ONLY = ("space", "trials", "objective", "sampler", "startup_trials", "seed", "dry_run", "screen", "finalists",
               "base_experiment", "profile", "dynamo_python", "screen_requests", "confirm", "residuals")
# Keys that change how results are shown or logged, not what is measured.
PRESENTATION = ("output_dir", "resume", "mlflow", "report", "progress")


def _flat(d, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def params_key(params: dict) -> str:
    """A trial's params as one string: suggestions with the same params are the same trial."""
    return json.dumps(params, sort_keys=True)


def base_fingerprint(cfg: DictConfig, knobs: list[plan.Knob]) -> dict:
    """What every trial shares (the config less the knobs, the search's own steering and
    presentation): trials in a folder are reused only while it is unchanged."""
    c = results_io.redact(OmegaConf.to_container(cfg, resolve=True))
    for k in PRESENTATION:
        c.pop(k, None)
    for k in SEARCH_ONLY:
        c["protocol"].pop(k, None)
    flat = {k: v for k, v in _flat(c).items() if k not in {kn.key for kn in knobs}}
    digest = hashlib.sha256(json.dumps(flat, sort_keys=True, default=str).encode()).hexdigest()
    return {"sha256": digest, "config": flat}


def check_base(cfg: DictConfig, knobs: list[plan.Knob], out: Path, trials: list[dict]) -> None:
    """The trials in ``out`` were run on this config less the knobs (``tune_base.json``): else a
    new output_dir is needed; the fingerprint is written for the next run."""
    path = out / BASE_FILE
    fp = base_fingerprint(cfg, knobs)
    if trials and not cfg.resume:
        raise UserError(f"resume=false, but {out / TRIALS_DIR} holds trials: give a new output_dir")
    if path.exists():
        old = results_io.read_json(path)
        if old["sha256"] != fp["sha256"] and trials:
            diff = sorted(k for k in set(old["config"]) | set(fp["config"])
                          if old["config"].get(k) != fp["config"].get(k))
            raise UserError(f"{out} holds trials of another config (differs in: {', '.join(diff[:8])}); "
                            "their results would not compare: give a new output_dir")
    results_io.write_json(path, fp)


class Trials:
    """The tune's trials: their folders, running one, and its verdict (the quality gate's among it).
    Each suggestion is appended to the state's ``suggestions``; a trial's MLflow run is made a child
    of the state's parent run."""

    def __init__(self, state: TuneState, quality: TrialQuality):
        self.state = state
        self.quality = quality

    def trials_dir(self) -> Path:
        return self.state.out / TRIALS_DIR

    def read_trials(self) -> list[dict]:
        d = self.trials_dir()
        found = [results_io.read_json(p) for p in d.glob(f"*/{TRIAL_FILE}")] if d.exists() else []
        return sorted(found, key=lambda t: t["trial"])

    def run_trial(self, params: dict) -> float:
        """One suggestion: reuse a finished trial with the same params, resume an unfinished
        one, or run a new one; returns what the study is told."""
        st = self.state
        objective = str(st.cfg.protocol.objective)
        params = {k.key: params[k.key] for k in st.knobs}
        shown = " ".join(f"{k}={v}" for k, v in params.items())
        n_sugg = len(st.suggestions) + 1
        same = [t for t in self.read_trials() if params_key(t["params"]) == params_key(params)]
        if same and same[0].get("status") == "complete":
            t = same[0]
            st.suggestions.append({"suggestion": n_sugg - 1, "trial": t["trial"], "evaluated": "reused"})
            verdict = self.verdict(t)
            print(f"suggestion {n_sugg}/{st.budget}: {shown} -> trial {t['trial']}, already evaluated "
                  f"({'feasible' if verdict['feasible'] else 'infeasible'}): read back", flush=True)
            return tune_verdict.study_value(verdict["objective"] if verdict["feasible"] else None, objective)
        if same:
            number, how = same[0]["trial"], "resumed"
        else:
            taken = [t["trial"] for t in self.read_trials()]
            number, how = (max(taken) + 1 if taken else 0), "ran"
        folder = self.trials_dir() / str(number)
        folder.mkdir(parents=True, exist_ok=True)
        overrides = [f"{k}={plan.override_literal(v)}" for k, v in params.items()]
        record = {"trial": number, "folder": str(folder.relative_to(st.out)), "params": params,
                  "overrides": overrides, "status": "running", "started": time.time()}
        results_io.write_json(folder / TRIAL_FILE, record)
        st.suggestions.append({"suggestion": n_sugg - 1, "trial": number, "evaluated": how})
        print(f"suggestion {n_sugg}/{st.budget}: {shown} -> trial {number} ({folder})", flush=True)
        t0 = time.monotonic()
        error = self.measure(params, overrides, folder, f"trial {number}")
        record.update(status="complete", error=error, duration_s=round(time.monotonic() - t0, 3))
        results_io.write_json(folder / TRIAL_FILE, record)
        verdict = self.verdict(record)
        print(f"trial {number}: " + (f"feasible, {objective} {verdict['objective']:.4g} at max load "
                                      f"{verdict['max_load_under_slo']:g}" if verdict["feasible"]
                                      else f"infeasible: {verdict['why']}"), flush=True)
        if st.mlflow:
            log_trial(st.mlflow, folder, number, params, verdict)
        return tune_verdict.study_value(verdict["objective"] if verdict["feasible"] else None, objective)

    def measure(self, params: dict, overrides: list[str], folder: Path, what: str) -> str | None:
        """The config with ``params`` as a sweep with search=slo in ``folder``; its error or None."""
        st = self.state
        try:
            exp = Experiment(trial_config(with_params(st.cfg, params), folder), explicit=st.explicit,
                             overrides=st.overrides + overrides, records=(SWEEP_RECORD,))  # a trial is a sweep
            exp.out = folder  # the tuner names its trials' folders
            exp.run()
        except UserError as e:
            return str(e)
        except Exception as e:  # noqa: BLE001 - one trial's failure is recorded, the tune goes on
            error = f"{type(e).__name__}: {e}"
            (folder / "error.txt").write_text(traceback.format_exc())
            print(f"{what} failed: {error} (traceback in {folder / 'error.txt'})", file=sys.stderr, flush=True)
            return error
        return None

    def verdict(self, trial: dict) -> dict:
        """The trial judged from what its folder holds now (so a re-judged record follows the
        current objective and any quality verdict written since)."""
        folder = self.state.out / trial["folder"]
        path = folder / "search.json"
        search = results_io.read_json(path, None)
        if search and search.get("cost_per_good_request") is None:  # goodput per dollar: from the run there
            at = [pr for pr in search.get("probes") or [] if pr.get("passed")
                  and pr.get("load") == search.get("max_load_under_slo")]
            summary = folder / (at[0].get("run_dir") or "") / results_io.SUMMARY if at else None
            if summary is not None and summary.exists():
                search["cost_per_good_request"] = results_io.read_json(summary).get("cost_per_good_request")
        passed, reason = quality_verdict(folder)
        against_ref, why = self.quality.trial_quality(folder, self.read_trials())
        if passed is not False and against_ref is not None:
            passed, reason = against_ref, why
        return tune_verdict.judge(search, str(self.state.cfg.protocol.objective), trial.get("error"), passed, reason)
