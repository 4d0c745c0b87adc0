"""protocol=tune: the Optuna study (ask and tell) that suggests the trials."""

from __future__ import annotations

import optuna

from metrics import tune_verdict
from protocols.tune import plan
from protocols.tune.state import TuneState
from protocols.tune.trials import Trials

STUDY_FILE = "study.db"  # Optuna's storage: the study a rerun with the same output_dir continues


class StudySearch:
    """The tune's Optuna study and the search over its budget of suggestions, each run by ``trials``."""

    def __init__(self, state: TuneState, trials: Trials):
        self.state = state
        self.trials = trials

    def open_study(self) -> optuna.Study:
        """The tune's Optuna study in ``OUT/study.db``, created or loaded (one per objective: a
        study's direction is fixed, and the trials' folders are shared by all)."""
        optuna.logging.set_verbosity(optuna.logging.WARNING)  # the tune prints each suggestion itself
        st = self.state
        p = st.cfg.protocol
        objective = str(p.objective)
        return optuna.create_study(storage=f"sqlite:///{(st.out / STUDY_FILE).resolve()}",
                                   study_name=f"tune-{objective}", direction=tune_verdict.DIRECTIONS[objective],
                                   sampler=plan.make_sampler(str(p.sampler), st.knobs, st.seed,
                                                             p.startup_trials),
                                   load_if_exists=True)

    def search(self, study: optuna.Study) -> None:
        """The budget of suggestions: those the study already holds first (told ones read back
        from their trials, one asked but never told run again and told), then new ones asked."""
        st = self.state
        for asked in sorted(study.get_trials(deepcopy=False), key=lambda t: t.number)[:st.budget]:
            value = self.trials.run_trial(asked.params)
            if asked.state == optuna.trial.TrialState.RUNNING:  # interrupted before it was told
                study.tell(asked.number, value)
        while len(st.suggestions) < st.budget:
            trial = study.ask(st.space)
            study.tell(trial, self.trials.run_trial(trial.params))
