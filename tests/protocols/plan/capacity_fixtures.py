"""Hand-built capacities for the plan's tests: operating points whose requests all have the
same TTFT and TPOT, so what the simulation does can be computed by hand."""

from __future__ import annotations

import numpy as np

from protocols.plan.capacity import ConfigCapacity, OperatingPoint

COST = {"model": "rental", "currency": "USD", "num_gpus": 0, "hourly_per_gpu": 0.0, "num_hosts": 1,
        "hourly_per_host": 3.6, "extra_hourly": {}}   # 0.001 per replica-second


def point(rate, in_flight, ttft, tpot, block=0, n=40, prompt=100, failed=0) -> OperatingPoint:
    return OperatingPoint(rate_rps=rate, in_flight=in_flight, prompt_tokens=np.full(n, prompt),
                          ttft_s=np.full(n, float(ttft)), tpot_s=np.full(n, float(tpot)),
                          output_tokens=np.full(n, 11), failed=failed, block=block)


def capacity(name="c", sizes=(1,), blocks=(0, 1, 2), scale=1.0, cold=10.0) -> ConfigCapacity:
    """Per replica, three points consistent with Little's law (in flight = rate x (TTFT + 10 TPOT)):
    fast at 1 and 4 req/s, slow at 8 (its TTFT of 1.5 s misses a 1 s SLO)."""
    pts = {}
    for s in sizes:
        pts[s] = [p for b in blocks for p in (
            point(1.0, 0.2, 0.1 * scale * (1 + 0.05 * b), 0.01, b),
            point(4.0, 1.6, 0.2 * scale * (1 + 0.05 * b), 0.02, b),
            point(8.0, 16.0, 1.5 * scale, 0.05, b))]
    return ConfigCapacity(name=name, source="measured", origin="test", points=pts,
                          cold_start_s=[cold] * len(blocks), cost=dict(COST))
