"""Another draw of the plan's day: the traffic's requests resampled in blocks within stretches of
the window, so that a day like the given one, not the given one itself, is simulated.

The plan simulates one day (``protocols.plan.traffic``): whether a config meets the SLO over it is
one draw of the day's arrivals and of the simulation's own draws (each request's work).  Near a
config's knee that draw decides the run-level SLO check: a 120 s day of Poisson arrivals carries
its rate to a few per cent, and a queue a few per cent past the capacity grows all day.  The block
resamples of the capacity (``protocols.plan.capacity.resamples``) keep the day as it is, so a miss
that comes from the day is in every one of them alike; the chance that the pick is wrong
(``metrics.plan_pick.pick_wrong``) judges each capacity resample on a day redrawn here instead.

The window is cut into ``stretches`` of equal length (the day's rate profile kept at that
resolution); within each, the sequence of requests (the gap to the one before, prompt and output
tokens) is drawn in blocks of ``block`` consecutive requests, at random starts, until the stretch
is filled: the gaps keep the trace's local burstiness, and the count of requests in a stretch
varies as the trace's own gaps make it vary (for Poisson arrivals, as a Poisson count).
"""

from __future__ import annotations

import numpy as np

from protocols.plan.traffic import Traffic

STRETCHES = 10      # the rate profile kept at a tenth of the window
BLOCK = 10          # requests per block: bursts up to about this many kept whole


def redrawn_day(traffic: Traffic, rng: np.random.Generator, stretches: int = STRETCHES,
                block: int = BLOCK) -> Traffic:
    """``traffic``'s requests redrawn (module doc): the same window, rate curve and length mix;
    a stretch without two requests is kept as it is (no gaps to draw from)."""
    if len(traffic) < 2 or traffic.duration_s <= 0:
        return traffic
    edges = np.linspace(0.0, traffic.duration_s, stretches + 1)
    arrivals, prompts, outputs = [], [], []
    for lo, hi in zip(edges[:-1], edges[1:]):
        inside = np.flatnonzero((traffic.arrival_s >= lo) & (traffic.arrival_s < hi))
        if inside.size < 2:
            arrivals.append(traffic.arrival_s[inside])
            prompts.append(traffic.prompt_tokens[inside])
            outputs.append(traffic.output_tokens[inside])
            continue
        t = traffic.arrival_s[inside]
        gaps = np.diff(np.concatenate([[lo], t]))
        k = min(block, inside.size)
        picked: list[np.ndarray] = []
        span = 0.0
        while span < hi - lo:
            start = int(rng.integers(0, inside.size - k + 1))
            picked.append(np.arange(start, start + k))
            span += float(gaps[start:start + k].sum())
        idx = np.concatenate(picked)
        at = lo + np.cumsum(gaps[idx])
        keep = at < hi
        arrivals.append(at[keep])
        prompts.append(traffic.prompt_tokens[inside][idx[keep]])
        outputs.append(traffic.output_tokens[inside][idx[keep]])
    return Traffic(np.concatenate(arrivals), np.concatenate(prompts), np.concatenate(outputs), traffic.duration_s,
                   traffic.source, list(traffic.curve),
                   list(traffic.notes) + [f"redrawn: blocks of {block} requests within {stretches} stretches"])
