"""The tune's judge: a trial's verdict from its SLO search, the best trial, the Pareto front.

- **Feasible**: the trial's engine ran, some load in the search bracket met the SLO
  (``max_load_under_slo`` > 0: the SLO constraint), and the quality gate did not fail (absent
  counts as not failed).  An infeasible trial stays in the record with the reason.
- **Objective**, at the max load under the SLO (``search.json``'s figures there):
  ``cost_per_mtok_good`` (minimised; ``metrics/cost.py``), or ``goodput_per_dollar`` (good
  requests per unit of currency = 1 / ``cost_per_good_request``, maximised).  The sampler is
  told the objective's own value for "no good token": an infeasible trial's cost per good token
  is +inf and its goodput per dollar 0, so the sampler learns the region is bad without a
  made-up penalty, and no infeasible trial can be best (``best_trial`` picks among feasible ones
  only).
- **Pareto front**: feasible trials not dominated in (cost per million good tokens: lower is
  better, max load under the SLO: higher is better); one that is no worse in both and better
  in one dominates.

Pure: numbers in, numbers out.
"""

from __future__ import annotations

import math

import numpy as np

from metrics.cost import per_million, per_unit, window_cost
from metrics.slo import good_mask

# objective -> the study's direction
DIRECTIONS = {"cost_per_mtok_good": "minimize", "goodput_per_dollar": "maximize"}

def _float(v) -> float | None:
    # search.json writes non-finite floats as "inf" / null
    if v is None:
        return None
    if v in ("inf", "-inf"):
        return math.inf if v == "inf" else -math.inf
    return float(v)


def goodput_per_dollar(cost_per_good_request: float | None) -> float:
    """Good requests per unit of currency at the max load: 1 / cost per good request (0 with none)."""
    if cost_per_good_request is None or not cost_per_good_request > 0 or math.isinf(cost_per_good_request):
        return 0.0
    return 1.0 / cost_per_good_request


def judge(search: dict | None, objective: str, error: str | None = None, quality_passed: bool | None = None,
          quality_reason: str | None = None) -> dict:
    """A trial's verdict from its ``search.json``: feasible, why not, the objective and the
    figures at its max load under the SLO."""
    if objective not in DIRECTIONS:
        raise ValueError(f"protocol.objective={objective!r}: expected one of {', '.join(DIRECTIONS)}")
    search = search or {}
    load = _float(search.get("max_load_under_slo"))
    cost = _float(search.get("cost_per_mtok_good"))
    per_request = _float(search.get("cost_per_good_request"))
    out = {"max_load_under_slo": load, "bracket": search.get("bracket"), "search_note": search.get("note"),
           "goodput_rps": _float(search.get("goodput_rps")),
           "good_output_throughput": _float(search.get("good_output_throughput")),
           "cost_per_mtok_good": cost, "cost_per_good_request": per_request,
           "goodput_per_dollar": goodput_per_dollar(per_request), "quality_gate_passed": quality_passed}
    why = None
    if error:
        why = error
    elif not search:
        why = "no search result"
    elif not (load and load > 0):
        why = f"no load in the bracket meets the SLO ({search.get('note') or 'the low end fails'})"
    elif quality_passed is False:
        why = "quality gate failed" + (f": {quality_reason}" if quality_reason else "")
    elif cost is None or not math.isfinite(cost):
        why = "no good output tokens at the max load under the SLO"
    out["feasible"] = why is None
    out["why"] = why
    hi = _float((search.get("bracket") or [None, None])[1])
    out["note"] = ("the SLO holds at protocol.search_high: the max load is a lower bound, the cost an upper one"
                   if why is None and hi is not None and math.isinf(hi) else None)
    out["objective"] = out[objective] if why is None else study_value(None, objective)
    return out


def study_value(value: float | None, objective: str) -> float:
    """What the study is told: the objective, or its value for "no good token" (cost +inf, goodput 0)."""
    if value is None:
        return math.inf if DIRECTIONS[objective] == "minimize" else 0.0
    return float(value)


def best_trial(trials: list[dict], objective: str) -> dict | None:
    """The feasible trial with the best objective (ties: the earlier trial); None if none is feasible."""
    ok = [t for t in trials if t.get("feasible")]
    if not ok:
        return None
    sign = 1 if DIRECTIONS[objective] == "minimize" else -1
    return min(ok, key=lambda t: (sign * t["objective"], t["trial"]))


def pareto_front(trials: list[dict]) -> list[dict]:
    """Feasible trials not dominated in (cost_per_mtok_good down, max_load_under_slo up), by load."""
    ok = [t for t in trials if t.get("feasible")]

    def dominates(a, b) -> bool:
        no_worse = a["cost_per_mtok_good"] <= b["cost_per_mtok_good"] and a["max_load_under_slo"] >= b[
            "max_load_under_slo"]
        better = a["cost_per_mtok_good"] < b["cost_per_mtok_good"] or a["max_load_under_slo"] > b["max_load_under_slo"]
        return no_worse and better

    front = [t for t in ok if not any(dominates(o, t) for o in ok if o is not t)]
    return sorted(front, key=lambda t: (t["max_load_under_slo"], t["trial"]))


def modelled_figures(slo, cost_cfg, rate_rps: float, ttft_s, tpot_s, output_tokens, failed: int,
                     min_attainment: float | None = None) -> dict:
    """A modelled point's figures, as a measured run's at its max load under the SLO (the tune's
    screen, ``protocols.tune.screen``): n = completed + ``failed`` requests offered at
    ``rate_rps``, the window W = n / rate_rps (the offered window; a measured run's also holds its
    drain), good = completed requests meeting every SLO (``metrics.slo.good_mask``), E2EL = TTFT
    + TPOT x (output - 1); cost = ``metrics.cost.window_cost`` over W for one replica;
    cost_per_mtok_good = 1e6 x cost / good output tokens, cost_per_good_request = cost / good
    requests, goodput_rps = good / W, goodput_per_dollar = 1 / cost_per_good_request."""
    ttft = np.asarray(ttft_s, dtype=np.float64)
    tpot = np.asarray(tpot_s, dtype=np.float64)
    out = np.asarray(output_tokens, dtype=np.int64)
    n = ttft.size + int(failed)
    window = n / rate_rps if rate_rps > 0 else math.nan
    e2el = ttft + np.nan_to_num(tpot) * np.maximum(out - 1, 0)
    good = good_mask(slo, np.full(ttft.size, "ok"), ttft, tpot, e2el)
    cost = window_cost(cost_cfg, window)["cost_total"]
    per_request = per_unit(cost, int(good.sum()))
    return {"window_s": window, "requests": n, "good_requests": int(good.sum()),
            "goodput_rps": float(good.sum()) / window if window > 0 else math.nan,
            "good_output_throughput": float(out[good].sum()) / window if window > 0 else math.nan,
            "cost_total": cost, "cost_per_mtok_good": per_million(cost, float(out[good].sum())),
            "cost_per_good_request": per_request, "goodput_per_dollar": goodput_per_dollar(per_request),
            "slo_attainment": float(good.sum()) / n if n else math.nan}
