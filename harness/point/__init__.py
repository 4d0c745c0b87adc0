"""One load point as named steps, in the order ``POINT_STEPS`` runs them.

Each step is ``step(session, point)``: ``session`` is the ``EngineSession`` (engine,
telemetry, client config, prompt builder), ``point`` the ``PointRun`` that carries what
earlier steps made.  A protocol can run its own list (skip the cache reset, add a fault
between dispatch and the window's close, ...).  What a point reads of the config is read
once, typed (``PointInputs``); ``summary.json`` is assembled in one step (``summarise``) and
written last of the files: a folder without it is not a finished run.
"""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from conf.load_point import RunSpec, offered_load
from engines.base import EngineError, emulation
from engines.tiny_model import cache_root
from harness import autoscale_record as autoscale  # (point.py has its own autoscale_record step)
from harness import results_io, workload_describe
from harness.errors import UserError
from harness.mlflow_log import child_run_name
from harness.otlp_export import run_attributes
from loadgen.client import StreamingClient
from loadgen.dispatch import Dispatcher, LoadSpec
from loadgen.prepare import PrepareCache, PrepareOptions, source_hash
from loadgen.records import RecordWriter, read_requests
from loadgen.workers import run_workers
from loadgen.workloads.build import make_workload
from metrics.energy import steady_capacity
from metrics.engine_counters import PHASES, engine_summary, replica_engine_summaries, router_summary
from metrics.replicas import forget_engine_values, replica_summary
from metrics.request_metrics import complete_record
from metrics.slo import vacuous_line
from metrics.speculative import spec_agreement
from metrics.summary import summarize

perf_ns = time.perf_counter_ns
# The code that shapes prepared requests: a change to it invalidates the cache.
PREPARE_CODE = source_hash("loadgen.workloads", "loadgen.client.dialect", "loadgen.prepare", "loadgen.dispatch")


@dataclass(frozen=True)
class PointInputs:
    """What a point's steps read of the config, typed, read once when the point is made
    (``from_config``); the groups another module takes whole (the workload, ``client.ray``)
    stay config nodes."""
    cache_state: str                     # engine.cache_state: warm, cold or primed
    on_failure: str                      # engine.on_failure: stop or restart
    workers: int                         # client.workers
    backend: str                         # client.backend: local or ray
    max_schedule_lag_ms: float
    max_clock_error_ms: float
    token_mismatch_tolerance: int        # client.token_mismatch_tolerance (metrics.token_accounting)
    token_mismatch_threshold: float      # client.token_mismatch_threshold
    prepare: str                         # client.prepare: auto, all or stream
    prepare_cache: bool
    prepare_ahead_s: float
    prepare_max_bytes: int               # client.prepare_max_mb, in bytes
    progress: bool
    kill_at_s: float | None              # scenario.kill_at_s (None: no kill)
    kill_signal: str
    recovery_window: int | None
    first_window_s: float | None
    min_attainment: float | None         # slo.min_attainment
    experiment: str
    protocol: str | None
    track: str | None                    # the track's name, if the run is one of a track's
    workload: Any                        # the workload group (loadgen.workloads.build.make_workload)
    ray: Any                             # client.ray (loadgen.ray_workers.RaySettings.from_config)
    autoscaled: bool = False             # deployment.autoscale.enabled (saturation_guard)

    @classmethod
    def from_config(cls, cfg) -> PointInputs:
        c, sc = cfg.client, cfg.get("scenario") or {}
        recovery, first, attain = sc.get("recovery_window"), sc.get("first_window_s"), cfg.slo.get("min_attainment")
        return cls(
            cache_state=str(cfg.engine.cache_state), on_failure=str(cfg.engine.on_failure),
            workers=int(c.workers), backend=str(c.get("backend", "local")),
            max_schedule_lag_ms=float(c.max_schedule_lag_ms), max_clock_error_ms=float(c.max_clock_error_ms),
            token_mismatch_tolerance=int(c.token_mismatch_tolerance),
            token_mismatch_threshold=float(c.token_mismatch_threshold),
            prepare=str(c.prepare), prepare_cache=bool(c.prepare_cache), prepare_ahead_s=float(c.prepare_ahead_s),
            prepare_max_bytes=int(c.prepare_max_mb * 2**20), progress=bool(cfg.progress),
            kill_at_s=sc.get("kill_at_s"), kill_signal=str(sc.get("kill_signal") or "SIGKILL"),
            recovery_window=int(recovery) if recovery is not None else None,
            first_window_s=float(first) if first is not None else None,
            min_attainment=float(attain) if attain is not None else None,
            experiment=str(cfg.experiment), protocol=cfg.protocol.get("name"), track=cfg.get("track"),
            workload=cfg.workload, ray=c.ray,
            autoscaled=bool(((cfg.get("deployment") or {}).get("autoscale") or {}).get("enabled", False)))


def saturation_guard(load: dict, autoscaled: bool) -> bool:
    """Whether the over-saturation guard stops the point (``load.stop_when_saturated``): as given,
    else on, but off for an autoscaled run, whose overload while a replica starts is what it
    measures (an autoscaled replay stopped at 688 of its 899 s never sent its last 105 requests)."""
    given = load.get("stop_when_saturated")
    return (not autoscaled) if given is None else bool(given)


@dataclass
class PointRun:
    spec: RunSpec
    run_dir: Path
    last: bool                           # the engine is stopped when this point ends
    window_open_ns: int                  # this point's observation window opened here
    inputs: PointInputs                  # what it reads of the config
    load: LoadSpec | None = None
    items: object = None                 # the workload's iterator of WorkItems
    workload_stats: dict = field(default_factory=dict)
    writer: RecordWriter | None = None
    stats: dict = field(default_factory=dict)   # the dispatcher's: start_ns, end_ns, sent, timestamp_source
    client_cpu_s: float = 0.0
    engine_alive: bool = True
    window_close_ns: int | None = None
    telemetry_path: Path | None = None
    requests: pa.Table | None = None
    summary: dict = field(default_factory=dict)
    progress: object = None              # the point's progress bars (dispatch)
    faults: list = field(default_factory=list)   # engine faults during the point (engines.watchdog.EngineFault)
    failure: object = None               # the fault that failed the point (None: it did not fail)
    scaler: object = None                # live autoscaling during the load (harness.autoscale_record)


# ---------------------------------------------------------------------------------- steps
def prepare_folder(s, p: PointRun) -> None:
    """The run folder, without what a previous, interrupted attempt left under final names."""
    p.run_dir.mkdir(parents=True, exist_ok=True)
    if results_io.run_failed(p.run_dir):  # a failed attempt runs again; what it measured is kept apart
        results_io.keep_failed_attempt(p.run_dir)
    for stale in (results_io.SUMMARY, results_io.REQUESTS):
        (p.run_dir / stale).unlink(missing_ok=True)
    p.load = LoadSpec.from_load(p.spec.load)
    p.load.stop_when_saturated = saturation_guard(p.spec.load, p.inputs.autoscaled)


def reset_cache(s, p: PointRun) -> None:
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


def engine_counters_start(s, p: PointRun) -> None:
    """The run's own share of the engine's counters starts here."""
    if s.engine_metrics:
        s.telemetry.engine_snapshot("start")


def build_workload(s, p: PointRun) -> None:
    try:
        p.items = make_workload(p.inputs.workload, s.builder, p.load.num_requests, s.engine.max_model_len())
    except ValueError as e:
        raise UserError(str(e)) from None


def describe_workload(s, p: PointRun) -> None:
    """workload.json in the run folder (logged to MLflow with it); the figures (workload.html)
    once, in the experiment's folder and its MLflow parent run."""
    first = not s.workload_figures_written
    try:
        p.workload_stats = workload_describe.describe(s.cfg, p.run_dir, n=p.load.num_requests,
                                                      table=getattr(p.items, "table", None), count=s.builder.count,
                                                      html_dir=s.out, figures_too=first, load=p.spec.load)
    except ValueError as e:
        raise UserError(str(e)) from None
    if first:
        s.workload_figures_written = True
        if s.mlflow:
            s.mlflow.log_parent_artifact(s.out / workload_describe.HTML_NAME)


def dispatch(s, p: PointRun) -> None:
    """Send the load and record every request (one process, or ``client.workers`` of them)."""
    p.writer = RecordWriter(p.run_dir / results_io.REQUESTS)
    p.progress = _Progress(s, p)
    on_done = p.progress.on_done
    followup = getattr(p.items, "followup", None)

    def finalize(rec) -> None:
        complete_record(rec, s.slo, s.count_tokens)

    prep = _prepare_options(s, p, followup)
    dispatchers: list = []  # the load's t0 (the scaler's origin) is its dispatcher's

    async def go():
        async with StreamingClient(s.client_cfg) as client:
            d = Dispatcher(client, p.writer, finalize=finalize, on_done=on_done, followup=followup, prepare=prep)
            dispatchers.append(d)
            s.faults.attach(d)  # the watchdog may abort it; the scenario's kill is timed from its t0
            try:
                return await d.run(p.items, p.load)
            finally:
                s.faults.detach()

    _event_loop_policy()
    n_workers = p.inputs.workers
    _arm_faults(s, p, n_workers)
    single = n_workers <= 1 and p.inputs.backend != "ray"
    autoscale.start(s, p, (lambda: dispatchers[0].t0 if dispatchers else None) if single else None)
    try:
        try:
            if p.inputs.backend == "ray":  # one shared schedule over Ray actors on the cluster's nodes
                p.stats = _ray_dispatch(s, p, on_done, followup)
            elif n_workers > 1:  # one shared schedule over forked load-generator processes
                p.stats = run_workers(n_workers, s.client_cfg, p.items, p.load, p.writer, finalize, on_done,
                                      followup=followup)
            else:
                p.stats = asyncio.run(go())
        except ValueError as e:
            raise UserError(f"{p.spec.title}: {e}") from None
        finally:
            autoscale.stop(s, p)  # the load is over: no more decisions, replicas on their way waited for
    except BaseException:
        p.writer.abort()
        # kept beside requests.parquet.partial, under a name that never reads as complete
        s.telemetry.write_window(p.run_dir / f"{results_io.TELEMETRY}.partial", p.window_open_ns, perf_ns())
        p.progress.close()
        raise
    p.client_cpu_s = p.stats["cpu_s"]  # from t0 on: building requests ahead is reported apart
    p.progress.close()
    p.writer.close()


def settle_faults(s, p: PointRun) -> None:
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


def engine_counters_end(s, p: PointRun) -> None:
    """Before the engine may be stopped by ``close_window``."""
    if s.engine_metrics:
        s.telemetry.engine_snapshot("end")


def close_window(s, p: PointRun) -> None:
    """Stop the engine after the last point (or a dead one), close the window and write its
    telemetry; what is older is on disk, so memory stays one window's worth."""
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
    p.telemetry_path = Path(tel.write_window(p.run_dir / results_io.TELEMETRY, p.window_open_ns, p.window_close_ns,
                                             also=keep))
    tel.forget_before(p.window_close_ns, keep=keep)


def summarise(s, p: PointRun) -> None:
    """``summary.json``, assembled here alone: the request metrics over the window and its
    telemetry (``metrics.summary.summarize``), the run's own keys, its engine faults' and
    scenarios' figures (``fault_figures``) and live autoscaling's replica figures
    (``harness.autoscale_record.figures``)."""
    p.requests = read_requests(p.run_dir / results_io.REQUESTS)
    telemetry = results_io.read_parquet(p.telemetry_path)
    capacity, why = steady_capacity(p.spec.load)
    scaled = autoscale.figures(s, p)  # empty unless autoscaled
    summary = summarize(p.requests, s.slo, p.window_open_ns, p.window_close_ns, cost_cfg=s.container["cost"],
                        max_schedule_lag_ms=p.inputs.max_schedule_lag_ms,
                        token_mismatch_tolerance=p.inputs.token_mismatch_tolerance,
                        token_mismatch_threshold=p.inputs.token_mismatch_threshold,
                        telemetry=telemetry, steady_capacity=capacity, steady_reason=why,
                        expected_turns=getattr(p.items, "expected_turns", None),
                        cost_replicas=int(s.topology().get("replicas") or 1),
                        # autoscaled: the replica-seconds paid in the window (starting, serving and
                        # draining), not replicas x window
                        cost_replica_seconds=scaled.get("paid_replica_seconds"),
                        fixed_rate=p.spec.load.get("kind") != "trace")
    load_s = (p.stats["end_ns"] - p.stats["start_ns"]) / 1e9
    summary.update({
        "label": p.spec.label, "offered_load": offered_load(p.spec.load), "load_kind": p.spec.load.get("kind"),
        "client_cpu_s": p.client_cpu_s, "client_cpu_util": p.client_cpu_s / load_s if load_s > 0 else float("nan"),
        "chunk_timestamps": p.stats.get("timestamp_source", "read"),  # kernel receive stamps or read times
        "engine_alive_after": p.engine_alive,
        "engine_startup_s": (s.engine.ready_ns - s.engine.started_ns) / 1e9,
        "cache_state": p.inputs.cache_state,
        # stopped early as over-saturated (loadgen.saturation): its latencies are not a steady state's
        "saturated": bool(p.stats.get("saturated")), "saturation_reason": p.stats.get("saturated"),
        "saturated_after_s": p.stats.get("saturated_after_s"),
        # what the point asked for (load.num_requests, warm-up included) and what a stop left unsent;
        # num_requests stays vLLM's: the requests in the run
        **planned_keys(p.load, p.stats),
    })
    summary.update(_clock_keys(p.inputs, p.stats))
    emu = emulation(s.engine)  # an emulated engine's numbers are never read as measured ones
    summary.update(emulated=emu["emulated"], timing_source=emu["timing_source"])
    prep = p.stats.get("prepare") or {}  # requests built off the send loop (loadgen/prepare.py)
    summary.update({f"prepare_{k}": prep.get(k) for k in ("mode", "seconds", "tokens_per_s", "cached", "stalls",
                                                           "streamed")})
    summary.update(workload_describe.summary_keys(p.workload_stats, p.items))
    if s.engine_metrics:
        summary.update(engine_summary(telemetry))
        summary.update(router_summary(telemetry))  # the router's own page, where sampled (Dynamo's frontend)
        summary.update(spec_agreement(summary))  # the rows' tokens per step against the engine's counters
    # per replica of a deployment (nothing for a single engine): metrics.replicas
    per_replica = replica_engine_summaries(telemetry) if s.engine_metrics else None
    # a deployment's pools (prefill, decode): each pool's shares and imbalance apart
    summary.update(replica_summary(p.requests, per_replica, s.engine.roles() if hasattr(s.engine, "roles") else None))
    summary.update(_roofline(s, summary))
    if per_replica and hasattr(s.engine, "roles"):
        summary["pools"] = _pool_bottlenecks(s, summary, per_replica)
    exp = p.requests.column("expected_prompt_tokens").to_numpy(zero_copy_only=False)
    got = p.requests.column("prompt_tokens").to_numpy(zero_copy_only=False)
    with np.errstate(invalid="ignore"):
        summary["prompt_tokens_mismatch"] = int(np.nansum(exp.astype(float) != got.astype(float)))
    p.summary = summary
    fault_figures(s, p)
    p.summary.update(scaled)


def planned_keys(load: LoadSpec, stats: dict) -> dict:
    """The requests the point planned (``load.num_requests``, warm-up included; None when bound by
    duration), those the dispatcher sent and those never sent (a stop, an engine failure)."""
    planned = load.num_requests
    sent = int(stats.get("sent") or 0)
    return {"num_requests_planned": planned, "num_requests_sent": sent,
            "num_requests_unsent": max(planned - sent, 0) if planned is not None else None}


def point_line(title: str, m: dict) -> str:
    """The console's line for a point: what completed of what ran, what was cancelled, and a
    stop (over-saturated) with the requests planned and never sent."""
    done = f"{m['completed']}/{m['num_requests']} ok"
    if m.get("num_cancelled"):
        whole = " (all)" if m["num_cancelled"] == m["num_requests"] else ""
        done += f", {m['num_cancelled']} cancelled{whole}"
    if m.get("saturated"):
        planned = m.get("num_requests_planned")
        of = (f"{m.get('num_requests_sent')} of {planned} planned sent, {m.get('num_requests_unsent')} never sent"
              if planned is not None else f"{m.get('num_requests_sent')} sent")
        after = m.get("saturated_after_s")
        done += (f"; STOPPED as over-saturated{f' after {after:.1f} s' if after is not None else ''}: {of} "
                 "(saturation_reason in summary.json)")
    emulated = f" [EMULATED: {m.get('timing_source')}]" if m.get("emulated") else ""
    return f"  {title}{emulated}: {done}, "


def fault_figures(s, p: PointRun) -> None:
    """Engine faults and scenarios in ``summary.json`` (part of ``summarise``): whether the point failed and why, the
    failure-recovery figures of a ``scenario.kill_at_s`` point (``metrics.recovery``), and
    the cold-start figures of a session's first point (``metrics.cold_start``)."""
    m, f = p.summary, p.failure
    m["point_failed"] = f is not None
    m["engine_faults"] = len(p.faults)
    lost = [x for x in p.faults if x.extra.get("replica")]
    if lost:  # a deployment's processes that failed (the rest served on, or the point failed)
        m["replica_faults"] = [{"replica": x.extra["replica"], "kind": x.kind, "message": x.message,
                                "detected_after_load_start_s": (x.detected_ns - p.stats["start_ns"]) / 1e9,
                                "injected": bool(x.extra.get("injected"))} for x in lost]
        m["replicas_lost"] = sorted({x.extra["replica"] for x in lost})
    m["requests_failed_by_fault"] = _fault_failed(p.requests) if p.faults else 0
    if f is not None:
        planned = p.load.num_requests
        m.update({"failure_reason": f.message, "engine_fault_kind": f.kind, "engine_fault_exit_code": f.exit_code,
                  "engine_fault_detected_s": (f.detected_ns - f.last_ok_ns) / 1e9,
                  "requests_not_sent": planned - int(p.stats.get("sent") or 0) if planned is not None else None})
    if any(x.restarted for x in p.faults):  # the engine's counters started again from zero
        for k in [k for k in m if k.startswith("engine_") and k[7:].startswith(_COUNTED)]:
            del m[k]
        forget_engine_values(m)  # each replica's engine values likewise, and the pool shares they gave
        m["engine_metrics_complete"] = False
    inj = s.faults.injector
    if inj is not None:
        m.update(_recovery_keys(s, p, inj))
    if s.cold_start and s.points_run == 0:
        from metrics.cold_start import cold_start_figures

        m["scenario_cold_start"] = True
        m.update(cold_start_figures(p.requests, s.engine_launch[0], s.engine_launch[1], p.stats["start_ns"],
                                    p.inputs.first_window_s))
    if s.restarted_before_s is not None:  # engine.on_failure=restart: this window holds the restart
        m["engine_restart_before_s"] = s.restarted_before_s
        s.restarted_before_s = None


def autoscale_record(s, p: PointRun) -> None:
    """Live autoscaling (``deployment.autoscale.enabled``): ``autoscale.json``
    (``harness.autoscale_record``, ``metrics.autoscale_bill``; its replica figures are in the summary, by
    ``summarise``)."""
    autoscale.record(s, p)


def write_results(s, p: PointRun) -> None:
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
    results_io.write_json(p.run_dir / results_io.SUMMARY, p.summary)  # last: marks the run complete


def log_mlflow(s, p: PointRun) -> None:
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


def export_otlp(s, p: PointRun) -> None:
    """The summary as OpenTelemetry gauges (``export.otlp_endpoint``; ``harness.otlp_export``)."""
    if not s.otlp:
        return
    eng = s.engine_prov.get("engine") or {}
    s.otlp.export_run(p.summary, run_attributes(
        experiment=p.inputs.experiment, folder=s.experiment_dir.name, protocol=p.inputs.protocol,
        track=p.inputs.track, config=s.name, block=s.block, label=p.spec.label, repeat=p.spec.repeat,
        role=p.spec.tags.get("role", "point"), engine=eng.get("engine"), engine_version=eng.get("engine_version")))


def print_point(s, p: PointRun) -> None:
    m = p.summary
    if (m.get("prepare_seconds") or 0) >= 1 or m.get("prepare_cached"):
        how = "from the cache" if m["prepare_cached"] else (
            f"in {m['prepare_seconds']:.1f} s ({m['prepare_tokens_per_s']:,.0f} prompt tokens/s)")
        print(f"  requests prepared {how}; {m['prepare_stalls']} sends waited for one", flush=True)
    print(point_line(p.spec.title, m) + f"{m['output_throughput']:.1f} out tok/s, "
          f"p99 TTFT {m['p99_ttft_ms']:.1f} ms, goodput {m['goodput_rps']:.2f} req/s -> {p.run_dir}", flush=True)
    # still filling, token counts, energy: said once for the experiment, ranked, before its answer
    # (harness.caveats, printed by harness.finish), not under every point and repeat
    if vacuous_line(m):
        print("  " + vacuous_line(m), flush=True)
    if m.get("cached_tokens_rows"):
        print(f"  prefix cache: {m['cache_hit_rate']:.1%} of prompt tokens cached (server usage, "
              f"{m['cached_tokens_rows']} requests); engine counters "
              f"{m.get('engine_prefix_cache_hit_rate', float('nan')):.1%} (warm-up included; rows: "
              f"{m['cache_hit_rate_all']:.1%})", flush=True)
    if m.get("num_tasks"):
        slo = (f", {m['task_slo_attainment']:.0%} within slo.task_s={m['task_slo_s']:g} s"
               if m.get("task_slo_attainment") is not None else "")
        cut = f" ({m['censored_tasks']} censored: cut by the run's end)" if m.get("censored_tasks") else ""
        print(f"  tasks: {m['completed_tasks']}/{m['num_tasks']} completed{cut}, "
              f"{m['attempts_per_completed_task']:.2f} attempts per completed task, "
              f"mean task time {m['mean_task_time_ms']:.0f} ms{slo}; "
              f"{m.get('cost_per_completed_task', float('nan')):.4g} {m.get('cost_currency', '')} per completed task",
              flush=True)
    energy = (f"; energy {m['energy_j']:.1f} J ({m['energy_source']}, {m['energy_method']})"
              if m["energy_available"] else "")
    print(f"  cost {m.get('cost_total', float('nan')):.4g} {m.get('cost_currency', '')} over "
          f"{m['window_s']:.1f} s, {m.get('cost_per_mtok_good', float('nan')):.4g} per M good tok{energy}",
          flush=True)


def _fault_failed(requests) -> int:
    """Rows that did not end ``ok`` and whose ``error`` names an engine or replica fault."""
    from harness.engine_faults import PREFIX

    return sum(1 for st, err in zip(requests.column("status").to_pylist(), requests.column("error").to_pylist())
               if st != "ok" and (err or "").startswith(PREFIX))


def engine_survived(s, p: PointRun) -> None:
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


# ---------------------------------------------------------------------------------- before launch
def prebuild(s, specs) -> int:
    """Before the engine starts: build each point's requests into the on-disk prepare cache,
    in the order the points will run, then put the prompt builder back where it was.  No
    observation window then holds the harness's own building: without this, the first config
    of an experiment paid (in its engine's window, so its cost) for the prompts every later
    config read from the cache.  Stops at a multi-turn workload (its later turns depend on
    replies, and so does the builder's state after it).  Returns the points built."""
    inputs = PointInputs.from_config(s.cfg)
    if not inputs.prepare_cache or inputs.prepare == "stream" or inputs.workers > 1:
        return 0
    from loadgen.client.dialect import RequestDialect

    start_state = s.builder.rng.bit_generator.state
    body = RequestDialect(s.client_cfg)
    built = 0
    try:
        for spec in specs:
            p = PointRun(spec=spec, run_dir=s.out, last=False, window_open_ns=0, inputs=inputs,
                         load=LoadSpec.from_load(spec.load))
            build_workload(s, p)
            if getattr(p.items, "followup", None) is not None:
                break
            p.progress = _Progress(s, p)
            opts = _prepare_options(s, p, None)
            if opts.cache is None:
                break
            try:  # the workload's items are made as they are built: a bad one is the user's to fix
                Dispatcher(body, None, prepare=opts).prepare_only(p.items, p.load).close()
            except ValueError as e:
                raise UserError(str(e)) from None
            p.progress.close()
            built += 1
    finally:
        s.builder.rng.bit_generator.state = start_state
    return built


# ---------------------------------------------------------------------------------- helpers
_COUNTED = ("prefix_cache_", "spec_decode_", "preemptions", "prompt_tokens", "generation_tokens", "mean_",
            *(f"{phase}_time_" for phase in PHASES))


def _arm_faults(s, p: PointRun, n_workers: int) -> None:
    """The scenario's kill for this point (load points only, not probes or searches)."""
    kill_at = p.inputs.kill_at_s if p.spec.tags.get("role", "point") == "point" else None
    if kill_at is not None and (n_workers > 1 or p.inputs.backend != "local"):
        raise UserError("scenario.kill_at_s times the kill from the load's start in this process: use "
                        "client.workers=1 (and client.backend=local)")
    if kill_at is not None and not s.engine.launched:
        raise UserError(f"scenario.kill_at_s kills an engine tokenfactory launched; engine={s.engine.name} "
                        "has launch=false")
    s.faults.arm(kill_at, p.inputs.kill_signal)


def _recovery_keys(s, p: PointRun, inj) -> dict:
    """``scenario.kill_at_s``'s figures (``metrics.recovery``) and the kill's own times."""
    from metrics.recovery import outage_cost, recovery_figures

    out = {"scenario_kill_at_s": inj.at_s, "kill_signal": inj.sig_name}
    if inj.kill_ns is None:
        out["kill_skipped"] = "the load ended before scenario.kill_at_s"
        return out
    fault = next((x for x in p.faults if x.extra.get("injected")), None)
    back = fault.restart_healthy_ns if fault is not None and fault.restarted else None  # serving again
    out.update({"kill_at_s": (inj.kill_ns - inj.load_start_ns) / 1e9, "kill_ns": inj.kill_ns,
                "engine_restarted": back is not None,
                "engine_fault_detected_s": (fault.detected_ns - inj.kill_ns) / 1e9 if fault is not None else None,
                # restart begun -> healthy again (the harness's warm-up request after it is not counted)
                "engine_restart_s": ((back - fault.restart_started_ns) / 1e9 if back is not None else None)})
    out.update(recovery_figures(p.requests, s.slo, inj.kill_ns, back, p.inputs.recovery_window,
                                p.inputs.min_attainment))
    out.update(outage_cost(p.summary, inj.kill_ns, back))
    if back is not None and not (p.stats["end_ns"] > back):
        out["recovery_note"] = "the load ended before the engine was back: raise load.duration_s or load.num_requests"
    return out


def _roofline(s, summary: dict) -> dict:
    """Measured over the roofline of the served model on ``hardware`` (metrics/roofline.py):
    only where the model's config.json is readable and the profile has the peak rates."""
    from metrics.roofline import canonical_dtype, read_model_config, run_roofline

    fixed = s.fixed_conditions()
    try:
        shape = read_model_config(s.engine.model)
        dtype = fixed.get("weight_dtype")
        dtype = canonical_dtype(dtype if dtype and dtype != "auto" else (shape.dtype or "bf16"))
        kv = fixed.get("kv_cache_dtype")
        kv = canonical_dtype(kv) if kv and kv != "auto" else dtype
        return run_roofline(summary, shape, s.container["hardware"], dtype, kv)
    except (OSError, ValueError, KeyError) as e:
        return {"roofline_unavailable_reason": str(e)[:300]}


def _pool_bottlenecks(s, summary: dict, per_replica: dict) -> dict:
    """Each pool of a deployment (its replicas, or its prefill and decode pools) against its own
    roofline and queue: the bounds at the batch one replica of the pool held (the mean of its
    replicas' ``engine_running_mean``), the requests waiting in the pool (summed over its
    replicas' ``engine_waiting_mean``), and what limits it."""
    pools: dict[str, list[str]] = {}
    for name, role in s.engine.roles().items():
        pools.setdefault(role, []).append(name)
    out = {}
    for role, names in pools.items():
        vals = [per_replica.get(n) or {} for n in names]
        running = [v["engine_running_mean"] for v in vals if v.get("engine_running_mean") is not None]
        waiting = [v["engine_waiting_mean"] for v in vals if v.get("engine_waiting_mean") is not None]
        one = dict(summary, engine_running_mean=float(np.mean(running)) if running else None)
        line = {k: v for k, v in _roofline(s, one).items()
                if k in ("roofline_batch", "roofline_decode_ms", "roofline_prefill_ms", "tpot_over_roofline",
                         "ttft_over_roofline", "bottleneck", "roofline_unavailable_reason")}
        out[role] = {"replicas": names, "running_mean_per_replica": one["engine_running_mean"],
                     "waiting_mean": float(np.sum(waiting)) if waiting else None, **line}
    return out


class _Progress:
    """tqdm bars (``progress=true``): the requests being built ahead, then those finished."""

    def __init__(self, s, p: PointRun):
        self.on = p.inputs.progress
        self.label = f"[{p.spec.index + 1}/{s.total_points}] {p.spec.title}"
        self.total = p.load.num_requests
        self.bars: list = []
        self.done_bar = None
        self.counts = {"ok": 0, "fail": 0}

    def _bar(self, **kw):
        from tqdm import tqdm

        bar = tqdm(file=sys.stderr, dynamic_ncols=True, **kw)
        self.bars.append(bar)
        return bar

    def preparing(self, total: int | None):
        """The per-request tick of building requests ahead (loadgen.prepare)."""
        bar = self._bar(total=total, desc=f"{self.label}: preparing", unit="req", leave=False) if self.on else None
        return bar.update if bar is not None else (lambda _n: None)

    def on_done(self, rec) -> None:
        self.counts["ok" if rec.status == "ok" else "fail"] += 1
        if not self.on:
            return
        if self.done_bar is None:  # made at the first answer, after any preparation bar
            self.done_bar = self._bar(total=self.total, desc=self.label, unit="req")
        self.done_bar.update(1)
        self.done_bar.set_postfix(ok=self.counts["ok"], failed=self.counts["fail"], refresh=False)

    def close(self) -> None:
        for bar in self.bars:
            bar.close()


def _prepare_options(s, p: PointRun, followup) -> PrepareOptions:
    """``client.prepare*`` as the dispatcher takes them, with the on-disk cache where it applies:
    not for sessions (their later turns depend on the replies) and only when building ahead."""
    c = p.inputs
    cache = None
    if c.prepare_cache and followup is None and c.prepare != "stream":
        items = p.items

        def end_state() -> dict:
            return {"rng": s.builder.rng.bit_generator.state, "skipped": getattr(items, "skipped", 0)}

        def on_hit(state: dict) -> None:
            s.builder.rng.bit_generator.state = state["rng"]  # as if the prompts had been built here
            if hasattr(items, "skipped"):
                items.skipped = state["skipped"]

        cache = PrepareCache(cache_root() / "prepared", {
            "workload": s.container["workload"], "load": p.spec.load, "num_requests": p.load.num_requests,
            "max_model_len": s.engine.max_model_len(), "tokenizer": s.tokenizer_digest(), "chat": s.builder.chat,
            "client": {k: getattr(s.client_cfg, k) for k in ("model", "api", "extra_body", "continuous_usage",
                                                              "exact_output")},
            "rng": s.builder.rng.bit_generator.state, "code": PREPARE_CODE}, end_state, on_hit)
    return PrepareOptions(mode=c.prepare, ahead_s=c.prepare_ahead_s, max_bytes=c.prepare_max_bytes,
                          cache=cache, progress=p.progress.preparing)


class _CountTokens:
    """The session's token counter without the session: it travels to Ray workers by pickle."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def __call__(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])


def _ray_dispatch(s, p: PointRun, on_done, followup) -> dict:
    """``client.backend=ray``: ``client.workers`` Ray actors share the schedule (loadgen/ray_workers.py)."""
    import functools

    try:
        from loadgen.ray_workers import RaySettings, run_ray_workers
    except ImportError as e:
        raise UserError(f"client.backend=ray needs Ray ({e}): pip install -e '.[ray]'") from None
    finalize = functools.partial(complete_record, slo=s.slo, count_tokens=_CountTokens(s.tokenizer))
    return run_ray_workers(p.inputs.workers, s.client_cfg, p.items, p.load, p.writer, finalize, on_done,
                           followup=followup, settings=RaySettings.from_config(p.inputs.ray))


def _clock_keys(inputs: PointInputs, stats: dict) -> dict:
    """Ray workers: each one's clock error on the driver's clock; a run whose largest exceeds
    ``client.max_clock_error_ms`` is client-limited (its timings are not trusted to that
    precision); a worker that died leaves the run incomplete."""
    if stats.get("backend") != "ray":
        return {}
    err, limit = float(stats["clock_error_ms"]), inputs.max_clock_error_ms
    out = {"client_backend": "ray", "client_workers": stats["workers"], "clock_error_ms": err,
           "clock_workers": stats["clock"], "clock_limited": not err <= limit,
           "incomplete": bool(stats.get("incomplete")), "incomplete_reason": stats.get("incomplete_reason")}
    if out["clock_limited"]:
        out.update(client_limited=True,
                   client_limited_reason=f"clock error {err:.3f} ms > client.max_clock_error_ms={limit:g}")
    return out


def _event_loop_policy() -> None:
    try:
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass
