"""One distribution's summary in ``workload.json``: count, mean, population std (ddof 0), min,
p50/p90/p99 (numpy's linear interpolation), max and total."""

from __future__ import annotations

import numpy as np


def distribution(x: np.ndarray) -> dict:
    x = np.asarray(x, dtype=np.float64)
    if x.size == 0:
        return {"n": 0}
    q = np.percentile(x, [50, 90, 99])
    return {"n": int(x.size), "mean": float(x.mean()), "std": float(x.std()), "min": float(x.min()),
            "p50": float(q[0]), "p90": float(q[1]), "p99": float(q[2]), "max": float(x.max()),
            "total": float(x.sum())}
