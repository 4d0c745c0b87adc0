"""The chance a fleet plan's pick is wrong: its cheapest config at an SLO against the runner-up,
with the capacity measurements' uncertainty and the model's validation error together.

A candidate's cost at the SLO is its plan's ``cost_per_mtok_good`` (``metrics.fleet``,
``metrics.cost``).  Two things make it uncertain:

- **the capacity**: the plan's block resamples of the candidate's measured runs
  (``protocols.plan.capacity.resamples``), resample i with cost y_i and weight w_i
  (Σ w_i = 1): the exact bootstrap enumeration, or random draws of equal weight;
- **the model**: its residuals on validation cases (held out, ideally) (a real run against the plan's
  prediction of it), one factor per case c of the candidate's replica model,

      q_c = (P_meas / P_pred) x (G_pred / G_meas)          (``cost_factor``)

  the measured cost per good token over the predicted one, the price cancelling: P is
  ``paid_replica_seconds`` (the factor's first part is 1 where the case lacks it: a fixed
  deployment, whose size the model did not predict), G the case's good output, the first of
  ``good_output_throughput``, ``goodput_rps``, ``slo_attainment`` it has (over one window and
  one set of requests they move together).  G_meas = 0 gives q = inf (nothing good measured).

**Joint resamples** of a candidate (``joint``): every (i, c), cost Y_ic = y_i x q_c, weight
W_ic = w_i / C over its C cases; without cases (no model error for it) the capacity's
resamples as they are.  Resamples with a NaN cost (no cost profile) are left out and the
weights renormalised; an infinite one (no good token) is kept.

**The probability that the runner-up is the cheaper** (``runner_up_cheaper``), pick a (the
lowest cost meeting the SLO) and runner-up b, their resamples independent so every pair counts:

    P(b cheaper) = Σ_{(i,c)} Σ_{(j,d)} W^a_ic W^b_jd ( 1[Y^b_jd < Y^a_ic] + ½ 1[Y^b_jd = Y^a_ic] )

Ties count half, so two identical candidates give exactly ½.

**Its resample error** (where a side's capacity resamples are random draws; 0 for an exact
enumeration): the Monte Carlo standard error of the two-sample U-statistic (DeLong's
placements), per side drawn at random with n draws, each draw i's placement V_i = the weighted
mean over its cases of P_b(Y^b < Y^a_ic) + ½ P_b(Y^b = Y^a_ic) (for the pick; for the
runner-up, of P_a(Y^a > Y^b_jd) + ½ ties),

    se² = Σ_{sides drawn at random} s²(V) / n          (s² with n - 1 in the divisor)

**The relative difference** (``relative_differences``): Y^a_ic / Y^b_jd - 1 over the same
pairs with weights W^a_ic W^b_jd (its interval: the weighted percentile interval,
``protocols.plan.record.interval``); past ``max_pairs`` pairs, that many drawn by weight
with a seed, each of weight 1 / max_pairs.  An infinite cost is part of it: +inf where only
the pick's is infinite, -1 where only the runner-up's, 0 where both are equal (both infinite:
neither has a good token, a tie, as the probability counts it half).  So the interval lies
below 0 only where the pick is the cheaper in more than its upper quantile of the pairs, and
a verdict read from it never contradicts the probability.

**The model's error between candidates.**  The pairs above take it as *independent*: every
case of the pick's replica model against every case of the runner-up's.  Two candidates on
one replica model share its cases; taking the error as *shared* (``shared=True`` of
``runner_up_cheaper`` and ``relative_differences``; ``shared_differences`` from the bare costs)
pairs each case with itself: Y^a_ic / Y^b_jc - 1 with weight w^a_i w^b_j / C, where a finite
factor cancels and an infinite one is a tie, and

    P_shared(b cheaper) = Σ_{i,j,c} (w^a_i w^b_j / C) ( 1[Y^b_jc < Y^a_ic] + ½ 1[Y^b_jc = Y^a_ic] )

(``probability_from_differences``: the weight of the pairs whose difference is above 0, ties
half).  The plan's verdict takes it as shared where both candidates have one model's cases: a
model biased on a case is biased alike for two engines on that case's traffic, and as
independent it put every close pick at about 25 % wrong (two cases: one pair in four has the
opposite biases) where mocker decisions whose truth is known were wrong in none
(``benchmarks/plan_reliability.py``, docs/measured/plan-reliability.md).  Candidates whose
models have different cases have no shared figure.

**The probability that the pick is wrong** (``pick_wrong``): over every candidate, not only
those whose plan meets the SLO.  A candidate's resample i *meets* the SLO where the simulation
on that block resample passes the plan's own run-level check (``protocols.plan.run.meets``),
M_i in {0, 1}, the same for each of its model's cases (the cases' factors are on the cost;
the SLO's percentiles are not scaled by them).  Pick a (the cheapest by point estimate among
the configs whose plan meets the SLO), every other candidate k, independent of a and of each
other, and ties half:

    B_k(y) = Σ_{(j,d)} W^k_jd M^k_j ( 1[Y^k_jd < y] + ½ 1[Y^k_jd = y] )

    P(pick wrong) = 1 - Σ_{(i,c)} W^a_ic M^a_i Π_{k≠a} ( 1 - B_k(Y^a_ic) )

that is P(the pick misses the SLO, or some other candidate meets it and is cheaper).  Where k
shares a's replica model's cases, B_k is taken within a's case c (k's weights renormalised in
it), as the shared figure above.  A candidate left out of the pick because its plan misses
the SLO thus counts with the share of its resamples that meet it: the plan's SLO check on a
short day near the knee fails configs that long runs find meeting it (docs/measured/
plan-reliability.md).  Where every resample of every candidate meets the SLO and there are two,
it is ``runner_up_cheaper``'s probability.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# A case's good output, in the order a cost factor takes the first it finds.
GOOD_METRICS = ("good_output_throughput", "goodput_rps", "slo_attainment")
PAID_METRIC = "paid_replica_seconds"


def cost_factor(case: dict[str, tuple[float, float]]) -> float | None:
    """q_c (module doc) of one case's ``{metric: (predicted, measured)}``; None without a good
    output metric (a case of latencies alone says nothing of the cost)."""
    good = next((case[m] for m in GOOD_METRICS if m in case), None)
    if good is None:
        return None
    g_pred, g_meas = (float(x) for x in good)
    q = g_pred / g_meas if g_meas > 0 else math.inf
    if PAID_METRIC in case:
        p_pred, p_meas = (float(x) for x in case[PAID_METRIC])
        q *= p_meas / p_pred
    return q


@dataclass(frozen=True)
class Draws:
    """A candidate's joint resamples: cost, weight (summing to 1), the capacity resample and
    the model's case each came from; ``random``: the capacity resamples are random draws, not an
    enumeration."""
    values: np.ndarray
    weights: np.ndarray
    unit: np.ndarray
    random: bool = False
    case: np.ndarray | None = None


def joint(values, weights, factors, random: bool = False) -> Draws:
    """Every capacity resample (cost ``values[i]``, weight ``weights[i]``) times every model
    factor (module doc); NaN costs left out, weights renormalised."""
    y = np.asarray(values, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    q = np.asarray(list(factors), dtype=np.float64) if len(factors) else np.ones(1)
    vals = (y[:, None] * q[None, :]).ravel()
    wts = np.repeat(w / q.size, q.size)
    unit = np.repeat(np.arange(y.size), q.size)
    case = np.tile(np.arange(q.size), y.size)
    keep = ~np.isnan(vals)
    vals, wts, unit, case = vals[keep], wts[keep], unit[keep], case[keep]
    total = wts.sum()
    return Draws(vals, wts / total if total > 0 else wts, unit, random, case)


def _cases(d: Draws) -> np.ndarray:
    return d.case if d.case is not None else np.zeros(d.values.size, dtype=np.int64)


def _placements(x: Draws, y: Draws, shared: bool) -> tuple[np.ndarray, np.ndarray]:
    """Per joint resample of ``x``: the weight of ``y`` below its value and at it, over every
    resample of ``y`` or, ``shared``, over those of the same case (``y``'s weights within that case
    renormalised; a case ``y`` lacks: none below, none equal)."""
    if not shared:
        yv, ycum = _sorted(y)
        return _below_and_equal(yv, ycum, x.values)
    below, equal = np.zeros(x.values.size), np.zeros(x.values.size)
    xc, yc = _cases(x), _cases(y)
    for c in np.unique(xc):
        mx, my = xc == c, yc == c
        if not my.any():
            continue
        sub = Draws(y.values[my], y.weights[my] / y.weights[my].sum(), y.unit[my])
        below[mx], equal[mx] = _below_and_equal(*_sorted(sub), x.values[mx])
    return below, equal


def _below_and_equal(sorted_vals: np.ndarray, cum: np.ndarray, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Weight of a distribution below ``x`` and at ``x`` (its values sorted, ``cum`` their
    cumulative weights with a leading 0)."""
    lo = np.searchsorted(sorted_vals, x, side="left")
    hi = np.searchsorted(sorted_vals, x, side="right")
    return cum[lo], cum[hi] - cum[lo]


def _sorted(d: Draws) -> tuple[np.ndarray, np.ndarray]:
    order = np.argsort(d.values, kind="stable")
    return d.values[order], np.concatenate([[0.0], np.cumsum(d.weights[order])])


def _placement_variance(d: Draws, placement: np.ndarray) -> float:
    """s²(V) / n over the capacity draws of ``d`` (module doc)."""
    units = np.unique(d.unit)
    if units.size < 2:
        return 0.0
    num = np.bincount(d.unit, weights=d.weights * placement)
    den = np.bincount(d.unit, weights=d.weights)
    v = num[units] / den[units]
    return float(np.var(v, ddof=1) / units.size)


def runner_up_cheaper(pick: Draws, runner_up: Draws, shared: bool = False) -> dict:
    """{probability, standard_error}: P(runner-up cheaper) and its resample error (module doc);
    ``shared``: the two candidates share one replica model's cases (the same factors, in the
    same order), so each case meets only itself; probability None where a side has no resample."""
    if pick.values.size == 0 or runner_up.values.size == 0:
        return {"probability": None, "standard_error": None}
    below, equal = _placements(pick, runner_up, shared)
    place_a = below + 0.5 * equal                  # P_b(Y^b < y) + ½ P_b(Y^b = y), per pick resample
    p = float(np.sum(pick.weights * place_a))
    se2 = 0.0
    if pick.random:
        se2 += _placement_variance(pick, place_a)
    if runner_up.random:
        below_a, equal_a = _placements(runner_up, pick, shared)
        se2 += _placement_variance(runner_up, (1.0 - below_a - equal_a) + 0.5 * equal_a)
    return {"probability": min(1.0, max(0.0, p)), "standard_error": math.sqrt(se2)}


def relative_differences(pick: Draws, runner_up: Draws, max_pairs: int = 1_000_000,
                         seed: int = 0, shared: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(Y^a / Y^b - 1, weight) over every pair of joint resamples, or ``max_pairs`` pairs drawn
    by weight past that many (module doc); ``shared``: only the pairs of one case (the
    runner-up's weights renormalised within each case, as ``runner_up_cheaper`` pairs them)."""
    na, nb = pick.values.size, runner_up.values.size
    if na == 0 or nb == 0:
        return np.zeros(0), np.zeros(0)
    if shared:
        return _shared_pairs(pick, runner_up, max_pairs, seed)
    if na * nb <= max_pairs:
        rel = _relative(pick.values[:, None], runner_up.values[None, :]).ravel()
        return rel, (pick.weights[:, None] * runner_up.weights[None, :]).ravel()
    rng = np.random.default_rng(seed)
    ia = rng.choice(na, size=max_pairs, p=pick.weights)
    ib = rng.choice(nb, size=max_pairs, p=runner_up.weights)
    return _relative(pick.values[ia], runner_up.values[ib]), np.full(max_pairs, 1.0 / max_pairs)


def _shared_pairs(pick: Draws, runner_up: Draws, max_pairs: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    ca, cb = _cases(pick), _cases(runner_up)
    groups = [(np.flatnonzero(ca == c), np.flatnonzero(cb == c)) for c in np.unique(ca)]
    groups = [(ia, ib) for ia, ib in groups if ib.size]
    if sum(ia.size * ib.size for ia, ib in groups) <= max_pairs:
        rels, wts = [], []
        for ia, ib in groups:
            wb = runner_up.weights[ib] / runner_up.weights[ib].sum()
            rels.append(_relative(pick.values[ia][:, None], runner_up.values[ib][None, :]).ravel())
            wts.append((pick.weights[ia][:, None] * wb[None, :]).ravel())
        rel, w = np.concatenate(rels), np.concatenate(wts)
        return rel, w / w.sum() if w.sum() > 0 else w
    rng = np.random.default_rng(seed)
    keep = np.concatenate([ia for ia, _ in groups])
    pa = pick.weights[keep] / pick.weights[keep].sum()
    ia = keep[rng.choice(keep.size, size=max_pairs, p=pa)]
    ib = np.empty(max_pairs, dtype=np.int64)
    for c in np.unique(ca[ia]):
        at, pool = ca[ia] == c, np.flatnonzero(cb == c)
        ib[at] = rng.choice(pool, size=int(at.sum()), p=runner_up.weights[pool] / runner_up.weights[pool].sum())
    return _relative(pick.values[ia], runner_up.values[ib]), np.full(max_pairs, 1.0 / max_pairs)


def _relative(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a / b - 1, 0 where a = b (both infinite: a tie; module doc)."""
    a, b = np.broadcast_arrays(a, b)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = a / b - 1.0
    rel[a == b] = 0.0
    return rel


def shared_differences(pick_costs, pick_weights, runner_up_costs, runner_up_weights, factors,
                       max_pairs: int = 1_000_000, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(Y^a_ic / Y^b_jc - 1, weight) with the model's error shared: each case's factor on both
    sides (module doc); NaN costs left out, each side's weights renormalised; past ``max_pairs``
    triples, that many drawn by weight with a seed."""
    sides = []
    for y, w in ((pick_costs, pick_weights), (runner_up_costs, runner_up_weights)):
        y, w = np.asarray(y, dtype=np.float64), np.asarray(w, dtype=np.float64)
        keep = ~np.isnan(y)
        y, w = y[keep], w[keep]
        sides.append((y, w / w.sum() if w.sum() > 0 else w))
    (ya, wa), (yb, wb) = sides
    q = np.asarray(list(factors), dtype=np.float64) if len(factors) else np.ones(1)
    if ya.size == 0 or yb.size == 0:
        return np.zeros(0), np.zeros(0)
    if ya.size * yb.size * q.size <= max_pairs:
        rel = _relative(ya[:, None, None] * q[None, None, :], yb[None, :, None] * q[None, None, :]).ravel()
        return rel, np.repeat((wa[:, None] * wb[None, :]).ravel() / q.size, q.size)
    rng = np.random.default_rng(seed)
    ia = rng.choice(ya.size, size=max_pairs, p=wa)
    ib = rng.choice(yb.size, size=max_pairs, p=wb)
    c = rng.integers(0, q.size, size=max_pairs)
    return _relative(ya[ia] * q[c], yb[ib] * q[c]), np.full(max_pairs, 1.0 / max_pairs)


def probability_from_differences(rel: np.ndarray, weights: np.ndarray) -> float | None:
    """P(runner-up cheaper) from pairs' relative differences (module doc): the weight above 0,
    ties half; None without pairs."""
    if rel.size == 0 or weights.sum() <= 0:
        return None
    w = weights / weights.sum()
    return float(np.sum(w * ((rel > 0) + 0.5 * (rel == 0))))


def no_good_share(d: Draws) -> float:
    """The weight of a candidate's joint resamples with an infinite cost (no good token)."""
    return float(d.weights[np.isinf(d.values)].sum())


def signed_share(x) -> str:
    """A relative difference as a signed percentage; an infinite one (or plan.json's "inf") as
    "+inf"."""
    if x in ("inf", "-inf"):
        x = float(x)
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "n/a"
    return ("+inf" if x > 0 else "-inf") if math.isinf(x) else f"{x:+.1%}"


def runner_up_text(verdict: dict) -> str:
    """A plan verdict's ``runner_up_cheaper`` (``protocols.plan.record.cheapest``) as the console
    and the page say it; where there is no probability, why (never a NaN printed as a number)."""
    r = verdict.get("runner_up_cheaper") or {}
    p = r.get("probability")
    if p is None:
        return (r.get("why") or "no probability stated") + pick_wrong_text(verdict)
    se = r.get("standard_error")
    cases = r.get("model_error_cases") or {}
    model = ", ".join(f"{n} {k} case{'s' if k != 1 else ''}" for n, k in cases.items() if k)
    return (f"chance that {r['runner_up']} is in fact the cheaper at the SLO: {p:.1%}"
            + (f" ± {se:.1%} (resample error)" if se else "")
            + (f", over the capacity's resamples and the model's validation residuals ({model})" if model
               else ", over the capacity's resamples alone (no validation residuals of its model)")
            + between_text(verdict) + pick_wrong_text(verdict))


def pick_wrong_text(verdict: dict) -> str:
    """A verdict's ``pick_wrong`` as the console says it after the runner-up's figure: the chance the
    pick is wrong over every config, and each config's share of resamples meeting the SLO where it is
    under 1 ('' without the figure: an older plan.json, or no pick)."""
    w = verdict.get("pick_wrong") or {}
    p = w.get("probability")
    if p is None:
        return ""
    shares = w.get("meets_slo_share") or {}
    short = ", ".join(f"{n} {s:.1%}" for n, s in shares.items() if s is not None and s < 1)
    return (f"; chance that {w['pick']} is wrong (it misses the SLO, or another config meets it and is cheaper): "
            f"{p:.1%}" + (f", the SLO met in {short} of the resamples" if short else ""))


def between_text(verdict: dict) -> str:
    """Whether the verdict took the model's error as shared or independent between the pick and
    the runner-up, with the other assumption's figure beside it ('' where neither has model error)."""
    m = verdict.get("model_error_between") or {}
    how = m.get("taken_as")
    if how not in ("independent", "shared"):
        return ""
    r = verdict["runner_up_cheaper"]
    a, b = r["pick"], r["runner_up"]
    other = "shared" if how == "independent" else "independent"
    fig = m.get(other) or {}
    if fig.get("probability") is None:
        return f"; the model's error taken as {how} between {a} and {b} ({fig.get('why', f'no {other} figure')})"
    iv = fig.get("interval")
    ivs = f", {a} vs {b} [{signed_share(iv[0])}, {signed_share(iv[1])}]" if iv else ""
    return (f"; the model's error taken as {how} between {a} and {b} ({other}: P({b} cheaper) = "
            f"{fig['probability']:.1%}{ivs})")


def _meeting_below(x: Draws, y: Draws, y_meets: np.ndarray, shared: bool) -> np.ndarray:
    """B_y at each joint resample of ``x`` (module doc): the weight of ``y``'s resamples that meet
    the SLO and cost less, ties half; ``shared``: within ``x``'s case."""
    out = np.zeros(x.values.size)
    if not shared:
        groups = [(np.ones(x.values.size, dtype=bool), np.ones(y.values.size, dtype=bool))]
    else:
        xc, yc = _cases(x), _cases(y)
        groups = [(xc == c, yc == c) for c in np.unique(xc)]
    for mx, my in groups:
        total = y.weights[my].sum()
        sel = my & y_meets
        if total <= 0 or not sel.any():
            continue
        sub = Draws(y.values[sel], y.weights[sel] / total, y.unit[sel])
        below, equal = _below_and_equal(*_sorted(sub), x.values[mx])
        out[mx] = below + 0.5 * equal
    return out


def pick_wrong(pick: Draws, pick_meets, others: dict[str, tuple[Draws, object, bool]]) -> dict:
    """{probability, pick_misses_slo, meets_and_cheaper}: P(pick wrong) (module doc), the share of
    the pick's resamples missing the SLO, and per other candidate the weight of the pick's resamples
    it beats while meeting the SLO (Σ W^a B_k).  ``pick_meets``: per capacity resample of the pick
    whether it meets the SLO; ``others``: name -> (joint resamples, per capacity resample whether it
    meets, whether it shares the pick's model cases).  Probability None where the pick or a
    candidate has no resample."""
    if pick.values.size == 0 or any(d.values.size == 0 for d, _, _ in others.values()):
        return {"probability": None, "pick_misses_slo": None, "meets_and_cheaper": {}}
    ma = np.asarray(pick_meets, dtype=bool)[pick.unit]
    right = pick.weights * ma
    beats = {}
    for name, (d, meets, shared) in others.items():
        b = _meeting_below(pick, d, np.asarray(meets, dtype=bool)[d.unit], shared)
        beats[name] = float(np.sum(pick.weights * b))
        right = right * (1.0 - b)
    p = 1.0 - float(np.sum(right))
    return {"probability": min(1.0, max(0.0, p)), "pick_misses_slo": float(np.sum(pick.weights * ~ma)),
            "meets_and_cheaper": beats}


def meeting_share(d: Draws, meets) -> float:
    """The weight of a candidate's joint resamples that meet the SLO."""
    return float(np.sum(d.weights * np.asarray(meets, dtype=bool)[d.unit]))
