"""Percentiles across runs: pooled over every run's requests with a cluster bootstrap over runs
(exact, :class:`PooledQuantile`), and one run's own order-statistic bounds."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Sequence

import numpy as np

from metrics.percentiles import early_stopping_min_samples, order_statistic_ci, percentile
from metrics.statistics.bootstrap import N_RESAMPLES, bootstrap_ci
from metrics.statistics.estimate import Estimate, clean, dropped_note, join_notes


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
        note = join_notes("cluster bootstrap: runs resampled, their requests pooled", est.note,
                     dropped_note(dropped, "NaN request value(s)"), dropped_note(empty, "run(s) without values"))
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
    v, dropped = clean(values)
    lo, hi = order_statistic_ci(v, q, confidence)
    need = early_stopping_min_samples(q) if q < 100 else 1
    note = join_notes(f"within-run bound; n={v.size} {'>=' if v.size >= need else '<'} {need} needed for p{q:g}",
                 dropped_note(dropped))
    return Estimate(percentile(v, q), lo, hi, int(v.size), "order-statistic (within run)", note, confidence, dropped)
