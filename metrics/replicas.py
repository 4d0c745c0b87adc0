"""A deployment measured per replica: who served how much, how each replica's cache and queue
fared, and how uneven the replicas were.

Inputs: the run's request rows (``requests.parquet``; its ``replica`` column names the replica
that served each row, ``unknown`` where nobody said) and each replica's engine values
(``metrics.engine_counters.replica_engine_summaries``: replica -> its ``engine_*`` keys).
Measured rows are those with ``warmup == False``; completed ones have ``status == 'ok'``.

Per replica (``replicas: {r0: {...}, ...}`` in ``summary.json``):
- ``requests``: measured rows it served (any status).
- ``load_share``: ``requests`` / all measured rows of the run (so the shares and
  ``replicas_unknown_share`` add up to 1).
- ``output_tokens``: output tokens of its completed measured rows.
- ``ttft_p50_ms``: median TTFT of its completed measured rows (the client's clock).
- ``prefix_cache_hit_rate``: its engine's Δ hits / Δ queries over the run.
- ``waiting_mean`` / ``waiting_max``: its engine's queue depth (requests waiting), mean and max
  over the telemetry samples during the run.
- ``kv_cache_usage_mean`` / ``kv_cache_usage_max``: its engine's KV-cache usage (0-1), likewise.
- ``mean_queue_ms``, ``mean_prefill_ms``, ``mean_decode_ms``, ``mean_kv_transfer_ms``: its
  engine's phase means (``metrics.engine_counters``), where the engine exposes them.

Across replicas (flat keys; each over every replica listed, an idle one included):
- ``replica_load_imbalance`` = max ``load_share`` / mean ``load_share`` (1: even; N: one of N
  replicas took everything).
- ``replica_kv_usage_imbalance`` = max / mean of ``kv_cache_usage_mean``.
- ``replica_queue_imbalance`` = max / mean of ``waiting_mean`` (NaN when nothing queued).
- ``replica_hit_rate_spread`` = max - min of ``prefix_cache_hit_rate``.
- ``replicas_unknown_share``: measured rows whose replica is ``unknown`` / measured rows.
- ``replica_count``: replicas listed (named by a row or with engine telemetry).
"""

from __future__ import annotations

import math
import re

import numpy as np
import pyarrow as pa

from metrics.percentiles import percentile

# requests.parquet's replica of a row nobody said which replica served (DESIGN.md's contract;
# loadgen.records writes it: metrics reads results and imports no loadgen)
UNKNOWN_REPLICA = "unknown"

# replica key <- the engine key it is read from
ENGINE_KEYS = {"prefix_cache_hit_rate": "engine_prefix_cache_hit_rate",
               "waiting_mean": "engine_waiting_mean", "waiting_max": "engine_waiting_max",
               "kv_cache_usage_mean": "engine_kv_cache_usage_mean", "kv_cache_usage_max": "engine_kv_cache_usage_max",
               "mean_queue_ms": "engine_mean_queue_ms", "mean_prefill_ms": "engine_mean_prefill_ms",
               "mean_decode_ms": "engine_mean_decode_ms", "mean_kv_transfer_ms": "engine_mean_kv_transfer_ms"}
IMBALANCE_KEYS = ("replica_load_imbalance", "replica_kv_usage_imbalance", "replica_queue_imbalance",
                  "replica_hit_rate_spread", "replicas_unknown_share", "replica_count")


def replica_order(name: str) -> tuple:
    """Sort key of replica names: by their letters, then their numbers as numbers (r2 before r10)."""
    return tuple((0, int(x), "") if x.isdigit() else (1, 0, x) for x in re.findall(r"\d+|\D+", name))


def _max_over_mean(values: list[float]) -> float:
    v = [x for x in values if x is not None and not math.isnan(x)]
    if not v:
        return math.nan
    mean = sum(v) / len(v)
    return max(v) / mean if mean > 0 else math.nan


def replica_summary(requests: pa.Table, engine: dict[str, dict] | None = None) -> dict:
    """The per-replica block and the imbalance keys (module doc); empty when the run has at
    most one replica named in its rows and no per-replica telemetry (a single engine's
    summary stays as it was)."""
    engine = engine or {}
    if "replica" in requests.column_names:
        replica = np.asarray(requests.column("replica").to_pylist(), dtype=object)
    else:
        replica = np.full(requests.num_rows, UNKNOWN_REPLICA, dtype=object)
    measured = ~np.asarray(requests.column("warmup").to_pylist(), dtype=bool)
    named = {r for r in replica[measured] if r is not None and r != UNKNOWN_REPLICA}
    if len(named) <= 1 and not engine:
        return {}
    status = np.asarray(requests.column("status").to_pylist(), dtype=object)
    ok = measured & (status == "ok")
    ttft = np.asarray(requests.column("ttft_s").to_pylist(), dtype=np.float64)
    out_tok = np.asarray([x if x is not None else np.nan for x in requests.column("output_tokens").to_pylist()],
                         dtype=np.float64)
    n_measured = int(measured.sum())
    names = sorted(named | set(engine), key=replica_order)
    per: dict[str, dict] = {}
    for r in names:
        mine = replica == r
        n = int((mine & measured).sum())
        row = {"requests": n,
               "load_share": n / n_measured if n_measured else math.nan,
               "output_tokens": int(np.nansum(out_tok[mine & ok])),
               "ttft_p50_ms": percentile(ttft[mine & ok], 50) * 1e3}
        eng = engine.get(r, {})
        for key, src in ENGINE_KEYS.items():
            if src in eng:
                row[key] = eng[src]
        per[r] = row
    unknown = measured & ((replica == UNKNOWN_REPLICA) | np.asarray([x is None for x in replica], dtype=bool))
    hit = [v["prefix_cache_hit_rate"] for v in per.values()
           if not math.isnan(v.get("prefix_cache_hit_rate", math.nan))]
    return {"replicas": per,
            "replica_count": len(per),
            "replica_load_imbalance": _max_over_mean([v["load_share"] for v in per.values()]),
            "replica_kv_usage_imbalance": _max_over_mean([v.get("kv_cache_usage_mean") for v in per.values()]),
            "replica_queue_imbalance": _max_over_mean([v.get("waiting_mean") for v in per.values()]),
            "replica_hit_rate_spread": max(hit) - min(hit) if hit else math.nan,
            "replicas_unknown_share": int(unknown.sum()) / n_measured if n_measured else math.nan}
