"""A load point's steps, in the order ``POINT_STEPS`` runs them; each is ``step(session, point)``
(``harness.point.session.PointSession``, ``harness.point.point_run.PointRun``).  The dispatch,
the summary's assembly and the console have modules of their own (``harness.point.dispatch``,
``.summary``, ``.console``)."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass

from conf.load_point import RunSpec
from engines.base import EngineError
from harness import autoscale_record as autoscale  # (this module has its own autoscale_record step)
from harness import results_io, workload_describe
from harness.errors import UserError
from harness.mlflow_log import child_run_name
from harness.otlp_export import run_attributes
from harness.point.console import print_point
from harness.point.dispatch import dispatch
from harness.point.inputs import saturation_guard
from harness.point.point_run import PointRun
from harness.point.session import PointSession
from harness.point.summary import summarise
from loadgen.dispatch import LoadSpec
from loadgen.workloads.build import make_workload

perf_ns = time.perf_counter_ns


def prepare_folder(s: PointSession, p: PointRun) -> None:
    """The run folder, without what a previous, interrupted attempt left under final names."""
    p.run_dir.mkdir(parents=True, exist_ok=True)
    if results_io.run_failed(p.run_dir):  # a failed attempt runs again; what it measured is kept apart
        results_io.keep_failed_attempt(p.run_dir)
    for stale in (results_io.SUMMARY, results_io.REQUESTS):
        (p.run_dir / stale).unlink(missing_ok=True)
    p.load = LoadSpec.from_load(p.spec.load)
    p.load.stop_when_saturated = saturation_guard(p.spec.load, p.inputs.autoscaled)


def reset_cache(s: PointSession, p: PointRun) -> None:
    """``engine.cache_state=cold``: empty the engine's prefix cache before the load; ``primed``:
    empty it, then put every shared prefix in it (``harness.scenarios.prime_prefixes``)."""
    state = p.inputs.cache_state
    if state not in ("cold", "primed"):
        return
    try:
        if not s.engine.reset_cache():
            raise UserError(f"engine={s.engine.name} has no way to reset its cache; use engine.cache_state=warm")
        if state == "primed":
            from harness.scenarios import prime_prefixes

            prime_prefixes(s)
    except (EngineError, ValueError) as e:
        raise UserError(str(e)) from None


def engine_counters_start(s: PointSession, p: PointRun) -> None:
    """The run's own share of the engine's counters starts here."""
    if s.engine_metrics:
        s.telemetry.engine_snapshot("start")


def build_workload(s: PointSession, p: PointRun) -> None:
    try:
        p.items = make_workload(p.inputs.workload, s.builder, p.load.requests_to_send, s.engine.max_model_len())
    except ValueError as e:
        raise UserError(str(e)) from None


@dataclass
class WorkloadDescription:
    """A point's workload description computed before its engine started (``harness.point.prebuild``):
    ``workload.json``'s numbers, and whether ``workload.html`` was drawn from it (into the session's folder)."""

    stats: dict
    figures: bool


def description_key(spec: RunSpec) -> tuple:
    """A point's key in ``session.workload_descriptions``."""
    return spec.subdir, spec.index, spec.label, spec.repeat


def describe_workload(s: PointSession, p: PointRun) -> None:
    """workload.json in the run folder (logged to MLflow with it); the figures (workload.html)
    once, in the experiment's folder and its MLflow parent run.  Both were computed before the
    engine started (``harness.point.prebuild``), so the window holds only a file's
    write; a point not described then (its tokenizer deferred, or not known before the start: an
    SLO search's, a profile's ladder) is described here."""
    first = not s.workload_figures_written
    ahead = s.workload_descriptions.pop(description_key(p.spec), None)
    if ahead is not None and (ahead.figures or not first):
        results_io.write_json(p.run_dir / workload_describe.JSON_NAME, ahead.stats)
        p.workload_stats = ahead.stats
    else:
        try:
            p.workload_stats = workload_describe.describe(
                s.cfg, p.run_dir, n=p.load.requests_to_send, table=getattr(p.items, "table", None),
                count=s.builder.count, html_dir=s.out, figures_too=first, load=p.spec.load)
        except ValueError as e:
            raise UserError(str(e)) from None
    if first:
        s.workload_figures_written = True
        if s.mlflow:
            s.mlflow.log_parent_artifact(s.out / workload_describe.HTML_NAME)


def settle_faults(s: PointSession, p: PointRun) -> None:
    """After the load: a restart in place is over, the point's engine faults are taken (one
    the watchdog did not see, with ``engine.health_interval_s=0``, is found here) and the
    requests they ended carry them in their ``error`` (``harness.engine_faults``)."""
    from engines.watchdog import exit_fault
    from harness.engine_faults import attribute

    s.faults.settle()
    p.faults = list(s.faults.point_faults)
    p.failure = s.faults.take_failed()
    proc = s.engine.process
    if p.failure is None and proc is not None and proc.poll() is not None:
        p.failure = exit_fault(s.engine.name, proc.poll(), proc.tail(), s.window_open_ns, perf_ns())
        p.faults.append(p.failure)
    if p.faults:
        attribute(p.run_dir / results_io.REQUESTS, p.faults)
    if p.last or p.failure is not None:
        s.faults.stop_watch()  # the engine is stopped next, on purpose


def engine_counters_end(s: PointSession, p: PointRun) -> None:
    """Before the engine may be stopped by ``close_window``."""
    if s.engine_metrics:
        s.telemetry.engine_snapshot("end")


def close_window(s: PointSession, p: PointRun) -> None:
    """Stop the engine after the last point (or a dead one), close the window and write its
    telemetry; what is older is on disk, so memory stays one window's worth.  The next point's
    window opens at this close, so the file is written off it (``TelemetryProcess.close_window``:
    the table comes back at once, the write runs in the telemetry process); the last point's is
    waited for (no window follows it)."""
    p.engine_alive = s.engine.alive()
    if p.last or not p.engine_alive:
        if s.engine_metrics and p.engine_alive:
            s.telemetry.remove_engine()  # its page goes away with the engine
        s.engine.stop()
    p.window_close_ns = perf_ns()
    tel = s.telemetry
    tel.sample_now()  # a sample after the window closes
    tel.mark("load_start", p.stats["start_ns"], p.spec.title)
    tel.mark("load_end", p.stats["end_ns"], p.spec.title)
    keep = [s.idle_interval] if s.idle_interval else []
    p.telemetry_path = p.run_dir / results_io.TELEMETRY
    p.telemetry = tel.close_window(p.telemetry_path, p.window_open_ns, p.window_close_ns, keep=keep,
                                   wait=p.last or not p.engine_alive)


def autoscale_record(s: PointSession, p: PointRun) -> None:
    """Live autoscaling (``deployment.autoscale.enabled``): ``autoscale.json``
    (``harness.autoscale_record``, ``metrics.autoscale_bill``; its replica figures are in the summary, by
    ``summarise``)."""
    autoscale.record(s, p)


def write_results(s: PointSession, p: PointRun) -> None:
    run_meta = {"index": p.spec.index, "label": p.spec.label, "load": p.spec.load, "repeat": p.spec.repeat,
                "repeats": p.spec.repeats,
                "config": s.name, "block": s.block, "role": p.spec.tags.get("role", "point"),
                "window_start_ns": p.window_open_ns,
                "window_end_ns": p.window_close_ns, "fixed_conditions": s.fixed_conditions(),
                "status": "failed" if p.failure is not None else "ok",
                "error": p.failure.error() if p.failure is not None else None,
                "engine_faults": [x.as_dict() for x in p.faults]}
    results_io.write_json(p.run_dir / results_io.RUN_META, run_meta)
    results_io.write_yaml(p.run_dir / results_io.CONFIG, {**s.safe_config, "load": p.spec.load})
    results_io.write_json(p.run_dir / results_io.PROVENANCE, s.engine_prov)
    s.telemetry.flush()  # telemetry.parquet, written since close_window, on disk before the run is complete
    results_io.write_json(p.run_dir / results_io.SUMMARY, p.summary)  # last: marks the run complete


def log_mlflow(s: PointSession, p: PointRun) -> None:
    if not s.mlflow:
        return
    eng = s.engine_prov.get("engine") or {}
    params = {**s.safe_config, "load": p.spec.load,
              "engine_resolved": {"version": eng.get("engine_version"),
                                  "feature_flags": " ".join(eng.get("feature_flags") or []),
                                  "command": " ".join(eng.get("command") or [])}}
    name = child_run_name(s.out.name, p.spec.label, s.name or "", s.block, p.spec.repeat, p.spec.repeats)
    tags = {"label": p.spec.label, "repeat": str(p.spec.repeat),
            **({"config": s.name, "block": str(s.block)} if s.name else {}),
            "tokenfactory.run_dir": str(p.run_dir.resolve())}  # mlflow-sync skips runs already logged
    s.mlflow.log_child(name, params, p.summary, p.run_dir, tags=tags)


def export_otlp(s: PointSession, p: PointRun) -> None:
    """The summary as OpenTelemetry gauges (``export.otlp_endpoint``; ``harness.otlp_export``)."""
    if not s.otlp:
        return
    eng = s.engine_prov.get("engine") or {}
    s.otlp.export_run(p.summary, run_attributes(
        experiment=p.inputs.experiment, folder=s.experiment_dir.name, protocol=p.inputs.protocol,
        track=p.inputs.track, config=s.name, block=s.block, label=p.spec.label, repeat=p.spec.repeat,
        role=p.spec.tags.get("role", "point"), engine=eng.get("engine"), engine_version=eng.get("engine_version")))



def engine_survived(s: PointSession, p: PointRun) -> None:
    """A point whose engine failed: ``engine.on_failure=restart`` starts it again for the next
    point; ``stop`` (or a restart that fails) ends the sweep, resumable: finished points are
    kept and the failed one runs again.  A deployment that lost a replica finished its point
    on the others; the next point needs the whole deployment again, so the same rule holds."""
    lost = list(s.faults.degraded)
    if p.failure is None and lost and not p.last:
        s.faults.degraded = []
        names = ", ".join(f.extra["replica"] for f in lost)
        why = f"replica {names} failed during {p.spec.title} (the point finished on the others)"
        if p.inputs.on_failure == "restart":
            print(f"{why}\nengine.on_failure=restart: starting the deployment again for the next point",
                  file=sys.stderr, flush=True)
            s.faults.stop_watch()
            try:
                s.restarted_before_s = s.restart_engine(why)
            except EngineError as e:
                raise UserError(f"{why}\nthe restart failed: {e}") from None
            s.faults.start_watch()
            return
        raise UserError(f"{why}: {lost[0].message}\nto resume, rerun the same command with "
                        f"output_dir={s.experiment_dir}: finished points are kept")
    if p.failure is None:
        return
    where = f"{p.spec.title} failed: {p.failure.error()}\nits requests are in {p.run_dir / 'requests.parquet'}"
    resume = (f"\nto resume, rerun the same command with output_dir={s.experiment_dir}: finished points are kept "
              "and this one runs again")
    if p.inputs.on_failure == "restart" and not p.last and s.engine.launched:
        print(f"{where}\nengine.on_failure=restart: starting the engine again for the next point", file=sys.stderr,
              flush=True)
        try:
            s.restarted_before_s = s.restart_engine(f"{p.failure.kind} during {p.spec.title}")
        except EngineError as e:
            raise UserError(f"{where}\nthe restart failed too: {e}{resume}") from None
        s.faults.start_watch()
        return
    raise UserError(where + resume)


POINT_STEPS = (prepare_folder, reset_cache, engine_counters_start, build_workload, describe_workload, dispatch,
               settle_faults, engine_counters_end, close_window, summarise, autoscale_record,
               write_results, log_mlflow, export_otlp,
               print_point, engine_survived)

