"""One run lifecycle for every protocol: the record as the run starts, the MLflow parent run, the
status on finish, interrupt (Ctrl-C, and SIGTERM as ``harness.commands.interrupts.Terminated``)
and failure, the record as the run stopped, the protocol's own record and the answer printed last.

A protocol plugs in three steps (``RunSteps``; ``protocols.experiment.Experiment`` is one):

- ``run_steps(parent)``: its runs (engine sessions, simulations, a judgement ...); ``parent`` is
  the MLflow parent run (None: MLflow off, or a protocol without one);
- ``record_as(status)``: ``experiment.json`` as the run folders stand (and the rows of
  ``runs.parquet``, where it keeps them) for the status ``running``, ``complete``,
  ``interrupted`` or ``failed`` (``RunRecord``; None: the protocol keeps no experiment.json);
  the lifecycle writes both files (``harness.experiment_record.write_experiment``);
- ``ending(status)``: after the runs, the protocol's own record (comparison.json, plan.json,
  profile.json ...) and what the parent run gets and the console ends on (``Ending``; None:
  nothing to end on).

``run_lifecycle(cfg, out, steps, pending=..., options=Lifecycle(...))`` runs them in this order::

    record_as("running" | "complete")            # pending=False: nothing left to run (a resume)
    parent = start_parent(...)                  # options.parent; only when something is pending
    try: run_steps(parent)                      # FINISHED
    except KeyboardInterrupt: the resume hint   # KILLED, then raised again
    except Exception:                           # FAILED, raised again
    finally: record_as("complete" | "interrupted" | "failed"), the parent ended where it stopped
    ending("complete") -> harness.finish.finish_run: the parent's metrics, files, report, its end,
                          "results: OUT" and the answer, the console's last lines

``options.finish_stopped``: ``ending`` is called also for a run that stopped (its status
``interrupted`` or ``failed``), and the parent run ends with that status after the record is
logged (a tune's finished trials, a promotion's decisions).  ``options.parent=None``: a protocol
over other experiments' results (plan, track): no MLflow parent run, no ``results:`` line; the
console ends on the answer alone.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from omegaconf import DictConfig

from harness.answer_record import console_lines
from harness.experiment_record import write_experiment
from harness.finish import finish_run
from harness.mlflow_log import MlflowLogger
from harness.parent_run import start_parent

# the MLflow parent run's status -> experiment.json's
FINISHED, KILLED, FAILED = "FINISHED", "KILLED", "FAILED"
STATUS = {FINISHED: "complete", KILLED: "interrupted", FAILED: "failed"}
RESUME_HINT = "to resume, run the same command with output_dir={out}"


@dataclass(frozen=True)
class ParentRun:
    """How the MLflow parent run starts (``harness.parent_run.start_parent``)."""
    name: str | None = None
    tags: Mapping[str, str] | None = None
    strict: bool = False
    resume: bool = True


@dataclass(frozen=True)
class Lifecycle:
    """A protocol's choices (module doc): its parent run (None: none), the line that says how to
    resume after an interrupt (``{out}``: the folder; None: nothing said), and whether a run that
    stopped is finished too."""
    parent: ParentRun | None = ParentRun()
    resume_hint: str | None = RESUME_HINT
    finish_stopped: bool = False


@dataclass(frozen=True)
class RunRecord:
    """``experiment.json`` (``harness.experiment_record.experiment_record``) and, where the
    protocol keeps one, the rows of ``runs.parquet`` (None, or none yet: the file is left as it is)."""
    experiment: dict
    rows: list[dict] | None = None


@dataclass(frozen=True)
class Ending:
    """What the end of a run hands the parent run and the console: ``metrics`` (the record's
    aggregates), ``artifacts`` (files in the folder, logged where they exist), ``report`` (draws
    the report, returning a file to log or None), ``answer`` (a record with ``answer`` and
    ``warnings``, ``harness.answer_record``: printed last), ``end`` (the parent run's status where
    not the run's own: a promotion that neither promoted nor rolled back ends FAILED)."""
    metrics: Mapping[str, float] | None = None
    artifacts: tuple[str, ...] = ()
    report: Callable[[], Path | None] | None = None
    answer: Mapping | None = None
    end: str | None = None


class RunSteps(Protocol):
    """The steps a protocol plugs into the lifecycle (module doc)."""

    def run_steps(self, parent: MlflowLogger | None) -> None: ...

    def record_as(self, status: str) -> RunRecord | None: ...

    def ending(self, status: str) -> Ending | None: ...


def run_lifecycle(cfg: DictConfig, out: Path, steps: RunSteps, *, pending: bool = True,
                  options: Lifecycle = Lifecycle()) -> Path:
    """Run ``steps`` in ``out`` (module doc); ``pending``: some run is left to do (False: the record
    is rebuilt and finished, no parent run started).  Returns ``out``; an interrupt or an error of
    the steps is raised again once the record says so."""
    _write(out, steps.record_as("running" if pending else STATUS[FINISHED]))
    if not pending:
        return _finish(cfg, out, None, steps, FINISHED, options)
    parent = start_parent(cfg, out, **vars(options.parent)) if options.parent is not None else None
    status = FAILED
    try:
        steps.run_steps(parent)
        status = FINISHED
    except KeyboardInterrupt:
        status = KILLED
        if options.resume_hint:
            print("\n" + options.resume_hint.format(out=out), file=sys.stderr, flush=True)
        raise
    finally:
        _stopped(cfg, out, parent, steps, status, options)
    return _finish(cfg, out, parent, steps, FINISHED, options)


def _stopped(cfg, out: Path, parent: MlflowLogger | None, steps: RunSteps, status: str, options: Lifecycle) -> None:
    """The record as the run stopped; a stopped run's parent ended (or finished, ``finish_stopped``)."""
    try:
        _write(out, steps.record_as(STATUS[status]))
    except OSError:
        if status == FINISHED:
            raise
        # already failing (a full disk, say): the error that stopped the run is the one to tell
    if status != FINISHED:
        if options.finish_stopped:
            _finish(cfg, out, parent, steps, status, options)
        elif parent is not None:
            parent.end_parent(status)


def _finish(cfg, out: Path, parent: MlflowLogger | None, steps: RunSteps, status: str, options: Lifecycle) -> Path:
    """The protocol's ending, logged on the parent run, which then ends; the answer printed last."""
    try:
        end = steps.ending(STATUS[status])
    except BaseException:
        if parent is not None:  # the runs ended as they did; the record's failure is told as itself
            parent.end_parent(status)
        raise
    if end is None:
        if parent is not None:
            parent.end_parent(status)
        return out
    if options.parent is None:
        for line in console_lines(end.answer or {}):
            print(line, flush=True)
        return out
    return finish_run(cfg, out, parent, metrics=dict(end.metrics or {}), artifacts=end.artifacts, report=end.report,
                      end=(end.end or status) if parent is not None else None, answer=end.answer)


def _write(out: Path, record: RunRecord | None) -> None:
    if record is not None:
        write_experiment(out, record.experiment, record.rows)
