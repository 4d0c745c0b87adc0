"""Where the guards cannot hold their bounds: a run whose own inputs put it where the over-saturation
rule (``loadgen.saturation``) and the end-of-run flags (``metrics.filling``) were measured outside
the bounds issue 41 set (``docs/measured/guards.md``, ``python benchmarks/guards.py``), said in one
line (``saturation_guard_limit`` in summary.json, a warning on the console), so that a verdict
there is read as the weaker one it is.

From the run's measured requests: n sent at a rate λ over an arrival window A = (n - 1) / λ, the
sends' index of dispersion D (the variance of their counts in the rule's 6-s spans over their
mean; Poisson's 1), a service time S (the 10th percentile of the latency to the end, the floor
``backlog_growing`` uses) and whether the server streams (a request's end 0.1 s or more after its
first token).  An overload of δ (sends at (1 + δ) x capacity) grows the queue by λ·r a second and
the wait by r a second of sends, r = δ / (1 + δ).  The three regions:

- **an overload too small to catch**: ``backlog_growing`` sees the wait's rise over the arrivals'
  second half, r·A/2, against its bound (S, or four standard errors of the waits, which bursts
  widen); the smallest overload it catches at about 95 % has r·A/2 = ``CATCH_SERVICE_TIMES`` x S x
  √D (the table: 16 slots x 10 s at +25 %, 400 requests, A = 200 s: r·A/2 = 20 s = 2 S, caught in
  54-58 of 60 Poisson runs, 45-49 gamma CV 2; at 2,000 requests 59-60).  Within three service
  times the rule's drift test sees the queue's growth over its span (``DRIFT_SPAN_S``), λ·r·18,
  against ``DRIFT_Z`` x √(D·λ·18): the smallest overload it stops there has r = 3·√(D / (18 λ))
  (λ = 2: r = 1/2, +100 %); judged on whole requests (nothing streams), none.  Said where the
  smallest caught by either is above the issue's 25 %.
- **bursty sends**: D above ``BURSTY_DISPERSION``.  The rule's margins scale with D, but a burst
  that queues for real at a slot-limited server with room still reads as a backlog now and then
  (25 slots x 10 s at 80 %, gamma gaps of CV 2: stopped or flagged in 1-3 of 60 runs).
- **a long rise judged whole**: nothing streams and the latency rose (``latency_rise_s``: the
  median of the first requests sent under ``RISE_FROM`` of the median of the second half's, until
  a block's reached ``RISE_TO`` of it) over longer than the first requests took: the rule cannot
  tell a fill-up from a queue while the latency rises, and waits for it as long as the longest
  wait; the shortfall lasts from the first ends (L0 in) to the last rising request's end (the
  rise + the latency it rose to), longer than that wait when the rise is longer than L0, and the
  fill-up is stopped (4 H200 batchers at 93 %, whole: 7 s rising to 23 s over 25 s of sends,
  6-7 of 60 runs stopped within capacity at 2,000 requests), and a latency that wanders as it
  rises, near a batcher's ceiling, can read as a backlog at the end (a batcher at 80 % of its
  ceiling, 5 s rising to 24 s: ``backlog_growing`` in 1-5 of 60 runs).
"""

from __future__ import annotations

import math

import numpy as np

SPAN_S = 6.0                 # the saturation rule's span (its windows x window_s): the dispersion's bins
DRIFT_SPAN_S = 18.0          # the rule's drift span (loadgen.saturation.DRIFT_SPANS x the span)
DRIFT_Z = 3.0                # loadgen.saturation.DRIFT_Z
CATCH_SERVICE_TIMES = 2.0    # the wait's rise over the second half backlog_growing catches at ~95 % (x √D)
SERVICE_TIMES = 3            # the bound: an overload stopped within this many service times
SMALLEST_OVERLOAD = 0.25     # ... of 25 % or more
BURSTY_DISPERSION = 2.0      # sends past this dispersion: bursts that queue for real read as a backlog now and then
RISE_FROM = 0.8              # the first requests' latency under this share of the second half's median: a rise
RISE_TO = 0.9                # ... that lasts until a block's median reaches this share of it
STREAMING_GAP_S = 0.1        # a request's end this long after its first token: the server streams


def send_dispersion(sent_s, bin_s: float = SPAN_S) -> float:
    """The sends' index of dispersion: the variance of their counts in ``bin_s`` windows from the first
    send over their mean (1 for Poisson, and where it is within two of Poisson's standard errors of 1,
    as ``loadgen.saturation`` reads it); NaN with fewer than five windows."""
    s = np.sort(np.asarray(sent_s, dtype=np.float64))
    s = s[~np.isnan(s)]
    if s.size < 2:
        return math.nan
    bins = int((s[-1] - s[0]) // bin_s)
    if bins < 5:
        return math.nan
    counts = np.diff(np.searchsorted(s - s[0], np.arange(bins + 1) * bin_s, side="right"))
    mean = counts.mean()
    if mean <= 0:
        return math.nan
    d = float(counts.var(ddof=1) / mean)
    # as the rule reads it: Poisson's own counts give about 1 +- sqrt(2 / (bins - 1)); within two of those, 1
    return d if d > 1 + 2 * math.sqrt(2 / (bins - 1)) else 1.0


def overload(r: float) -> float:
    """The overload δ whose queue grows r a second of sends (r = δ / (1 + δ)); inf from r >= 1."""
    return r / (1 - r) if r < 1 else math.inf


def smallest_caught_by_the_end(requests: int, rate_rps: float, service_s: float, dispersion: float) -> float:
    """The smallest overload ``backlog_growing`` flags at about 95 % (module doc): r·A/2 = 2·S·√D."""
    arrivals = (requests - 1) / rate_rps if rate_rps > 0 and requests > 1 else 0.0
    if arrivals <= 0:
        return math.inf
    return overload(CATCH_SERVICE_TIMES * service_s * math.sqrt(max(dispersion, 1.0)) / (arrivals / 2))


def smallest_stopped_in_three_service_times(rate_rps: float, service_s: float, dispersion: float,
                                            streaming: bool) -> float:
    """The smallest overload the rule's drift test stops within three service times (module doc): its
    growth over the drift's span at its margin, r = DRIFT_Z·√(D / (λ·span)); inf judged whole, or where
    three service times are shorter than the span."""
    if not streaming or rate_rps <= 0 or SERVICE_TIMES * service_s < DRIFT_SPAN_S:
        return math.inf
    return overload(DRIFT_Z * math.sqrt(max(dispersion, 1.0) / (rate_rps * DRIFT_SPAN_S)))


def _under(x: float, what: str) -> str:
    return ("no overload" if what == "none" else "any overload") if math.isinf(x) else f"{what} under +{x:.0%}"


def latency_rise_s(sent_s, latency_s) -> tuple[float, float]:
    """(how long the latency rose, in seconds of sends; the first block's median): the requests in send order
    in blocks of a twentieth (10 at least); 0 where the first block's median latency is not under
    ``RISE_FROM`` of the median of the later half's, else the time from the first send to the first
    block whose median reaches ``RISE_TO`` of it."""
    sent = np.asarray(sent_s, dtype=np.float64)
    lat = np.asarray(latency_s, dtype=np.float64)
    ok = ~np.isnan(sent) & ~np.isnan(lat)
    order = np.argsort(sent[ok])
    sent, lat = sent[ok][order], lat[ok][order]
    if sent.size < 20:
        return 0.0, math.nan
    level = float(np.median(lat[sent.size // 2:]))
    size = max(10, sent.size // 20)
    medians = [float(np.median(lat[i:i + size])) for i in range(0, sent.size - size + 1, size)]
    if medians[0] >= RISE_FROM * level:
        return 0.0, medians[0]
    reached = next(i for i, m in enumerate(medians) if m >= RISE_TO * level or i == len(medians) - 1)
    return float(sent[reached * size] - sent[0]), medians[0]


def guard_limit(requests: int, rate_rps: float, service_s: float, dispersion: float, streaming: bool,
                rise_s: float = 0.0, rise_from_s: float = math.nan) -> str | None:
    """The line saying where this run's inputs put the guards outside their measured bounds (module
    doc), or None where they hold; the reasons joined by '; '.  ``rise_s``, ``rise_from_s``: how long
    the latency rose and from what (``latency_rise_s``)."""
    if requests < 2 or not rate_rps > 0 or not service_s > 0:
        return None
    d = 1.0 if math.isnan(dispersion) else dispersion
    reasons = []
    end = smallest_caught_by_the_end(requests, rate_rps, service_s, d)
    soon = smallest_stopped_in_three_service_times(rate_rps, service_s, d, streaming)
    if min(end, soon) > SMALLEST_OVERLOAD:
        reasons.append(
            f"{_under(end, 'an overload')} may go uncaught ({requests} requests at {rate_rps:.3g} req/s, service "
            f"{service_s:.3g} s, sends' dispersion {d:.2g}: the wait's rise over the arrivals' second half is too "
            f"small beside a service time), and {_under(soon, 'none')} is stopped within {SERVICE_TIMES} service "
            "times (measured: 16 slots x 10 s at +25 %, 400 requests: 45-58 of 60 caught, against 95 %)")
    if d > BURSTY_DISPERSION:
        reasons.append(
            f"the sends are bursty (dispersion {d:.2g} in {SPAN_S:g}-s spans, Poisson's 1, past "
            f"{BURSTY_DISPERSION:g}): a burst that queues for real at a server with room can read as a backlog "
            "(measured: 25 slots x 10 s at 80 %, gamma gaps of CV 2: 1-3 of 60 runs stopped or flagged, "
            "against 1 %)")
    if not streaming and rise_s > rise_from_s > 0:
        reasons.append(
            f"nothing streams and the latency rose from {rise_from_s:.3g} s over {rise_s:.3g} s of sends, longer "
            "than its first requests took: judged on whole requests a fill-up reads as a queue until it "
            "levels (measured: 4 H200 batchers at 93 %: 6-7 of 60 runs stopped within capacity at 2,000 requests; a "
            "batcher at 80 % of its ceiling, 5 s rising to 24 s: its backlog flagged in 1-5 of 60; against 1 %)")
    return "; ".join(reasons) or None


def run_guard_limit(sent_s, first_s, end_s) -> str | None:
    """``guard_limit`` from a run's measured requests: their sends, first tokens (NaN: none) and ends,
    in seconds on one clock (NaN: never sent, no end recorded)."""
    sent = np.asarray(sent_s, dtype=np.float64)
    first = np.asarray(first_s, dtype=np.float64)
    end = np.asarray(end_s, dtype=np.float64)
    sends = np.sort(sent[~np.isnan(sent)])
    if sends.size < 2 or not sends[-1] > sends[0]:
        return None
    rate = (sends.size - 1) / (sends[-1] - sends[0])
    ended = ~np.isnan(sent) & ~np.isnan(end)
    if not ended.any():
        return None
    latency = end[ended] - sent[ended]
    service = float(np.percentile(latency, 10))
    rise, rise_from = latency_rise_s(sent[ended], latency)
    after_first = (end - first)[ended & ~np.isnan(first)]
    streaming = bool(after_first.size) and float(np.median(after_first)) >= STREAMING_GAP_S
    return guard_limit(int(sends.size), float(rate), service, send_dispersion(sends), streaming, rise, rise_from)
