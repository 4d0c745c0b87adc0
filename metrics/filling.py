"""Whether a run was still filling up: the requests in flight still rising through its arrivals.

An open loop's engine takes time to reach its steady state: a continuous batch fills as the
requests arrive, and each request's latency grows with the batch.  A run whose arrivals end
before the batch is full measured a fill-up: its latencies are a lower bound of the steady
state's, and its passing an SLO says nothing about the load it was offered.

From the per-request records over the arrival window ``[first send, last send]`` of the measured
requests (length ``L``), with a request in flight at ``t`` when ``sent_ns <= t < end`` (``end`` its
``done_ns``, else its ``end_ns``; ended or failed alike):

- ``in_flight_second_quarter`` = the mean number in flight over ``[first + L/4, first + L/2]``
  = Σ over requests of the time each spent in flight inside that quarter ÷ (L/4);
- ``in_flight_last_quarter`` = the same over ``[first + 3L/4, last]``;
- ``still_filling`` = last − second > max(3·√(second + last), 0.1·second).

The second quarter, not the first, so that a batch that fills within the first quarter (a
request's latency under L/4) is steady by then. The margin: in flight is a count like an M/G/∞
queue's, whose noise is about the square root of its mean, so the difference of the two
quarters' counts has a noise of about √(second + last); three of those keep a steady run from
being flagged by chance, and 10 % of the count is the floor for large counts (above about 1,800
in flight, where three noises are under a tenth: a drift that small is not a fill-up). (Against
√(second) alone: issue 31's server without a capacity limit, 10.2 s requests at Poisson 2 req/s,
60 requests, whose second quarter still holds part of its ramp, is flagged in 94 of 3,000 seeds
by 3·√(second) and in 4 by 3·√(second + last); ``tests/metrics/test_filling.py``.) Below 9 in
flight (second + last) the margin exceeds any rise, so a few short requests are never flagged.
Bursty arrivals count noisier than Poisson ones (gamma gaps of CV 2: that server at 60 requests
is flagged in 54 of 1,000 seeds, at 400 in 1): such a run needs more requests to be judged.
``python benchmarks/filling_rule.py`` gives the rule's flags on simulated servers by the run's
length.

Still filling, or a backlog growing?  In flight rises in both, and a user must know which
(issue 44 item 4): a fill-up's latency levels off once its batch is full, a queue past the
engine's capacity grows with the run.  ``wait_rise`` fits the wait of each request sent in the
arrival window's second half (its first token's, or its end's with none: a whole response's
latency) against its send, on the mean waits of ``BACKLOG_BLOCKS`` equal spans (the waits of
requests sent together are alike: a burst queues them all), and ``backlog_growing`` is its rise
over that half past the larger of ``BACKLOG_Z`` standard errors and the 10th percentile of the
latency (a service time: a smaller rise is no backlog worth the name).  It is what catches the
slow overloads the saturation rule cannot tell in time: 16 slots x 10 s at +25 % (2 req/s,
400 requests), missed by the rule and ``still_filling`` in 15 of 60 runs, is flagged in
53 of 60 (37 under gamma gaps of CV 2; ``python benchmarks/guards.py``, docs/measured/guards.md),
and missed by every guard in 2 (streaming) and 6 (whole); within capacity
(the matrix's servers, streaming or not) it flags at most 1 run in 60 but for the batcher
under bursty arrivals judged whole at 2,000 requests (2 of 60; 5 at 3 standard errors).

A request with no end recorded (neither ``done_ns`` nor ``end_ns``) is in flight for an unknown
time and counts in neither quarter; its send still bounds the window.  No window (fewer than two
sends, or every send at one instant): both means NaN, not filling.
"""

from __future__ import annotations

import math

import numpy as np

# The reason a run that otherwise meets the SLO does not (metrics.slo.run_meets_slo) starts so.
STILL_FILLING = "still filling"


def quarter_in_flight(sent_ns, end_ns) -> tuple[float, float]:
    """(mean in flight over the arrival window's second quarter, over its last quarter): module doc;
    ``sent_ns`` and ``end_ns`` per measured request (NaN: never sent, no end recorded)."""
    sent = np.asarray(sent_ns, dtype=np.float64)
    end = np.asarray(end_ns, dtype=np.float64)
    sends = sent[~np.isnan(sent)]
    if sends.size < 2 or not sends.max() > sends.min():
        return math.nan, math.nan
    first, span = sends.min(), sends.max() - sends.min()
    known = ~np.isnan(sent) & ~np.isnan(end)
    s, e = sent[known], end[known]

    def mean_over(a: float, b: float) -> float:
        inside = np.clip(np.minimum(e, b) - np.maximum(s, a), 0.0, None)
        return float(inside.sum() / (b - a))

    return mean_over(first + span / 4, first + span / 2), mean_over(first + 3 * span / 4, first + span)


def still_filling(second: float, last: float) -> bool:
    """Last quarter's mean in flight above the second quarter's by more than
    max(3·√(second + last), 0.1·second) (module doc); False where either is NaN."""
    if math.isnan(second) or math.isnan(last):
        return False
    return last - second > max(3 * math.sqrt(second + last), 0.1 * second)


def filling_note(second: float, last: float) -> str:
    """What a console line and a report say of a run still filling."""
    return (f"{STILL_FILLING}: in flight rose from {second:.3g} to {last:.3g} over the arrivals' second and "
            "last quarters; its latencies are a fill-up's or a growing backlog's (a lower bound either way): give it "
            "more requests or a longer duration to tell which")


# The note of a run whose backlog grew through its arrivals (metrics.slo.run_meets_slo) starts so.
BACKLOG_GROWING = "backlog growing"
BACKLOG_Z = 4.0           # standard errors of the slope the rise must pass (the block means of a latency that
                          # wanders are correlated: with 8 degrees of freedom 3 passed 1-5 of 60 batchers at 80 %)
BACKLOG_BLOCKS = 10       # spans of the second half whose mean waits are fitted
BACKLOG_FLOOR_Q = 10      # ... and the latency (send to end) of this percentile of the requests: a service time


def wait_rise(sent_ns, wait_s, end_ns) -> tuple[float, float]:
    """(the rise of the wait over the arrival window's second half, the bound it must pass), in
    seconds: the wait of each measured request (``wait_s``: its first token's, or, with none, its
    end's; NaN: neither) fitted by least squares against its send over ``[first + L/2, last]``,
    the rise the slope x L/2; the bound the larger of BACKLOG_Z standard errors of that rise (by
    the fit's own residuals) and the 10th percentile of the requests' latency to their end (a
    service time: a rise smaller than that is no backlog worth the name).  NaN, NaN without a
    window or with fewer than 10 waits in its second half."""
    sent = np.asarray(sent_ns, dtype=np.float64)
    wait = np.asarray(wait_s, dtype=np.float64)
    end = np.asarray(end_ns, dtype=np.float64)
    sends = sent[~np.isnan(sent)]
    if sends.size < 2 or not sends.max() > sends.min():
        return math.nan, math.nan
    half = (sends.max() - sends.min()) / 2
    late = ~np.isnan(sent) & ~np.isnan(wait) & (sent >= sends.min() + half)
    if late.sum() < 10:
        return math.nan, math.nan
    # the waits of requests sent close together are alike (a burst queues them all): the fit is on
    # the mean wait of each of BACKLOG_BLOCKS equal spans of the half, whose residuals carry that
    edges = sends.min() + half + np.arange(BACKLOG_BLOCKS + 1) * half / BACKLOG_BLOCKS
    block = np.clip(np.searchsorted(edges, sent[late], side="right") - 1, 0, BACKLOG_BLOCKS - 1)
    counts = np.bincount(block, minlength=BACKLOG_BLOCKS)
    full = counts > 0
    if full.sum() < 3:
        return math.nan, math.nan
    x = (np.bincount(block, sent[late], BACKLOG_BLOCKS)[full] / counts[full]) / 1e9
    y = np.bincount(block, wait[late], BACKLOG_BLOCKS)[full] / counts[full]
    x = x - x.mean()
    sxx = float((x * x).sum())
    if sxx <= 0:
        return math.nan, math.nan
    slope = float((x * (y - y.mean())).sum() / sxx)
    resid = y - y.mean() - slope * x
    se = math.sqrt(float((resid * resid).sum()) / (full.sum() - 2) / sxx)
    ends = ~np.isnan(sent) & ~np.isnan(end)
    service = float(np.percentile((end[ends] - sent[ends]) / 1e9, BACKLOG_FLOOR_Q)) if ends.any() else 0.0
    return float(slope * half / 1e9), float(max(BACKLOG_Z * se * half / 1e9, service))


def backlog_growing(rise_s: float, bound_s: float) -> bool:
    """The wait rose through the arrivals' second half by more than its bound (``wait_rise``): a queue
    past the engine's capacity, which a fill-up's levelled latency and a steady server's flat one are
    not; False where either is NaN."""
    if math.isnan(rise_s) or math.isnan(bound_s):
        return False
    return rise_s > bound_s


def backlog_note(rise_s: float, bound_s: float) -> str:
    """What a console line and a report say of a run whose backlog grew (not a fill-up)."""
    return (f"{BACKLOG_GROWING}: the wait for a first token rose by {rise_s:.3g} s over the arrivals' second half "
            f"(more than {bound_s:.3g} s, its noise or a service time): a queue past the engine's capacity, not a "
            "fill-up; its latencies grow with the run's length")
