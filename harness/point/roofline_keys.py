"""The summary's roofline keys: the run measured over the roofline of the served model on its
hardware (``roofline_keys``), and each pool of a deployment against its own (``pool_bottlenecks``)."""

from __future__ import annotations

import numpy as np

from harness.point.session import PointSession


def roofline_keys(s: PointSession, summary: dict) -> dict:
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


def pool_bottlenecks(s: PointSession, summary: dict, per_replica: dict) -> dict:
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
        line = {k: v for k, v in roofline_keys(s, one).items()
                if k in ("roofline_batch", "roofline_decode_ms", "roofline_prefill_ms", "tpot_over_roofline",
                         "ttft_over_roofline", "bottleneck", "roofline_unavailable_reason")}
        out[role] = {"replicas": names, "running_mean_per_replica": one["engine_running_mean"],
                     "waiting_mean": float(np.sum(waiting)) if waiting else None, **line}
    return out

