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

The steps, a module each: ``configs`` (a trial's config; the checks of the bracket and the knobs),
``quality`` (the reference outputs, a trial's quality verdict), ``search`` (the study), ``trials``
(one trial: reused, resumed or run, and judged; the trials' shared base), ``finalists``
(screen=model), ``record`` (tune.json, and what experiment.json, runs.parquet and the parent run
take from it), ``mlflow_log`` (a trial's run as the parent's child).  Here: the command's checks,
the console, and the parent run (``Tuner.parent_run``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import optuna
from omegaconf import DictConfig, OmegaConf

from conf.overrides import explicit_keys
from conf.schema import ConfigError, validate
from harness import results_io
from harness.errors import UserError
from harness.experiment_record import write_runs_table
from harness.finish import finish_run
from harness.parent_run import start_parent
from harness.report.tune import write_tune_page
from metrics import tune_verdict
from protocols.experiment import check_config
from protocols.plan.modelled import residuals_error
from protocols.plan.residuals import DEFAULT as RESIDUALS_DEFAULT
from protocols.plan.residuals import read_residuals
from protocols.tune import plan, screen
from protocols.tune.configs import check_bracket, check_knobs, trial_config
from protocols.tune.finalists import Finalists
from protocols.tune.plan import finalists_table, screen_table
from protocols.tune.quality import TrialQuality
from protocols.tune.record import TUNE_FILE, TuneRecord, finish_metrics, trial_runs
from protocols.tune.search import STUDY_FILE, StudySearch
from protocols.tune.trials import TRIALS_DIR, Trials, check_base


class Tuner(TrialQuality, StudySearch, Trials, Finalists, TuneRecord):
    """One tune: its config and knobs, its folder, its steps (the quality gate's reference, the
    study's search or the screen's finalists, each trial) and its parent run."""

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
            check_bracket(cfg)
            check_knobs(cfg, self.knobs, self.grid)
            check_config(trial_config(cfg, Path(".")))
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

    # ------------------------------------------------------------------------------------ the steps
    def run(self) -> Path:
        if self.cfg.protocol.dry_run:
            print(self.describe())
            return self.out
        self.out.mkdir(parents=True, exist_ok=True)
        check_base(self.cfg, self.knobs, self.out, self.read_trials())
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
        study: list[optuna.Study] = []

        def prepare() -> None:  # the quality gate's reference outputs, then the study (none when screening)
            self.reference_outputs()
            study.extend([] if self.screening else [self.open_study()])

        def steps() -> None:  # the trials: the screen's finalists, or the study's suggestions
            if self.screening:
                self.measure_finalists()
            else:
                self.search(study[0])

        return self.parent_run(prepare, steps, self.show)

    def show(self, record: dict) -> None:
        """The tune on the console: its trials, the best and the Pareto front."""
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

    # ------------------------------------------------------------------------------------ the parent run
    def parent_run(self, prepare: Callable[[], None], steps: Callable[[], None],
                   show: Callable[[dict], None]) -> Path:
        """The tune's parent run, all of it here (a shared lifecycle can take its place): the MLflow
        parent started (each trial's run becomes its child), ``prepare`` run, the record written
        (``tune.json``, ``experiment.json``, ``runs.parquet``) before and after ``steps`` with the
        status they end in (complete, interrupted, failed), the parent ended FINISHED, KILLED or
        FAILED with the tune's aggregates (``harness.finish``); ``show`` puts the record on the
        console before a complete tune finishes."""
        self.mlflow = start_parent(self.cfg, self.out, name=f"tune {self.out.name}", tags={"tokenfactory.kind": "tune"},
                                   strict=True)
        prepare()
        self.status = "running"

        def write() -> dict:
            record = self.write_tune_record()
            results_io.write_json(self.out / results_io.EXPERIMENT, {**self.experiment_json(record),
                                                                      "answer": record["answer"]})
            rows = trial_runs(self.out, record["trials"])
            if rows:
                write_runs_table(self.out, rows)
            return record

        def end(record: dict) -> Path:
            return finish_run(self.cfg, self.out, self.mlflow, metrics=finish_metrics(record), artifacts=(TUNE_FILE,),
                              answer=record, end={"complete": "FINISHED", "interrupted": "KILLED"}.get(self.status,
                                                                                                       "FAILED"),
                              report=lambda: write_tune_page(self.out))

        write()
        try:
            steps()
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
            record = write()
            if self.status != "complete":  # failing or interrupted: the record logged before the error is told
                end(record)
        show(record)
        return end(record)
