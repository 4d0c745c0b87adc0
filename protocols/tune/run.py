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
the order of the steps and the console; the parent run, the record's status on finish, interrupt
and failure, and the answer printed last are the run lifecycle's (``harness.lifecycle``: ``Tuner`` is
its ``RunSteps``; a stopped tune is finished too, its finished trials logged).
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from conf.overrides import explicit_keys
from conf.schema import ConfigError, validate
from harness import results_io
from harness.errors import UserError
from harness.lifecycle import Ending, Lifecycle, ParentRun, RunRecord, run_lifecycle
from harness.mlflow_log import MlflowLogger
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
    the console, and the lifecycle's steps (``run_steps``, ``record_as``, ``ending``)."""

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
        self.written: dict | None = None  # tune.json as the lifecycle last recorded it (record_as)

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
        return run_lifecycle(st.cfg, st.out, self, options=Lifecycle(
            parent=ParentRun(name=f"tune {st.out.name}", tags={"tokenfactory.kind": "tune"}, strict=True),
            resume_hint="finished trials are kept; to resume, run the same command with output_dir={out}",
            finish_stopped=True))  # a stopped tune is finished too: its finished trials are the record

    def run_steps(self, parent: MlflowLogger | None) -> None:
        """The lifecycle's runs: the quality gate's reference outputs, then the trials (the screen's
        finalists, or the study's suggestions); each trial's run a child of ``parent``."""
        st = self.state
        st.mlflow = parent
        self.quality.reference_outputs()
        if st.screening:
            self.finalists.measure_finalists()
        else:
            self.search.search(self.search.open_study())

    def record_as(self, status: str) -> RunRecord:
        """tune.json with ``status``, rebuilt from the trials, and from it experiment.json and runs.parquet."""
        st = self.state
        st.status = status
        self.written = self.record.write_tune_record()
        return RunRecord({**self.record.experiment_json(self.written), "answer": self.written["answer"]},
                         trial_runs(st.out, self.written["trials"]))

    def ending(self, status: str) -> Ending:
        """The tune's aggregates, tune.json and its page for the parent run; a complete tune shown first."""
        record = self.written
        if status == "complete":
            self.show(record)
        return Ending(metrics=finish_metrics(record), artifacts=(TUNE_FILE,), answer=record,
                      report=lambda: write_tune_page(self.state.out))

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
