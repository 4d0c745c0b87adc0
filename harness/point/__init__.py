"""One load point as named steps, in the order ``POINT_STEPS`` runs them.

Each step is ``step(session, point)``: ``session`` is the ``EngineSession`` (engine,
telemetry, client config, prompt builder; what the steps use of it: ``session.PointSession``),
``point`` the ``PointRun`` that carries what earlier steps made.  A protocol can run its own
list (skip the cache reset, add a fault between dispatch and the window's close, ...).  What a
point reads of the config is read once, typed (``PointInputs``); ``summary.json`` is assembled
in one step (``summarise``) and written last of the files: a folder without it is not a
finished run.

Modules: ``steps`` (the steps and ``POINT_STEPS``), ``dispatch`` (local, worker processes,
Ray), ``summary`` (its keys, with ``fault_keys`` and ``roofline_keys``), ``console``,
``prebuild`` (each workload built, described and its requests prepared before the engine starts),
``inputs``, ``point_run``, ``session``, ``progress``.  The names below are the package's (``from harness.point import
prebuild``), each re-exported by its ``as`` alias.
"""

from __future__ import annotations

from harness.point.console import point_line as point_line
from harness.point.console import print_point as print_point
from harness.point.dispatch import PREPARE_CODE as PREPARE_CODE
from harness.point.dispatch import dispatch as dispatch
from harness.point.fault_keys import add_fault_keys as add_fault_keys
from harness.point.inputs import PointInputs as PointInputs
from harness.point.inputs import saturation_guard as saturation_guard
from harness.point.point_run import PointRun as PointRun
from harness.point.prebuild import prebuild as prebuild
from harness.point.session import PointSession as PointSession
from harness.point.steps import POINT_STEPS as POINT_STEPS
from harness.point.steps import autoscale_record as autoscale_record
from harness.point.steps import build_workload as build_workload
from harness.point.steps import close_window as close_window
from harness.point.steps import describe_workload as describe_workload
from harness.point.steps import engine_counters_end as engine_counters_end
from harness.point.steps import engine_counters_start as engine_counters_start
from harness.point.steps import engine_survived as engine_survived
from harness.point.steps import export_otlp as export_otlp
from harness.point.steps import log_mlflow as log_mlflow
from harness.point.steps import prepare_folder as prepare_folder
from harness.point.steps import reset_cache as reset_cache
from harness.point.steps import settle_faults as settle_faults
from harness.point.steps import write_results as write_results
from harness.point.summary import planned_keys as planned_keys
from harness.point.summary import summarise as summarise

