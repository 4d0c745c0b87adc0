"""Arrival processes for open-loop load: offsets (seconds from the start) of each request.

``poisson``: exponential gaps at ``rate``; ``constant``: gaps of exactly 1/rate; ``gamma``:
gamma gaps with shape ``burstiness`` and mean 1/rate (burstiness 1 is Poisson, < 1 burstier,
> 1 smoother), as vLLM's benchmark defines it.
"""

from __future__ import annotations

import numpy as np

OPEN_LOOP = ("poisson", "constant", "gamma")


def arrival_offsets(kind: str, rate: float, n: int, burstiness: float = 1.0, seed: int = 0) -> np.ndarray:
    if rate is None or rate <= 0 or not np.isfinite(rate):
        raise ValueError(f"load.rate must be a positive number of requests/s for load={kind}, got {rate}")
    rng = np.random.default_rng(seed)
    mean_gap = 1.0 / rate
    if kind == "poisson":
        gaps = rng.exponential(mean_gap, size=n)
    elif kind == "constant":
        gaps = np.full(n, mean_gap)
    elif kind == "gamma":
        if burstiness <= 0:
            raise ValueError(f"load.burstiness must be > 0, got {burstiness}")
        gaps = rng.gamma(burstiness, mean_gap / burstiness, size=n)
    else:
        raise ValueError(f"load: unknown arrival process {kind!r} (expected one of {OPEN_LOOP} or concurrency)")
    gaps[0] = 0.0  # the first request goes at the start
    return np.cumsum(gaps)
