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

import sys
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from conf.overrides import explicit_keys
from conf.schema import ConfigError, validate
from harness import results_io
from harness.errors import UserError
from metrics import tune_verdict
from protocols.experiment import check_config
from protocols.plan.modelled import residuals_error
from protocols.plan.residuals import DEFAULT as RESIDUALS_DEFAULT
from protocols.plan.residuals import read_residuals
from protocols.tune import plan, screen
from protocols.tune.configs import TrialConfigs
from protocols.tune.finalists import Finalists
from protocols.tune.mlflow_log import TuneMlflow
from protocols.tune.plan import finalists_table, screen_table
from protocols.tune.quality import TrialQuality
from protocols.tune.record import TuneRecord
from protocols.tune.search import STUDY_FILE, StudySearch
from protocols.tune.trials import TRIALS_DIR, Trials


class Tuner(TrialConfigs, TrialQuality, StudySearch, Trials, Finalists, TuneRecord, TuneMlflow):
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
