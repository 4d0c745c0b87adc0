"""protocol=tune: what the tune's steps share (``TuneState``): the command's settings, fixed once the
``Tuner`` has checked them, and the few values the run adds (the suggestions, the screen's ranking,
the parent run, the status)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig
from optuna.distributions import BaseDistribution

from harness.mlflow_log import MlflowLogger
from protocols.tune import plan


@dataclass
class TuneState:
    """One tune's state.  The settings are written by ``Tuner`` and read by every step; below them,
    who writes each value the run adds (the record reads them all)."""

    cfg: DictConfig
    overrides: list[str]
    explicit: frozenset[str]          # the keys set on the command line (a trial's experiment is told them)
    knobs: list[plan.Knob]
    out: Path
    seed: int
    budget: int                       # the suggestions to evaluate (screen=model: the finalists)
    grid: int | None                  # the grid's size (sampler=grid or screen=model), else None
    screening: bool                   # protocol.screen=model
    space: dict[str, BaseDistribution]
    sampler: str                      # the sampler as the record names it
    suggestions: list[dict] = field(default_factory=list)  # Trials: each suggestion, in order, and its trial
    screened: dict | None = None      # Tuner.run, screen=model: the model's ranking (protocols.tune.screen)
    validated: dict | None = None     # Tuner.run, screen=model: the model's validated error
    mlflow: MlflowLogger | None = None  # Tuner.run_steps: the parent run each trial's run becomes a child of
    status: str = "planned"           # Tuner.record_as: planned, running, complete, interrupted, failed
