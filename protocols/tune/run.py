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

The steps, an object each in a module of its own, composed by ``Tuner`` and sharing one
``state.TuneState`` (the checked settings; the suggestions, the screen's ranking, the parent run
and the status the run adds): ``quality.TrialQuality`` (the reference outputs, a trial's quality
verdict), ``trials.Trials`` (one trial: reused, resumed or run, and judged; the trials' shared
base), ``search.StudySearch`` (the study), ``finalists.Finalists`` (screen=model),
``record.TuneRecord`` (tune.json, and what experiment.json, runs.parquet and the parent run take
from it); with ``configs`` (a trial's config; the checks of the bracket and the knobs) and
``mlflow_log`` (a trial's run as the parent's child) as functions.  Here: the command's checks,
the order of the steps, the console, and the parent run (``Tuner.parent_run``).
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
from protocols.tune.state import TuneState
from protocols.tune.trials import TRIALS_DIR, Trials, check_base


class Tuner:
    """One tune, its steps run in order: the quality gate's reference (``TrialQuality``), the study's
    search (``StudySearch``) or the screen's finalists (``Finalists``), each a trial (``Trials``), and
    the record (``TuneRecord``); they share the tune's ``TuneState``.  Here: the command's checks,
    the console and the parent run."""

    def __init__(self, cfg: DictConfig, overrides: list[str]):
        overrides = list(overrides)
        p = cfg.protocol
        try:
            validate(cfg)
            space = OmegaConf.to_container(p.space, resolve=True) if isinstance(p.space, DictConfig) else p.space
            knobs = plan.parse_space(space)
            explicit = explicit_keys(overrides)
            for k in knobs:
                if k.key in explicit:
                    raise ValueError(f"protocol.space.{k.key}: also set on the command line; a knob's value comes "
                                     "from the search")
            screening = p.screen == "model"
            if screening:
                screen.check(cfg, knobs)
            grid = plan.grid_size(knobs) if p.sampler == "grid" or screening else None
            check_bracket(cfg)
            check_knobs(cfg, knobs, grid)
            check_config(trial_config(cfg, Path(".")))
        except (ConfigError, ValueError) as e:
            raise UserError(str(e)) from None
        seed = int(p.seed if p.seed is not None else cfg.seed)
        budget = int(p.trials) if grid is None else min(int(p.trials), grid)
        if screening:  # the budget of measurements: the finalists
            budget = min(int(p.finalists), grid)
        self.state = TuneState(
            cfg=cfg, overrides=overrides, explicit=explicit, knobs=knobs,
            out=Path(cfg.output_dir or Path("results") / str(cfg.experiment) / results_io.new_run_id()),
            seed=seed, budget=budget, grid=grid, screening=screening,
            space=plan.search_space(knobs, grid=grid is not None),
            sampler=plan.describe_sampler(str(p.sampler), seed, p.startup_trials))
        self.quality = TrialQuality(self.state)
        self.trials = Trials(self.state, self.quality)
        self.search = StudySearch(self.state, self.trials)
        self.finalists = Finalists(self.state, self.trials)
        self.record = TuneRecord(self.state, self.trials, self.finalists)

    def describe(self) -> str:
        st = self.state
        p = st.cfg.protocol
        closed = st.cfg.load.kind == "concurrency"
        how = (f"tune: the grid's {st.grid} configs screened on the scheduler model (modelled), the {st.budget} "
               f"best measured, the winner measured again (seed {st.seed}" if st.screening else
               f"tune: {st.budget} suggestions ({p.sampler} sampler, seed {st.seed}"
               + (f", {plan.startup_trials(p.startup_trials)} random first" if p.sampler == "tpe"
                  else "") + (f"; the grid has {st.grid} configs" if st.grid else ""))
        lines = [how
                 + f") over {len(st.knobs)} knob(s); objective {p.objective} "
                 f"({tune_verdict.DIRECTIONS[str(p.objective)]}) at the max load under the SLO ("
                 + ("users" if closed else "requests/s") + f" in [{p.search_low or 'from the load points'}, "
                 f"{p.search_high or '...'}], tolerance {float(p.search_tolerance):.0%})"]
        for k in st.knobs:
            lines.append(f"  {k.key}: " + (f"{list(k.choices)}" if k.choices is not None else
                                          f"{'int' if k.integer else 'float'} {k.low}..{k.high}"
                                          + (" log" if k.log else "") + (f" step {k.step}" if k.step else "")))
        lines.append(f"screen: {st.out / screen.SCREEN_FILE}; base {p.base_experiment}" if st.screening else
                     f"sampler: {st.sampler}; study: {st.out / STUDY_FILE}")
        lines.append(f"would write to {st.out} (trials in {st.out / TRIALS_DIR}/<n>/)")
        return "\n".join(lines)

    # ------------------------------------------------------------------------------------ the steps
    def run(self) -> Path:
        st = self.state
        if st.cfg.protocol.dry_run:
            print(self.describe())
            return st.out
        st.out.mkdir(parents=True, exist_ok=True)
        check_base(st.cfg, st.knobs, st.out, self.trials.read_trials())
        done = [t for t in self.trials.read_trials() if t.get("status") == "complete"]
        print(self.describe().rsplit("\n", 1)[0], flush=True)
        if done:
            print(f"resuming {st.out}: {len(done)} trial(s) already evaluated are read back, not run again",
                  flush=True)
        if st.screening:
            given = st.cfg.protocol.residuals
            st.validated = residuals_error(read_residuals(str(given) if given else RESIDUALS_DEFAULT))
            st.screened = screen.screen(st.cfg, st.knobs)
            results_io.write_json(st.out / screen.SCREEN_FILE, st.screened)
            print(screen_table(st.screened), flush=True)
        study: list[optuna.Study] = []

        def prepare() -> None:  # the quality gate's reference outputs, then the study (none when screening)
            self.quality.reference_outputs()
            study.extend([] if st.screening else [self.search.open_study()])

        def steps() -> None:  # the trials: the screen's finalists, or the study's suggestions
            if st.screening:
                self.finalists.measure_finalists()
            else:
                self.search.search(study[0])

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
        st = self.state
        st.mlflow = start_parent(st.cfg, st.out, name=f"tune {st.out.name}", tags={"tokenfactory.kind": "tune"},
                                 strict=True)
        prepare()
        st.status = "running"

        def write() -> dict:
            record = self.record.write_tune_record()
            results_io.write_json(st.out / results_io.EXPERIMENT, {**self.record.experiment_json(record),
                                                                    "answer": record["answer"]})
            rows = trial_runs(st.out, record["trials"])
            if rows:
                write_runs_table(st.out, rows)
            return record

        def end(record: dict) -> Path:
            return finish_run(st.cfg, st.out, st.mlflow, metrics=finish_metrics(record), artifacts=(TUNE_FILE,),
                              answer=record, end={"complete": "FINISHED", "interrupted": "KILLED"}.get(st.status,
                                                                                                     "FAILED"),
                              report=lambda: write_tune_page(st.out))

        write()
        try:
            steps()
            st.status = "complete"
        except KeyboardInterrupt:
            st.status = "interrupted"
            print(f"\nfinished trials are kept; to resume, run the same command with output_dir={st.out}",
                  file=sys.stderr, flush=True)
            raise
        except Exception:
            st.status = "failed"
            raise
        finally:
            record = write()
            if st.status != "complete":  # failing or interrupted: the record logged before the error is told
                end(record)
        show(record)
        return end(record)
