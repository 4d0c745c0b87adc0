"""protocol=tune: the Optuna study (ask and tell) that suggests the trials."""

from __future__ import annotations

import optuna

from metrics import tune_verdict
from protocols.tune import plan

STUDY_FILE = "study.db"  # Optuna's storage: the study a rerun with the same output_dir continues


class StudySearch:
    """The tune's Optuna study and the search over its budget of suggestions."""

    def open_study(self) -> optuna.Study:
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
