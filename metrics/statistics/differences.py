"""B vs A: paired over blocks (t interval, delta method, log ratio) or runs made separately
(Welch's interval), as a :class:`Difference`."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from metrics.statistics.bootstrap import N_RESAMPLES, bootstrap_ci
from metrics.statistics.estimate import (
    Estimate,
    clean,
    dropped_note,
    join_notes,
    log_ratio_ci,
    mean_ci,
    nan_estimate,
    t_interval,
)


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
        return nan_estimate(math.nan, n, "relative", "relative difference needs a positive mean of A",
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
    note = dropped_note(dropped, "block(s) with a missing run")
    ea, eb = mean_ci(aa, confidence), mean_ci(bb, confidence)
    if n < 2:
        why = join_notes(f"{n} complete block(s): need 2", note)
        val = float(bb.mean() - aa.mean()) if n else math.nan
        absolute = nan_estimate(val, n, "paired student-t", why, confidence, dropped)
        rel = nan_estimate(float(bb.mean() / aa.mean() - 1) if n and aa.mean() > 0 else math.nan, n,
                            "delta (student-t)", why, confidence, dropped)
        return Difference(absolute, rel, ea, eb, True, dropped, None, labels, why)
    d = bb - aa
    lo, hi = t_interval(float(d.mean()), float(d.std(ddof=1)) / math.sqrt(n), n - 1, confidence)
    absolute = Estimate(float(d.mean()), float(lo), float(hi), n, "paired student-t", note, confidence, dropped)
    rel = _relative_guard(float(aa.mean()), n, confidence, dropped)
    if rel is None and relative == "bootstrap":
        rel = bootstrap_ci(_rel_diff, (aa, bb), confidence=confidence, n_resamples=n_resamples, paired=True,
                           seed=seed, rng=rng)
        rel = Estimate(rel.value, rel.low, rel.high, n, rel.method, join_notes(rel.note, note), confidence, dropped)
    elif rel is None and relative == "log" and bool(np.all(aa > 0) and np.all(bb > 0)):
        rel = _paired_log(aa, bb, confidence, note, dropped)
    elif rel is None:
        rel = _paired_delta(aa, bb, confidence, note, dropped)
        if relative == "log":
            rel = Estimate(rel.value, rel.low, rel.high, rel.n, rel.method,
                           join_notes("a block's value is not positive: no log ratio", rel.note), confidence, dropped)
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
    lo, hi = t_interval(float(r - 1), se, n - 1, confidence)
    return Estimate(float(r - 1), float(lo), float(hi), n, "delta (student-t)", note, confidence, dropped)


def welch_dof(va_n: float, vb_n: float, na: int, nb: int) -> float:
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
    aa, da = clean(a)
    bb, db = clean(b)
    dropped, na, nb = da + db, aa.size, bb.size
    note = dropped_note(dropped)
    ea, eb = mean_ci(aa, confidence), mean_ci(bb, confidence)
    method = "unpaired (Welch)"
    if na < 2 or nb < 2:
        why = join_notes(f"n_a={na}, n_b={nb}: need 2 each", note)
        val = float(bb.mean() - aa.mean()) if na and nb else math.nan
        relv = float(bb.mean() / aa.mean() - 1) if na and nb and aa.mean() > 0 else math.nan
        return Difference(nan_estimate(val, na + nb, method, why, confidence, dropped),
                          nan_estimate(relv, na + nb, "delta (Welch)", why, confidence, dropped),
                          ea, eb, False, dropped, None, labels, why)
    ca, cb = aa.var(ddof=1) / na, bb.var(ddof=1) / nb
    diff = float(bb.mean() - aa.mean())
    lo, hi = t_interval(diff, math.sqrt(ca + cb), welch_dof(ca, cb, na, nb), confidence)
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
        lo, hi = t_interval(float(r - 1), math.sqrt(c1 + c2), welch_dof(c2, c1, na, nb), confidence)
        rel = Estimate(float(r - 1), float(lo), float(hi), na + nb, "delta (Welch)", note, confidence, dropped)
    boot = None
    if bootstrap:
        boot = bootstrap_ci(_mean_diff, (aa, bb), confidence=confidence, n_resamples=n_resamples, paired=False,
                            seed=seed, rng=rng)
        boot = Estimate(boot.value, boot.low, boot.high, boot.n, "unpaired " + boot.method, boot.note,
                        confidence, dropped)
    return Difference(absolute, rel, ea, eb, False, dropped, boot, labels, note)
