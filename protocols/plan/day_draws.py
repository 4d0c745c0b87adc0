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

The profile is the stretches' counts less their own noise (``stretch_rates``): each count shrunk
towards the day's mean by the share of the counts' spread beyond a Poisson count's (empirical
Bayes), and each stretch's gaps scaled to that count.  Kept as counted, a flat day's chance
excess in a stretch was kept as if it were the traffic's and the redraw's own noise added on
top: twice a Poisson day's variance per stretch, a day burstier than the traffic, which failed
configs near their knee on more redrawn days than on days of that traffic (docs/measured/
plan-reliability.md, "The high bin").  A ramp's or a peak's spread is far beyond the noise's and
is kept nearly whole.

A long run (``long_day``): the chance that the pick is wrong is a chance over the long run of
traffic like the day, not over one short day of it.  Near its knee a config's check over a 120 s
day flips with the day's queue (a burst at 0.9 of the knee fills it for a minute, and a p90 over
2000 requests sees it), where a long run averages such stretches into its percentiles: the
plan's short days failed configs at 0.85 to 0.95 of their knee in a third of their resamples
where every long run met the SLO (docs/measured/plan-reliability.md).  So each resample is
judged on redrawn days one after another, ``LONG_S`` or more in all, at one draw of the day's
rate (the day tells its rate to its own count's noise, and a long run of it would not shrink
that).
"""

from __future__ import annotations

import numpy as np

from protocols.plan.traffic import Traffic

STRETCHES = 10      # the rate profile kept at a tenth of the window
BLOCK = 10          # requests per block: bursts up to about this many kept whole
LONG_S = 600.0      # a long run: redrawn days one after another to at least this long (s)


def stretch_rates(traffic: Traffic, edges: np.ndarray) -> np.ndarray:
    """The day's rate profile, as requests per stretch (module doc): each stretch's count shrunk
    towards the day's mean count by the share of the counts' spread that a Poisson count's own noise
    (its variance its mean) does not explain; a flat Poisson day's profile is flat, a ramp's is kept."""
    counts = np.histogram(traffic.arrival_s, bins=edges)[0].astype(np.float64)
    mean = float(counts.mean())
    spread = float(counts.var(ddof=1)) if counts.size > 1 else 0.0
    kept = max(0.0, spread - mean) / spread if spread > 0 else 0.0
    return mean + kept * (counts - mean)


def redrawn_day(traffic: Traffic, rng: np.random.Generator, stretches: int = STRETCHES,
                block: int = BLOCK) -> Traffic:
    """``traffic``'s requests redrawn (module doc): the same window, rate curve and length mix;
    a stretch without two requests is kept as it is (no gaps to draw from)."""
    if len(traffic) < 2 or traffic.duration_s <= 0:
        return traffic
    edges = np.linspace(0.0, traffic.duration_s, stretches + 1)
    target = stretch_rates(traffic, edges)
    arrivals, prompts, outputs = [], [], []
    for s, (lo, hi) in enumerate(zip(edges[:-1], edges[1:])):
        inside = np.flatnonzero((traffic.arrival_s >= lo) & (traffic.arrival_s < hi))
        if inside.size < 2:
            arrivals.append(traffic.arrival_s[inside])
            prompts.append(traffic.prompt_tokens[inside])
            outputs.append(traffic.output_tokens[inside])
            continue
        t = traffic.arrival_s[inside]
        # the stretch's gaps at its profile's rate: its own count's noise is not redrawn on top of it
        gaps = np.diff(np.concatenate([[lo], t])) * (inside.size / target[s])
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


def long_day(traffic: Traffic, rng: np.random.Generator, long_s: float = LONG_S, stretches: int = STRETCHES,
             block: int = BLOCK) -> Traffic:
    """A long run of traffic like the day (module doc): ``ceil(long_s / duration)`` redrawn days
    one after another, the whole at one draw of the day's rate (each redraw's count varies around
    the day's, so its mean over the redraws would carry the rate surer than one day can: the first
    redraw's count over the mean count scales the run's rate); a day of ``long_s`` or longer is one
    redrawn day."""
    if len(traffic) < 2 or traffic.duration_s <= 0:
        return traffic
    repeats = max(1, int(np.ceil(long_s / traffic.duration_s - 1e-9)))
    days = [redrawn_day(traffic, rng, stretches, block) for _ in range(repeats)]
    if repeats == 1:
        return days[0]
    counts = np.array([len(d) for d in days], dtype=np.float64)
    scale = counts[0] / counts.mean() if counts.mean() > 0 else 1.0
    offsets = traffic.duration_s * np.arange(repeats)
    arrivals = np.concatenate([d.arrival_s + o for d, o in zip(days, offsets)]) / scale
    return Traffic(arrivals, np.concatenate([d.prompt_tokens for d in days]),
                   np.concatenate([d.output_tokens for d in days]), repeats * traffic.duration_s / scale,
                   traffic.source, list(traffic.curve),
                   list(traffic.notes) + [f"long run: {repeats} redrawn days at x{scale:.3f} the day's rate"])
