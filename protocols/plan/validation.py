"""A plan's prediction against a real replay of the same window (``protocol.validate=RUN_DIR``):
the run folder of a ``load=trace`` run on a real deployment the harness scaled by the same
policy (``deployment.autoscale.enabled=true``), and the plan's simulation of the same
traffic from the same starting replicas.

Both sides go through the same definitions (``metrics.fleet``, ``metrics.autoscale_bill``) over
the same window, the trace's span [first arrival, last arrival]: attainment, goodput and good
output tokens per second, TTFT, TPOT and E2EL p50/p90, and the bill under one name each:
``starting_replica_seconds``, ``serving_replica_seconds``, ``draining_replica_seconds`` and
their sum ``paid_replica_seconds``.  A failed scale-up is paid from its decision until it
failed (an autoscale.json written before failures were timed: counted 0 s, and said so).  The error of each is
(predicted - measured) / measured; for attainment also the difference in percentage points.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from harness import results_io
from harness.errors import UserError
from metrics.autoscale_bill import BILL_KEYS, replica_figures
from metrics.fleet import request_metrics
from metrics.slo import SLO
from protocols.plan.traffic import Traffic

ROWS = (("slo_attainment", "relative"), ("goodput_rps", "relative"), ("good_output_throughput", "relative"),
        ("p50_ttft_ms", "relative"), ("p90_ttft_ms", "relative"), ("p50_tpot_ms", "relative"),
        ("p90_tpot_ms", "relative"), ("p50_e2el_ms", "relative"), ("p90_e2el_ms", "relative"),
        ("paid_replica_seconds", "relative"),
        ("starting_replica_seconds", "relative"), ("serving_replica_seconds", "relative"),
        ("draining_replica_seconds", "relative"), ("replicas_max", "relative"), ("scale_ups", "difference"))


def measured(run: Path, slo: SLO) -> dict:
    """The fleet metrics of a real replay's run folder over its trace's span."""
    req = run / results_io.REQUESTS
    if not req.is_file():
        raise UserError(f"protocol.validate={run}: no requests.parquet there (give a finished run's folder)")
    t = results_io.read_parquet(req, columns=["scheduled_ns", "ttft_s", "tpot_s", "output_tokens", "status",
                                              "warmup"]).to_pydict()
    sched = np.asarray(t["scheduled_ns"], dtype=np.int64)
    t0 = int(sched.min())
    arrival = (sched - t0) / 1e9
    span = float(arrival.max())
    done = np.asarray(t["status"]) == "ok"
    res = request_metrics(slo, done, np.asarray(t["ttft_s"], dtype=np.float64),
                          np.asarray(t["tpot_s"], dtype=np.float64), np.asarray(t["output_tokens"]), span)
    res["warmup_rows"] = int(np.asarray(t["warmup"], dtype=bool).sum())
    res.update(replicas_measured(run, t0, span))
    return res


def replicas_measured(run: Path, t0_ns: int, span_s: float) -> dict:
    """The bill over [0, span] from the run's autoscale.json (``metrics.autoscale_bill.replica_figures``):
    serving replicas from its ``serving`` log; starting, each replica start from the policy's
    request to its joining the router, its failure or its cancellation; draining, each replica
    scaled down from leaving the router to its stop; as the plan counts them."""
    path = run / results_io.AUTOSCALE
    if not path.is_file():
        return {"replicas_note": "no autoscale.json in the run: its replicas are not compared"}
    a = results_io.read_json(path)
    shift = (int(a.get("load_start_ns") or t0_ns) - t0_ns) / 1e9   # its clock: the load's start
    out: dict = {"scale_ups": sum(1 for d in a.get("decisions", []) if d.get("to", 0) > d.get("from", 0))}
    log = sorted((max(0.0, float(e["t_s"]) + shift), int(e["replicas"])) for e in a.get("serving", [])
                 if e.get("t_s") is not None)
    if not log:
        return {**out, "replicas_note": "autoscale.json has no serving log"}
    notes = []

    def end_of(e: dict, keys, what: str) -> float:
        for k in keys:
            if e.get(k) is not None:
                return e[k] + shift
        if e.get("error") is not None:  # ended in failure, when is not recorded (an older autoscale.json)
            notes.append(f"{what} of {e.get('replica')} failed at an unrecorded time: counted 0 s")
            return e["requested_s"] + shift
        return span_s                   # still going at the window's end

    starting = [(e["requested_s"] + shift, end_of(e, ("added_s", "failed_s", "cancelled_s"), "the start"))
                for e in a.get("starts", []) if e.get("requested_s") is not None]
    draining = [(e["removed_s"] + shift, end_of({**e, "requested_s": e["removed_s"]},
                                                ("stopped_s", "failed_s", "drained_s"), "the stop"))
                for e in a.get("stops", []) if e.get("removed_s") is not None]
    fig = replica_figures(log, 0.0, span_s, starting, draining, unit_s=1.0,
                          # an older record's serving log and its start or drain times are two clock
                          # reads apart: a stretch under a millisecond is not a replica more
                          min_hold_s=1e-3)
    out.update({k: fig[k] for k in (*BILL_KEYS, "replicas_max")})
    if notes:
        out["replicas_note"] = "; ".join(notes)
    return out


def validate(run: Path, plan: dict, slo: SLO, traffic: Traffic) -> dict:
    """The validation table of the plan's first candidate against the real run (module doc)."""
    if not run.is_dir():
        raise UserError(f"protocol.validate={run}: no such run folder")
    if not plan["configs"]:
        raise UserError("protocol.validate: the plan has no candidate to validate")
    name, entry = next(iter(plan["configs"].items()))
    real = measured(run, slo)
    pred = {k: entry["metrics"][k]["value"] for k in entry["metrics"]}
    pred["scale_ups"] = entry["scale_ups"]
    rows = []
    for key, kind in ROWS:
        m, p = real.get(key), pred.get(key)
        if m is None or p is None:
            continue
        err = (p - m) / m if kind == "relative" and m else (p - m)
        row = {"metric": key, "measured": m, "predicted": p, "error": err,
               "error_kind": "relative (predicted - measured) / measured" if kind == "relative" else "difference"}
        if key == "slo_attainment":
            row["difference_pp"] = 100 * (p - m)
        rows.append(row)
    n_real = real["requests"]
    notes = [f"the real run has {n_real} requests, the plan's traffic {len(traffic)}"]
    if n_real != len(traffic):
        notes.append("the request counts differ: the plan's traffic is not the replayed window (check workload.* "
                     "and load.* against the run's config.yaml)")
    if real.get("warmup_rows"):
        notes.append(f"{real['warmup_rows']} warm-up rows are counted as traffic on both sides")
    if real.get("replicas_note"):
        notes.append(real["replicas_note"])
    if entry["outside_measurements"]:
        notes.append(f"{entry['outside_measurements_share']:.1%} of the plan's requests were served outside the "
                     "measurements")
    return {"what": f"{name}: the plan's simulation of the replayed window (from {plan.get('initial_replicas', 1)} "
                    f"replica(s)) against the real run {run}",
            "config": name, "run": str(run), "rows": rows, "measured": real, "notes": notes}
