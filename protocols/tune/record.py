"""protocol=tune: the record: tune.json, and from it experiment.json's steps, runs.parquet's rows and the
parent run's metrics (as the run lifecycle asks: ``protocols.tune.run.Tuner.record_as``, ``ending``)."""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

from harness import results_io
from harness.experiment_record import experiment_record, run_rows, steps_record
from metrics import tune_verdict
from metrics.answer import tune_answer
from protocols.tune import plan
from protocols.tune.finalists import Finalists
from protocols.tune.search import STUDY_FILE
from protocols.tune.state import TuneState
from protocols.tune.trials import TRIALS_DIR, Trials

TUNE_FILE = "tune.json"


class TuneRecord:
    """The tune's record: tune.json (the trials judged by ``trials``, the screen's part by
    ``finalists``, the state's settings, suggestions and status) and what experiment.json says of it."""

    def __init__(self, state: TuneState, trials: Trials, finalists: Finalists):
        self.state = state
        self.trials = trials
        self.finalists = finalists

    def write_tune_record(self) -> dict:
        """``tune.json`` from the trial folders (the best trial is the best feasible one, not the
        study's best value: an infeasible trial's value can tie with it)."""
        st = self.state
        p = st.cfg.protocol
        objective = str(p.objective)
        trials = []
        for t in self.trials.read_trials():
            entry = {"trial": t["trial"], "folder": t["folder"], "params": t["params"], "overrides": t["overrides"],
                     "status": t["status"], "duration_s": t.get("duration_s"), "error": t.get("error")}
            if t["status"] == "complete":
                entry.update(self.trials.verdict(t))
            else:
                entry.update(feasible=None, why="not finished (interrupted): resumes with the same output_dir")
            trials.append(entry)
        best = tune_verdict.best_trial(trials, objective)
        front = tune_verdict.pareto_front(trials)
        done = [t for t in trials if t["status"] == "complete"]
        screened, screen_note = None, None
        if st.screened is not None:
            screened, best, screen_note = self.finalists.screen_record(trials)
        record = {
            "protocol": "tune", "status": st.status, "output_dir": str(st.out),
            "experiment": str(st.cfg.experiment),
            "objective": objective, "direction": tune_verdict.DIRECTIONS[objective], "sampler": str(p.sampler),
            "seed": st.seed, "budget": st.budget,
            "startup_trials": plan.startup_trials(p.startup_trials) if p.sampler == "tpe" else None,
            "space": [{"key": k.key, **({"choices": list(k.choices)} if k.choices is not None else
                                         {"low": k.low, "high": k.high, "log": k.log, "step": k.step})}
                      for k in st.knobs],
            "study": None if st.screening else {"storage": STUDY_FILE, "name": f"tune-{objective}",
                                                "sampler": st.sampler},
            "infeasible_told_as": tune_verdict.study_value(None, objective),
            "search": {"load_kind": str(st.cfg.load.kind), "low": p.search_low, "high": p.search_high,
                       "tolerance": float(p.search_tolerance), "max_probes": int(p.search_max_probes)},
            "slo": results_io.redact(OmegaConf.to_container(st.cfg.slo, resolve=True)),
            "suggestions": st.suggestions,
            "trials": trials,
            "evaluated": len(done), "feasible": sum(bool(t.get("feasible")) for t in done),
            "best": best,
            "best_stands_on": "measurement" if best else None,
            "best_note": None if best else screen_note or ("no trial evaluated yet" if not done else
                                            f"no feasible trial among {len(done)}: none met the SLO (and the "
                                            "quality gate) at any load in the bracket"),
            "pareto_front": [{k: t[k] for k in ("trial", "params", "max_load_under_slo", "cost_per_mtok_good")}
                             for t in front],
        }
        if screened is not None:
            record["screen"] = screened
        record["answer"] = tune_answer(record).to_dict()
        results_io.write_json(st.out / TUNE_FILE, record)
        return record

    def experiment_json(self, record: dict) -> dict:
        """experiment.json of the tune (the seven steps: tune ran) from its record."""
        st = self.state
        done = record["evaluated"] > 0
        best = record["best"]
        steps = steps_record([
            (1, done, "fixed conditions recorded with every trial's runs (run.json); a trial whose record says the "
                      "quality gate failed is infeasible"),
            (2, done, f"workload.json per run ({st.cfg.workload.name}), the same workload for every trial"),
            (3, done, "provenance.json per run: engine version, flags (the trial's knobs), devices"),
            (4, done, "each trial: its load points and the SLO search for its max load (trials/<n>/search.json)"),
            (5, False, "not an ablation (protocol=ablation): the tune varies knobs together"),
            (6, done, (f"screened {len(record['screen']['configs'])} configs on the scheduler model (modelled), "
                       f"measured the {len(record['screen']['finalists'])} finalists; " if record.get("screen") else "")
                      + f"tune: {record['evaluated']} configs from protocol.space compared by {record['objective']} at "
                      "their max load under the SLO; best feasible "
                      + (f"trial {best['trial']}" if best else "none") + ", Pareto front of cost vs max load "
                      "(tune.json); one run per config, no intervals: protocol=compare on the finalists gives them"),
            (7, False, "not a promotion (protocol=promote)"),
        ])
        return experiment_record(
            st.cfg, status=record["status"], out=st.out, overrides=st.overrides, seed=st.seed,
            configs={f"trial{t['trial']}": t["overrides"] for t in record["trials"]}, baseline="", steps=steps,
            runs_finished=sum(1 for _ in st.out.glob(f"{TRIALS_DIR}/*/**/{results_io.SUMMARY}")), tune=TUNE_FILE)


def trial_runs(out: Path, trials: list[dict]) -> list[dict]:
    """``runs.parquet``'s rows: every trial's runs, ``config`` = trial<n>, with its params as columns."""
    by_folder = {t["folder"]: t for t in trials}
    rows = []
    for r in run_rows(out):
        parts = Path(r["run_dir"]).parts
        t = by_folder.get(str(Path(*parts[:2]))) if len(parts) >= 2 else None
        if t is None:
            continue
        r = {**r, "config": f"trial{t['trial']}", "run_dir": r["run_dir"],
             **{f"param.{k}": v for k, v in t["params"].items()}}
        rows.append(r)
    return rows


def finish_metrics(record: dict) -> dict:
    """The tune's aggregates logged on its parent run."""
    best = record["best"]
    metrics = {"tune.evaluated": record["evaluated"], "tune.feasible": record["feasible"]}
    if best:
        metrics.update({"tune.best_objective": best["objective"], "tune.best_trial": best["trial"],
                        "tune.best_max_load_under_slo": best["max_load_under_slo"],
                        "tune.best_cost_per_mtok_good": best["cost_per_mtok_good"]})
    return metrics
