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
``prebuild`` (requests built before the engine starts), ``inputs``, ``point_run``,
``session``, ``progress``.
"""

from __future__ import annotations

from harness.point.console import point_line, print_point
from harness.point.dispatch import PREPARE_CODE, dispatch
from harness.point.fault_keys import add_fault_keys
from harness.point.inputs import PointInputs, saturation_guard
from harness.point.point_run import PointRun
from harness.point.prebuild import prebuild
from harness.point.session import PointSession
from harness.point.steps import (
    POINT_STEPS,
    autoscale_record,
    build_workload,
    close_window,
    describe_workload,
    engine_counters_end,
    engine_counters_start,
    engine_survived,
    export_otlp,
    log_mlflow,
    prepare_folder,
    reset_cache,
    settle_faults,
    write_results,
)
from harness.point.summary import planned_keys, summarise

__all__ = [
    "POINT_STEPS", "PREPARE_CODE", "PointInputs", "PointRun", "PointSession", "add_fault_keys", "autoscale_record",
    "build_workload", "close_window", "describe_workload", "dispatch", "engine_counters_end", "engine_counters_start",
    "engine_survived", "export_otlp", "log_mlflow", "planned_keys", "point_line", "prebuild", "prepare_folder",
    "print_point", "reset_cache", "saturation_guard", "settle_faults", "summarise", "write_results",
]
