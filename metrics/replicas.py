"""A deployment measured per replica: who served how much, how each replica's cache and queue
fared, and how uneven the replicas were.

Inputs: the run's request rows (``requests.parquet``; its ``replica`` column names the replica
that served each row, ``unknown`` where nobody said) and each replica's engine values
(``metrics.engine_counters.replica_engine_summaries``: replica -> its ``engine_*`` keys).
Measured rows are those with ``warmup == False``; completed ones have ``status == 'ok'``.
``pools`` (replica -> its pool: the deployment's roles ``replica``, ``prefill``, ``decode``;
none given: every replica in one pool) says which replicas share a pool's work.

Per replica (``replicas: {r0: {...}, ...}`` in ``summary.json``):
- ``pool``: its pool (with ``pools`` only).
- ``requests``: measured rows it served (any status).
- ``load_share``: its share of its pool's work, and ``load_share_from`` what says so:
  - ``rows``, in a pool the rows name: ``requests`` / all measured rows of the run (so the
    pool's shares and ``replicas_unknown_share`` add up to 1).
  - in a pool no row names (a prefill pool: the client sees the decode worker's header), from
    the engines' counters: c / (sum of c over the pool), c the first counter every replica of
    the pool has, requests before tokens (``SHARE_COUNTERS``).  A pool of one replica: 1.0
    (``only replica``).  Nothing says: None (``unknown``, never 0).  Its ``requests`` is then
    its engine's request counter (warm-up included), None without one.
- ``output_tokens``: output tokens of its completed measured rows.
- ``ttft_p50_ms``: median TTFT of its completed measured rows (the client's clock).
- ``prefix_cache_hit_rate``: its engine's Δ hits / Δ queries over the run.
- ``cache_hit_rate``: from its rows, warm-up included (the requests its engine's counters saw):
  sum(cached_tokens) / sum(prompt_tokens) over those that report ``cached_tokens``
  (``metrics.token_accounting.hit_rate``); NaN when none does.
- ``waiting_mean`` / ``waiting_max``: its engine's queue depth (requests waiting), mean and max
  over the telemetry samples during the run.
- ``kv_cache_usage_mean`` / ``kv_cache_usage_max``: its engine's KV-cache usage (0-1), likewise.
- ``mean_queue_ms``, ``mean_prefill_ms``, ``mean_decode_ms``, ``mean_kv_transfer_ms``: its
  engine's phase means (``metrics.engine_counters``), where the engine exposes them.

Across replicas (flat keys; each over every replica listed, an idle one included):
- ``pool_load_imbalance``: per pool, max ``load_share`` / mean ``load_share`` over its
  replicas (1: even; N: one of N replicas took everything); None where a share is unknown.
- ``replica_load_imbalance`` = the largest ``pool_load_imbalance`` known (one pool: its value;
  a 1P1D or 2P2D deployment balanced in each pool reads 1).
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
from metrics.token_accounting import hit_rate

# requests.parquet's replica of a row nobody said which replica served (DESIGN.md's contract;
# loadgen.records writes it: metrics reads results and imports no loadgen)
UNKNOWN_REPLICA = "unknown"

# replica key <- the engine key it is read from
ENGINE_KEYS = {"prefix_cache_hit_rate": "engine_prefix_cache_hit_rate",
               "waiting_mean": "engine_waiting_mean", "waiting_max": "engine_waiting_max",
               "kv_cache_usage_mean": "engine_kv_cache_usage_mean", "kv_cache_usage_max": "engine_kv_cache_usage_max",
               "mean_queue_ms": "engine_mean_queue_ms", "mean_prefill_ms": "engine_mean_prefill_ms",
               "mean_decode_ms": "engine_mean_decode_ms", "mean_kv_transfer_ms": "engine_mean_kv_transfer_ms"}
# counters a pool's shares may come from where no row names its replicas: requests, then tokens
SHARE_COUNTERS = ("engine_inference_time_count", "engine_prefill_time_count", "engine_queue_time_count",
                  "engine_prompt_tokens")
REQUEST_COUNTERS = SHARE_COUNTERS[:3]
ROWS, ONLY, UNKNOWN = "rows", "only replica", "unknown"
IMBALANCE_KEYS = ("replica_load_imbalance", "pool_load_imbalance", "replica_kv_usage_imbalance",
                  "replica_queue_imbalance", "replica_hit_rate_spread", "replicas_unknown_share", "replica_count")


def replica_order(name: str) -> tuple:
    """Sort key of replica names: by their letters, then their numbers as numbers (r2 before r10)."""
    return tuple((0, int(x), "") if x.isdigit() else (1, 0, x) for x in re.findall(r"\d+|\D+", name))


def _max_over_mean(values: list[float]) -> float:
    v = [x for x in values if x is not None and not math.isnan(x)]
    if not v:
        return math.nan
    mean = sum(v) / len(v)
    return max(v) / mean if mean > 0 else math.nan


def _pool_shares(names: list[str], engine: dict[str, dict]) -> tuple[list[float | None], str]:
    """The shares of a pool no row names, from its engines' counters (module doc)."""
    if len(names) == 1:
        return [1.0], ONLY
    for key in SHARE_COUNTERS:
        vals = [(engine.get(r) or {}).get(key) for r in names]
        if all(v is not None and not math.isnan(v) for v in vals) and sum(vals) > 0:
            return [v / sum(vals) for v in vals], key
    return [None] * len(names), UNKNOWN


def _imbalances(per: dict[str, dict]) -> dict:
    """``pool_load_imbalance`` per pool and ``replica_load_imbalance`` from the rows' shares."""
    pools: dict[str, list] = {}
    for row in per.values():
        pools.setdefault(row.get("pool", "replica"), []).append(row["load_share"])
    each = {pool: (None if any(s is None for s in shares) else _max_over_mean(shares))
            for pool, shares in pools.items()}
    known = [v for v in each.values() if v is not None and not math.isnan(v)]
    return {"pool_load_imbalance": each, "replica_load_imbalance": max(known) if known else math.nan}


def forget_engine_values(summary: dict) -> None:
    """Drop each replica's engine values (its engine restarted: its counters began again from
    zero) and the shares they gave (``unknown``), then the load imbalance again."""
    per = summary.get("replicas") or {}
    for row in per.values():
        for k in ENGINE_KEYS:
            row.pop(k, None)
        if row.get("load_share_from") in SHARE_COUNTERS:
            row.update(load_share=None, load_share_from=UNKNOWN, requests=None)
    if per:
        summary.update(_imbalances(per))


def replica_summary(requests: pa.Table, engine: dict[str, dict] | None = None,
                    pools: dict[str, str] | None = None) -> dict:
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
    cached, prompt = (np.asarray([np.nan if x is None else x for x in requests.column(c).to_pylist()]
                                 if c in requests.column_names else np.full(requests.num_rows, np.nan),
                                 dtype=np.float64) for c in ("cached_tokens", "prompt_tokens"))
    n_measured = int(measured.sum())
    names = sorted(named | set(engine), key=replica_order)
    per: dict[str, dict] = {}
    for r in names:
        mine = replica == r
        n = int((mine & measured).sum())
        row = {"requests": n,
               "load_share": n / n_measured if n_measured else math.nan,
               "output_tokens": int(np.nansum(out_tok[mine & ok])),
               "ttft_p50_ms": percentile(ttft[mine & ok], 50) * 1e3,
               "cache_hit_rate": hit_rate(cached[mine], prompt[mine])}
        eng = engine.get(r, {})
        for key, src in ENGINE_KEYS.items():
            if src in eng:
                row[key] = eng[src]
        if pools is not None:
            row["pool"] = pools.get(r, "replica")
        row["load_share_from"] = ROWS
        per[r] = row
    by_pool: dict[str, list[str]] = {}
    for r in names:
        by_pool.setdefault(per[r].get("pool", "replica"), []).append(r)
    for members in by_pool.values():
        if any(r in named for r in members):
            continue            # the rows say who served what
        shares, source = _pool_shares(members, engine)
        for r, share in zip(members, shares):
            eng = engine.get(r) or {}
            count = next((eng[k] for k in REQUEST_COUNTERS if eng.get(k) is not None and not math.isnan(eng[k])), None)
            per[r].update(load_share=share, load_share_from=source,
                          requests=int(count) if count is not None else None)
    unknown = measured & ((replica == UNKNOWN_REPLICA) | np.asarray([x is None for x in replica], dtype=bool))
    hit = [v["prefix_cache_hit_rate"] for v in per.values()
           if not math.isnan(v.get("prefix_cache_hit_rate", math.nan))]
    return {"replicas": per,
            "replica_count": len(per),
            **_imbalances(per),
            "replica_kv_usage_imbalance": _max_over_mean([v.get("kv_cache_usage_mean") for v in per.values()]),
            "replica_queue_imbalance": _max_over_mean([v.get("waiting_mean") for v in per.values()]),
            "replica_hit_rate_spread": max(hit) - min(hit) if hit else math.nan,
            "replicas_unknown_share": int(unknown.sum()) / n_measured if n_measured else math.nan}
