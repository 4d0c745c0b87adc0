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

These are sample sizes for the interval excluding zero; a verdict that also asks the effect to
be beyond a margin needs a little more where the effect is near the margin.
"""

from __future__ import annotations

import math

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
