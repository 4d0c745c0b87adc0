"""The engine's own counters over a run, from the start and end snapshots of its ``/metrics``
page taken around the load and the samples between them, all rows of the run's
``telemetry.parquet`` (``source = 'engine'``, or ``'engine:<replica>'`` for each replica of a
deployment; ``metrics.telemetry.engine``).

Definitions (per run; per replica, and over the whole deployment):
- ``engine_prefix_cache_hit_rate`` = Δ prefix_cache_hits / Δ prefix_cache_queries (tokens
  found in the prefix cache over prompt tokens looked up); NaN when nothing was looked up.
- ``engine_spec_decode_acceptance_rate`` = Δ accepted draft tokens / Δ draft tokens.
- ``engine_spec_decode_mean_accepted_length`` = 1 + Δ accepted draft tokens / Δ drafts (tokens a
  drafting step delivered; ``metrics.speculative`` compares it with the rows' tokens per step).
- ``engine_<counter>`` = end - start, for every counter the engine exposes.
- ``engine_<gauge>_max`` / ``_mean``: over the timer's samples during the run.
- ``engine_mean_<phase>_ms`` (``PHASES``: queue, prefill, decode, inference, kv_transfer) =
  1000 * Δ <phase>_time_sum / Δ <phase>_time_count: the mean time a request the engine
  finished during the run spent in that phase, from the engine's per-request histogram
  (vLLM: ``vllm:request_queue_time_seconds`` ...; the KV transfer of disaggregated serving:
  NIXL's ``vllm:nixl_xfer_time_seconds``, per transfer); NaN when no request finished.
- The whole deployment (``engine_summary`` over several replicas): each counter's Δ is the sum
  of the replicas' Δs (so the hit rate is Σ hits / Σ queries and a phase mean Σ sums / Σ
  counts), over the replicas with both snapshots (``engine_metrics_complete`` only when every
  replica has them); gauges per sample round: ``running`` and ``waiting`` summed over the
  replicas, the others (``kv_cache_usage`` ...) their mean over replicas; then max and mean
  over the rounds.  ``engine_replicas``: how many replicas had engine rows.
- The router in front of the workers, where its page is sampled (Dynamo's frontend, rows
  ``source = 'router'``; ``router_summary``): ``router_<counter>`` = end - start for requests,
  requests_ok, output_tokens and disconnected_clients; ``router_mean_<x>_ms`` (``ROUTER_MEANS``:
  ttft, itl, request) = 1000 * Δ <x>_time_sum / Δ <x>_time_count, the router's own mean TTFT,
  inter-token latency (per token) and request time over the requests it finished in the run
  (NaN when none); ``router_<gauge>_max`` / ``_mean`` (inflight, queued) over the samples.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from metrics.speculative import engine_accept_length
from metrics.telemetry.engine import ENGINE_SOURCE, ROUTER_SOURCE, is_engine_source, source_replica

PHASES = ("queue", "prefill", "decode", "inference", "kv_transfer")
PHASE_COUNTERS = tuple(f"{p}_time_{part}" for p in PHASES for part in ("sum", "count"))
COUNTERS = ("prefix_cache_queries", "prefix_cache_hits", "preemptions", "prompt_tokens", "generation_tokens",
            "spec_decode_drafts", "spec_decode_draft_tokens", "spec_decode_accepted_tokens", *PHASE_COUNTERS)
GAUGES = ("running", "waiting", "kv_cache_usage", "prefix_cache_hit_rate", "spec_decode_accept_rate",
          "spec_decode_accept_length")
SUMMED_GAUGES = ("running", "waiting")  # a deployment's queue is the sum of its replicas'; the rest: the mean
ROUTER_MEANS = ("ttft", "itl", "request")
ROUTER_COUNTERS = ("requests", "requests_ok", "output_tokens", "disconnected_clients",
                   *(f"{x}_time_{part}" for x in ROUTER_MEANS for part in ("sum", "count")))
ROUTER_GAUGES = ("inflight", "queued")


def _ratio(num: float, den: float) -> float:
    return num / den if den > 0 else math.nan


def counter_deltas(start: dict | None, end: dict | None, gauges: dict | None = None) -> dict:
    """The run's share of each engine counter and the ratios defined in the module doc."""
    out: dict = {}
    if start is None or end is None:
        out["engine_metrics_complete"] = False
    else:
        out["engine_metrics_complete"] = True
        for k in COUNTERS:
            if k in start and k in end:
                out[f"engine_{k}"] = end[k] - start[k]
        if "engine_prefix_cache_queries" in out and "engine_prefix_cache_hits" in out:
            out["engine_prefix_cache_hit_rate"] = _ratio(out["engine_prefix_cache_hits"],
                                                         out["engine_prefix_cache_queries"])
        if "engine_spec_decode_draft_tokens" in out and "engine_spec_decode_accepted_tokens" in out:
            out["engine_spec_decode_acceptance_rate"] = _ratio(out["engine_spec_decode_accepted_tokens"],
                                                               out["engine_spec_decode_draft_tokens"])
        if "engine_spec_decode_drafts" in out and "engine_spec_decode_accepted_tokens" in out:
            out["engine_spec_decode_mean_accepted_length"] = engine_accept_length(
                out["engine_spec_decode_accepted_tokens"], out["engine_spec_decode_drafts"])
        for p in PHASES:
            s, n = out.get(f"engine_{p}_time_sum"), out.get(f"engine_{p}_time_count")
            if s is not None and n is not None:
                out[f"engine_mean_{p}_ms"] = _ratio(s * 1e3, n)
    for k, vals in (gauges or {}).items():
        vals = [v for v in vals if not math.isnan(v)]
        if vals:
            out[f"engine_{k}_max"] = max(vals)
            out[f"engine_{k}_mean"] = sum(vals) / len(vals)
    return out


class _EngineRows:
    """One engine source's rows: its last ``start``/``end`` snapshots and the gauge samples
    between them, per sample time."""

    def __init__(self, t: np.ndarray, names: list, values: list, detail: np.ndarray, gauges=GAUGES):
        self.start, t0 = self._snapshot(t, names, values, detail, "start")
        self.end, t1 = self._snapshot(t, names, values, detail, "end")
        lo, hi = (t0 if t0 is not None else t.min()), (t1 if t1 is not None else t.max())
        self.samples: dict[str, dict[int, float]] = {}  # gauge -> time -> value
        for i in np.flatnonzero((detail != "start") & (detail != "end") & (t >= lo) & (t <= hi)):
            if names[i] in gauges:
                self.samples.setdefault(names[i], {})[int(t[i])] = values[i]

    @staticmethod
    def _snapshot(t, names, values, detail, tag):
        at = np.flatnonzero(detail == tag)
        if not at.size:
            return None, None
        when = t[at].max()
        return {names[i]: values[i] for i in at if t[i] == when}, int(when)

    def summary(self) -> dict:
        return counter_deltas(self.start, self.end, {k: list(v.values()) for k, v in self.samples.items()})


def _engine_rows(telemetry: pa.Table) -> dict[str | None, _EngineRows]:
    """Engine source -> its rows: None for the one engine of a run, else the replica's name."""
    src = telemetry.column("source")
    mine = pc.or_(pc.equal(src, ENGINE_SOURCE), pc.starts_with(src, ENGINE_SOURCE + ":"))
    d = telemetry.filter(pc.fill_null(mine, False)).select(["time_ns", "source", "name", "value", "detail"]).to_pydict()
    by: dict[str, list[int]] = {}
    for i, src in enumerate(d["source"]):
        if src is not None and is_engine_source(src):
            by.setdefault(src, []).append(i)
    out = {}
    for src, idx in sorted(by.items()):
        t = np.asarray([d["time_ns"][i] for i in idx], dtype=np.int64)
        detail = np.asarray([d["detail"][i] or "" for i in idx], dtype=object)
        out[source_replica(src)] = _EngineRows(t, [d["name"][i] for i in idx], [d["value"][i] for i in idx], detail)
    return out


def replica_engine_summaries(telemetry: pa.Table) -> dict[str, dict]:
    """``counter_deltas`` of each replica of a deployment (replica name -> its ``engine_*``
    keys); empty when the run has one engine (``source = 'engine'``) or none."""
    return {r: rows.summary() for r, rows in _engine_rows(telemetry).items() if r is not None}


def _deployment(rows: dict[str | None, _EngineRows]) -> dict:
    """The whole deployment's ``counter_deltas`` (module doc: sums of the replicas' Δs, gauges
    combined per sample round)."""
    both = [r for r in rows.values() if r.start is not None and r.end is not None]
    start: dict = {}
    end: dict = {}
    for k in COUNTERS:
        have = [r for r in both if k in r.start and k in r.end]
        if have:
            start[k] = sum(r.start[k] for r in have)
            end[k] = sum(r.end[k] for r in have)
    gauges: dict = {}
    for k in GAUGES:
        rounds: dict[int, list[float]] = {}
        for r in rows.values():
            for t, v in r.samples.get(k, {}).items():
                if not math.isnan(v):
                    rounds.setdefault(t, []).append(v)
        if rounds:
            combine = sum if k in SUMMED_GAUGES else (lambda vs: sum(vs) / len(vs))
            gauges[k] = [combine(vs) for _, vs in sorted(rounds.items())]
    out = counter_deltas(start if both else None, end if both else None, gauges)
    out["engine_metrics_complete"] = bool(both) and len(both) == len(rows)
    out["engine_replicas"] = len(rows)
    return out


def engine_summary(telemetry: pa.Table) -> dict:
    """``counter_deltas`` of a run from its telemetry table: the last ``start`` and ``end``
    snapshots, and the gauges sampled between them; over a deployment's replicas, the whole
    deployment's (module doc)."""
    rows = _engine_rows(telemetry)
    if not rows:
        return {}
    if list(rows) == [None]:
        return rows[None].summary()
    return _deployment({r: v for r, v in rows.items() if r is not None})


def router_summary(telemetry: pa.Table) -> dict:
    """The router's own figures over a run, from its rows (``source = 'router'``: the start and
    end snapshots and the samples between them; module doc); empty when its page was not sampled."""
    d = telemetry.filter(pc.fill_null(pc.equal(telemetry.column("source"), ROUTER_SOURCE), False)).select(
        ["time_ns", "name", "value", "detail"]).to_pydict()
    if not any(n in ROUTER_COUNTERS or n in ROUTER_GAUGES for n in d["name"]):
        return {}
    t = np.asarray(d["time_ns"], dtype=np.int64)
    rows = _EngineRows(t, d["name"], d["value"], np.asarray([x or "" for x in d["detail"]], dtype=object),
                       gauges=ROUTER_GAUGES)
    out: dict = {"router_metrics_complete": rows.start is not None and rows.end is not None}
    if out["router_metrics_complete"]:
        delta = {k: rows.end[k] - rows.start[k] for k in ROUTER_COUNTERS if k in rows.start and k in rows.end}
        out.update({f"router_{k}": v for k, v in delta.items() if "_time_" not in k})
        for x in ROUTER_MEANS:
            if f"{x}_time_sum" in delta and f"{x}_time_count" in delta:
                out[f"router_mean_{x}_ms"] = _ratio(delta[f"{x}_time_sum"] * 1e3, delta[f"{x}_time_count"])
    for k, vals in rows.samples.items():
        vals = [v for v in vals.values() if not math.isnan(v)]
        if vals:
            out[f"router_{k}_max"] = max(vals)
            out[f"router_{k}_mean"] = sum(vals) / len(vals)
    return out
