"""Fleet metrics over a whole window: what a deployment that grows and shrinks with its load
delivers and pays for.  One definition, applied alike to a plan's simulated requests and to
a real autoscaled replay's ``requests.parquet``, so the two can be compared.

Given per-request arrays (arrival or send time, TTFT, TPOT, output tokens, completed) and the
replica count as a step function over the window ``[0, window_s]``:

- ``slo_attainment`` = good requests / requests (good: completed and every configured
  per-request SLO holds, ``metrics.slo.good_mask``);
- ``goodput_rps`` = good requests / window_s; ``good_output_throughput`` = output tokens of
  good requests / window_s;
- ``p50_ttft_ms``, ``p90_ttft_ms``, ``p99_ttft_ms``, ``p50_tpot_ms``, ``p90_tpot_ms``, ``p99_tpot_ms``:
  percentiles over the completed requests (``metrics.percentiles.percentile``);
- ``slo_met``: the percentile part of the run-level check (``slo.percentile`` of each configured metric
  within its limit, over the completed requests; ``metrics.slo.run_meets_slo`` is the whole check);
- ``starting_replica_seconds``, ``serving_replica_seconds``, ``draining_replica_seconds``:
  integral of the replicas starting (from the policy's decision to serving: provision_s and
  the cold start), serving (taking requests) and draining (taken out, finishing their
  requests) over the window; ``paid_replica_seconds`` = their sum, what the cost bills (the
  names a live run's autoscale.json and summary use, ``metrics.autoscale_bill``);
- ``replicas_max``, ``replicas_mean`` (= paid_replica_seconds / window_s) of the paid count;
- ``idle_replica_seconds``: replica time with no request in service;
- ``overprovisioned_replica_seconds`` = integral of max(0, paid - needed) with needed(t) =
  ceil(arrival rate over the policy's window / one replica's capacity): the headroom the
  policy keeps beyond what the load needed at full utilisation.
"""

from __future__ import annotations

import math

import numpy as np

from metrics.percentiles import percentile
from metrics.slo import SLO, good_mask, percentiles_missed


def step_integral(times_s: np.ndarray, values: np.ndarray, end_s: float, start_s: float = 0.0) -> float:
    """Integral over [start_s, end_s] of the step function that takes ``values[i]`` from
    ``times_s[i]`` until the next time (sorted times; before the first, 0)."""
    t = np.clip(np.asarray(times_s, dtype=np.float64), start_s, end_s)
    v = np.asarray(values, dtype=np.float64)
    if t.size == 0:
        return 0.0
    widths = np.diff(np.append(t, end_s))
    return float(np.sum(widths * v))


def request_metrics(slo: SLO, completed, ttft_s, tpot_s, output_tokens, window_s: float) -> dict:
    """The per-request part of the fleet metrics (module doc) over a window of ``window_s``."""
    completed = np.asarray(completed, dtype=bool)
    ttft = np.asarray(ttft_s, dtype=np.float64)
    tpot = np.asarray(tpot_s, dtype=np.float64)
    out = np.asarray(output_tokens, dtype=np.float64)
    n = int(completed.size)
    e2el = ttft + np.where(np.isnan(tpot), 0.0, tpot) * np.maximum(out - 1, 0)
    good = good_mask(slo, np.where(completed, "ok", "failed"), ttft, tpot, e2el)
    done_ttft, done_tpot = ttft[completed], tpot[completed & ~np.isnan(tpot)]
    res = {
        "requests": n,
        "completed": int(completed.sum()),
        "good": int(good.sum()),
        "slo_attainment": float(good.sum() / n) if n else math.nan,
        "goodput_rps": float(good.sum() / window_s) if window_s > 0 else math.nan,
        "good_output_throughput": float(out[good].sum() / window_s) if window_s > 0 else math.nan,
        "output_tokens_good": float(out[good].sum()),
        "p50_ttft_ms": percentile(done_ttft, 50) * 1e3 if done_ttft.size else math.nan,
        "p90_ttft_ms": percentile(done_ttft, 90) * 1e3 if done_ttft.size else math.nan,
        "p99_ttft_ms": percentile(done_ttft, 99) * 1e3 if done_ttft.size else math.nan,
        "p50_tpot_ms": percentile(done_tpot, 50) * 1e3 if done_tpot.size else math.nan,
        "p90_tpot_ms": percentile(done_tpot, 90) * 1e3 if done_tpot.size else math.nan,
        "p99_tpot_ms": percentile(done_tpot, 99) * 1e3 if done_tpot.size else math.nan,
        # end to end, TTFT + TPOT x (output - 1): how a stream is split between its first token and
        # the rest (an engine holding tokens back, then sending them at once) does not move it
        "p50_e2el_ms": percentile(e2el[completed], 50) * 1e3 if completed.any() else math.nan,
        "p90_e2el_ms": percentile(e2el[completed], 90) * 1e3 if completed.any() else math.nan,
    }
    res["slo_met"] = slo_met(slo, done_ttft, done_tpot, e2el[completed])
    return res


def slo_met(slo: SLO, ttft_s, tpot_s, e2el_s) -> bool:
    """The percentile part of the run-level check: ``slo.percentile`` of each configured metric
    over the completed requests within its limit (``metrics.slo.percentiles_missed``; the whole
    check, failed requests included, is ``metrics.slo.run_meets_slo``)."""
    return not percentiles_missed(slo, ttft_s, tpot_s, e2el_s)


def needed_replicas(rate_rps: np.ndarray, capacity_rps: float) -> np.ndarray:
    """Replicas the load needed at full utilisation: ceil(rate / capacity), at least 1."""
    r = np.asarray(rate_rps, dtype=np.float64)
    return np.maximum(1, np.ceil(r / capacity_rps - 1e-9)).astype(np.int64)


def replica_metrics(times_s: np.ndarray, starting_n: np.ndarray, serving_n: np.ndarray, draining_n: np.ndarray,
                    window_s: float, idle_replica_seconds: float | None = None,
                    needed_t: np.ndarray | None = None, needed_n: np.ndarray | None = None) -> dict:
    """The replica part of the fleet metrics (module doc) from step functions on one grid of
    times: the replicas starting, serving and draining from each time on."""
    starting = step_integral(times_s, starting_n, window_s)
    serving = step_integral(times_s, serving_n, window_s)
    draining = step_integral(times_s, draining_n, window_s)
    paid_n = (np.asarray(starting_n, dtype=np.int64) + np.asarray(serving_n, dtype=np.int64)
              + np.asarray(draining_n, dtype=np.int64))
    paid = starting + serving + draining
    res = {
        "window_s": float(window_s),
        "starting_replica_seconds": starting,
        "serving_replica_seconds": serving,
        "draining_replica_seconds": draining,
        "paid_replica_seconds": paid,
        "replicas_max": int(np.max(paid_n)) if len(paid_n) else 0,
        "replicas_mean": paid / window_s if window_s > 0 else math.nan,
        "idle_replica_seconds": idle_replica_seconds,
    }
    if needed_t is not None:
        # both step functions on one grid: the union of their change times
        grid = np.union1d(np.asarray(times_s, dtype=np.float64), np.asarray(needed_t, dtype=np.float64))
        p = _step_at(times_s, paid_n, grid)
        q = _step_at(needed_t, needed_n, grid)
        res["overprovisioned_replica_seconds"] = step_integral(grid, np.maximum(0, p - q), window_s)
    return res


def _step_at(times_s, values, at_s) -> np.ndarray:
    idx = np.searchsorted(np.asarray(times_s, dtype=np.float64), at_s, side="right") - 1
    v = np.asarray(values, dtype=np.float64)
    return np.where(idx >= 0, v[np.clip(idx, 0, None)], 0.0)
