"""Percentiles with honest error bars.

Point estimates use linear interpolation (numpy's default), as ``vllm bench serve`` does.
Beside each we give a distribution-free confidence interval from order statistics and say
whether the sample is large enough to claim the percentile at all, by MLPerf LoadGen's
early-stopping rule.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats
from scipy.special import betainc

EARLY_STOP_CONFIDENCE = 0.99
QUANTILES = (50, 90, 95, 99)  # the percentiles a summary reports of each latency


def percentile(values, q: float) -> float:
    """The q-th percentile (0-100) with linear interpolation; NaN for an empty sample."""
    v = np.asarray(values, dtype=np.float64)
    v = v[~np.isnan(v)]
    return float(np.percentile(v, q)) if v.size else math.nan


def order_statistic_ci(values, q: float, confidence: float = 0.95) -> tuple[float, float]:
    """Distribution-free CI for the q-th percentile from order statistics.

    With n sorted samples, the number of samples below the true quantile is
    Binomial(n, q/100); we take the symmetric binomial interval [l, u] and return the
    l-th and u-th order statistics.  The bound is open (NaN) on a side the sample cannot
    reach: too few samples to bracket the quantile at this confidence.
    """
    v = np.sort(np.asarray(values, dtype=np.float64))
    v = v[~np.isnan(v)]
    n = v.size
    if n == 0:
        return (math.nan, math.nan)
    p = q / 100.0
    alpha = 1.0 - confidence
    lo_rank = int(stats.binom.ppf(alpha / 2, n, p))  # order statistics are 1-based ranks
    hi_rank = int(stats.binom.ppf(1 - alpha / 2, n, p)) + 1
    lo = v[lo_rank - 1] if lo_rank >= 1 else math.nan
    hi = v[hi_rank - 1] if hi_rank <= n else math.nan
    return (float(lo), float(hi))


def early_stopping_min_samples(q: float, confidence: float = EARLY_STOP_CONFIDENCE, overlatency: int = 1) -> int:
    """Fewest samples that can support a claim about the q-th percentile (MLPerf LoadGen).

    LoadGen's ``MinPassingQueriesFinder``: the smallest h with I_p(h, 1 + t) <= 1 - c
    (regularised incomplete beta), plus the t over-latency samples it allows (t = 1 in its
    single-stream rule).  At c = 0.99 this gives 64, 130 and 662 samples for p90, p95, p99.
    """
    p = q / 100.0
    target = 1.0 - confidence
    lo, hi = 1, 2
    while betainc(hi, 1 + overlatency, p) > target:
        hi *= 2
    while lo < hi:
        mid = (lo + hi) // 2
        if betainc(mid, 1 + overlatency, p) <= target:
            hi = mid
        else:
            lo = mid + 1
    return lo + overlatency


def describe(values, quantiles=(50, 90, 95, 99), confidence: float = 0.95) -> dict:
    """mean/median/std/min/max and, per quantile, the value, its CI and whether n suffices."""
    v = np.asarray(values, dtype=np.float64)
    v = v[~np.isnan(v)]
    out: dict = {"n": int(v.size)}
    if v.size == 0:
        out.update(mean=math.nan, median=math.nan, std=math.nan, min=math.nan, max=math.nan)
    else:
        out.update(mean=float(v.mean()), median=float(np.median(v)), std=float(v.std()),
                   min=float(v.min()), max=float(v.max()))
    for q in quantiles:
        key = f"p{q:g}"
        out[key] = percentile(v, q)
        out[key + "_ci"] = order_statistic_ci(v, q, confidence)
        out[key + "_sufficient"] = bool(v.size >= early_stopping_min_samples(q)) if q < 100 else True
    return out


def add_latency_stats(out: dict, prefix: str, values_s, quantiles=QUANTILES) -> None:
    """``describe`` of ``values_s`` (seconds) into ``out`` as a summary's latency keys, in ms:
    ``mean_<prefix>_ms``, ``median_``, ``std_``, ``max_``, per quantile ``p<q>_<prefix>_ms`` with its
    ``_ci95_low``/``_ci95_high`` and ``p<q>_<prefix>_sufficient``, and ``n_<prefix>``."""
    d = describe(values_s, quantiles)
    out[f"mean_{prefix}_ms"] = d["mean"] * 1e3
    out[f"median_{prefix}_ms"] = d["median"] * 1e3
    out[f"std_{prefix}_ms"] = d["std"] * 1e3
    out[f"max_{prefix}_ms"] = d["max"] * 1e3
    for q in quantiles:
        out[f"p{q}_{prefix}_ms"] = d[f"p{q}"] * 1e3
        lo, hi = d[f"p{q}_ci"]
        out[f"p{q}_{prefix}_ms_ci95_low"] = lo * 1e3
        out[f"p{q}_{prefix}_ms_ci95_high"] = hi * 1e3
        out[f"p{q}_{prefix}_sufficient"] = d[f"p{q}_sufficient"]
    out[f"n_{prefix}"] = d["n"]
