"""Live autoscaling in a load point (``deployment.autoscale.enabled``): the ``LiveScaler``
(``engines.live_scaler``) runs while the point's load runs, and what it did reaches the run's files.

- ``start(s, p)`` before the load (decisions timed from the load's start, the dispatcher's
  t0), ``stop(s, p)`` after it (replicas being started or stopped are waited for);
- a replica added is sampled (``engine:<r>`` rows of ``telemetry.parquet``) and watched
  (its process's CPU and memory, the watchdog) like the first ones; one scaled down is
  unwatched before it is taken out;
- ``telemetry.parquet`` gets the series ``source = 'deployment'``, ``name =
  'replicas_serving'`` and ``'replicas_wanted'``, at every decision and every change;
- ``record(s, p)`` writes ``autoscale.json`` (the policy, every decision, failed read, replica
  start and stop, the bill over the window: ``starting_replica_seconds``,
  ``serving_replica_seconds``, ``draining_replica_seconds`` and their sum
  ``paid_replica_seconds``, times in seconds from the load's start), gives ``summary.json``
  the same keys (``metrics.autoscale_bill``; its cost bills ``paid_replica_seconds``) and brings
  the provenance's deployment, replicas and router up to date (the replicas started and
  stopped so far).
"""

from __future__ import annotations

import time

from conf.schema import Autoscale, typed
from engines.autoscale_policy import ScalingPolicy
from engines.deployment import Member
from engines.live_scaler import LiveScaler
from harness import results_io
from metrics.autoscale_bill import replica_figures

SOURCE = "deployment"
perf_ns = time.perf_counter_ns


def enabled(s) -> bool:
    return typed(s.cfg.deployment.autoscale, Autoscale).enabled and hasattr(s.engine, "serving_log")


def start(s, p, origin=None) -> LiveScaler | None:
    """The point's scaler, started (None: autoscaling is off); ``origin()``: the load's t0 once known."""
    if not enabled(s) or p.spec.tags.get("role", "point") != "point":
        return None
    policy = ScalingPolicy(typed(s.cfg.deployment.autoscale, Autoscale))
    tel = s.telemetry

    def on_serving(eng) -> None:
        if eng.process is not None and eng.process.pid is not None:
            tel.watch_process(f"engine:{eng.replica}", eng.process.pid)
        if s.engine_metrics and eng.server_metric_map:
            tel.add_engine(eng.base_url + eng.metrics_path, eng.server_metric_map, eng.auth(), replica=eng.replica)
        s.faults.watch_member(Member(f"{eng.name} replica {eng.replica}", eng, eng.replica))

    def on_leaving(eng) -> None:
        s.faults.unwatch(eng.replica)
        if s.engine_metrics:
            tel.remove_engine(eng.replica)

    def on_count(t_ns: int, serving: int, wanted: int) -> None:
        tel.record([(t_ns, SOURCE, "replicas_serving", float(serving), None),
                    (t_ns, SOURCE, "replicas_wanted", float(wanted), None)])

    scaler = LiveScaler(s.engine, policy, on_serving=on_serving, on_leaving=on_leaving, on_count=on_count)
    p.scaler = scaler
    return scaler.start(origin)


def stop(s, p) -> None:
    scaler = getattr(p, "scaler", None)
    if scaler is not None:
        scaler.stop()
        s.telemetry.record([(perf_ns(), SOURCE, "replicas_serving", float(len(s.engine.replicas)), None)])


def figures(s, p) -> dict:
    """``metrics.autoscale_bill``'s figures over the point's window (empty: autoscaling is off): the
    replicas serving, and those the point's scaler started and drained, all paid for."""
    if not enabled(s):
        return {}
    return _figures(s, p, p.window_open_ns, p.window_close_ns)


def _figures(s, p, start_ns: int, end_ns: int) -> dict:
    scaler = getattr(p, "scaler", None)
    starting, draining = scaler.paid_intervals(end_ns) if scaler is not None else ([], [])
    return replica_figures(s.engine.serving_log, start_ns, end_ns, starting, draining)


def _over_load(s, p) -> dict | None:
    a, b = p.stats.get("start_ns"), p.stats.get("end_ns")
    if not a or not b or b <= a:
        return None
    return {"start_s": 0.0, "end_s": (b - a) / 1e9, **_figures(s, p, a, b)}


def record(s, p) -> None:
    """``autoscale.json`` in the run folder (the summary's autoscale keys are ``figures``, which
    ``harness.point.summarise`` adds)."""
    if not enabled(s):
        return
    fig = figures(s, p)
    auto = typed(s.cfg.deployment.autoscale, Autoscale)
    scaler = getattr(p, "scaler", None)
    rec = scaler.record() if scaler is not None else {
        "policy": ScalingPolicy(auto).record(), "decisions": [], "starts": [],
        "stops": [], "errors": [], "origin_ns": None, "note": "no scaling in this point (not a load point)"}
    t0 = p.stats.get("start_ns") or rec.get("origin_ns") or p.window_open_ns

    def rel(ns):
        return None if ns is None else (ns - t0) / 1e9

    def times(event: dict) -> dict:
        return {(k[:-3] + "_s" if k.endswith("_ns") else k): (rel(v) if k.endswith("_ns") else v)
                for k, v in event.items()}

    out = {
        "policy": rec["policy"], "drain_timeout_s": float(auto.drain_timeout_s),
        "times": "seconds from the load's start (the dispatcher's t0); negative: before it",
        "load_start_ns": t0, "decided_from_s": rel(rec.get("origin_ns")),
        "window": {"start_s": rel(p.window_open_ns), "end_s": rel(p.window_close_ns),
                   "window_s": (p.window_close_ns - p.window_open_ns) / 1e9,
                   "what": "the point's observation window, the one its cost counts: from where it opened "
                           "(the deployment's start, or the previous point's close) to its close"},
        **fig,
        "bill_what": {
            "starting_replica_seconds": "replicas the scaler started, from the decision to their joining the "
                                        "router (provision_s and the cold start), or to their start's failure",
            "serving_replica_seconds": "the integral of the replicas serving (behind the router); the replicas "
                                       "the deployment started with count from its start",
            "draining_replica_seconds": "replicas scaled down, from leaving the router to their process's stop",
            "paid_replica_seconds": "their sum: what the cost bills (summary.json cost_replica_seconds)"},
        # the same over the load alone (its first send to its end), as a plan over the trace counts it
        "load": _over_load(s, p),
        "serving": [{"t_s": rel(t), "replicas": n} for t, n in s.engine.serving_log],
        "decisions": [times(d) for d in rec["decisions"]],
        "starts": [times(e) for e in rec["starts"]],
        "stops": [times(e) for e in rec["stops"]],
        "failed_reads": [times(e) for e in rec.get("failed_reads", [])],
        "backoff": rec.get("backoff"),
        "errors": rec["errors"],
    }
    results_io.write_json(p.run_dir / results_io.AUTOSCALE, out)
    prov = (s.engine_prov or {}).get("engine")
    if isinstance(prov, dict):  # provenance.json names every replica that ran, as they are now
        prov["deployment"] = s.engine.topology()
        prov["replicas"] = s.engine.replica_records(prov.get("replicas"))
        prov["router"] = s.engine.router.provenance()
