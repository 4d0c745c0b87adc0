"""Bootstrap intervals over repeats (BCa, the percentile interval of the same resamples as its
fallback), and the ratio of totals across repeats built on it."""

from __future__ import annotations

import inspect
import math
import warnings
from collections.abc import Callable, Sequence

import numpy as np
from scipy import stats

from metrics.statistics.estimate import Estimate, clean, dropped_note, join_notes, nan_estimate

N_RESAMPLES = 10_000
# scipy >= 1.15 names the generator ``rng``; older ones only know ``random_state``.
_RNG_KW = "rng" if "rng" in inspect.signature(stats.bootstrap).parameters else "random_state"


def _generator(seed: int | None, rng: np.random.Generator | None) -> np.random.Generator:
    return rng if rng is not None else np.random.default_rng(seed)


def _drop_nan(samples: Sequence[np.ndarray], paired: bool) -> tuple[list[np.ndarray], int]:
    """Paired: drop an observation from every sample when any is NaN; else each sample alone."""
    arrs = [np.asarray(s, dtype=np.float64).ravel() for s in samples]
    if paired:
        if len({a.size for a in arrs}) > 1:
            raise ValueError(f"paired samples differ in length: {[a.size for a in arrs]}")
        keep = np.logical_and.reduce([~np.isnan(a) for a in arrs])
        return [a[keep] for a in arrs], int(keep.size - keep.sum())
    cleaned = [clean(a) for a in arrs]
    return [c[0] for c in cleaned], sum(c[1] for c in cleaned)


def _evaluate(statistic: Callable, samples: Sequence[np.ndarray], vectorized: bool) -> float:
    with np.errstate(divide="ignore", invalid="ignore"):
        v = statistic(*samples, axis=-1) if vectorized else statistic(*samples)
    return float(np.asarray(v))


def _scipy_bootstrap(samples, statistic, rng, **kw):
    """``scipy.stats.bootstrap``, its warnings caught (returned) instead of printed."""
    with warnings.catch_warnings(record=True) as caught, np.errstate(divide="ignore", invalid="ignore"):
        warnings.simplefilter("always")
        res = stats.bootstrap(tuple(samples), statistic, **{_RNG_KW: rng}, **kw)
    return res, list(caught)


def bootstrap_ci(statistic: Callable, samples: Sequence, *, confidence: float = 0.95,
                 n_resamples: int = N_RESAMPLES, method: str = "BCa", paired: bool = True,
                 vectorized: bool = True, seed: int | None = 0, rng: np.random.Generator | None = None,
                 batch: int | None = None, drop_nan: bool = True) -> Estimate:
    """Bootstrap interval of ``statistic(*samples)`` over repeats, BCa by default.

    ``statistic(*samples, axis=-1)`` (``vectorized``) or ``statistic(*samples)``; ``paired``
    resamples the same indices in every sample (numerator and denominator of one run stay
    together).  The interval is the BCa one (bias-corrected and accelerated: the percentiles
    α1 = Φ(ẑ0 + (ẑ0 + z_α)/(1 - â(ẑ0 + z_α))) of the bootstrap distribution, ẑ0 from the share
    of resamples below the estimate, â from the jackknife's skewness).  When BCa cannot be
    computed (scipy's DegenerateDataWarning, or NaN bounds: constant data, too few distinct
    resamples), the percentile interval [q(α/2), q(1-α/2)] of the same resamples is returned
    and ``note`` says so.  Fewer than 2 observations in a sample: NaN bounds and a note.
    """
    if drop_nan:
        arrs, dropped = _drop_nan(samples, paired)
    else:
        arrs, dropped = [np.asarray(s) for s in samples], 0
    n = arrs[0].shape[-1] if (paired or len(arrs) == 1) else sum(a.shape[-1] for a in arrs)
    label = "bca-bootstrap" if method.lower() == "bca" else f"{method.lower()}-bootstrap"
    if min(a.shape[-1] for a in arrs) == 0:
        return nan_estimate(math.nan, n, label, join_notes("no values", dropped_note(dropped)), confidence, dropped)
    value = _evaluate(statistic, arrs, vectorized)
    if min(a.shape[-1] for a in arrs) < 2:
        return nan_estimate(value, n, label, join_notes("fewer than 2 observations: no bootstrap interval",
                                                    dropped_note(dropped)), confidence, dropped)
    kw = dict(n_resamples=n_resamples, batch=batch, vectorized=vectorized, paired=paired and len(arrs) > 1,
              axis=-1, confidence_level=confidence)
    gen = _generator(seed, rng)
    res, caught = _scipy_bootstrap(arrs, statistic, gen, method=method, **kw)
    lo, hi = (float(x) for x in res.confidence_interval)
    degenerate = [w for w in caught if issubclass(w.category, stats.DegenerateDataWarning)]
    note = ""
    if method.lower() == "bca" and (degenerate or not (math.isfinite(lo) and math.isfinite(hi))):
        why = str(degenerate[0].message).split(".")[0] if degenerate else "BCa bounds are NaN"
        # Same resamples, percentile method: no new draws, so the fallback is free and seeded.
        kw["n_resamples"] = 0
        res, _ = _scipy_bootstrap(arrs, statistic, gen, method="percentile", bootstrap_result=res, **kw)
        lo, hi = (float(x) for x in res.confidence_interval)
        label, note = "percentile-bootstrap", f"BCa failed ({why}); percentile interval of the same resamples"
    if not (math.isfinite(lo) and math.isfinite(hi)):
        note = join_notes(note, "the bootstrap distribution has NaN/inf values (statistic undefined on some resamples)")
    return Estimate(value, lo, hi, n, label, join_notes(note, dropped_note(dropped)), confidence, dropped)


def _ratio_of_sums(num, den, axis=-1):
    return np.sum(num, axis=axis) / np.sum(den, axis=axis)


def ratio_ci(numerators, denominators, *, scale: float = 1.0, confidence: float = 0.95,
             n_resamples: int = N_RESAMPLES, seed: int | None = 0, rng: np.random.Generator | None = None,
             method: str = "BCa") -> Estimate:
    """Interval for scale · Σ numerators / Σ denominators across repeats (paired BCa bootstrap).

    E.g. cost per million good tokens = 1e6 · Σ cost / Σ good tokens (``scale=1e6``): the
    ratio of totals, which weights each run by its tokens (not the mean of per-run ratios).
    Repeats are resampled with numerator and denominator kept together; a repeat with a NaN
    in either is dropped.  A resample whose denominators sum to 0 gives inf; then BCa fails
    and the percentile fallback's note says so.
    """
    est = bootstrap_ci(_ratio_of_sums, (numerators, denominators), confidence=confidence,
                       n_resamples=n_resamples, method=method, paired=True, seed=seed, rng=rng)
    if scale == 1.0:
        return est
    return Estimate(est.value * scale, est.low * scale, est.high * scale, est.n, est.method, est.note,
                    est.confidence, est.dropped)

