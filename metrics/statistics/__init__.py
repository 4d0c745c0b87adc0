"""Statistics across repeats: intervals, comparisons between configs, verdicts, convergence.

A run is one replicate.  Requests inside a run share the engine's state, its warm-up, the
host's noise, so they are correlated: every interval here treats the *run* as the sample,
never the request.  Within-run figures (order-statistic bounds of a percentile, MLPerf early
stopping) live in ``metrics.percentiles``; :func:`within_run_percentile` only wraps them and
labels them "within run".

Configs are run in blocks: in each block every config runs once, in a random order, so block
``i`` of config A and block ``i`` of config B are paired (:func:`paired_difference`); runs
made separately are compared with Welch's interval (:func:`unpaired_difference`).

Methods (``Estimate.method``):
- ``student-t``: mean x̄ ± t(1-α/2, n-1) · s/√n, s the sample standard deviation (ddof=1).
- ``bca-bootstrap`` / ``percentile-bootstrap``: ``scipy.stats.bootstrap`` over repeats (10,000
  resamples by default, seeded).  BCa when it can be computed; when it cannot (degenerate
  data, too few distinct resamples: scipy warns or returns NaN) the percentile interval of
  the *same* resamples, said so in ``note``.
- ``cluster ...-bootstrap``: percentiles pooled across runs, resampling runs (not requests).
- ``paired student-t``, ``unpaired (Welch)``, ``delta (student-t)``: see the functions.
- ``order-statistic (within run)``: ``metrics.percentiles.order_statistic_ci``.

Every bootstrap is seeded (``seed``, default 0, or a ``rng``): the same call gives the same
interval.
"""

from __future__ import annotations

import copy
import inspect
import math
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass

import numpy as np
from scipy import stats

from metrics.percentiles import early_stopping_min_samples, order_statistic_ci, percentile

N_RESAMPLES = 10_000
# scipy >= 1.15 names the generator ``rng``; older ones only know ``random_state``.
_RNG_KW = "rng" if "rng" in inspect.signature(stats.bootstrap).parameters else "random_state"


# ------------------------------------------------------------------------------------ the estimate
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


def _nan_estimate(value: float, n: int, method: str, note: str, confidence: float, dropped: int = 0) -> Estimate:
    return Estimate(float(value), math.nan, math.nan, n, method, note, confidence, dropped)


def _join(*notes: str) -> str:
    return "; ".join(s for s in notes if s)


def _dropped_note(dropped: int, what: str = "NaN value(s)") -> str:
    return f"{dropped} {what} dropped" if dropped else ""


def _clean(values) -> tuple[np.ndarray, int]:
    """Float array without NaNs (None becomes NaN), and how many were dropped."""
    v = np.asarray(values, dtype=np.float64).ravel()
    keep = ~np.isnan(v)
    return v[keep], int(v.size - keep.sum())


def _t_interval(center: float, se: float, dof: float, confidence: float) -> tuple[float, float]:
    """center ± t(1 - α/2, dof) · se."""
    if se == 0:  # no spread at all: scipy's t with scale 0 is NaN, the interval is the point
        return center, center
    h = stats.t.ppf(0.5 + confidence / 2.0, dof) * se
    return center - h, center + h


# ------------------------------------------------------------------------------------ means
def mean_ci(values, confidence: float = 0.95) -> Estimate:
    """Student-t interval for the mean across repeats.

    x̄ ± t(1-α/2, n-1) · s/√n with s the sample standard deviation (ddof=1).  NaNs are dropped
    and counted; with n = 1 the bounds are NaN (no spread can be estimated from one run).
    """
    v, dropped = _clean(values)
    n = v.size
    if n == 0:
        return _nan_estimate(math.nan, 0, "student-t", _join("no values", _dropped_note(dropped)), confidence, dropped)
    m = float(v.mean())
    if n == 1:
        return _nan_estimate(m, 1, "student-t", _join("one repeat: no interval", _dropped_note(dropped)),
                             confidence, dropped)
    lo, hi = _t_interval(m, float(v.std(ddof=1)) / math.sqrt(n), n - 1, confidence)
    return Estimate(m, float(lo), float(hi), n, "student-t", _dropped_note(dropped), confidence, dropped)


# ------------------------------------------------------------------------------------ bootstrap
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
    cleaned = [_clean(a) for a in arrs]
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
        return _nan_estimate(math.nan, n, label, _join("no values", _dropped_note(dropped)), confidence, dropped)
    value = _evaluate(statistic, arrs, vectorized)
    if min(a.shape[-1] for a in arrs) < 2:
        return _nan_estimate(value, n, label, _join("fewer than 2 observations: no bootstrap interval",
                                                    _dropped_note(dropped)), confidence, dropped)
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
        note = _join(note, "the bootstrap distribution has NaN/inf values (statistic undefined on some resamples)")
    return Estimate(value, lo, hi, n, label, _join(note, _dropped_note(dropped)), confidence, dropped)


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


# ------------------------------------------------------------------------------------ pooled percentiles
class PooledQuantile:
    """q-th percentile of the requests of a weighted multiset of runs, exact, in O(R·B + S) a resample.

    A cluster-bootstrap resample draws R runs with replacement: run k appears w_k times.  The
    pooled sample is then N = Σ w_k n_k values; its percentile (numpy's linear rule: h =
    (N-1)·q/100, x_(⌊h⌋) + (h-⌊h⌋)(x_(⌊h⌋+1) - x_(⌊h⌋))) needs two order statistics of it.

    Once, up front: every request value of every run is sorted together (M values, each tagged
    with its run) and cut into B blocks of S consecutive values; C[k, b] counts run k's values
    in block b.  A resample's weighted count up to the end of each block is cumsum(w · C), so
    the block holding rank t is found from R·B numbers; inside it, the cumulative sum of the
    weights of its S values gives the exact position.  No approximation: the result equals
    ``np.percentile`` of the materialised pooled sample (to float rounding in the interpolation).
    S ≈ √(R·M)/16 balances the two steps, the gather being dearer than the matrix product
    (1e6 values, 100 runs: S = 625, B = 1,600; 10,000 resamples of one percentile take ~0.2 s).
    """

    def __init__(self, runs: Sequence[np.ndarray], q: float | Sequence[float], block_size: int | None = None):
        self.qs = np.atleast_1d(np.asarray(q, dtype=np.float64))
        self.R = len(runs)
        self.sizes = np.array([r.size for r in runs], dtype=np.float64)
        vals = np.concatenate(runs) if runs else np.empty(0)
        rid = np.repeat(np.arange(self.R), [r.size for r in runs])
        order = np.argsort(vals)  # ties in any order: only values are read back
        m = vals.size
        self.S = int(min(block_size or max(64, math.sqrt(self.R * m) / 16), max(m, 1)))
        self.B = max(1, -(-m // self.S))
        pad = self.B * self.S - m
        # Padding takes run id R, whose weight column is always 0: it can never be selected.
        self.vals = np.concatenate([vals[order], np.full(pad, vals.max() if m else np.nan)])
        self.rid = np.concatenate([rid[order], np.full(pad, self.R)])
        blocks = np.arange(self.B * self.S) // self.S
        counts = np.bincount(self.rid * self.B + blocks, minlength=(self.R + 1) * self.B)
        self.C = counts.reshape(self.R + 1, self.B)[: self.R].astype(np.float64)

    def weights(self, idx: np.ndarray) -> np.ndarray:
        """Resampled run indices (rows) -> times each run was drawn, shape (rows, R)."""
        idx = np.asarray(idx).astype(np.intp)
        rows = idx.shape[0]
        flat = (np.arange(rows)[:, None] * self.R + idx).ravel()
        return np.bincount(flat, minlength=rows * self.R).reshape(rows, self.R).astype(np.float64)

    def from_weights(self, w: np.ndarray) -> np.ndarray:
        """Pooled percentiles for each weight row, shape (rows, len(qs))."""
        w = np.atleast_2d(w)
        n_tot = w @ self.sizes
        cum = np.cumsum(w @ self.C, axis=1)
        w_ext = np.concatenate([w, np.zeros((w.shape[0], 1))], axis=1)
        out = np.empty((w.shape[0], self.qs.size))
        for i, q in enumerate(self.qs):
            h = (n_tot - 1) * (q / 100.0)
            j = np.floor(h)
            g = h - j
            lo, hi = self._order_stats(w_ext, cum, j + 1, n_tot)
            # numpy's lerp, so that equal inputs give bit-equal outputs where it can
            out[:, i] = np.where(g >= 0.5, hi - (hi - lo) * (1 - g), lo + (hi - lo) * g)
        out[n_tot == 0] = math.nan  # only empty runs drawn
        return out

    def _order_stats(self, w_ext: np.ndarray, cum: np.ndarray, t: np.ndarray, n_tot: np.ndarray,
                     second: bool = True):
        """Values of the t-th and (t+1)-th (1-based, capped at N) smallest pooled values, per row.

        The block holding rank t is the first whose cumulative weighted count reaches t; inside
        it the cumulative weights of its S values give the position.  Rank t+1 is almost always
        in the same block; the rows where it is not are looked up again on their own.
        """
        rows = np.arange(w_ext.shape[0])
        blk = np.minimum((cum < t[:, None]).sum(axis=1), self.B - 1)
        before = np.where(blk > 0, cum[rows, np.maximum(blk - 1, 0)], 0.0)
        pos = blk[:, None] * self.S + np.arange(self.S)
        inner = np.cumsum(np.take_along_axis(w_ext, self.rid[pos], axis=1), axis=1)
        t_in = t - before
        k1 = np.minimum((inner < t_in[:, None]).sum(axis=1), self.S - 1)
        first = self.vals[blk * self.S + k1]
        if not second:
            return first, first
        t2 = np.minimum(t + 1, n_tot)
        k2 = (inner < (t2 - before)[:, None]).sum(axis=1)
        nxt = self.vals[blk * self.S + np.minimum(k2, self.S - 1)]
        spill = k2 >= self.S  # rank t+1 lies in a later block
        if spill.any():
            nxt[spill] = self._order_stats(w_ext[spill], cum[spill], t2[spill], n_tot[spill], False)[0]
        return first, nxt

    def __call__(self, idx, axis: int = -1) -> np.ndarray:
        """scipy's vectorised statistic: resampled run indices along ``axis`` -> percentile(s)."""
        idx = np.moveaxis(np.asarray(idx), axis, -1)
        lead = idx.shape[:-1]
        flat = idx.reshape(-1, idx.shape[-1])
        # bound the (rows x S) working arrays to a few tens of MB
        step = max(1, 2_000_000 // max(self.S, self.B))
        out = np.concatenate([self.from_weights(self.weights(flat[i:i + step]))
                              for i in range(0, flat.shape[0], step)]) if flat.shape[0] else np.empty((0, 1))
        res = out.reshape(*lead, self.qs.size)
        return res[..., 0] if self.qs.size == 1 else np.moveaxis(res, -1, 0)


def pooled_percentile_ci(per_run_values: Sequence, q: float | Sequence[float], *, confidence: float = 0.95,
                         n_resamples: int = N_RESAMPLES, seed: int | None = 0,
                         rng: np.random.Generator | None = None, method: str = "BCa"):
    """Percentile of all requests of all runs, with a cluster-bootstrap interval over runs.

    Value: ``np.percentile`` (linear) of the pooled requests.  Interval: resample *runs* with
    replacement (a cluster bootstrap), pool their requests, take the percentile; BCa (jackknife
    over runs), percentile fallback as in :func:`bootstrap_ci`.  Resampling requests instead
    would treat correlated requests as independent and give far too narrow an interval.
    Exact (see :class:`PooledQuantile`): each resample costs O(R·B + S), not O(requests).

    ``q`` a number -> one Estimate; a sequence -> a list of Estimates (the sort is shared, the
    resamples too, as every q is drawn with the same seed).  NaNs are dropped per run; runs
    left with no values are left out (``note`` counts them).  Fewer than 2 runs: NaN bounds (see
    :func:`within_run_percentile` for one run's own interval).
    """
    runs = [np.asarray(r, dtype=np.float64).ravel() for r in per_run_values]
    dropped = sum(int(np.isnan(r).sum()) for r in runs)
    runs = [r[~np.isnan(r)] for r in runs]
    empty = sum(r.size == 0 for r in runs)
    runs = [r for r in runs if r.size]  # a run without values has no latency to pool
    qs = list(np.atleast_1d(np.asarray(q, dtype=np.float64)))
    if rng is not None:  # one draw from the caller's generator, then the same resamples for every q
        seed, rng = int(rng.integers(2**63)), None
    stat = PooledQuantile(runs, qs) if runs else None
    ests = []
    for qi in qs:
        one = _single_q(stat, qi)
        est = bootstrap_ci(one, (np.arange(len(runs)),), confidence=confidence, n_resamples=n_resamples,
                           method=method, seed=seed, rng=rng, drop_nan=False)
        note = _join("cluster bootstrap: runs resampled, their requests pooled", est.note,
                     _dropped_note(dropped, "NaN request value(s)"), _dropped_note(empty, "run(s) without values"))
        ests.append(Estimate(est.value, est.low, est.high, est.n, "cluster " + est.method, note,
                             confidence, dropped))
    return ests if np.ndim(q) else ests[0]


def _single_q(stat: PooledQuantile | None, q: float) -> Callable:
    """A one-percentile view of a shared :class:`PooledQuantile` (scipy wants one output)."""
    if stat is None:
        return lambda idx, axis=-1: np.full(np.shape(idx)[:-1], np.nan)
    view = copy.copy(stat)  # shallow: the sorted values and counts are shared
    view.qs = np.array([q])
    return view


def within_run_percentile(values, q: float, confidence: float = 0.95) -> Estimate:
    """One run's percentile with its distribution-free order-statistic bounds (within run).

    From ``metrics.percentiles``; it ignores run-to-run variation, so it is no substitute for
    an interval across repeats.  ``note`` says whether the sample passes MLPerf's early-stopping
    minimum for this percentile.
    """
    v, dropped = _clean(values)
    lo, hi = order_statistic_ci(v, q, confidence)
    need = early_stopping_min_samples(q) if q < 100 else 1
    note = _join(f"within-run bound; n={v.size} {'>=' if v.size >= need else '<'} {need} needed for p{q:g}",
                 _dropped_note(dropped))
    return Estimate(percentile(v, q), lo, hi, int(v.size), "order-statistic (within run)", note, confidence, dropped)


# ------------------------------------------------------------------------------------ differences
@dataclass(frozen=True)
class Difference:
    """B vs A: ``absolute`` = B - A, ``relative`` = (B - A)/A as mean(B)/mean(A) - 1.

    ``a``, ``b``: each side's mean over the observations used; ``bootstrap``: the bootstrap
    interval of B - A when asked for; ``dropped``: blocks (paired) or values (unpaired) left out.
    """

    absolute: Estimate
    relative: Estimate
    a: Estimate
    b: Estimate
    paired: bool
    dropped: int = 0
    bootstrap: Estimate | None = None
    labels: tuple[str, str] = ("A", "B")
    note: str = ""

    @property
    def method(self) -> str:
        return self.absolute.method

    @property
    def judged(self) -> str:
        """``absolute`` where A's or B's mean is exactly 0 and B - A has an interval, ``relative``
        otherwise.  A relative difference against zero is undefined (an error rate that was 0 is
        judged by how far it moved), and one to zero is -100 % with a zero-width interval when B
        never varies (no error in any run of B: an error rate that fell from 0.005 to 0 is not a
        certain 100 % improvement)."""
        zero = self.a.value == 0 or self.b.value == 0
        has = not math.isnan(self.absolute.low) and not math.isnan(self.absolute.high)
        return "absolute" if zero and has else "relative"

    def to_dict(self) -> dict:
        d = {k: getattr(self, k) for k in ("paired", "dropped", "note", "method", "judged")}
        d["labels"] = list(self.labels)
        for k in ("absolute", "relative", "a", "b", "bootstrap"):
            e = getattr(self, k)
            d[k] = e.to_dict() if e is not None else None
        return d


def _align(a, b) -> tuple[np.ndarray, np.ndarray]:
    """Two block-aligned arrays from sequences (same length) or mappings block -> value."""
    if isinstance(a, Mapping) or isinstance(b, Mapping):
        if not (isinstance(a, Mapping) and isinstance(b, Mapping)):
            raise TypeError("paired_difference: give two sequences or two mappings block -> value")
        keys = list(dict.fromkeys([*a.keys(), *b.keys()]))
        a = [a.get(k, math.nan) for k in keys]
        b = [b.get(k, math.nan) for k in keys]
    aa = np.asarray(a, dtype=np.float64).ravel()
    bb = np.asarray(b, dtype=np.float64).ravel()
    if aa.size != bb.size:
        raise ValueError(f"paired samples differ in length: {aa.size} blocks of A, {bb.size} of B")
    return aa, bb


def _mean_diff(a, b, axis=-1):
    return np.mean(b, axis=axis) - np.mean(a, axis=axis)


def _rel_diff(a, b, axis=-1):
    return np.mean(b, axis=axis) / np.mean(a, axis=axis) - 1.0


def _relative_guard(ma: float, n: int, confidence: float, dropped: int) -> Estimate | None:
    if not ma > 0:
        return _nan_estimate(math.nan, n, "relative", "relative difference needs a positive mean of A",
                             confidence, dropped)
    return None


def paired_difference(a, b, *, confidence: float = 0.95, relative: str = "delta", bootstrap: bool = False,
                      n_resamples: int = N_RESAMPLES, seed: int | None = 0, rng: np.random.Generator | None = None,
                      labels: tuple[str, str] = ("A", "B")) -> Difference:
    """B - A over blocks, paired: block i of A with block i of B.

    ``a``, ``b``: per-block values, two sequences aligned by block (NaN/None where a run is
    missing) or two mappings block -> value.  Blocks where either is missing are dropped and
    counted.  With d_i = b_i - a_i over n blocks:

    - absolute: d̄ ± t(1-α/2, n-1) · s_d/√n  (= ``scipy.stats.ttest_rel(b, a).confidence_interval``);
    - relative, r = b̄/ā - 1 (for positive metrics), ``relative="delta"`` (default): the delta
      method, se(b̄/ā) = s_e/(√n · ā) with e_i = b_i - (b̄/ā)·a_i (ddof=1), t(n-1) quantile,
      never narrower than the absolute interval / ā (s_e can vanish when B is proportional
      to A); unlike a bootstrap it is not too narrow with the 3-10 blocks a protocol runs.
      ``relative="bootstrap"``: paired BCa bootstrap of b̄/ā - 1 over blocks;
    - ``relative="log"``: the per-block ratios r_i = b_i/a_i, their geometric mean minus 1 with
      a t interval on the logs: exp(mean(ln r) ± t(n-1)·s_ln r/√n) - 1.  The paired model for
      effects that multiply: a slow block slows every config by a factor (a busy host, a
      throttled device), which cancels in b_i/a_i but not in b_i - a_i.  Where a block's
      value is not positive (no log), the delta method is used instead, and the method says so;
    - ``bootstrap=True`` adds a paired BCa bootstrap interval of d̄.
    """
    aa, bb = _align(a, b)
    keep = ~(np.isnan(aa) | np.isnan(bb))
    aa, bb = aa[keep], bb[keep]
    dropped, n = int(keep.size - keep.sum()), int(keep.sum())
    note = _dropped_note(dropped, "block(s) with a missing run")
    ea, eb = mean_ci(aa, confidence), mean_ci(bb, confidence)
    if n < 2:
        why = _join(f"{n} complete block(s): need 2", note)
        val = float(bb.mean() - aa.mean()) if n else math.nan
        absolute = _nan_estimate(val, n, "paired student-t", why, confidence, dropped)
        rel = _nan_estimate(float(bb.mean() / aa.mean() - 1) if n and aa.mean() > 0 else math.nan, n,
                            "delta (student-t)", why, confidence, dropped)
        return Difference(absolute, rel, ea, eb, True, dropped, None, labels, why)
    d = bb - aa
    lo, hi = _t_interval(float(d.mean()), float(d.std(ddof=1)) / math.sqrt(n), n - 1, confidence)
    absolute = Estimate(float(d.mean()), float(lo), float(hi), n, "paired student-t", note, confidence, dropped)
    rel = _relative_guard(float(aa.mean()), n, confidence, dropped)
    if rel is None and relative == "bootstrap":
        rel = bootstrap_ci(_rel_diff, (aa, bb), confidence=confidence, n_resamples=n_resamples, paired=True,
                           seed=seed, rng=rng)
        rel = Estimate(rel.value, rel.low, rel.high, n, rel.method, _join(rel.note, note), confidence, dropped)
    elif rel is None and relative == "log" and bool(np.all(aa > 0) and np.all(bb > 0)):
        rel = _paired_log(aa, bb, confidence, note, dropped)
    elif rel is None:
        rel = _paired_delta(aa, bb, confidence, note, dropped)
        if relative == "log":
            rel = Estimate(rel.value, rel.low, rel.high, rel.n, rel.method,
                           _join("a block's value is not positive: no log ratio", rel.note), confidence, dropped)
    boot = None
    if bootstrap:
        boot = bootstrap_ci(_mean_diff, (aa, bb), confidence=confidence, n_resamples=n_resamples, paired=True,
                            seed=seed, rng=rng)
    return Difference(absolute, rel, ea, eb, True, dropped, boot, labels, note)


def _paired_log(aa: np.ndarray, bb: np.ndarray, confidence: float, note: str, dropped: int) -> Estimate:
    """exp(mean(ln(b/a)) ± t(n-1)·s/√n) - 1: the geometric mean of the per-block ratios."""
    e = log_ratio_ci(list(bb / aa), confidence)
    return Estimate(e.value - 1, e.low - 1, e.high - 1, e.n, "paired log ratio (student-t)", note, confidence,
                    dropped)


def log_ratio_ci(ratios, confidence: float = 0.95) -> Estimate:
    """Geometric mean of ``ratios`` with a Student-t interval on their logs:
    exp(mean(ln r) ± t(n-1)·s_ln r/√n).  Ratios that are not positive and finite are dropped
    and counted (an ablation's effects and interactions, a paired comparison's ratios)."""
    r = np.asarray([x for x in ratios if x is not None and math.isfinite(x) and x > 0], dtype=np.float64)
    dropped = len(ratios) - r.size
    if r.size == 0:
        return _nan_estimate(math.nan, 0, "geometric mean, t interval on logs", "no positive ratio", confidence,
                             dropped)
    e = mean_ci(np.log(r), confidence)
    return Estimate(math.exp(e.value), math.exp(e.low), math.exp(e.high), e.n, "geometric mean, t interval on logs",
                    e.note, confidence, dropped)


def _paired_delta(aa: np.ndarray, bb: np.ndarray, confidence: float, note: str, dropped: int) -> Estimate:
    """r = b̄/ā; se(r) = max(s_e, s_d)/(√n ā), e_i = b_i - r·a_i, d_i = b_i - a_i; (r - 1) ± t(n-1)·se.

    The delta method alone (s_e) collapses to a zero-width interval when B is proportional to A
    block by block (e.g. (1.4, 3.0), (0, 0), (0, 0)): three blocks cannot show that.  Never
    narrower than the absolute interval over ā keeps the interval honest there.
    """
    n = aa.size
    ma, r = aa.mean(), bb.mean() / aa.mean()
    s = max(float((bb - r * aa).std(ddof=1)), float((bb - aa).std(ddof=1)))
    se = s / (math.sqrt(n) * ma)
    lo, hi = _t_interval(float(r - 1), se, n - 1, confidence)
    return Estimate(float(r - 1), float(lo), float(hi), n, "delta (student-t)", note, confidence, dropped)


def _welch(va_n: float, vb_n: float, na: int, nb: int) -> float:
    """Welch–Satterthwaite dof: (c_a + c_b)² / (c_a²/(n_a-1) + c_b²/(n_b-1)), c = s²/n."""
    den = va_n ** 2 / (na - 1) + vb_n ** 2 / (nb - 1)
    return (va_n + vb_n) ** 2 / den if den > 0 else math.inf


def unpaired_difference(a, b, *, confidence: float = 0.95, relative: str = "delta", bootstrap: bool = False,
                        n_resamples: int = N_RESAMPLES, seed: int | None = 0, rng: np.random.Generator | None = None,
                        labels: tuple[str, str] = ("A", "B")) -> Difference:
    """B - A for runs made separately (not in blocks): Welch's interval.

    b̄ - ā ± t(1-α/2, ν) · √(s_a²/n_a + s_b²/n_b), ν by Welch–Satterthwaite
    (= ``scipy.stats.ttest_ind(b, a, equal_var=False).confidence_interval``).  Relative
    r = b̄/ā - 1: ``"delta"`` gives se = √(s_b²/n_b + r̃²·s_a²/n_a)/ā with r̃ = b̄/ā and
    Welch–Satterthwaite dof on those two terms; ``"bootstrap"`` resamples A and B
    independently (BCa).  ``bootstrap=True`` adds the unpaired bootstrap interval of b̄ - ā.
    NaNs are dropped per side.
    """
    aa, da = _clean(a)
    bb, db = _clean(b)
    dropped, na, nb = da + db, aa.size, bb.size
    note = _dropped_note(dropped)
    ea, eb = mean_ci(aa, confidence), mean_ci(bb, confidence)
    method = "unpaired (Welch)"
    if na < 2 or nb < 2:
        why = _join(f"n_a={na}, n_b={nb}: need 2 each", note)
        val = float(bb.mean() - aa.mean()) if na and nb else math.nan
        relv = float(bb.mean() / aa.mean() - 1) if na and nb and aa.mean() > 0 else math.nan
        return Difference(_nan_estimate(val, na + nb, method, why, confidence, dropped),
                          _nan_estimate(relv, na + nb, "delta (Welch)", why, confidence, dropped),
                          ea, eb, False, dropped, None, labels, why)
    ca, cb = aa.var(ddof=1) / na, bb.var(ddof=1) / nb
    diff = float(bb.mean() - aa.mean())
    lo, hi = _t_interval(diff, math.sqrt(ca + cb), _welch(ca, cb, na, nb), confidence)
    absolute = Estimate(diff, float(lo), float(hi), na + nb, method, note, confidence, dropped)
    rel = _relative_guard(float(aa.mean()), na + nb, confidence, dropped)
    if rel is None and relative == "bootstrap":
        rel = bootstrap_ci(_rel_diff, (aa, bb), confidence=confidence, n_resamples=n_resamples, paired=False,
                           seed=seed, rng=rng)
        rel = Estimate(rel.value, rel.low, rel.high, rel.n, "unpaired " + rel.method, rel.note, confidence,
                       dropped)
    elif rel is None:
        ma, r = aa.mean(), bb.mean() / aa.mean()
        c1, c2 = cb / ma ** 2, r ** 2 * ca / ma ** 2
        lo, hi = _t_interval(float(r - 1), math.sqrt(c1 + c2), _welch(c2, c1, na, nb), confidence)
        rel = Estimate(float(r - 1), float(lo), float(hi), na + nb, "delta (Welch)", note, confidence, dropped)
    boot = None
    if bootstrap:
        boot = bootstrap_ci(_mean_diff, (aa, bb), confidence=confidence, n_resamples=n_resamples, paired=False,
                            seed=seed, rng=rng)
        boot = Estimate(boot.value, boot.low, boot.high, boot.n, "unpaired " + boot.method, boot.note,
                        confidence, dropped)
    return Difference(absolute, rel, ea, eb, False, dropped, boot, labels, note)


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
    note = _dropped_note(dropped, "replicate(s) with a missing value")
    n = na if paired else na + nb

    def side(r: float, u: np.ndarray) -> Estimate:
        if u.size < 2:
            return _nan_estimate(r, u.size, method, "", confidence)
        lo, hi = _t_interval(math.log(r), float(u.std(ddof=1)) / math.sqrt(u.size), u.size - 1, confidence)
        return Estimate(r, math.exp(lo), math.exp(hi), int(u.size), method, "", confidence)

    ea, eb = side(ra, ua), side(rb, ub)
    val_abs = rb - ra if math.isfinite(ra) and math.isfinite(rb) else (math.inf if rb == math.inf else math.nan)
    val_rel = rb / ra - 1 if math.isfinite(ra) and ra > 0 and not math.isnan(rb) else math.nan
    nothing = _bought_nothing(num_a, den_a, num_b, den_b, labels)
    if nothing is not None:  # one side paid for no good token in any replicate, the other for some in each
        val_rel, why = nothing
        val_abs = -math.inf if val_rel < 0 else math.inf
        return Difference(_nan_estimate(val_abs, n, method, why, confidence, dropped),
                          Estimate(val_rel, val_rel, val_rel, n, method, _join(why, note), confidence, dropped),
                          ea, eb, paired, dropped, None, labels, _join(why, note))
    why = ""
    if not math.isfinite(rb) or not math.isfinite(ra):
        empty = [lab for lab, r in zip(labels, (ra, rb)) if not math.isfinite(r)]
        why = f"{' and '.join(empty)}: the denominators sum to 0 (infinite or undefined ratio)"
    elif ra <= 0 or rb <= 0:
        why = "a ratio of 0: no log ratio"
    elif ua.size < 2 or ub.size < 2 or (paired and ua.size != ub.size):
        why = f"n_a={ua.size}, n_b={ub.size}: need 2 each"
    if why:
        why = _join(why, note)
        return Difference(_nan_estimate(val_abs, n, method, why, confidence, dropped),
                          _nan_estimate(val_rel, n, method, why, confidence, dropped),
                          ea, eb, paired, dropped, None, labels, why)
    if paired:
        z = ub - ua
        se, dof = float(z.std(ddof=1)) / math.sqrt(z.size), z.size - 1
        # u·R is a replicate's influence on R itself: the absolute difference's
        se_abs, dof_abs = float((ub * rb - ua * ra).std(ddof=1)) / math.sqrt(z.size), dof
    else:
        ca, cb = ua.var(ddof=1) / ua.size, ub.var(ddof=1) / ub.size
        se, dof = math.sqrt(ca + cb), _welch(ca, cb, ua.size, ub.size)
        aa, ab = ca * ra ** 2, cb * rb ** 2
        se_abs, dof_abs = math.sqrt(aa + ab), _welch(aa, ab, ua.size, ub.size)
    lr = math.log(rb / ra)
    lo, hi = _t_interval(lr, se, dof, confidence)
    rel = Estimate(rb / ra - 1, math.exp(lo) - 1, math.exp(hi) - 1, n, method, note, confidence, dropped)
    lo, hi = _t_interval(rb - ra, se_abs, dof_abs, confidence)
    absolute = Estimate(rb - ra, float(lo), float(hi), n, method, note, confidence, dropped)
    return Difference(absolute, rel, ea, eb, paired, dropped, None, labels, note)


# ------------------------------------------------------------------------------------ verdict
OUTCOMES = ("a_better", "b_better", "equivalent", "no_significant_difference", "insufficient_data")


@dataclass(frozen=True)
class Verdict:
    """``outcome``: one of :data:`OUTCOMES`; ``text`` for people; ``significant``: the interval
    excludes zero (true also for an effect too small to win); ``judged``: ``relative`` (the
    interval of (B - A)/A against ``margin``) or ``absolute`` (a side's mean was 0: B - A against
    ``margin``, in the metric's unit)."""

    outcome: str
    text: str
    relative: Estimate
    margin: float
    higher_is_better: bool
    significant: bool = False
    confidence: float = 0.95
    judged: str = "relative"

    def to_dict(self) -> dict:
        d = asdict(self)
        d["relative"] = self.relative.to_dict()
        return d


def verdict(diff: Difference | Estimate, margin: float = 0.02, higher_is_better: bool = True,
            confidence: float = 0.95, labels: tuple[str, str] | None = None,
            absolute_margin: float | None = None) -> Verdict:
    """Who wins, from the relative difference r = (B - A)/A and its interval [lo, hi].

    - winner when the interval excludes 0 (lo > 0 or hi < 0) AND |r| > ``margin``: B when r > 0
      and higher is better (throughput, goodput) or r < 0 and lower is better (latency, cost);
    - ``equivalent`` when -margin <= lo and hi <= margin (a significant effect smaller than the
      margin lands here or in the next case, never as a winner);
    - ``no_significant_difference`` otherwise (``significant`` tells an interval that excludes
      0 but is not inside the margin);
    - ``insufficient_data`` when the interval is missing (fewer than 2 blocks, undefined ratio).

    Where A's or B's mean is 0 (``Difference.judged == "absolute"``: an error rate that was 0) the
    relative difference is undefined; the same rules then apply to the absolute difference
    B - A and its interval, with ``absolute_margin`` (in the metric's unit; default ``margin``:
    for a rate, 0.02 = 2 percentage points).

    ``confidence`` must be the interval's own level: a verdict cannot change it.
    """
    absolute = isinstance(diff, Difference) and diff.judged == "absolute"
    rel = diff.absolute if absolute else (diff.relative if isinstance(diff, Difference) else diff)
    if absolute:
        margin = margin if absolute_margin is None else absolute_margin
    if labels is None:
        labels = diff.labels if isinstance(diff, Difference) else ("A", "B")
    if not math.isclose(rel.confidence, confidence):
        raise ValueError(f"the interval is at {rel.confidence:.0%}, the verdict asked for {confidence:.0%}")
    la, lb = labels
    v, lo, hi = rel.value, rel.low, rel.high
    conf = f"{confidence:.0%}" if round(confidence * 100, 6).is_integer() else f"{confidence:.2%}"  # 99.55%
    judged = "absolute" if absolute else "relative"

    def make(outcome: str, text: str, significant: bool = False) -> Verdict:
        return Verdict(outcome, text, rel, margin, higher_is_better, significant, confidence, judged)

    if rel.n < 2 or any(math.isnan(x) for x in (v, lo, hi)):
        return make("insufficient_data", f"insufficient data to compare {lb} with {la} ({rel.note or 'no interval'})")
    if absolute:
        detail = (f"{lb} - {la} = {v:+.4g} [{lo:+.4g}, {hi:+.4g}] at {conf}, n={rel.n} (a mean of 0: the absolute "
                  f"difference is judged); margin ±{margin:.4g}; {'higher' if higher_is_better else 'lower'} is better")
    else:
        detail = (f"({lb} - {la})/{la} = {v:+.1%} [{lo:+.1%}, {hi:+.1%}] at {conf}, n={rel.n}; "
                  f"margin ±{margin:.1%}; {'higher' if higher_is_better else 'lower'} is better")
    significant = lo > 0 or hi < 0
    if significant and abs(v) > margin:
        b_wins = (v > 0) == higher_is_better
        winner, loser = (lb, la) if b_wins else (la, lb)
        # the improvement in the winner's favour, as a magnitude and its interval
        mlo, mhi = (lo, hi) if v > 0 else (-hi, -lo)
        size = f"{abs(v):.4g} [{mlo:.4g}, {mhi:.4g}]" if absolute else f"{abs(v):.1%} [{mlo:.1%}, {mhi:.1%}]"
        return make("b_better" if b_wins else "a_better", f"{winner} better than {loser} by {size} ({detail})", True)
    if lo >= -margin and hi <= margin:
        within = f"{margin:.4g}" if absolute else f"{margin:.0%}"
        return make("equivalent", f"{la} and {lb} equivalent within {within} ({detail})", significant)
    if significant:
        text = (f"no practically significant difference: significant at {conf} "
                f"but the effect is below the margin ({detail})")
    else:
        text = f"no significant difference at {conf} ({detail})"
    return make("no_significant_difference", text, significant)


# ------------------------------------------------------------------------------------ convergence
def converged(estimates: Mapping[str, Estimate], target_rel_halfwidth: float) -> tuple[bool, list[tuple[str, float]]]:
    """Whether every estimate's rel_half_width (half-width / |value|) is at most the target.

    Returns (all converged, [(metric, rel_half_width), ...] for those not yet); a NaN width
    (fewer than 2 repeats) is not converged.  No estimates: (True, []).  Drives "add blocks
    until every named metric converged or ``protocol.max_repeats`` is reached".
    """
    pending = [(name, e.rel_half_width) for name, e in estimates.items()
               if not e.rel_half_width <= target_rel_halfwidth]
    return (not pending, pending)


# ------------------------------------------------------------------------------------ many runs
def _columns(runs) -> dict:
    """A pyarrow Table or a dict of columns -> dict name -> column (list or array)."""
    if hasattr(runs, "column_names"):
        return {name: runs.column(name) for name in runs.column_names}
    return dict(runs)


def _as_float(col) -> np.ndarray:
    if hasattr(col, "to_numpy"):  # pyarrow: nulls become NaN
        col = col.to_numpy(zero_copy_only=False)
    return np.asarray([math.nan if x is None else x for x in col] if isinstance(col, list) else col,
                      dtype=np.float64)


def _as_list(col) -> list:
    return col.to_pylist() if hasattr(col, "to_pylist") else list(col)


def _groups(cols: dict, group_by: Sequence[str], n_rows: int) -> dict[tuple, np.ndarray]:
    """Group key (tuple of the group_by values) -> row indices, in order of first appearance."""
    keys = list(zip(*[_as_list(cols[g]) for g in group_by])) if group_by else [()] * n_rows
    out: dict[tuple, list] = {}
    for i, k in enumerate(keys):
        out.setdefault(tuple(k), []).append(i)
    return {k: np.asarray(v, dtype=np.intp) for k, v in out.items()}


def aggregate_runs(runs, metrics: Sequence[str] = (), group_by: Sequence[str] = ("config", "load_point"), *,
                   ratios: Mapping[str, tuple] | None = None, confidence: float = 0.95,
                   n_resamples: int = N_RESAMPLES, seed: int | None = 0) -> dict[tuple, dict[str, Estimate]]:
    """Per group and metric, the estimate across the group's runs (one row a run).

    ``runs``: a pyarrow Table (e.g. ``runs.parquet``) or a dict of equal-length columns.
    ``metrics``: columns averaged per run -> :func:`mean_ci`.  ``ratios``: name ->
    (numerator column, denominator column[, scale]) -> :func:`ratio_ci` of the totals, e.g.
    ``{"cost_per_mtok_good": ("cost_total", "good_output_tokens", 1e6)}``; a name in both
    ``metrics`` and ``ratios`` is computed as the ratio.  Returns {group key tuple: {name:
    Estimate}}, groups in order of first appearance; ``group_by=()`` gives one group ``()``.
    """
    cols = _columns(runs)
    ratios = dict(ratios or {})
    needed = list(group_by) + [m for m in metrics if m not in ratios] + [c for r in ratios.values() for c in r[:2]]
    missing = [c for c in needed if c not in cols]
    if missing:
        raise KeyError(f"aggregate_runs: no column(s) {missing}; have {sorted(cols)}")
    n_rows = len(next(iter(cols.values()))) if cols else 0
    floats = {c: _as_float(cols[c]) for c in dict.fromkeys(needed[len(group_by):])}
    out: dict[tuple, dict[str, Estimate]] = {}
    for key, rows in _groups(cols, group_by, n_rows).items():
        res: dict[str, Estimate] = {}
        for m in metrics:
            if m not in ratios:
                res[m] = mean_ci(floats[m][rows], confidence)
        for name, spec in ratios.items():
            num, den, scale = (*spec, 1.0)[:3]
            res[name] = ratio_ci(floats[num][rows], floats[den][rows], scale=scale, confidence=confidence,
                                 n_resamples=n_resamples, seed=seed)
        out[key] = res
    return out


__all__ = ["N_RESAMPLES", "OUTCOMES", "Difference", "Estimate", "PooledQuantile", "Verdict", "aggregate_runs",
           "bootstrap_ci", "converged", "mean_ci", "paired_difference", "pooled_percentile_ci", "ratio_ci",
           "unpaired_difference", "verdict", "within_run_percentile"]
