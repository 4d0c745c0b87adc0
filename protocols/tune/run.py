"""``protocol=tune``, run: an Optuna study suggests configs, each trial is an experiment.

``tokenfactory run protocol=tune 'protocol.space={...}' ...`` runs through the protocol
registry like any protocol.  The command's own overrides are checked (every knob a config key
whose every choice, or both ends of its range, passes the schema), then the study asks for
each suggestion (``study.ask`` with the space as distributions: ``protocols.tune.plan.search_space``),
the trial runs, and the study is told its objective (``study.tell``; ``metrics.tune_verdict``:
an infeasible trial is told the objective's value for "no good token", +inf cost or 0 goodput
per dollar).  Each trial is the config with the knobs set and the protocol turned into a sweep
with ``search=slo``, run as an ``Experiment`` in ``OUT/trials/<n>/`` (its full record: runs,
search.json, experiment.json); a suggestion whose params match a finished trial is answered
from it instead of run again.

Resume: the study lives in ``OUT/study.db`` (Optuna's RDB storage, SQLite), the trials in
their folders (``trial.json``: params and result).  The same command with the same
``output_dir`` loads the study and goes on: a suggestion it was told is read back from its
trial, one asked but never told (the tune was interrupted during it) is run again inside its
folder (the experiment skips its finished runs) and told, and the rest of the budget is asked
for.  Samplers are seeded (``protocols.tune.plan.make_sampler``).

Quality gate (on unless ``quality.enabled=false``): before the first trial, an engine with no
knob set gives the reference greedy outputs (``OUT/reference/quality.json``); every trial
collects its own at the end of its session, and one whose agreement with the reference is
below ``quality.min_agreement`` (or whose evaluation score drops) is infeasible.

The record (``OUT/tune.json``, rebuilt from the trials' ``trial.json``): every trial, the best
feasible one, the Pareto front (cost per million good tokens vs max load under the SLO); also
``experiment.json`` (the seven steps: tune ran), ``runs.parquet`` (every trial's runs, with its
params) and, with MLflow on, a parent run holding the trials' runs as children.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import math
import sys
import time
import traceback
from pathlib import Path

import optuna
from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from conf.compose import compose_config
from conf.overrides import explicit_keys
from conf.schema import ConfigError, SweepProtocol, validate
from harness import quality_gate, results_io
from harness.engine_session import EngineSession
from harness.errors import UserError
from harness.experiment_record import experiment_record, run_rows, steps_record, write_runs_table
from harness.finish import finish_run
from harness.parent_run import start_parent
from harness.quality_gate import QUALITY_FILE, gate_enabled
from harness.report.tune import write_tune_page
from metrics import model_error, tune_verdict
from metrics.answer import tune_answer
from protocols.designs import design_of
from protocols.experiment import Experiment, check_config
from protocols.plan.modelled import residuals_error
from protocols.plan.residuals import DEFAULT as RESIDUALS_DEFAULT
from protocols.plan.residuals import read_residuals
from protocols.sweep.record import SWEEP_RECORD
from protocols.tune import plan, screen
from protocols.tune.plan import finalists_table, screen_table

TRIALS_DIR = "trials"
TRIAL_FILE = "trial.json"
REFERENCE_DIR = "reference"  # the quality gate's control: the config with no knob set
TUNE_FILE = "tune.json"
STUDY_FILE = "study.db"  # Optuna's storage: the study a rerun with the same output_dir continues
BASE_FILE = "tune_base.json"
# Protocol keys that steer the search, not what a trial measures: changing them keeps the trials.
SEARCH_ONLY = ("space", "trials", "objective", "sampler", "startup_trials", "seed", "dry_run", "screen", "finalists",
               "base_experiment", "profile", "dynamo_python", "screen_requests", "confirm", "residuals")
CONFIRM_DIR = "confirm"  # screen=model: the winner measured a second time
# Keys that change how results are shown or logged, not what is measured.
PRESENTATION = ("output_dir", "resume", "mlflow", "report", "progress")


def _key(params: dict) -> str:
    return json.dumps(params, sort_keys=True)


def _flat(d, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


class Tuner:
    """One tune: its config and knobs, its folder, the sweep and the record."""

    def __init__(self, cfg: DictConfig, overrides: list[str]):
        self.cfg = cfg
        self.overrides = list(overrides)
        p = cfg.protocol
        try:
            validate(cfg)
            space = OmegaConf.to_container(p.space, resolve=True) if isinstance(p.space, DictConfig) else p.space
            self.knobs = plan.parse_space(space)
            self.explicit = explicit_keys(self.overrides)
            for k in self.knobs:
                if k.key in self.explicit:
                    raise ValueError(f"protocol.space.{k.key}: also set on the command line; a knob's value comes "
                                     "from the search")
            self.screening = p.screen == "model"
            if self.screening:
                screen.check(cfg, self.knobs)
            self.grid = plan.grid_size(self.knobs) if p.sampler == "grid" or self.screening else None
            self._check_bracket()
            self._check_knobs()
            check_config(self.trial_config(cfg, Path(".")))
        except (ConfigError, ValueError) as e:
            raise UserError(str(e)) from None
        self.seed = int(p.seed if p.seed is not None else cfg.seed)
        self.trials = int(p.trials) if self.grid is None else min(int(p.trials), self.grid)
        if self.screening:  # the budget of measurements: the finalists
            self.trials = min(int(p.finalists), self.grid)
        self.screened: dict | None = None   # screen=model: the model's ranking (protocols.tune.screen)
        self.validated: dict | None = None
        self.out = Path(cfg.output_dir or Path("results") / str(cfg.experiment) / results_io.new_run_id())
        self.space = plan.search_space(self.knobs, grid=self.grid is not None)
        self.sampler = plan.describe_sampler(str(p.sampler), self.seed, p.startup_trials)
        self.suggestions: list[dict] = []   # the study's suggestions, in order: {"trial": n, "evaluated": ...}
        self.mlflow = None
        self.status = "planned"

    # ------------------------------------------------------------------------------------ checks
    def _check_bracket(self) -> None:
        p = self.cfg.protocol
        points = list(p.load_points or [])
        if not (p.search_low and p.search_high) and len(points) < 2 and not p.probe:
            raise ValueError("protocol=tune searches each trial's max load under the SLO between "
                             "protocol.search_low and protocol.search_high: give both (requests/s, or users "
                             "for load=concurrency), or protocol.load_points to take them from, or protocol.probe=true")
        if p.search_low and p.search_high and not p.search_low < p.search_high:
            raise ValueError(f"protocol.search_low={p.search_low} must be below protocol.search_high={p.search_high}")

    def _check_knobs(self) -> None:
        """Every knob names one config value, and each of its choices (or range ends) fits the
        field's type and passes the schema's checks, so no suggestion fails halfway through a
        tune; each choice also survives the round trip through Hydra's override syntax (a trial's
        params are recorded, and given to its experiment, as overrides)."""
        from hydra.core.override_parser.overrides_parser import OverridesParser

        missing = object()
        parser = OverridesParser.create()
        for k in self.knobs:
            current = OmegaConf.select(self.cfg, k.key, default=missing)
            if current is missing:
                parent = k.key.rsplit(".", 1)[0] if "." in k.key else ""
                node = OmegaConf.select(self.cfg, parent, default=None) if parent else self.cfg
                known = ", ".join(map(str, node)) if isinstance(node, DictConfig) else "none"
                raise ValueError(f"protocol.space.{k.key}: no such key in this config "
                                 f"({parent or 'the root'} has: {known})")
            if isinstance(current, (DictConfig, ListConfig)):
                raise ValueError(f"protocol.space.{k.key}: a group or mapping, not one value; a knob is a single "
                                 "setting (whole engine configs are compared with protocol=compare)")
            for want in list(k.choices) if k.choices is not None else (k.grid() if self.grid else []):
                got = parser.parse_overrides([f"{k.key}={plan.override_literal(want)}"])[0].value()
                if got != want or type(got) is not type(want):
                    raise ValueError(f"protocol.space.{k.key}: the choice {want!r} comes back from Hydra's override "
                                     f"syntax as {got!r}; rename it")
            for v in (k.choices or [k.low, k.high]):
                trial = copy.deepcopy(self.cfg)
                try:
                    OmegaConf.update(trial, k.key, v, merge=False)
                    validate(trial)
                except ConfigError as e:
                    raise ValueError(f"protocol.space.{k.key}: the value {v!r}: {e}") from None
                except OmegaConfBaseException as e:
                    raise ValueError(f"protocol.space.{k.key}: the value {v!r}: {str(e.msg).splitlines()[0]}") from None

    # ------------------------------------------------------------------------------------ configs
    def trial_config(self, cfg: DictConfig, folder: Path) -> DictConfig:
        """A job's config as a trial: the protocol becomes a sweep with ``search=slo`` (its load
        points, bracket and tolerance kept), written to ``folder``."""
        trial = copy.deepcopy(cfg)
        keep = {f.name for f in dataclasses.fields(SweepProtocol)}
        proto = {k: v for k, v in OmegaConf.to_container(cfg.protocol, resolve=True).items() if k in keep}
        proto.update(name="sweep", search="slo", dry_run=False)
        trial.protocol = OmegaConf.merge(OmegaConf.structured(SweepProtocol), proto)
        trial.output_dir = str(folder)
        if gate_enabled(cfg, design_of(cfg)):  # each trial's greedy outputs, judged against the reference's
            trial.quality.enabled = True
        return trial

    def reference_outputs(self) -> None:
        """The quality gate's control: greedy outputs of the config without any knob (the
        engine's defaults for them), or of ``protocol.reference``'s overrides, from an engine
        launched for that alone, in ``OUT/reference/`` (once; a resumed tune reuses it).  Every
        trial's outputs are judged against them."""
        folder = self.out / REFERENCE_DIR
        if not gate_enabled(self.cfg, design_of(self.cfg)) or (folder / QUALITY_FILE).exists():
            return
        ref = [str(o) for o in (self.cfg.protocol.get("reference") or [])]
        print("quality gate: greedy outputs of the reference config ("
              + (" ".join(ref) if ref else "no knob set") + ") ...", flush=True)
        try:
            cfg = compose_config(self.overrides + ref) if ref else self.cfg
        except Exception as e:  # noqa: BLE001 - Hydra's parse and compose errors, said with the key
            raise UserError(f"protocol.reference: {e}") from None
        session = EngineSession(self.trial_config(cfg, folder), folder, None, name=None)
        folder.mkdir(parents=True, exist_ok=True)
        try:
            session.start()
            quality_gate.collect(session, folder)
        except UserError as e:  # e.g. a knob the engine cannot do without (the model itself)
            print(f"quality gate: the config with no knob set does not run ({e}); the first trial's outputs "
                  "are the reference", flush=True)
        finally:
            session.stop()

    def trial_quality(self, folder: Path) -> tuple[bool | None, str | None]:
        """A trial's greedy outputs against the reference's (``quality.*`` thresholds)."""
        ref = self.out / REFERENCE_DIR
        if not (ref / QUALITY_FILE).exists():  # no knob-less reference: the first trial with outputs
            firsts = sorted((t["trial"], self.out / t["folder"]) for t in self.read_trials()
                            if (self.out / t["folder"] / QUALITY_FILE).exists())
            ref = firsts[0][1] if firsts else ref
        gate = gate_enabled(self.cfg, design_of(self.cfg))
        if not gate or not (folder / QUALITY_FILE).exists() or not (ref / QUALITY_FILE).exists():
            return None, None
        if ref == folder:
            return True, "the reference (the first trial: the config with no knob set did not run)"
        v = quality_gate.judge([(REFERENCE_DIR, 0, ref), ("trial", 0, folder)], REFERENCE_DIR,
                               self.cfg.quality)["configs"].get("trial")
        return (None, None) if v is None else (bool(v["passed"]), v["reason"])

    def base_fingerprint(self) -> dict:
        """What every trial shares (the config less the knobs, the search's own steering and
        presentation): trials in a folder are reused only while it is unchanged."""
        c = results_io.redact(OmegaConf.to_container(self.cfg, resolve=True))
        for k in PRESENTATION:
            c.pop(k, None)
        for k in SEARCH_ONLY:
            c["protocol"].pop(k, None)
        flat = {k: v for k, v in _flat(c).items() if k not in {kn.key for kn in self.knobs}}
        digest = hashlib.sha256(json.dumps(flat, sort_keys=True, default=str).encode()).hexdigest()
        return {"sha256": digest, "config": flat}

    def describe(self) -> str:
        p = self.cfg.protocol
        closed = self.cfg.load.kind == "concurrency"
        how = (f"tune: the grid's {self.grid} configs screened on the scheduler model (modelled), the {self.trials} "
               f"best measured, the winner measured again (seed {self.seed}" if self.screening else
               f"tune: {self.trials} suggestions ({p.sampler} sampler, seed {self.seed}"
               + (f", {plan.startup_trials(p.startup_trials)} random first" if p.sampler == "tpe"
                  else "") + (f"; the grid has {self.grid} configs" if self.grid else ""))
        lines = [how
                 + f") over {len(self.knobs)} knob(s); objective {p.objective} "
                 f"({tune_verdict.DIRECTIONS[str(p.objective)]}) at the max load under the SLO ("
                 + ("users" if closed else "requests/s") + f" in [{p.search_low or 'from the load points'}, "
                 f"{p.search_high or '...'}], tolerance {float(p.search_tolerance):.0%})"]
        for k in self.knobs:
            lines.append(f"  {k.key}: " + (f"{list(k.choices)}" if k.choices is not None else
                                          f"{'int' if k.integer else 'float'} {k.low}..{k.high}"
                                          + (" log" if k.log else "") + (f" step {k.step}" if k.step else "")))
        lines.append(f"screen: {self.out / screen.SCREEN_FILE}; base {p.base_experiment}" if self.screening else
                     f"sampler: {self.sampler}; study: {self.out / STUDY_FILE}")
        lines.append(f"would write to {self.out} (trials in {self.out / TRIALS_DIR}/<n>/)")
        return "\n".join(lines)

    # ------------------------------------------------------------------------------------ the sweep
    def run(self) -> Path:
        if self.cfg.protocol.dry_run:
            print(self.describe())
            return self.out
        self.out.mkdir(parents=True, exist_ok=True)
        self._check_base()
        done = [t for t in self.read_trials() if t.get("status") == "complete"]
        print(self.describe().rsplit("\n", 1)[0], flush=True)
        if done:
            print(f"resuming {self.out}: {len(done)} trial(s) already evaluated are read back, not run again",
                  flush=True)
        if self.screening:
            given = self.cfg.protocol.residuals
            self.validated = residuals_error(read_residuals(str(given) if given else RESIDUALS_DEFAULT))
            self.screened = screen.screen(self.cfg, self.knobs)
            results_io.write_json(self.out / screen.SCREEN_FILE, self.screened)
            print(screen_table(self.screened), flush=True)
        self.start_mlflow()
        self.reference_outputs()
        study = None if self.screening else self.study()
        self.status = "running"
        self.write_record()
        try:
            if self.screening:
                self.measure_finalists()
            else:
                self.search(study)
            self.status = "complete"
        except KeyboardInterrupt:
            self.status = "interrupted"
            print(f"\nfinished trials are kept; to resume, run the same command with output_dir={self.out}",
                  file=sys.stderr, flush=True)
            raise
        except Exception:
            self.status = "failed"
            raise
        finally:
            record = self.write_record()
            if self.status != "complete":  # failing or interrupted: the record logged before the error is told
                self.finish(record)
        print(plan.format_table(record), flush=True)
        if record.get("screen"):
            print(finalists_table(record), flush=True)
        best = record["best"]
        print("best: " + (f"trial {best['trial']} " + " ".join(f"{k}={v}" for k, v in best["params"].items())
                          + f": {record['objective']} {best['objective']:.4g} (measured"
                          + (f"; {best['confirmation']['said']}" if best.get("confirmation") else "") + ")"
                          if best else record["best_note"]))
        print("pareto front (cost per million good tokens vs max load under the SLO): "
              + (", ".join(f"trial {t['trial']} ({t['max_load_under_slo']:g}, {t['cost_per_mtok_good']:.4g})"
                           for t in record["pareto_front"]) or "empty"))
        return self.finish(record)

    def study(self) -> optuna.Study:
        """The tune's Optuna study in ``OUT/study.db``, created or loaded (one per objective: a
        study's direction is fixed, and the trials' folders are shared by all)."""
        optuna.logging.set_verbosity(optuna.logging.WARNING)  # the tune prints each suggestion itself
        p = self.cfg.protocol
        objective = str(p.objective)
        return optuna.create_study(storage=f"sqlite:///{(self.out / STUDY_FILE).resolve()}",
                                   study_name=f"tune-{objective}", direction=tune_verdict.DIRECTIONS[objective],
                                   sampler=plan.make_sampler(str(p.sampler), self.knobs, self.seed,
                                                             p.startup_trials),
                                   load_if_exists=True)

    def search(self, study: optuna.Study) -> None:
        """The budget of suggestions: those the study already holds first (told ones read back
        from their trials, one asked but never told run again and told), then new ones asked."""
        for asked in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)[:self.trials]:
            value = self.run_trial(asked.params)
            if asked.state == optuna.trial.TrialState.RUNNING:  # interrupted before it was told
                study.tell(asked.number, value)
        while len(self.suggestions) < self.trials:
            trial = study.ask(self.space)
            study.tell(trial, self.run_trial(trial.params))

    def _check_base(self) -> None:
        path = self.out / BASE_FILE
        fp = self.base_fingerprint()
        trials = self.read_trials()
        if trials and not self.cfg.resume:
            raise UserError(f"resume=false, but {self.out / TRIALS_DIR} holds trials: give a new output_dir")
        if path.exists():
            old = results_io.read_json(path)
            if old["sha256"] != fp["sha256"] and trials:
                diff = sorted(k for k in set(old["config"]) | set(fp["config"])
                              if old["config"].get(k) != fp["config"].get(k))
                raise UserError(f"{self.out} holds trials of another config (differs in: {', '.join(diff[:8])}); "
                                "their results would not compare: give a new output_dir")
        results_io.write_json(path, fp)

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

    # ------------------------------------------------------------------------------------ screen=model
    def measure_finalists(self) -> None:
        """The screen's finalists measured, each a trial; then the best of them measured again in
        ``OUT/confirm/`` (``protocol.confirm``): the result stands on measurements only."""
        for params in self.screened["finalists"]:
            self.run_trial(params)
        if not self.cfg.protocol.confirm:
            return
        mine = [{**t, **self._verdict(t)} for t in self.read_trials() if t["status"] == "complete"
                and _key(t["params"]) in {_key(f) for f in self.screened["finalists"]}]
        winner = tune_verdict.best_trial(mine, str(self.cfg.protocol.objective))
        if winner is None:
            print("no finalist met the SLO when measured: nothing to confirm", flush=True)
            return
        folder = self.out / CONFIRM_DIR
        old = results_io.read_json(folder / TRIAL_FILE, None)
        if old and old.get("status") == "complete" and _key(old["params"]) == _key(winner["params"]):
            print(f"confirmation of trial {winner['trial']}: already measured, read back", flush=True)
            return
        folder.mkdir(parents=True, exist_ok=True)
        record = {"trial": f"confirm{winner['trial']}", "of_trial": winner["trial"], "folder": CONFIRM_DIR,
                  "params": winner["params"], "overrides": winner["overrides"], "status": "running",
                  "started": time.time()}
        results_io.write_json(folder / TRIAL_FILE, record)
        print(f"confirming trial {winner['trial']} by a second measurement ({folder})", flush=True)
        t0 = time.monotonic()
        error = self.measure(winner["params"], winner["overrides"], folder, "the confirmation")
        record.update(status="complete", error=error, duration_s=round(time.monotonic() - t0, 3))
        results_io.write_json(folder / TRIAL_FILE, record)

    def screen_record(self, trials: list[dict]) -> tuple[dict, dict | None, str | None]:
        """tune.json's ``screen`` (the model's ranking, each finalist's modelled figures beside its
        measured ones and whether they disagree beyond the validated error), the best trial as
        measured and confirmed (None where no result stands) and the note on it."""
        p = self.cfg.protocol
        objective = str(p.objective)
        bound = (self.validated or {}).get("bound")
        tol = float(p.search_tolerance)
        modelled = {_key(c["params"]): c for c in self.screened["configs"]}
        by = {_key(t["params"]): t for t in trials}
        rows = []
        for params in self.screened["finalists"]:
            m, t = modelled[_key(params)], by.get(_key(params))
            row = {"params": params, "trial": t["trial"] if t else None,
                   "modelled": {k: m.get(k) for k in ("max_load_under_slo", "objective", "cost_per_mtok_good",
                                                       "rank")},
                   "measured": None if not t or t["status"] != "complete" else
                   {k: t.get(k) for k in ("feasible", "why", "max_load_under_slo", "objective", "cost_per_mtok_good")}}
            if row["measured"] is None:
                row.update(disagrees=None, note="not measured yet")
            elif not row["measured"]["feasible"]:
                row.update(disagrees=True, note=f"the model has it meet the SLO up to {m['max_load_under_slo']:g} "
                                                f"req/s; measured, it is infeasible: {t.get('why')}")
            else:
                row["max_load"] = model_error.disagreement(m["max_load_under_slo"], t["max_load_under_slo"], bound,
                                                           tol)
                row["objective"] = model_error.disagreement(m["objective"], t["objective"], bound, tol)
                flags = [row["max_load"]["disagrees"], row["objective"]["disagrees"]]
                row["disagrees"] = True if True in flags else (None if None in flags else False)
                row["note"] = (f"max load modelled {m['max_load_under_slo']:g} vs measured "
                               f"{t['max_load_under_slo']:g} req/s ({row['max_load']['error']:+.0%}), {objective} "
                               f"{row['objective']['error']:+.0%}: " +
                               ("beyond the validated error and the search's tolerance "
                                f"(±{row['max_load']['limit']:.0%}): the model disagrees with the measurement"
                                if row["disagrees"] else
                                f"within ±{row['max_load']['limit']:.0%}" if row["disagrees"] is False else
                                "not judged: the model is not validated"))
            rows.append(row)
        rec = {k: v for k, v in self.screened.items() if k != "finalists"}
        rec.update(validated_error=self.validated, validated=model_error.describe(self.validated),
                   finalists=rows, disagreeing=[r["trial"] for r in rows if r["disagrees"]])
        best = tune_verdict.best_trial(trials, objective)
        note = None
        confirm = results_io.read_json(self.out / CONFIRM_DIR / TRIAL_FILE, None)
        if best and p.confirm:
            if not confirm or confirm.get("status") != "complete" or _key(confirm["params"]) != _key(best["params"]):
                best, note = None, "the best measured finalist is not confirmed yet (its second measurement)"
            else:
                v = self._verdict(confirm)
                said = (f"confirmed by a second measurement: {objective} {v['objective']:.4g} at max load "
                        f"{v['max_load_under_slo']:g}" if v["feasible"] else
                        f"not confirmed: its second measurement is infeasible: {v['why']}")
                rec["confirmation"] = {"trial": best["trial"], "folder": CONFIRM_DIR, "params": best["params"],
                                       **{k: v.get(k) for k in ("feasible", "why", "max_load_under_slo", "objective",
                                                                "cost_per_mtok_good")}, "said": said}
                if v["feasible"]:
                    best = {**best, "confirmation": rec["confirmation"]}
                else:
                    best, note = None, (f"trial {rec['confirmation']['trial']} was the best measured finalist but "
                                        f"is {said}: no result stands")
        elif best:
            best = {**best, "confirmation": {"said": "one measurement (protocol.confirm=false)"}}
        return rec, best, note

    def with_params(self, params: dict) -> DictConfig:
        """The command's config with the knobs set to ``params`` (each checked against the schema
        for its choices and range ends before the first trial)."""
        cfg = copy.deepcopy(self.cfg)
        for key, value in params.items():
            OmegaConf.update(cfg, key, value, merge=False)
        return cfg

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

    # ------------------------------------------------------------------------------------ the record
    def write_record(self) -> dict:
        """``tune.json``, ``experiment.json`` and ``runs.parquet`` from the trial folders (the
        best trial is the best feasible one, not the study's best value: an infeasible trial's
        value can tie with it)."""
        p = self.cfg.protocol
        objective = str(p.objective)
        trials = []
        for t in self.read_trials():
            entry = {"trial": t["trial"], "folder": t["folder"], "params": t["params"], "overrides": t["overrides"],
                     "status": t["status"], "duration_s": t.get("duration_s"), "error": t.get("error")}
            if t["status"] == "complete":
                entry.update(self._verdict(t))
            else:
                entry.update(feasible=None, why="not finished (interrupted): resumes with the same output_dir")
            trials.append(entry)
        best = tune_verdict.best_trial(trials, objective)
        front = tune_verdict.pareto_front(trials)
        done = [t for t in trials if t["status"] == "complete"]
        screened, screen_note = None, None
        if self.screened is not None:
            screened, best, screen_note = self.screen_record(trials)
        record = {
            "protocol": "tune", "status": self.status, "output_dir": str(self.out),
            "experiment": str(self.cfg.experiment),
            "objective": objective, "direction": tune_verdict.DIRECTIONS[objective], "sampler": str(p.sampler),
            "seed": self.seed, "budget": self.trials,
            "startup_trials": plan.startup_trials(p.startup_trials) if p.sampler == "tpe" else None,
            "space": [{"key": k.key, **({"choices": list(k.choices)} if k.choices is not None else
                                         {"low": k.low, "high": k.high, "log": k.log, "step": k.step})}
                      for k in self.knobs],
            "study": None if self.screening else {"storage": STUDY_FILE, "name": f"tune-{objective}",
                                                  "sampler": self.sampler},
            "infeasible_told_as": tune_verdict.study_value(None, objective),
            "search": {"load_kind": str(self.cfg.load.kind), "low": p.search_low, "high": p.search_high,
                       "tolerance": float(p.search_tolerance), "max_probes": int(p.search_max_probes)},
            "slo": results_io.redact(OmegaConf.to_container(self.cfg.slo, resolve=True)),
            "suggestions": self.suggestions,
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
        results_io.write_json(self.out / TUNE_FILE, record)
        results_io.write_json(self.out / results_io.EXPERIMENT, {**self.experiment_json(record),
                                                                  "answer": record["answer"]})
        self.write_runs(trials)
        return record

    def experiment_json(self, record: dict) -> dict:
        done = record["evaluated"] > 0
        best = record["best"]
        steps = steps_record([
            (1, done, "fixed conditions recorded with every trial's runs (run.json); a trial whose record says the "
                      "quality gate failed is infeasible"),
            (2, done, f"workload.json per run ({self.cfg.workload.name}), the same workload for every trial"),
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
            self.cfg, status=record["status"], out=self.out, overrides=self.overrides, seed=self.seed,
            configs={f"trial{t['trial']}": t["overrides"] for t in record["trials"]}, baseline="", steps=steps,
            runs_finished=sum(1 for _ in self.out.glob(f"{TRIALS_DIR}/*/**/{results_io.SUMMARY}")), tune=TUNE_FILE)

    def write_runs(self, trials: list[dict]) -> None:
        """``runs.parquet``: every trial's runs, ``config`` = trial<n>, with its params as columns."""
        by_folder = {t["folder"]: t for t in trials}
        rows = []
        for r in run_rows(self.out):
            parts = Path(r["run_dir"]).parts
            t = by_folder.get(str(Path(*parts[:2]))) if len(parts) >= 2 else None
            if t is None:
                continue
            r = {**r, "config": f"trial{t['trial']}", "run_dir": r["run_dir"],
                 **{f"param.{k}": v for k, v in t["params"].items()}}
            rows.append(r)
        if rows:
            write_runs_table(self.out, rows)

    # ------------------------------------------------------------------------------------ MLflow
    def start_mlflow(self) -> None:
        """A parent run for the tune; each trial's own parent run becomes its child."""
        self.mlflow = start_parent(self.cfg, self.out, name=f"tune {self.out.name}", tags={"tokenfactory.kind": "tune"},
                                   strict=True)

    def _mlflow_child(self, folder: Path, number: int, params: dict, verdict: dict) -> None:
        from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID, MLFLOW_RUN_NAME

        marker = folder / "mlflow_parent.txt"
        if not marker.exists():
            return
        rid = marker.read_text().strip()
        client = self.mlflow.client
        client.set_tag(rid, MLFLOW_PARENT_RUN_ID, self.mlflow.parent_id)
        client.set_tag(rid, MLFLOW_RUN_NAME, f"trial {number}")
        client.set_tag(rid, "tokenfactory.kind", "tune_trial")
        client.set_tag(rid, "tune.feasible", str(verdict["feasible"]))
        if verdict["why"]:
            client.set_tag(rid, "tune.why", str(verdict["why"])[:5000])
        for k, v in params.items():
            client.set_tag(rid, f"tune.param.{k}"[:250], str(v))
        for k in ("objective", "max_load_under_slo", "cost_per_mtok_good", "goodput_rps", "goodput_per_dollar"):
            v = verdict.get(k)
            if isinstance(v, (int, float)) and math.isfinite(v):
                client.log_metric(rid, f"tune.{k}", float(v))

    def finish(self, record: dict) -> Path:
        """The finishing step every protocol shares (``harness.finish``): the tune's aggregates
        and ``tune.json`` on its parent run, which ends with the tune's status."""
        best = record["best"]
        metrics = {"tune.evaluated": record["evaluated"], "tune.feasible": record["feasible"]}
        if best:
            metrics.update({"tune.best_objective": best["objective"], "tune.best_trial": best["trial"],
                            "tune.best_max_load_under_slo": best["max_load_under_slo"],
                            "tune.best_cost_per_mtok_good": best["cost_per_mtok_good"]})
        return finish_run(self.cfg, self.out, self.mlflow, metrics=metrics, artifacts=(TUNE_FILE,), answer=record,
                          end={"complete": "FINISHED", "interrupted": "KILLED"}.get(self.status, "FAILED"),
                          report=lambda: write_tune_page(self.out))


def quality_verdict(folder: Path) -> tuple[bool | None, str | None]:
    """Whether a trial's record says the quality gate failed: ``quality_gate_passed`` in its
    experiment.json, the verdicts under its ``quality_gate``, or any of its runs' summaries
    (None: no gate verdict in the record)."""
    verdicts: list[tuple[bool, str | None]] = []
    path = folder / results_io.EXPERIMENT
    rec = results_io.read_json(path, {})
    if isinstance(rec.get("quality_gate_passed"), bool):
        verdicts.append((rec["quality_gate_passed"], rec.get("quality_gate_reason")))
    for v in ((rec.get("quality_gate") or {}).get("configs") or {}).values():
        if isinstance(v, dict) and isinstance(v.get("passed"), bool):
            verdicts.append((v["passed"], v.get("reason")))
    for s in folder.rglob(results_io.SUMMARY):
        m = results_io.read_json(s)
        if isinstance(m.get("quality_gate_passed"), bool):
            verdicts.append((m["quality_gate_passed"], m.get("quality_gate_reason")))
    if not verdicts:
        return None, None
    failed = [why for ok, why in verdicts if not ok]
    return (False, failed[0]) if failed else (True, None)
