"""Cold start: how long a freshly launched engine takes to serve, and how its first minute
of load compares with the rest, from the launch times and the per-request records.

Times are ``perf_counter_ns`` (the records' clock).  ``launch_ns``: the engine's process was
started; ``healthy_ns``: its health route first answered 200; ``load_start_ns``: the load's
schedule began (t0).  Under ``scenario.cold_start`` no warm-up request is sent and no idle
baseline is taken, so the first request of the load is the engine's first.

- ``engine_ready_s`` = healthy - launch: start to ready (health).
- ``engine_start_s`` = load start - launch: start until the load could begin (ready, plus
  anything the harness did before the load).
- ``first_token_after_start_s`` = the earliest ``first_token_ns`` of any row (warm-up rows
  included: they are the engine's first requests) - launch.
- ``first_request_ttft_ms``: TTFT of the first request sent (any row).
- ``first_window_*`` / ``rest_*``: measured requests (``warmup == False``) that completed
  (``ok``), split by ``sent_ns`` < load start + ``first_window_s``; per part its count and
  the p50/p99 of TTFT and TPOT (``metrics.percentiles``: linear interpolation).
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from metrics.percentiles import describe


def _col(t: pa.Table, name: str) -> np.ndarray:
    return t.column(name).to_numpy(zero_copy_only=False).astype(np.float64, copy=False)


def cold_start_figures(table: pa.Table, launch_ns: int, healthy_ns: int | None, load_start_ns: int,
                       first_window_s: float) -> dict:
    """The module doc's figures for the first run after an engine launch."""
    out: dict = {
        "engine_ready_s": (healthy_ns - launch_ns) / 1e9 if healthy_ns is not None else math.nan,
        "engine_start_s": (load_start_ns - launch_ns) / 1e9,
        "first_window_s": float(first_window_s),
    }
    first_tok = _col(table, "first_token_ns")
    out["first_token_after_start_s"] = ((np.nanmin(first_tok) - launch_ns) / 1e9
                                        if np.any(~np.isnan(first_tok)) else math.nan)
    sent_all = _col(table, "sent_ns")
    if np.any(~np.isnan(sent_all)):
        first = int(np.nanargmin(sent_all))
        out["first_request_ttft_ms"] = float(_col(table, "ttft_s")[first]) * 1e3
        out["first_request_status"] = str(table.column("status")[first].as_py())
    else:
        out["first_request_ttft_ms"] = math.nan
        out["first_request_status"] = None
    measured = table.filter(pc.invert(table.column("warmup")))
    ok = measured.column("status").to_numpy(zero_copy_only=False).astype(str) == "ok"
    sent = _col(measured, "sent_ns")
    with np.errstate(invalid="ignore"):
        early = sent < load_start_ns + first_window_s * 1e9
    for part, mask in (("first_window", ok & early), ("rest", ok & ~early)):
        out[f"{part}_n"] = int(mask.sum())
        for name, col in (("ttft", "ttft_s"), ("tpot", "tpot_s")):
            d = describe(_col(measured, col)[mask], (50, 99))
            out[f"{part}_p50_{name}_ms"] = d["p50"] * 1e3
            out[f"{part}_p99_{name}_ms"] = d["p99"] * 1e3
    return out
