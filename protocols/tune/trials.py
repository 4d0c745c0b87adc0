"""protocol=tune: one trial: a suggestion reused, resumed or run as a sweep, and judged."""

from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path

from harness import results_io
from harness.errors import UserError
from metrics import tune_verdict
from protocols.experiment import Experiment
from protocols.sweep.record import SWEEP_RECORD
from protocols.tune import plan
from protocols.tune.quality import quality_verdict

TRIALS_DIR = "trials"
TRIAL_FILE = "trial.json"


def _key(params: dict) -> str:
    return json.dumps(params, sort_keys=True)


class Trials:
    """The tune's trials: their folders, running one, and its verdict."""

    # ------------------------------------------------------------------------------------ one trial
    def trials_dir(self) -> Path:
        return self.out / TRIALS_DIR

    def read_trials(self) -> list[dict]:
        d = self.trials_dir()
        found = [results_io.read_json(p) for p in d.glob(f"*/{TRIAL_FILE}")] if d.exists() else []
        return sorted(found, key=lambda t: t["trial"])

    def run_trial(self, params: dict) -> float:
        """One suggestion: reuse a finished trial with the same params, resume an unfinished
        one, or run a new one; returns what the study is told."""
        objective = str(self.cfg.protocol.objective)
        params = {k.key: params[k.key] for k in self.knobs}
        shown = " ".join(f"{k}={v}" for k, v in params.items())
        n_sugg = len(self.suggestions) + 1
        same = [t for t in self.read_trials() if _key(t["params"]) == _key(params)]
        if same and same[0].get("status") == "complete":
            t = same[0]
            self.suggestions.append({"suggestion": n_sugg - 1, "trial": t["trial"], "evaluated": "reused"})
            verdict = self._verdict(t)
            print(f"suggestion {n_sugg}/{self.trials}: {shown} -> trial {t['trial']}, already evaluated "
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
        record = {"trial": number, "folder": str(folder.relative_to(self.out)), "params": params,
                  "overrides": overrides, "status": "running", "started": time.time()}
        results_io.write_json(folder / TRIAL_FILE, record)
        self.suggestions.append({"suggestion": n_sugg - 1, "trial": number, "evaluated": how})
        print(f"suggestion {n_sugg}/{self.trials}: {shown} -> trial {number} ({folder})", flush=True)
        t0 = time.monotonic()
        error = self.measure(params, overrides, folder, f"trial {number}")
        record.update(status="complete", error=error, duration_s=round(time.monotonic() - t0, 3))
        results_io.write_json(folder / TRIAL_FILE, record)
        verdict = self._verdict(record)
        print(f"trial {number}: " + (f"feasible, {objective} {verdict['objective']:.4g} at max load "
                                      f"{verdict['max_load_under_slo']:g}" if verdict["feasible"]
                                      else f"infeasible: {verdict['why']}"), flush=True)
        if self.mlflow:
            self._mlflow_child(folder, number, params, verdict)
        return tune_verdict.study_value(verdict["objective"] if verdict["feasible"] else None, objective)

    def measure(self, params: dict, overrides: list[str], folder: Path, what: str) -> str | None:
        """The config with ``params`` as a sweep with search=slo in ``folder``; its error or None."""
        try:
            exp = Experiment(self.trial_config(self.with_params(params), folder), explicit=self.explicit,
                             overrides=self.overrides + overrides, records=(SWEEP_RECORD,))  # a trial is a sweep
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

    def _verdict(self, trial: dict) -> dict:
        """The trial judged from what its folder holds now (so a re-judged record follows the
        current objective and any quality verdict written since)."""
        folder = self.out / trial["folder"]
        path = folder / "search.json"
        search = results_io.read_json(path, None)
        if search and search.get("cost_per_good_request") is None:  # goodput per dollar: from the run there
            at = [pr for pr in search.get("probes") or [] if pr.get("passed")
                  and pr.get("load") == search.get("max_load_under_slo")]
            summary = folder / (at[0].get("run_dir") or "") / results_io.SUMMARY if at else None
            if summary is not None and summary.exists():
                search["cost_per_good_request"] = results_io.read_json(summary).get("cost_per_good_request")
        passed, reason = quality_verdict(folder)
        against_ref, why = self.trial_quality(folder)
        if passed is not False and against_ref is not None:
            passed, reason = against_ref, why
        return tune_verdict.judge(search, str(self.cfg.protocol.objective), trial.get("error"), passed, reason)
