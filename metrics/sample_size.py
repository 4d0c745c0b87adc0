"""How many replicates or requests a verdict needs to find a difference of a given size.

- ``welch_power``: the chance that an unpaired (Welch) t interval at ``confidence`` excludes
  zero when the true difference of the means is ``delta``, with ``n`` replicates a side whose
  spreads (standard deviations) are ``sd_a`` and ``sd_b``: the noncentral t with Welch's degrees
  of freedom, ncp = delta / sqrt(sd_a²/n + sd_b²/n) (two-sided; the far tail left out).
- ``replicates_for_power``: the fewest replicates a side (>= 2) whose ``welch_power`` reaches
  ``power`` (80 % by default): the repeats or launches a comparison or gate needs to find a 10 %
  latency regression, from the spread it observed.
- ``requests_for_rate_rise``: the requests a side a two-proportion test (pooled variance under
  the null, Fleiss, no continuity correction) needs to find a rate rising from ``p0`` to ``p1``:
  n = (z_a·sqrt(2·p̄·(1-p̄)) + z_b·sqrt(p0(1-p0) + p1(1-p1)))² / (p1 - p0)², p̄ = (p0 + p1)/2,
  z_a at 1 - (1 - confidence)/2 and z_b at ``power``.  0 -> 5 % at 95 %: 152 a side.
- ``paired_t_power``: the chance that a paired t interval at ``confidence`` over ``n`` blocks
  excludes zero when the per-block differences (a comparison's log ratios B/A) have mean
  ``delta`` and spread ``sd``: the noncentral t with n - 1 degrees of freedom,
  ncp = delta / (sd/sqrt(n)) (two-sided; the far tail left out).  The t interval of a
  comparison's paired blocks (``metrics.statistics.paired_difference``) at its adjusted level.
- ``blocks_for_power``: the fewest blocks (>= 2) whose ``paired_t_power`` reaches ``power``.
- ``detectable_difference``: the smallest ``delta`` that ``n`` blocks find with ``power``
  (``paired_t_power`` rises with delta: the root of power(delta) = ``power``).  Of a log ratio,
  exp(delta) - 1 is the relative difference.
- ``welch_detectable``: the same for runs made separately, ``welch_power`` with ``n`` a side.

These are sample sizes for the interval excluding zero; a verdict that also asks the effect to
be beyond a margin needs a little more where the effect is near the margin.
"""

from __future__ import annotations

import math

from scipy.optimize import brentq
from scipy.stats import nct, norm
from scipy.stats import t as student


def welch_power(delta: float, sd_a: float, sd_b: float, n: int, confidence: float = 0.95) -> float:
    """The power of a two-sided Welch interval at ``confidence`` with ``n`` replicates a side."""
    if n < 2:
        return 0.0
    va, vb = sd_a ** 2 / n, sd_b ** 2 / n
    se = math.sqrt(va + vb)
    if se == 0:
        return 1.0 if delta else 0.0
    df = (va + vb) ** 2 / ((va ** 2 + vb ** 2) / (n - 1))
    crit = float(student.ppf(1 - (1 - confidence) / 2, df))
    return float(nct.sf(crit, df, abs(delta) / se))


def replicates_for_power(delta: float, sd_a: float, sd_b: float, confidence: float = 0.95,
                         power: float = 0.8, max_n: int = 10_000) -> int | None:
    """The fewest replicates a side (>= 2) with ``welch_power`` >= ``power``; None beyond ``max_n``
    (or for no difference)."""
    if not delta or not all(math.isfinite(x) for x in (delta, sd_a, sd_b)):
        return None
    lo, hi = 2, 2
    while welch_power(delta, sd_a, sd_b, hi, confidence) < power:
        if hi >= max_n:
            return None
        lo, hi = hi, min(hi * 2, max_n)
    while lo < hi:  # power rises with n: the first n that reaches it
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if welch_power(delta, sd_a, sd_b, mid, confidence) < power else (lo, mid)
    return hi


def requests_for_rate_rise(p0: float, p1: float, confidence: float = 0.95, power: float = 0.8) -> int:
    """The requests a side a two-proportion test needs to find a rate going from ``p0`` to ``p1``."""
    if not (0 <= p0 <= 1 and 0 <= p1 <= 1) or p0 == p1:
        raise ValueError(f"the rates must differ, each in [0, 1]: got {p0} and {p1}")
    za = float(norm.ppf(1 - (1 - confidence) / 2))
    zb = float(norm.ppf(power))
    bar = (p0 + p1) / 2
    root = za * math.sqrt(2 * bar * (1 - bar)) + zb * math.sqrt(p0 * (1 - p0) + p1 * (1 - p1))
    return math.ceil((root / (p1 - p0)) ** 2)


def paired_t_power(delta: float, sd: float, n: int, confidence: float = 0.95) -> float:
    """The power of a two-sided paired t interval at ``confidence`` over ``n`` blocks."""
    if n < 2 or not math.isfinite(sd) or not math.isfinite(delta):
        return 0.0
    if sd == 0:
        return 1.0 if delta else 0.0
    crit = float(student.ppf(1 - (1 - confidence) / 2, n - 1))
    return float(nct.sf(crit, n - 1, abs(delta) * math.sqrt(n) / sd))


def blocks_for_power(delta: float, sd: float, confidence: float = 0.95, power: float = 0.8,
                     max_n: int = 10_000) -> int | None:
    """The fewest blocks (>= 2) with ``paired_t_power`` >= ``power``; None beyond ``max_n`` (or
    for no difference, or a spread that is not finite)."""
    if not delta or not (math.isfinite(delta) and math.isfinite(sd)):
        return None
    lo, hi = 2, 2
    while paired_t_power(delta, sd, hi, confidence) < power:
        if hi >= max_n:
            return None
        lo, hi = hi, min(hi * 2, max_n)
    while lo < hi:  # power rises with n: the first n that reaches it
        mid = (lo + hi) // 2
        lo, hi = (mid + 1, hi) if paired_t_power(delta, sd, mid, confidence) < power else (lo, mid)
    return hi


def detectable_difference(sd: float, n: int, confidence: float = 0.95, power: float = 0.8) -> float | None:
    """The smallest difference (>= 0) that ``n`` blocks of spread ``sd`` find with ``power``:
    0 for no spread; None for fewer than 2 blocks or a spread that is not finite."""
    if n < 2 or not math.isfinite(sd) or sd < 0:
        return None
    return _smallest(lambda d: paired_t_power(d, sd, n, confidence), sd / math.sqrt(n), power)


def welch_detectable(sd_a: float, sd_b: float, n: int, confidence: float = 0.95, power: float = 0.8) -> float | None:
    """The smallest difference (>= 0) that ``n`` replicates a side of spreads ``sd_a`` and ``sd_b``
    find with ``power`` (``welch_power``); as ``detectable_difference`` at its edges."""
    if n < 2 or not (math.isfinite(sd_a) and math.isfinite(sd_b)) or min(sd_a, sd_b) < 0:
        return None
    return _smallest(lambda d: welch_power(d, sd_a, sd_b, n, confidence), math.hypot(sd_a, sd_b) / math.sqrt(n),
                     power)


def _smallest(power_of, se: float, power: float) -> float:
    """The root of power_of(delta) = ``power`` (power rises with delta; 0 where ``se`` is 0)."""
    if se == 0:
        return 0.0
    hi = se
    while power_of(hi) < power:  # bracket the root: power -> 1 as delta grows
        hi *= 2
    return float(brentq(lambda d: power_of(d) - power, 0.0, hi, xtol=1e-12 * hi))
