"""B vs A for a ratio of totals (cost per good token): the delta method on the log of the ratio."""

from __future__ import annotations

import math

import numpy as np

from metrics.statistics.differences import Difference, welch_dof
from metrics.statistics.estimate import Estimate, dropped_note, join_notes, nan_estimate, t_interval


def _ratio_side(num, den) -> tuple[float, np.ndarray, int]:
    """(R = Σnum/Σden, the per-replicate influence on ln R: u_i = (num_i - R·den_i)/(mean(den)·R),
    replicates used); NaN in either column drops the replicate."""
    n, d = np.asarray(num, dtype=np.float64).ravel(), np.asarray(den, dtype=np.float64).ravel()
    keep = ~(np.isnan(n) | np.isnan(d))
    n, d = n[keep], d[keep]
    if n.size == 0 or d.sum() == 0:
        return (math.inf if n.size and n.sum() > 0 else math.nan), np.array([]), int(n.size)
    r = float(n.sum() / d.sum())
    if r <= 0:
        return r, np.array([]), int(n.size)
    return r, (n - r * d) / (d.mean() * r), int(n.size)


def _bought_nothing(num_a, den_a, num_b, den_b, labels: tuple[str, str]) -> tuple[float, str] | None:
    """(R_B/R_A - 1, why) where one side's every replicate has a denominator of 0 and a cost
    (R = inf however its replicates are resampled) and the other's every replicate a positive
    denominator (R finite in every resample), with 2 replicates or more a side; else None."""
    sides = []
    for num, den in ((num_a, den_a), (num_b, den_b)):
        n, d = np.asarray(num, dtype=np.float64).ravel(), np.asarray(den, dtype=np.float64).ravel()
        keep = ~(np.isnan(n) | np.isnan(d))
        n, d = n[keep], d[keep]
        if n.size < 2:
            return None
        sides.append("none" if np.all(d == 0) and np.all(n > 0) else "each" if np.all(d > 0) else "mixed")
    if sorted(sides) != ["each", "none"]:
        return None
    empty, full = (labels[0], labels[1]) if sides[0] == "none" else (labels[1], labels[0])
    why = (f"{empty} had a cost and a denominator of 0 in every replicate (no good tokens: an infinite ratio), "
           f"{full} a positive one in each: {labels[1]}/{labels[0]} - 1 is "
           + ("-100 %" if sides[0] == "none" else "+inf") + " in every resample")
    return (-1.0 if sides[0] == "none" else math.inf), why


def ratio_difference(num_a, den_a, num_b, den_b, *, paired: bool, scale: float = 1.0, confidence: float = 0.95,
                     labels: tuple[str, str] = ("A", "B")) -> Difference:
    """B vs A for a ratio of totals (cost per good token = 1e6 · Σ cost / Σ good tokens): the
    same definition on both sides as the value shown (:func:`ratio_ci`), never a mean of
    per-run ratios.

    R_X = scale · Σ num_X / Σ den_X over X's replicates; relative r = R_B / R_A - 1, absolute
    R_B - R_A.  The interval is the delta method on ln R: each replicate's influence
    u_i = (num_i - R·den_i) / (mean(den) · R), se(ln R) = s_u / √n; unpaired (runs made
    separately) se² = s_uA²/n_A + s_uB²/n_B with Welch–Satterthwaite dof, paired (block i of A
    with block i of B) se = s(u_B - u_A)/√n with n - 1 dof; r ∈ exp(ln(R_B/R_A) ± t·se) - 1
    (effects that multiply, as the paired log ratio).  A side whose denominators sum to 0 has
    an infinite ratio (no good tokens: the cost was paid for nothing): the value is inf and
    there is no interval, and the note says so; except where that side has a denominator of 0
    in every replicate and the other a positive one in each (2 replicates or more a side): then
    r is -100 % (A bought nothing) or +inf (B did) in every resample, its interval that one value.
    """
    if paired:
        aa_n, aa_d, bb_n, bb_d = (np.asarray(x, dtype=np.float64).ravel() for x in (num_a, den_a, num_b, den_b))
        if aa_n.size != bb_n.size:
            raise ValueError(f"paired samples differ in length: {aa_n.size} blocks of A, {bb_n.size} of B")
        keep = ~(np.isnan(aa_n) | np.isnan(aa_d) | np.isnan(bb_n) | np.isnan(bb_d))
        num_a, den_a, num_b, den_b = aa_n[keep], aa_d[keep], bb_n[keep], bb_d[keep]
        dropped = int(keep.size - keep.sum())
    else:
        dropped = 0
    ra, ua, na = _ratio_side(num_a, den_a)
    rb, ub, nb = _ratio_side(num_b, den_b)
    if not paired:
        dropped = int(np.size(num_a) + np.size(num_b) - na - nb)
    ra, rb = ra * scale, rb * scale
    method = "ratio of totals, delta on logs (" + ("paired" if paired else "Welch") + ")"
    note = dropped_note(dropped, "replicate(s) with a missing value")
    n = na if paired else na + nb

    def side(r: float, u: np.ndarray) -> Estimate:
        if u.size < 2:
            return nan_estimate(r, u.size, method, "", confidence)
        lo, hi = t_interval(math.log(r), float(u.std(ddof=1)) / math.sqrt(u.size), u.size - 1, confidence)
        return Estimate(r, math.exp(lo), math.exp(hi), int(u.size), method, "", confidence)

    ea, eb = side(ra, ua), side(rb, ub)
    val_abs = rb - ra if math.isfinite(ra) and math.isfinite(rb) else (math.inf if rb == math.inf else math.nan)
    val_rel = rb / ra - 1 if math.isfinite(ra) and ra > 0 and not math.isnan(rb) else math.nan
    nothing = _bought_nothing(num_a, den_a, num_b, den_b, labels)
    if nothing is not None:  # one side paid for no good token in any replicate, the other for some in each
        val_rel, why = nothing
        val_abs = -math.inf if val_rel < 0 else math.inf
        return Difference(nan_estimate(val_abs, n, method, why, confidence, dropped),
                          Estimate(val_rel, val_rel, val_rel, n, method, join_notes(why, note), confidence, dropped),
                          ea, eb, paired, dropped, None, labels, join_notes(why, note))
    why = ""
    if not math.isfinite(rb) or not math.isfinite(ra):
        empty = [lab for lab, r in zip(labels, (ra, rb)) if not math.isfinite(r)]
        why = f"{' and '.join(empty)}: the denominators sum to 0 (infinite or undefined ratio)"
    elif ra <= 0 or rb <= 0:
        why = "a ratio of 0: no log ratio"
    elif ua.size < 2 or ub.size < 2 or (paired and ua.size != ub.size):
        why = f"n_a={ua.size}, n_b={ub.size}: need 2 each"
    if why:
        why = join_notes(why, note)
        return Difference(nan_estimate(val_abs, n, method, why, confidence, dropped),
                          nan_estimate(val_rel, n, method, why, confidence, dropped),
                          ea, eb, paired, dropped, None, labels, why)
    if paired:
        z = ub - ua
        se, dof = float(z.std(ddof=1)) / math.sqrt(z.size), z.size - 1
        # u·R is a replicate's influence on R itself: the absolute difference's
        se_abs, dof_abs = float((ub * rb - ua * ra).std(ddof=1)) / math.sqrt(z.size), dof
    else:
        ca, cb = ua.var(ddof=1) / ua.size, ub.var(ddof=1) / ub.size
        se, dof = math.sqrt(ca + cb), welch_dof(ca, cb, ua.size, ub.size)
        aa, ab = ca * ra ** 2, cb * rb ** 2
        se_abs, dof_abs = math.sqrt(aa + ab), welch_dof(aa, ab, ua.size, ub.size)
    lr = math.log(rb / ra)
    lo, hi = t_interval(lr, se, dof, confidence)
    rel = Estimate(rb / ra - 1, math.exp(lo) - 1, math.exp(hi) - 1, n, method, note, confidence, dropped)
    lo, hi = t_interval(rb - ra, se_abs, dof_abs, confidence)
    absolute = Estimate(rb - ra, float(lo), float(hi), n, method, note, confidence, dropped)
    return Difference(absolute, rel, ea, eb, paired, dropped, None, labels, note)
