"""Energy of a window from ``telemetry.parquet``, and the per-token figures built on it.

Definitions (one place for each):
- Window energy ``energy_j``: the sum over devices of the energy between the window's start
  and end.  Per device, from its cumulative energy counter where it has one (NVML's total
  energy, DCGM's ``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION``, RAPL's ``energy_uj``): E(end) -
  E(start), each interpolated linearly between the samples around it; a counter that goes
  down wrapped (when its range is known: add the range) or was reset (driver reload: the
  new reading is the energy since the reset).  Without a counter: the trapezoid integral of
  the sampled power over the window, its edges interpolated.  ``energy_method`` says which.
- Scope: the accelerators (NVML, else DCGM) when any is read; else the CPU packages (RAPL).
  ``cpu_package_energy_j`` is reported beside the accelerators' energy when RAPL is readable.
- ``energy_per_good_token_j`` = energy_j / good output tokens; ``energy_per_token_j`` =
  energy_j / every measured output token, good or not (``all_output_tokens``);
  ``good_tokens_per_joule`` and ``tokens_per_joule`` are their inverses.
- Idle baseline: mean power over the ``idle_baseline_start``..``idle_baseline_end`` marks
  (engine up, no load).  ``idle_energy_share`` = idle_power_w x window_s / energy_j: the
  part of the window's energy the devices would have drawn doing nothing.
- Steady state (ML.ENERGY's rule for closed-loop runs): from the moment the number of
  requests in flight (every row counts: the engine serves them all) first reaches the batch
  capacity C (``load.concurrency``, or an open loop's ``max_concurrency``) once warm-up is
  over (not before the first measured request is sent) to the moment it last falls below C
  (the final drain starts).
  ``steady_energy_per_token_j`` = energy in that interval / output tokens whose chunks
  arrived in it.  Reported beside the full-window figures, never instead of them.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa

from metrics.telemetry.index import TelemetryIndex

COVERAGE_TOLERANCE = 1e-6


# --------------------------------------------------------------------------------- integration
def time_ordered(t_ns, values) -> tuple[np.ndarray, np.ndarray]:
    """Samples as float arrays in time order (ties kept in their order), those with a
    non-finite time or value left out."""
    t = np.asarray(t_ns, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    keep = np.isfinite(t) & np.isfinite(v)
    t, v = t[keep], v[keep]
    order = np.argsort(t, kind="stable")
    return t[order], v[order]


def counter_energy(t_ns, values_j, start_ns: int, end_ns: int, wrap_j: float | None = None) -> dict:
    """Energy in [start, end] from a cumulative counter's samples (see module doc).

    Returns ``energy_j``, ``covered_s`` (the part of the window inside the samples' span),
    ``wraps`` and ``resets`` counted between consecutive samples.
    """
    t, v = time_ordered(t_ns, values_j)
    if t.size < 2:
        return {"energy_j": math.nan, "covered_s": 0.0, "wraps": 0, "resets": 0}
    d = np.diff(v)
    wraps = resets = 0
    down = d < 0
    if down.any():
        if wrap_j and wrap_j > 0:
            d = np.where(down, d + wrap_j, d)
            wraps = int(down.sum())
        else:
            # A counter that restarted from zero: its new value is what was used since the restart.
            d = np.where(down, v[1:], d)
            resets = int(down.sum())
    cum = np.concatenate([[0.0], np.cumsum(d)])
    a, b = max(float(start_ns), t[0]), min(float(end_ns), t[-1])
    if b <= a:
        return {"energy_j": math.nan, "covered_s": 0.0, "wraps": wraps, "resets": resets}
    e = float(np.interp(b, t, cum) - np.interp(a, t, cum))
    return {"energy_j": e, "covered_s": (b - a) / 1e9, "wraps": wraps, "resets": resets}


def power_energy(t_ns, watts, start_ns: int, end_ns: int) -> dict:
    """Energy in [start, end] as the trapezoid integral of sampled power (edges interpolated)."""
    t, w = time_ordered(t_ns, watts)
    if t.size < 2:
        return {"energy_j": math.nan, "covered_s": 0.0}
    a, b = max(float(start_ns), t[0]), min(float(end_ns), t[-1])
    if b <= a:
        return {"energy_j": math.nan, "covered_s": 0.0}
    inside = (t > a) & (t < b)
    ts = np.concatenate([[a], t[inside], [b]])
    ws = np.concatenate([[np.interp(a, t, w)], w[inside], [np.interp(b, t, w)]])
    e = float(np.sum((ws[1:] + ws[:-1]) * np.diff(ts)) / 2.0 / 1e9)
    return {"energy_j": e, "covered_s": (b - a) / 1e9}


def source_energy(tel: TelemetryIndex, source: str, start_ns: int, end_ns: int) -> dict:
    """Energy of ``source``'s devices in [start, end], summed; per-device method and notes."""
    total, methods, notes, covered = 0.0, {}, [], []
    wraps = resets = 0
    for dev in sorted(tel.series[source]):
        q = tel.series[source][dev]
        r = None
        if "energy_counter_j" in q:
            wrap = q.get("energy_counter_range_j")
            wrap_j = float(np.nanmax(wrap[1])) if wrap is not None else None
            r = counter_energy(*q["energy_counter_j"], start_ns, end_ns, wrap_j)
            if r["covered_s"] > 0:
                methods[dev] = "counter"
                wraps += r["wraps"]
                resets += r["resets"]
            else:
                r = None
        if r is None and "power_w" in q:
            r = power_energy(*q["power_w"], start_ns, end_ns)
            if r["covered_s"] > 0:
                why = tel.quantity_notes.get((source, dev), "energy counter not sampled in the window")
                methods[dev] = "power_integration"
                notes.append(f"{dev}: integrated power ({why})")
            else:
                r = None
        if r is None:
            notes.append(f"{dev}: no energy or power samples span the window")
            continue
        total += r["energy_j"]
        covered.append(r["covered_s"])
    if not methods:
        return {"energy_j": math.nan, "methods": {}, "notes": notes, "coverage": 0.0, "wraps": 0, "resets": 0}
    window_s = (end_ns - start_ns) / 1e9
    coverage = min(covered) / window_s if window_s > 0 else 1.0
    if resets:
        notes.append(f"{resets} counter reset(s) inside the window (driver reload?): energy since each reset added")
    return {"energy_j": total, "methods": methods, "notes": notes, "coverage": coverage,
            "wraps": wraps, "resets": resets}


def _method_name(methods: dict) -> str:
    kinds = set(methods.values())
    return kinds.pop() if len(kinds) == 1 else "mixed"


# ------------------------------------------------------------------------------ steady state
def steady_capacity(load: dict | None) -> tuple[int | None, str]:
    """The batch capacity C that defines a steady state for this load, or why there is none."""
    load = load or {}
    kind = load.get("kind")
    if kind == "concurrency" and load.get("concurrency"):
        return load["concurrency"], ""
    if load.get("max_concurrency"):
        return load["max_concurrency"], ""
    return None, (f"load={kind} is open-loop without max_concurrency: the steady-state rule needs a "
                  "closed loop (a full batch)")


def _ns(table: pa.Table, name: str) -> np.ndarray:
    return table.column(name).to_numpy(zero_copy_only=False).astype(np.float64)


def steady_state_interval(requests: pa.Table, capacity: int) -> tuple[tuple[int, int] | None, str]:
    """[first time C requests are in flight after warm-up, last time in-flight falls below C]."""
    sent = _ns(requests, "sent_ns")
    warm = np.asarray(requests.column("warmup").to_pylist(), dtype=bool)
    measured_sent = sent[~warm & ~np.isnan(sent)]
    if not measured_sent.size:
        return None, "no measured request was sent"
    not_before = measured_sent.min()
    done = _ns(requests, "done_ns")
    done = np.where(np.isnan(done), _ns(requests, "end_ns"), done)
    ok = ~np.isnan(sent) & ~np.isnan(done)
    if not ok.any():
        return None, "no request has both a send and a completion time"
    t = np.concatenate([sent[ok], done[ok]])
    step = np.concatenate([np.ones(ok.sum()), -np.ones(ok.sum())])
    # At equal times completions go first, so a user's next send never looks like C + 1.
    order = np.lexsort((step, t))
    t, inflight = t[order], np.cumsum(step[order])
    full = inflight >= capacity
    if not full.any():
        return None, f"requests in flight never reached the batch capacity {capacity}"
    full &= t >= not_before
    if not full.any():
        return None, f"requests in flight never reached the batch capacity {capacity} after warm-up"
    first = int(np.argmax(full))
    last_full = len(full) - 1 - int(np.argmax(full[::-1]))
    if last_full + 1 >= len(t):
        return None, "the batch never drained inside the records"
    start, end = int(t[first]), int(t[last_full + 1])
    if end <= start:
        return None, "the full-batch interval is empty"
    return (start, end), ""


def tokens_between(requests: pa.Table, start_ns: int, end_ns: int) -> int:
    """Output tokens in chunks received inside [start, end] (every row, warm-up included)."""
    n = 0
    for chunks, toks in zip(requests.column("chunk_ns").to_pylist(), requests.column("chunk_tokens").to_pylist()):
        if not chunks:
            continue
        c = np.asarray(chunks, dtype=np.int64)
        k = np.asarray(toks, dtype=np.int64)
        n += int(k[(c >= start_ns) & (c <= end_ns)].sum())
    return n


# ------------------------------------------------------------------------------ the block
def _ratio(num: float, den: float) -> float:
    if math.isnan(num) or math.isnan(den):
        return math.nan
    return num / den if den > 0 else math.inf


def token_figures(energy_j: float, good_tokens: float, all_tokens: float) -> dict:
    """Energy per good token, per token, and tokens per joule (NaN when energy is unknown)."""
    out = {"energy_per_good_token_j": _ratio(energy_j, good_tokens),
           "energy_per_token_j": _ratio(energy_j, all_tokens),
           "good_tokens_per_joule": _ratio(float(good_tokens), energy_j),
           "tokens_per_joule": _ratio(float(all_tokens), energy_j)}
    if not math.isnan(energy_j) and good_tokens <= 0:
        out["energy_per_good_token_reason"] = "no good output tokens in the window: the energy was spent for nothing"
    return out


def energy_summary(telemetry: TelemetryIndex | pa.Table | None, window_start_ns: int, window_end_ns: int,
                   good_tokens: float, all_tokens: float, requests: pa.Table | None = None,
                   capacity: int | None = None, capacity_reason: str = "") -> dict:
    """The summary's energy block (module doc has the definitions).  Unavailable -> NaN figures,
    ``energy_available`` False and ``energy_unavailable_reason``; never zeros."""
    tel = telemetry if isinstance(telemetry, TelemetryIndex) else TelemetryIndex(telemetry)
    window_s = (window_end_ns - window_start_ns) / 1e9
    nan = math.nan
    out: dict = {"energy_available": False, "energy_j": nan, "energy_source": None, "energy_scope": None,
                 "energy_method": None, "energy_devices": 0, "energy_coverage": nan, "energy_notes": [],
                 "mean_power_w": nan, "energy_per_good_token_j": nan, "energy_per_token_j": nan,
                 "good_tokens_per_joule": nan, "tokens_per_joule": nan,
                 "idle_power_w": nan, "idle_energy_j": nan, "idle_energy_share": nan,
                 "cpu_package_energy_j": nan}
    src, scope = tel.scope()
    if src is not None:
        e = source_energy(tel, src, window_start_ns, window_end_ns)
        if e["methods"]:
            out.update({"energy_available": True, "energy_j": e["energy_j"], "energy_source": src,
                        "energy_scope": scope, "energy_method": _method_name(e["methods"]),
                        "energy_devices": len(e["methods"]), "energy_coverage": e["coverage"],
                        "energy_notes": e["notes"], "energy_counter_wraps": e["wraps"],
                        "energy_counter_resets": e["resets"]})
            if e["coverage"] < 1 - COVERAGE_TOLERANCE:
                out["energy_notes"].append(f"samples cover {e['coverage']:.1%} of the window: "
                                           "energy_j is a lower bound")
        else:
            out["energy_unavailable_reason"] = f"{src}: " + "; ".join(e["notes"])
    if not out["energy_available"]:
        out.setdefault("energy_unavailable_reason", tel.why_unavailable())
        reason = out["energy_unavailable_reason"]
    else:
        reason = ""
    ej = out["energy_j"]
    out["mean_power_w"] = ej / window_s if window_s > 0 else nan
    out.update(token_figures(ej, good_tokens, all_tokens))
    if scope == "accelerators" and tel.series.get("rapl"):
        out["cpu_package_energy_j"] = source_energy(tel, "rapl", window_start_ns, window_end_ns)["energy_j"]

    # Idle baseline (same source and per-device method as the window).
    idle = tel.interval("idle_baseline_start", "idle_baseline_end")
    if out["energy_available"] and idle is not None:
        ie = source_energy(tel, src, *idle)
        if ie["methods"]:
            out["idle_power_w"] = ie["energy_j"] / ((idle[1] - idle[0]) / 1e9)
            out["idle_baseline_s"] = (idle[1] - idle[0]) / 1e9
            out["idle_energy_j"] = out["idle_power_w"] * window_s
            out["idle_energy_share"] = _ratio(out["idle_energy_j"], ej)
    elif out["energy_available"]:
        out["idle_unavailable_reason"] = "no idle baseline was recorded (telemetry.idle_baseline_s = 0?)"
    else:
        out["idle_unavailable_reason"] = reason

    # Steady state, beside the full window.
    out.update({"steady_start_ns": None, "steady_end_ns": None, "steady_window_s": nan, "steady_output_tokens": None,
                "steady_output_throughput": nan, "steady_energy_j": nan, "steady_energy_per_token_j": nan,
                "steady_batch_capacity": capacity})
    why = ""
    if requests is None:
        why = "no request records"
    elif capacity is None:
        why = capacity_reason or "no batch capacity given"
    else:
        iv, why = steady_state_interval(requests, capacity)
        if iv is not None:
            s, e = iv
            toks = tokens_between(requests, s, e)
            out.update({"steady_start_ns": s, "steady_end_ns": e, "steady_window_s": (e - s) / 1e9,
                        "steady_output_tokens": toks, "steady_output_throughput": toks / ((e - s) / 1e9)})
            if out["energy_available"]:
                se = source_energy(tel, src, s, e)
                out["steady_energy_j"] = se["energy_j"]
                out["steady_energy_per_token_j"] = _ratio(se["energy_j"], toks)
            else:
                why = reason
    if why:
        out["steady_unavailable_reason"] = why
    return out
