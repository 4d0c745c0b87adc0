"""A cheap replica with memory for the stretch sampling's tests and benchmark: ``slots`` requests
served at once, first come first served, each holding its slot for its prefill (20 ms + 0.02 ms a
prompt token) and its decode (5 ms a further output token); TTFT = its wait for a slot + its
prefill, TPOT 5 ms.  Past its capacity a backlog builds for as long as the arrivals exceed it,
over hours on a diurnal day: the case a lead-in of minutes cannot reconstruct."""

from __future__ import annotations

import heapq

import numpy as np

from conf.schema import DIURNAL_CURVE

TPOT_S = 0.005
PROMPTS = (100, 2001)            # prompt tokens drawn uniformly in [lo, hi)
OUTPUTS = (10, 501)


def mean_service_s() -> float:
    """A request's mean time in its slot: prefill at the mean prompt + decode at the mean output."""
    return 0.020 + 2e-5 * (sum(PROMPTS) - 1) / 2 + TPOT_S * ((sum(OUTPUTS) - 1) / 2 - 1)


def capacity_rps(slots: int) -> float:
    return slots / mean_service_s()


def replay(slots: int):
    """A replay function (list of streams -> list of (TTFT, TPOT)) of a ``slots``-slot replica."""
    def run(streams):
        out = []
        for arr, prompt, outputs in (s[:3] for s in streams):
            arr = np.asarray(arr, dtype=np.float64)
            pre = 0.020 + 2e-5 * np.asarray(prompt, dtype=np.float64)
            hold = pre + TPOT_S * np.maximum(np.asarray(outputs) - 1, 0)
            free = [0.0] * slots
            ttft = np.empty(arr.size)
            for i in range(arr.size):
                start = max(heapq.heappop(free), arr[i])
                ttft[i] = start - arr[i] + pre[i]
                heapq.heappush(free, start + hold[i])
            out.append((ttft, np.full(arr.size, TPOT_S)))
        return out
    return run


def diurnal_day(peak_over_capacity: float, slots: int = 4, hours: float = 24.0, seed: int = 0):
    """(arrival s, prompt tokens, output tokens) of a Poisson day whose rate follows
    ``DIURNAL_CURVE`` (peak/trough 4) and peaks at ``peak_over_capacity`` x the replica's capacity."""
    rng = np.random.default_rng(seed)
    curve = np.asarray(DIURNAL_CURVE, dtype=np.float64)
    span = hours * 3600.0
    rate = curve / curve.max() * peak_over_capacity * capacity_rps(slots)
    edges = np.linspace(0.0, span, curve.size + 1)
    cum = np.concatenate([[0.0], np.cumsum(rate * np.diff(edges))])
    n = int(cum[-1])
    arr = np.interp(np.cumsum(rng.exponential(cum[-1] / n, n)), cum, edges, right=span)
    return arr, rng.integers(*PROMPTS, n), rng.integers(*OUTPUTS, n)
