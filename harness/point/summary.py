"""The ``summarise`` step: ``summary.json`` assembled here alone, each group of keys from its own
function, in this order: the request metrics over the window and its telemetry
(``metrics.summary.summarize``), the run's own keys (``run_keys``), Ray's clock (``clock_keys``),
where the timings and requests came from (``source_keys``), the engine's counters
(``engine_keys``), the roofline (``harness.point.roofline_keys``), the engine faults' and
scenarios' keys (``harness.point.fault_keys``) and live autoscaling's replica figures
(``autoscale_keys``)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from conf.load_point import offered_load
from engines.base import emulation
from harness import autoscale_record as autoscale
from harness import results_io, workload_describe
from harness.point.fault_keys import add_fault_keys
from harness.point.inputs import PointInputs
from harness.point.point_run import PointRun
from harness.point.roofline_keys import pool_bottlenecks, roofline_keys
from harness.point.session import PointSession
from loadgen.dispatch import LoadSpec
from loadgen.records import read_requests
from metrics.energy import steady_capacity
from metrics.engine_counters import engine_summary, replica_engine_summaries, router_summary
from metrics.replicas import replica_summary
from metrics.speculative import spec_agreement
from metrics.summary import summarize


def summarise(s: PointSession, p: PointRun) -> None:
    """``summary.json``'s keys, in ``p.summary`` (``write_results`` writes it)."""
    p.requests = read_requests(p.run_dir / results_io.REQUESTS)
    # the table close_window wrote (its file may still be being written, off the next window)
    telemetry = p.telemetry if p.telemetry is not None else results_io.read_parquet(p.telemetry_path)
    scaled = autoscale_keys(s, p)  # empty unless autoscaled
    capacity, why = steady_capacity(p.spec.load)
    summary = summarize(p.requests, s.slo, p.window_open_ns, p.window_close_ns, cost_cfg=s.container["cost"],
                        max_schedule_lag_ms=p.inputs.client.max_schedule_lag_ms,
                        token_mismatch_tolerance=p.inputs.client.token_mismatch_tolerance,
                        token_mismatch_threshold=p.inputs.client.token_mismatch_threshold,
                        telemetry=telemetry, steady_capacity=capacity, steady_reason=why,
                        expected_turns=getattr(p.items, "expected_turns", None),
                        cost_replicas=int(s.topology().get("replicas") or 1),
                        # autoscaled: the replica-seconds paid in the window (starting, serving and
                        # draining), not replicas x window
                        cost_replica_seconds=scaled.get("paid_replica_seconds"),
                        fixed_rate=p.spec.load.get("kind") != "trace")
    summary.update(run_keys(s, p))
    summary.update(clock_keys(p.inputs, p.stats))
    summary.update(source_keys(s, p))
    summary.update(engine_keys(s, telemetry, summary))
    # per replica of a deployment (nothing for a single engine): metrics.replicas
    per_replica = replica_engine_summaries(telemetry) if s.engine_metrics else None
    # a deployment's pools (prefill, decode): each pool's shares and imbalance apart
    summary.update(replica_summary(p.requests, per_replica, s.engine.roles() if hasattr(s.engine, "roles") else None))
    summary.update(roofline_keys(s, summary))
    if per_replica and hasattr(s.engine, "roles"):
        summary["pools"] = pool_bottlenecks(s, summary, per_replica)
    summary["prompt_tokens_mismatch"] = prompt_tokens_mismatch(p.requests)
    p.summary = summary
    add_fault_keys(s, p)
    p.summary.update(scaled)


def run_keys(s: PointSession, p: PointRun) -> dict:
    """What the point was (label, load), what it cost the client, whether it stopped early, and
    what it planned, sent and left unsent."""
    load_s = (p.stats["end_ns"] - p.stats["start_ns"]) / 1e9
    return {
        "label": p.spec.label, "offered_load": offered_load(p.spec.load), "load_kind": p.spec.load.get("kind"),
        "client_cpu_s": p.client_cpu_s, "client_cpu_util": p.client_cpu_s / load_s if load_s > 0 else float("nan"),
        "chunk_timestamps": p.stats.get("timestamp_source", "read"),  # kernel receive stamps or read times
        "engine_alive_after": p.engine_alive,
        "engine_startup_s": (s.engine.ready_ns - s.engine.started_ns) / 1e9,
        "cache_state": p.inputs.cache_state,
        # stopped early as over-saturated (loadgen.saturation): its latencies are not a steady state's
        "saturated": bool(p.stats.get("saturated")), "saturation_reason": p.stats.get("saturated"),
        "saturated_after_s": p.stats.get("saturated_after_s"),
        # what the point was to send (LoadSpec.requests_to_send: load.num_requests plus the warm-up)
        # and what a stop left unsent;
        # num_requests stays vLLM's: the requests in the run
        **planned_keys(p.load, p.stats),
    }


def planned_keys(load: LoadSpec, stats: dict) -> dict:
    """The requests the point planned (``LoadSpec.requests_to_send``: the user's ``load.num_requests``
    plus its warm-up; None when bound by duration), those the dispatcher sent and those never sent
    (a stop, an engine failure)."""
    planned = load.requests_to_send
    sent = int(stats.get("sent") or 0)
    return {"num_requests_planned": planned, "num_requests_sent": sent,
            "num_requests_unsent": max(planned - sent, 0) if planned is not None else None}


def clock_keys(inputs: PointInputs, stats: dict) -> dict:
    """Ray workers: each one's clock error on the driver's clock; a run whose largest exceeds
    ``client.max_clock_error_ms`` is client-limited (its timings are not trusted to that
    precision); a worker that died leaves the run incomplete."""
    if stats.get("backend") != "ray":
        return {}
    err, limit = float(stats["clock_error_ms"]), inputs.client.max_clock_error_ms
    out = {"client_backend": "ray", "client_workers": stats["workers"], "clock_error_ms": err,
           "clock_workers": stats["clock"], "clock_limited": not err <= limit,
           "incomplete": bool(stats.get("incomplete")), "incomplete_reason": stats.get("incomplete_reason")}
    if out["clock_limited"]:
        out.update(client_limited=True,
                   client_limited_reason=f"clock error {err:.3f} ms > client.max_clock_error_ms={limit:g}")
    return out


def source_keys(s: PointSession, p: PointRun) -> dict:
    """Where the point's figures came from: an emulated engine's timings (never read as measured
    ones), telemetry sampled through the window or at its edges only (``metrics.telemetry.sampling``),
    the requests built off the send loop (``loadgen.prepare``) and the workload's shape."""
    emu = emulation(s.engine)
    prep = p.stats.get("prepare") or {}
    return {"emulated": emu["emulated"], "timing_source": emu["timing_source"],
            "telemetry_sampling": s.telemetry_sampling[0], "telemetry_sampling_reason": s.telemetry_sampling[1],
            **{f"prepare_{k}": prep.get(k) for k in ("mode", "seconds", "tokens_per_s", "cached", "stalls",
                                                      "streamed")},
            **workload_describe.summary_keys(p.workload_stats, p.items)}


def engine_keys(s: PointSession, telemetry: pa.Table, summary: dict) -> dict:
    """The engine's counters over the window (where its /metrics was sampled), its router's, and the
    rows' tokens per step against the engine's speculative-decoding counters."""
    if not s.engine_metrics:
        return {}
    out = {**engine_summary(telemetry), **router_summary(telemetry)}  # the router's page: Dynamo's frontend
    out.update(spec_agreement({**summary, **out}))
    return out


def prompt_tokens_mismatch(requests: pa.Table) -> int:
    """Requests whose prompt tokens, as the server counted them, differ from those the workload built."""
    exp = requests.column("expected_prompt_tokens").to_numpy(zero_copy_only=False)
    got = requests.column("prompt_tokens").to_numpy(zero_copy_only=False)
    with np.errstate(invalid="ignore"):
        return int(np.nansum(exp.astype(float) != got.astype(float)))


def autoscale_keys(s: PointSession, p: PointRun) -> dict:
    """Live autoscaling's replica figures (``harness.autoscale_record.figures``; empty unless
    autoscaled); added last, and their paid replica-seconds bill the window's cost."""
    return autoscale.figures(s, p)
