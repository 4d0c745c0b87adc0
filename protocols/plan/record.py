"""plan.json: what a plan predicts per config, with intervals from the capacity's block
resamples, the cheapest config at each SLO, and the planner's questions answered.

Per (SLO, policy variant) and config, the point estimate is the simulation on every block's
runs; its interval is the weighted percentile interval over the simulations on block
resamples (``protocols.plan.capacity.resamples``: the capacity measurements' uncertainty;
the traffic and the simulation's random draws are the same in every resample, so the spread
is the capacity's alone).  The cheapest config at an SLO is the one with the lowest cost per
million good output tokens among those whose plan meets the SLO, when the relative
difference to the runner-up over all pairs of their joint resamples has an interval that
excludes zero and a point estimate beyond ``protocol.min_effect``; else "no significant
difference".  A joint resample is a block resample times one of the model's validation cost
factors (``protocol.residuals``, ``protocols.plan.residuals``; none: the capacity's alone),
and the verdict states the probability that the runner-up is in fact the cheaper at the SLO
over the same pairs (``metrics.plan_pick``).  An infinite cost (no good token) is part of the
interval (its bound then +inf) and of the probability; the verdict says "cheapest" only where
the interval lies below zero and the runner-up is the cheaper in under half the pairs, so the two
never contradict each other.  Where both candidates are on one replica model's cases, the pairs
take the model's error as shared (each case on both sides: a bias of the model moves both alike),
with the independent figure beside it; on different models' cases, as independent
(``model_error_between``).  ``pick_wrong`` states the chance the pick is wrong over every
candidate, those whose plan misses the SLO included, each with the share of its block resamples
whose simulation meets it (``metrics.plan_pick.pick_wrong``).  That check is judged on a redrawn day:
each block resample is simulated again on another draw of the day (``protocols.plan.day_draws``: the
day's requests in blocks, and the simulation's own draws), so that a config near its knee, whose
check flips with the day's draw, is said to meet the SLO in the share of the draws it meets it in;
its cost there is the given day's cost over the good tokens at the redrawn day's good share
(``redrawn_day_check``), so the day's volume moves no cost.  Processor sharing only: the engine's
scheduler model keeps the given day (a redrawn day would be a fresh replay per resample).
"""

from __future__ import annotations

import math

import numpy as np

from metrics.plan_pick import (
    joint,
    meeting_share,
    no_good_share,
    pick_wrong,
    relative_differences,
    runner_up_cheaper,
    signed_share,
)

# The metrics a plan reports per config, each with its interval.
PLAN_METRICS = ("slo_attainment", "goodput_rps", "good_output_throughput", "p50_ttft_ms", "p90_ttft_ms",
                "p99_ttft_ms", "p50_tpot_ms", "p90_tpot_ms", "p99_tpot_ms", "p50_e2el_ms", "p90_e2el_ms",
                "replicas_max", "replicas_mean", "starting_replica_seconds",
                "serving_replica_seconds", "draining_replica_seconds", "paid_replica_seconds",
                "idle_replica_seconds", "overprovisioned_replica_seconds", "cost_total", "cost_per_mtok_good",
                "headroom_cost")
LOWER_IS_BETTER = {"cost_per_mtok_good", "cost_total", "p50_ttft_ms", "p90_ttft_ms", "p99_ttft_ms", "p50_tpot_ms",
                   "p90_tpot_ms", "p99_tpot_ms", "p50_e2el_ms", "p90_e2el_ms",
                   "starting_replica_seconds", "draining_replica_seconds", "paid_replica_seconds",
                   "idle_replica_seconds", "overprovisioned_replica_seconds", "headroom_cost"}


def weighted_quantile(values, weights, q: float) -> float:
    v = np.asarray(values, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    keep = ~np.isnan(v)                   # an infinite value (no good token) is part of the interval
    v, w = v[keep], w[keep]
    if v.size == 0:
        return math.nan
    order = np.argsort(v)
    v, w = v[order], w[order]
    cdf = np.cumsum(w) / w.sum()
    return float(v[min(int(np.searchsorted(cdf, q)), v.size - 1)])


def interval(samples: list[tuple[float, float]], confidence: float) -> list[float] | None:
    """Weighted percentile interval of (value, weight) samples; None without samples."""
    if not samples:
        return None
    vals, ws = zip(*samples)
    a = (1 - confidence) / 2
    return [weighted_quantile(vals, ws, a), weighted_quantile(vals, ws, 1 - a)]


def config_entry(point: dict, resampled: list[tuple[dict, float]], confidence: float) -> dict:
    """One config's plan: every metric's estimate and interval (over its block resamples)."""
    metrics = {}
    for m in PLAN_METRICS:
        v = point.get(m)
        samples = [(r[m], w) for r, w in resampled if r.get(m) is not None]
        metrics[m] = {"value": v, "interval": interval(samples, confidence)}
    return metrics


def cheapest(entries: dict[str, dict], resampled: dict[str, list[tuple[dict, float]]], confidence: float,
             min_effect: float, factors: dict[str, list[float]] | None = None,
             random: dict[str, bool] | None = None) -> dict:
    """The cheapest config meeting the SLO (module doc), with the relative cost difference to
    the runner-up over every pair of joint resamples and the probability that the runner-up is
    the cheaper.  ``factors``: per config, the model's validation cost factors (none: no model
    error); ``random``: per config, whether its block resamples are random draws (their
    resample error is stated) rather than the exact enumeration."""
    factors, random = factors or {}, random or {}
    meeting = {n: e for n, e in entries.items() if e["meets_slo"]}
    pool = meeting or entries
    ranked = sorted(pool, key=lambda n: _cost(entries[n]))
    out = {"among": "configs whose plan meets the SLO" if meeting else "no config meets the SLO: ranked by cost alone",
           "ranking": ranked, "config": None, "verdict": "", "difference": None,
           "runner_up_cheaper": {"pick": None, "runner_up": None, "probability": None, "standard_error": None}}
    if not meeting:
        out["verdict"] = "no config's plan meets the SLO"
        out["runner_up_cheaper"]["why"] = "no config's plan meets the SLO: no pick to be wrong"
        out["pick_wrong"] = {"pick": None, "probability": None, "why": "no config's plan meets the SLO: no pick"}
        return out
    out["pick_wrong"] = _pick_wrong(ranked[0], entries, resampled, factors, random)
    wrong = out["pick_wrong"]["probability"]
    if len(ranked) == 1:
        odds = f"; P(pick wrong) = {wrong:.1%} (a config missing the SLO in its plan meeting it)" if wrong else ""
        out.update(config=ranked[0], verdict=f"{ranked[0]} is the only config whose plan meets the SLO{odds}")
        out["runner_up_cheaper"].update(pick=ranked[0], why=f"no runner-up: {ranked[0]} is the only config whose "
                                                            "plan meets the SLO")
        return out
    a, b = ranked[0], ranked[1]
    ca, cb = _cost(entries[a]), _cost(entries[b])
    rel = ca / cb - 1 if cb and math.isfinite(cb) else math.nan

    def draws(name: str, with_model: bool):
        return _draws(resampled.get(name, []), factors.get(name, []) if with_model else [],
                      bool(random.get(name)))

    da, db = draws(a, True), draws(b, True)
    fa, fb = list(factors.get(a, [])), list(factors.get(b, []))
    shared = bool(fa) and fa == fb          # one replica model's cases: its error moves both alike
    iv = interval(list(zip(*relative_differences(da, db, shared=shared))), confidence)
    iv_cap = interval(list(zip(*relative_differences(draws(a, False), draws(b, False)))), confidence)
    cases = {a: len(factors.get(a, [])), b: len(factors.get(b, []))}
    out["difference"] = {"a": a, "b": b, "relative": rel, "interval": iv, "interval_capacity_only": iv_cap,
                         "confidence": confidence, "model_error_cases": cases,
                         "what": f"cost_per_mtok_good of {a} / {b} - 1 over their joint resamples"}
    chance = (runner_up_cheaper(da, db, shared=shared) if iv is not None
              else {"probability": None, "standard_error": None})
    out["model_error_between"] = _between(a, b, da, db, factors, confidence)
    out["runner_up_cheaper"] = {
        "pick": a, "runner_up": b, **chance, "model_error_cases": cases,
        "what": f"the weight of the joint resamples (block resamples x the model's validation cost factors"
                f"{', each case on both sides' if shared else ''}) in which {b}'s cost_per_mtok_good is below "
                f"{a}'s, ties half (metrics.plan_pick.runner_up_cheaper)"}
    if chance["probability"] is None:
        out["runner_up_cheaper"]["why"] = "no capacity resamples (protocol.resamples=0 or one block): no probability"
    odds = f"; P({b} cheaper) = {chance['probability']:.1%}" if chance["probability"] is not None else ""
    odds += "".join(f"; no good tokens in {no_good_share(d):.1%} of {n}'s resamples"
                    for n, d in ((a, da), (b, db)) if no_good_share(d) > 0)
    significant = (iv is not None and iv[1] < 0 and abs(rel) >= min_effect
                   and (chance["probability"] is None or chance["probability"] < 0.5))
    ivs = f"[{signed_share(iv[0])}, {signed_share(iv[1])}]" if iv is not None else ""
    if significant:
        out.update(config=a, verdict=f"{a} is cheapest at the SLO: {rel:+.1%} cost per million good tokens vs {b} "
                                     f"{ivs} at {confidence:.0%}{odds}")
    elif iv is None:
        out.update(config=a, verdict=f"{a} is cheapest at the SLO by its point estimate ({rel:+.1%} vs {b}); no "
                                     "interval (protocol.resamples=0 or one block)")
    else:
        out["verdict"] = (f"no significant difference: {a} vs {b} {rel:+.1%} {ivs} at "
                          f"{confidence:.0%} (margin {min_effect:.0%}){odds}")
    return out


def redrawn_day_check(given: dict, redrawn: dict | None, meets: bool | None, offered_given: float) -> dict:
    """A capacity resample as ``pick_wrong`` judges it (module doc): ``meets_slo_redrawn``, the SLO
    check of its simulation on a redrawn day (``protocols.plan.day_draws``), and ``cost_redrawn``,
    its cost on the given day over the good output tokens it would have there at the redrawn day's
    good share (the good tokens / the offered ones): the day's SLO misses move the cost, its volume
    does not ({} without a redrawn day)."""
    if redrawn is None:
        return {}
    offered = redrawn.get("output_tokens_offered") or 0.0
    share = redrawn["output_tokens_good"] / offered if offered > 0 else 0.0
    total = given.get("cost_total")
    if total is None or math.isnan(total):
        cost = math.nan
    else:
        cost = total / (share * offered_given) * 1e6 if share > 0 and offered_given > 0 else math.inf
    return {"meets_slo_redrawn": bool(meets), "cost_redrawn": cost}


def _pick_wrong(a: str, entries: dict[str, dict], resampled: dict[str, list[tuple[dict, float]]],
                factors: dict[str, list[float]], random: dict[str, bool]) -> dict:
    """plan.json's ``pick_wrong``: P(``a`` is wrong) over every candidate (``metrics.plan_pick.pick_wrong``),
    each resample meeting the SLO as its simulation on a redrawn day did, at its cost there
    (``redrawn_day_check``; where a resample has no redrawn day, as its simulation on the given day
    did, and its plan's check where it lacks that too)."""
    fa = list(factors.get(a, []))
    sides = {}
    for name, e in entries.items():
        rs = [({**r, "cost_per_mtok_good": r.get("cost_redrawn", r.get("cost_per_mtok_good")),
                "meets_slo": r.get("meets_slo_redrawn", r.get("meets_slo"))}, w) for r, w in resampled.get(name, [])]
        meets = [bool(e["meets_slo"] if r.get("meets_slo") is None else r["meets_slo"]) for r, _ in rs]
        fk = list(factors.get(name, []))
        sides[name] = (_draws(rs, fk, bool(random.get(name))), meets, bool(fk) and fk == fa)
    da, ma, _ = sides.pop(a)
    res = pick_wrong(da, ma, sides)
    shares = {n: (meeting_share(d, m) if d.values.size else None) for n, (d, m, _) in {a: (da, ma, 0), **sides}.items()}
    out = {"pick": a, **res, "meets_slo_share": shares,
           "what": f"P({a} misses the SLO, or another config meets it and is cheaper), over the block resamples "
                   "(each meeting the SLO as its simulation on a redrawn day did, at its cost there: "
                   "protocols.plan.day_draws) x the model's validation cost factors, "
                   "every config's plan meeting the SLO or not (metrics.plan_pick.pick_wrong)"}
    if res["probability"] is None:
        out["why"] = "no capacity resamples (protocol.resamples=0 or one block): no probability"
    return out


def _between(a: str, b: str, da, db, factors: dict, confidence: float) -> dict:
    """How the verdict took the model's error between ``a`` and ``b``: shared where both have one
    replica model's cases, with the independent figure beside it; else independent (module doc)."""
    fa, fb = list(factors.get(a, [])), list(factors.get(b, []))
    if not fa and not fb:
        return {"taken_as": "none", "why": "no validation residuals of either config's model"}
    if fa and fa == fb:
        rel, w = relative_differences(da, db)
        return {"taken_as": "shared",
                "what": f"each validation case of the one replica model on both {a} and {b}: a finite factor "
                        "cancels, an infinite one is a tie",
                "independent": {"interval": interval(list(zip(rel.tolist(), w.tolist())), confidence),
                                "probability": runner_up_cheaper(da, db)["probability"],
                                "what": f"every validation case of {a}'s replica model against every case of {b}'s"}}
    return {"taken_as": "independent",
            "what": f"every validation case of {a}'s replica model against every case of {b}'s",
            "shared": {"why": f"{a}'s and {b}'s replica models have different validation cases: no shared figure"}}


def _draws(resampled: list[tuple[dict, float]], factors: list[float], random: bool = False):
    costs = [r.get("cost_per_mtok_good") for r, _ in resampled]
    return joint([math.nan if c is None else c for c in costs], [w for _, w in resampled], factors, random=random)


def model_error_interval(resampled: list[tuple[dict, float]], factors: list[float],
                         confidence: float) -> list[float] | None:
    """A config's cost per million good tokens over its joint resamples (block resamples x the
    model's validation cost factors, ``metrics.plan_pick.joint``); None without factors or resamples."""
    if not factors:
        return None
    d = _draws(resampled, factors)
    return interval(list(zip(d.values.tolist(), d.weights.tolist())), confidence)


def _cost(entry: dict) -> float:
    v = entry["metrics"]["cost_per_mtok_good"]["value"]
    return v if v is not None and math.isfinite(v) else math.inf


def cost_lower_bound(plans: list[dict]) -> dict | None:
    """plan.json's ``cost_lower_bound``: the configs whose simulated bill leaves a line out (an
    owned-hardware profile's electricity: the plan simulates no energy, ``metrics.cost.fleet_cost``
    then gives the energy line as NaN and leaves it out of ``cost_total``), and why their cost and
    cost per million good tokens are lower bounds; None where every bill is complete."""
    names, notes = [], []
    for plan in plans:
        for name, e in plan["configs"].items():
            c = e.get("cost") or {}
            if c and c.get("cost_complete") is False:
                if name not in names:
                    names.append(name)
                notes += [n for n in c.get("cost_notes", []) if n not in notes]
    if not names:
        return None
    return {"configs": names, "notes": notes,
            "reason": f"the cost of {', '.join(names)} is a lower bound: owned hardware (cost.model=owned) is "
                      "priced as depreciation + electricity + operations, and the plan simulates no energy, so "
                      "the electricity line is left out of cost_total and cost per million good tokens"}


def answers(plans: list[dict]) -> dict:
    """The planner's questions (issue: replicas at peak and on average, a tighter SLO's cost, a
    faster scale-up, the headroom's cost), read from the plans side by side."""
    base = [p for p in plans if p["variant"] == "base"]
    out: dict = {"replicas": {}, "slos": [], "variants": [], "headroom": {}}
    if base:
        first = base[0]
        for name, e in first["configs"].items():
            m = e["metrics"]
            out["replicas"][name] = {"peak": m["replicas_max"]["value"], "mean": m["replicas_mean"]["value"]}
            out["headroom"][name] = {"overprovisioned_replica_hours": _h(m["overprovisioned_replica_seconds"]["value"]),
                                     "idle_replica_hours": _h(m["idle_replica_seconds"]["value"]),
                                     "headroom_cost": m["headroom_cost"]["value"],
                                     "share_of_cost": _share(m["headroom_cost"]["value"], m["cost_total"]["value"])}
    for p in base:
        out["slos"].append({"slo": p["slo"], "cheapest": p["cheapest"]["config"],
                            "cost_per_mtok_good": {n: e["metrics"]["cost_per_mtok_good"]["value"]
                                                   for n, e in p["configs"].items()},
                            "meets_slo": {n: e["meets_slo"] for n, e in p["configs"].items()}})
    for p in plans:
        if p["variant"] != "base":
            out["variants"].append({"variant": p["variant"], "overrides": p["variant_overrides"],
                                    "cost_per_mtok_good": {n: e["metrics"]["cost_per_mtok_good"]["value"]
                                                           for n, e in p["configs"].items()},
                                    "slo_attainment": {n: e["metrics"]["slo_attainment"]["value"]
                                                       for n, e in p["configs"].items()}})
    return out


def _h(seconds):
    return seconds / 3600.0 if seconds is not None else None


def _share(part, whole):
    return part / whole if part is not None and whole else None
