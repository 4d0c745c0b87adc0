"""Failure recovery: what a kill of the engine mid-run cost, from the per-request records.

Inputs: the run's ``requests.parquet`` (measured rows: ``warmup == False``), the kill's time
``kill_ns`` and the time the restarted engine served again ``ready_ns`` (its health route
answered 200; both ``perf_counter_ns``, the records' clock), the SLO and N = ``scenario.recovery_window``.
A request's end is ``done_ns`` (else ``end_ns``, else ``sent_ns``): when its outcome was known.

- ``requests_in_flight_at_kill``: sent before ``kill_ns``, ended at or after it;
  ``requests_lost``: those of them that did not end ``ok``.
- ``requests_failed_during_outage``: sent in [``kill_ns``, ``ready_ns``) and not ``ok``.
- ``requests_failed_after_kill``: every request that ended at or after ``kill_ns`` not ``ok``.
- ``engine_down_s`` = ``ready_ns`` - ``kill_ns``: the outage, kill to the engine serving again
  (``engine_fault_detected_s``, kill to the watchdog's notice, + ``engine_restart_s``, the
  restart's start to health).
- A window is N consecutive requests in order of their end (ties: in order of sending).  It
  meets the SLO when its share of good requests (``metrics.slo.good_mask``: ``ok`` and every
  configured per-request SLO holds; a failed request is never good) is at least
  ``slo.min_attainment``, or ``slo.percentile`` / 100 where no floor is set (N = 20 at p99:
  all 20 good).
- ``slo_recovery_s``: from ``kill_ns`` to the end of the last request of the first window
  whose N requests all ended at or after ``kill_ns`` and which meets the SLO; NaN (and
  ``slo_recovered`` false) when no such window came before the run ended.
  ``slo_recovery_after_ready_s`` = ``slo_recovery_s`` - ``engine_down_s``.
- ``slo_met_before_kill``: whether the window of the last N requests that ended before
  ``kill_ns`` met the SLO (None with fewer than N): recovery means the SLO held before.
- ``outage_cost`` = ``cost_total`` x ``engine_down_s`` / ``window_s``: the outage's share of
  the window's cost, by time (every cost line accrues per second; measured energy is not
  split), and ``outage_in_window``: the kill and the restart both inside the window, so the
  window's cost and energy hold the whole outage.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from metrics.slo import SLO, good_mask


def _col(t: pa.Table, name: str) -> np.ndarray:
    return t.column(name).to_numpy(zero_copy_only=False).astype(np.float64, copy=False)


def request_end_ns(t: pa.Table) -> np.ndarray:
    """When each request's outcome was known: ``done_ns``, else ``end_ns``, else ``sent_ns``."""
    end = _col(t, "done_ns")
    for alt in ("end_ns", "sent_ns"):
        end = np.where(np.isnan(end), _col(t, alt), end)
    return end


def required_attainment(slo: SLO, min_attainment: float | None) -> float:
    """The share of good requests a window needs (see module doc)."""
    return float(min_attainment) if min_attainment is not None else slo.percentile / 100.0


def windows_meeting_slo(good_in_end_order: np.ndarray, n: int, need: float) -> np.ndarray:
    """For each window of ``n`` consecutive requests (index of its last request), whether it
    meets the SLO; empty when fewer than ``n`` requests."""
    g = np.asarray(good_in_end_order, dtype=np.int64)
    if g.size < n:
        return np.zeros(0, dtype=bool)
    c = np.concatenate([[0], np.cumsum(g)])
    share = (c[n:] - c[:-n]) / n
    return share >= need - 1e-12


def recovery_figures(table: pa.Table, slo: SLO, kill_ns: int, ready_ns: int | None, window_n: int,
                     min_attainment: float | None = None) -> dict:
    """The module doc's figures for one run with one kill."""
    measured = table.filter(pc.invert(table.column("warmup")))
    status = measured.column("status").to_numpy(zero_copy_only=False).astype(str)
    ok = status == "ok"
    good = good_mask(slo, status, _col(measured, "ttft_s"), _col(measured, "tpot_s"), _col(measured, "e2el_s"))
    sent = _col(measured, "sent_ns")
    end = request_end_ns(measured)
    with np.errstate(invalid="ignore"):
        in_flight = (sent < kill_ns) & (end >= kill_ns)
        after = end >= kill_ns
        ready = float(ready_ns) if ready_ns is not None else math.inf
        during = (sent >= kill_ns) & (sent < ready)
    out: dict = {
        "requests_in_flight_at_kill": int(in_flight.sum()),
        "requests_lost": int((in_flight & ~ok).sum()),
        "requests_failed_during_outage": int((during & ~ok).sum()),
        "requests_failed_after_kill": int((after & ~ok).sum()),
        "requests_sent_during_outage": int(during.sum()),
        "engine_down_s": (ready_ns - kill_ns) / 1e9 if ready_ns is not None else math.nan,
        "slo_recovery_window": int(window_n),
        "slo_recovery_attainment": required_attainment(slo, min_attainment),
    }
    order = np.lexsort((np.nan_to_num(sent, nan=np.inf), np.nan_to_num(end, nan=np.inf)))
    end_o, good_o = end[order], good[order]
    need = out["slo_recovery_attainment"]
    before = end_o < kill_ns
    prior = good_o[before][-window_n:]
    out["slo_met_before_kill"] = (bool(windows_meeting_slo(prior, window_n, need)[-1])
                                  if prior.size >= window_n else None)
    post = np.flatnonzero(end_o >= kill_ns)
    meets = windows_meeting_slo(good_o[post], window_n, need)
    hit = np.flatnonzero(meets)
    if hit.size:
        last = post[hit[0] + window_n - 1]
        out["slo_recovery_s"] = (end_o[last] - kill_ns) / 1e9
        out["slo_recovered"] = True
    else:
        out["slo_recovery_s"] = math.nan
        out["slo_recovered"] = False
    out["slo_recovery_after_ready_s"] = out["slo_recovery_s"] - out["engine_down_s"]
    return out


def outage_cost(summary: dict, kill_ns: int, ready_ns: int | None) -> dict:
    """``outage_cost`` and ``outage_in_window`` (module doc) from a run's summary."""
    w0, w1 = summary.get("window_start_ns"), summary.get("window_end_ns")
    inside = (w0 is not None and w1 is not None and ready_ns is not None and w0 <= kill_ns and ready_ns <= w1)
    down = (ready_ns - kill_ns) / 1e9 if ready_ns is not None else math.nan
    total, window_s = summary.get("cost_total"), summary.get("window_s")
    cost = total * down / window_s if total is not None and window_s and not math.isnan(down) else math.nan
    return {"outage_in_window": bool(inside), "outage_share_of_window": down / window_s if window_s else math.nan,
            "outage_cost": cost}
