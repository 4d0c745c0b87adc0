"""The engine's own counters over a run, from the start and end snapshots of its ``/metrics``
page taken around the load and the samples between them, all rows of the run's
``telemetry.parquet`` (``source = 'engine'``; ``metrics.telemetry.engine``).

Definitions (per run):
- ``engine_prefix_cache_hit_rate`` = Δ prefix_cache_hits / Δ prefix_cache_queries (tokens
  found in the prefix cache over prompt tokens looked up); NaN when nothing was looked up.
- ``engine_spec_decode_acceptance_rate`` = Δ accepted draft tokens / Δ draft tokens.
- ``engine_<counter>`` = end - start, for every counter the engine exposes.
- ``engine_<gauge>_max`` / ``_mean``: over the timer's samples during the run.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

COUNTERS = ("prefix_cache_queries", "prefix_cache_hits", "preemptions", "prompt_tokens", "generation_tokens",
            "spec_decode_drafts", "spec_decode_draft_tokens", "spec_decode_accepted_tokens")
GAUGES = ("running", "waiting", "kv_cache_usage", "prefix_cache_hit_rate", "spec_decode_accept_rate",
          "spec_decode_accept_length")


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
    for k, vals in (gauges or {}).items():
        vals = [v for v in vals if not math.isnan(v)]
        if vals:
            out[f"engine_{k}_max"] = max(vals)
            out[f"engine_{k}_mean"] = sum(vals) / len(vals)
    return out


def engine_summary(telemetry: pa.Table) -> dict:
    """``counter_deltas`` of a run from its telemetry table: the last ``start`` and ``end``
    snapshots, and the gauges sampled between them."""
    eng = telemetry.filter(pc.equal(telemetry.column("source"), "engine"))
    if eng.num_rows == 0:
        return {}
    d = eng.to_pydict()
    t = np.asarray(d["time_ns"], dtype=np.int64)
    detail = np.asarray([x or "" for x in d["detail"]], dtype=object)

    def snapshot(tag: str) -> tuple[dict | None, int | None]:
        at = np.flatnonzero(detail == tag)
        if not at.size:
            return None, None
        when = t[at].max()
        return {d["name"][i]: d["value"][i] for i in at if t[i] == when}, int(when)

    start, t0 = snapshot("start")
    end, t1 = snapshot("end")
    lo, hi = (t0 if t0 is not None else t.min()), (t1 if t1 is not None else t.max())
    gauges: dict = {}
    for i in np.flatnonzero((detail != "start") & (detail != "end") & (t >= lo) & (t <= hi)):
        if d["name"][i] in GAUGES:
            gauges.setdefault(d["name"][i], []).append(d["value"][i])
    return counter_deltas(start, end, gauges)
