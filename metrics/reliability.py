"""A reliability table of stated probabilities against what happened (issue 43's plan row): the
decisions binned by the probability stated that each is wrong, per bin the mean stated, the
observed share wrong with its Clopper-Pearson interval, and the Brier score over all.

A bin **holds** its level where the observed share is within ``tolerance`` (10 points) of the
bin's mean stated probability, **fails** where the share's interval lies wholly outside that
band (a small sample cannot prove a level, but it can disprove it), and is **open** between;
a bin with fewer than ``min_count`` decisions is **too few** to judge.
"""

from __future__ import annotations

import numpy as np
from scipy.stats import beta

# [lo, hi) of stated probability; the last bin closed at 1
BINS = ((0.0, 0.1), (0.1, 0.3), (0.3, 0.5), (0.5, 0.7), (0.7, 0.9), (0.9, 1.0))


def clopper_pearson(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """The exact binomial interval of k successes in n trials ((0, 1) for n = 0)."""
    if n == 0:
        return 0.0, 1.0
    a = (1 - confidence) / 2
    lo = 0.0 if k == 0 else float(beta.ppf(a, k, n - k + 1))
    hi = 1.0 if k == n else float(beta.ppf(1 - a, k + 1, n - k))
    return lo, hi


def brier(stated, wrong) -> float:
    """Mean squared difference between the stated probability and the outcome (1 wrong, 0 right)."""
    p, y = np.asarray(stated, dtype=np.float64), np.asarray(wrong, dtype=np.float64)
    return float(np.mean((p - y) ** 2)) if p.size else float("nan")


def bin_verdict(count: int, wrong: int, mean_stated: float, tolerance: float = 0.10, min_count: int = 5,
                confidence: float = 0.95) -> str:
    """'holds', 'fails', 'open' or 'too few' (module doc)."""
    if count < min_count:
        return "too few"
    lo, hi = clopper_pearson(wrong, count, confidence)
    if hi < mean_stated - tolerance or lo > mean_stated + tolerance:
        return "fails"
    return "holds" if abs(wrong / count - mean_stated) <= tolerance else "open"


def reliability_table(stated, wrong, bins=BINS, tolerance: float = 0.10, min_count: int = 5,
                      confidence: float = 0.95) -> dict:
    """{bins: [{bin, count, wrong, mean_stated, observed, interval, verdict}], brier} (module doc)."""
    p, y = np.asarray(stated, dtype=np.float64), np.asarray(wrong, dtype=bool)
    rows = []
    for i, (lo, hi) in enumerate(bins):
        last = i == len(bins) - 1
        sel = (p >= lo) & ((p <= hi) if last else (p < hi))
        n, k = int(sel.sum()), int(y[sel].sum())
        mean = float(p[sel].mean()) if n else float("nan")
        rows.append({"bin": f"[{lo:g}, {hi:g}{']' if last else ')'}", "count": n, "wrong": k, "mean_stated": mean,
                     "observed": k / n if n else float("nan"), "interval": list(clopper_pearson(k, n, confidence)),
                     "verdict": bin_verdict(n, k, mean, tolerance, min_count, confidence) if n else "too few"})
    return {"bins": rows, "brier": brier(p, y), "tolerance": tolerance, "min_count": min_count}
