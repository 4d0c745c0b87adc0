"""The estimate every interval here returns, its notes, Student-t intervals: the mean, the geometric
mean (a t interval on logs), and whether a set of estimates has converged."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats


@dataclass(frozen=True)
class Estimate:
    """A point estimate with its interval ``[low, high]`` at ``confidence``.

    ``n``: replicates used (runs, blocks); ``dropped``: inputs left out (NaN, unpaired);
    ``note``: anything a reader must know (fallbacks, why bounds are NaN).
    """

    value: float
    low: float
    high: float
    n: int
    method: str
    note: str = ""
    confidence: float = 0.95
    dropped: int = 0

    @property
    def half_width(self) -> float:
        """(high - low) / 2; NaN when a bound is missing."""
        return (self.high - self.low) / 2.0

    @property
    def rel_half_width(self) -> float:
        """half_width / |value|: the interval's width relative to the estimate (NaN if unknown)."""
        hw = self.half_width
        if math.isnan(hw) or math.isnan(self.value):
            return math.nan
        if self.value == 0:
            return 0.0 if hw == 0 else math.inf
        return hw / abs(self.value)

    def to_dict(self) -> dict:
        return {**asdict(self), "half_width": self.half_width, "rel_half_width": self.rel_half_width}


def nan_estimate(value: float, n: int, method: str, note: str, confidence: float, dropped: int = 0) -> Estimate:
    return Estimate(float(value), math.nan, math.nan, n, method, note, confidence, dropped)


def join_notes(*notes: str) -> str:
    return "; ".join(s for s in notes if s)


def dropped_note(dropped: int, what: str = "NaN value(s)") -> str:
    return f"{dropped} {what} dropped" if dropped else ""


def clean(values) -> tuple[np.ndarray, int]:
    """Float array without NaNs (None becomes NaN), and how many were dropped."""
    v = np.asarray(values, dtype=np.float64).ravel()
    keep = ~np.isnan(v)
    return v[keep], int(v.size - keep.sum())


def t_interval(center: float, se: float, dof: float, confidence: float) -> tuple[float, float]:
    """center ± t(1 - α/2, dof) · se."""
    if se == 0:  # no spread at all: scipy's t with scale 0 is NaN, the interval is the point
        return center, center
    h = stats.t.ppf(0.5 + confidence / 2.0, dof) * se
    return center - h, center + h


def mean_ci(values, confidence: float = 0.95) -> Estimate:
    """Student-t interval for the mean across repeats.

    x̄ ± t(1-α/2, n-1) · s/√n with s the sample standard deviation (ddof=1).  NaNs are dropped
    and counted; with n = 1 the bounds are NaN (no spread can be estimated from one run).
    """
    v, dropped = clean(values)
    n = v.size
    if n == 0:
        return nan_estimate(math.nan, 0, "student-t", join_notes("no values", dropped_note(dropped)), confidence,
                            dropped)
    m = float(v.mean())
    if n == 1:
        return nan_estimate(m, 1, "student-t", join_notes("one repeat: no interval", dropped_note(dropped)),
                             confidence, dropped)
    lo, hi = t_interval(m, float(v.std(ddof=1)) / math.sqrt(n), n - 1, confidence)
    return Estimate(m, float(lo), float(hi), n, "student-t", dropped_note(dropped), confidence, dropped)



def log_ratio_ci(ratios, confidence: float = 0.95) -> Estimate:
    """Geometric mean of ``ratios`` with a Student-t interval on their logs:
    exp(mean(ln r) ± t(n-1)·s_ln r/√n).  Ratios that are not positive and finite are dropped
    and counted (an ablation's effects and interactions, a paired comparison's ratios)."""
    r = np.asarray([x for x in ratios if x is not None and math.isfinite(x) and x > 0], dtype=np.float64)
    dropped = len(ratios) - r.size
    if r.size == 0:
        return nan_estimate(math.nan, 0, "geometric mean, t interval on logs", "no positive ratio", confidence,
                             dropped)
    e = mean_ci(np.log(r), confidence)
    return Estimate(math.exp(e.value), math.exp(e.low), math.exp(e.high), e.n, "geometric mean, t interval on logs",
                    e.note, confidence, dropped)


def converged(estimates: Mapping[str, Estimate], target_rel_halfwidth: float) -> tuple[bool, list[tuple[str, float]]]:
    """Whether every estimate's rel_half_width (half-width / |value|) is at most the target.

    Returns (all converged, [(metric, rel_half_width), ...] for those not yet); a NaN width
    (fewer than 2 repeats) is not converged.  No estimates: (True, []).  Drives "add blocks
    until every named metric converged or ``protocol.max_repeats`` is reached".
    """
    pending = [(name, e.rel_half_width) for name, e in estimates.items()
               if not e.rel_half_width <= target_rel_halfwidth]
    return (not pending, pending)

