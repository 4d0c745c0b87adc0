"""Over-saturation: an open-loop point whose queue grows without bound is stopped early.

Past the engine's capacity an open loop keeps sending while the engine falls behind: requests
pile up waiting to be served, every latency measured is mostly queueing that grows with the
run's length, and waiting for the backlog to drain wastes the time a sweep has.

The rule watches the stage where a backlog waits: from a request's send to its first token
(or its end, if it ends with none).  A queue past capacity holds requests there, and its
wait grows with the run; a request being served is past it, however long its output.  That
is what tells a backlog from the ramp of long requests, which the whole request's latency
cannot: a server that takes 10 s a request at 2 req/s has 20 in flight after 10 s and none
completed, and is nowhere near its capacity; a continuous batcher's latency grows from 5 s
to 24 s while its batch fills within its capacity (each step serves more sequences), so its
early requests end faster than its late ones, while its first tokens keep pace with the
sends throughout.  (On a server that streams nothing before the end, the first token is the
end, and the rule judges whole requests.)

The monitor is told when each request was sent, and every ``window_s`` the time since the
load started, the requests ``served`` (past their first token, or ended without an error),
those ``waiting`` (in flight with no token yet), those ``failed`` (ended with no token by an
error or the client's timeout) and ``wait_s`` = W: the longest wait seen so far, the slowest
first token (or end with none) or the age of the oldest request still waiting, whichever is
longer.  At time t, with H = ``windows x window_s``, or W if longer:

    served = requests served in the last H seconds, (t - H, t], cut to (W, t] before W + H
    due    = requests sent in the H seconds W earlier, (t - W - H, t - W], cut to (0, t - W]
             (after a wait of W every one of them is served)

A server that keeps pace serves as many as were due, however long it takes each; one past its
capacity starts them at its own rate while the sends go on, so ``served`` stays below ``due``
and the requests not served (waiting, or failed) rise.  (A window rather than all since the
start: evidence from before a queue formed would dilute it.)  The point trips when

    served < m x due - z x sqrt(D x (m^2 x due + served))     (m = min_achieved)

with ``due >= min_waiting``, while the requests not served rose over the last ``windows x
window_s`` (and are at least ``min_waiting``) and the served are not rising (below), at
``windows`` consecutive checks.  D is the sends' own index of dispersion (``dispersion``: the
variance of their counts in windows of ``windows x window_s`` over the mean; 1 until five such
windows were sent, and where it is within two standard errors of Poisson's): Poisson counts
have D = 1, bursty arrivals (gamma gaps of CV 2, a
trace's) vary about four times more, and a margin of Poisson's stopped a server with room at
their bursts.  Measured from the sends themselves, it is a trace's own burstiness too.

Not rising: a batch still filling up serves more each window as it grows (a continuous batcher
within its capacity, each step serving more sequences), one at its capacity no more; the served
of the last window are compared with those of the window before it, as long, and a rise past
z x sqrt(D x (both)) is no backlog.  On a server that streams nothing before the end this is
what tells a fill-up from a queue while the fill-up's ends speed up; a latency that rises in a
line and then levels (5 s to 24 s over the first 10 s of sends) reads as a queue past capacity
until it levels, and is stopped (benchmarks/guards.py, docs/measured/guards.md).

Judged on whole requests (nothing streams), a fill-up cannot be told from a queue while its
latency rises, so there the shortfall must last as long as W, the longest wait seen (``needed``
checks: W / ``window_s``, at least ``windows``), past a fill-up's rise: the 4 H200 batchers'
fill-up (7 s to 23 s over 40 s of sends) judged whole was stopped in 7 of 10 seeds, now 1; the
latency of 5 s rising to 24 s, in 15 of 20, now none.  The price: an overload judged on whole
requests is stopped later or not at all (16 slots x 10 s at +100 %, 400 requests: 16 of 60
runs stopped, a median of 7 service times after its queue formed, against 60 at 3.5), and the
end-of-run ``backlog_growing`` and ``still_filling`` (``metrics.filling``) are its guard.
Requests that end with no token are no fill-up's: while they rise, ``windows`` checks
suffice, and a horizon in which none was served while they rose is a shortfall whatever the
margin (a server fallen silent under bursty sends).

Drift (streaming points): where the server streams (a request in flight had a chunk after its
first, ``streams``), the requests not served (waiting, or failed) are also fitted by least
squares against the checks' times over the last ``DRIFT_SPANS x windows x window_s`` seconds
(18 s); their growth over it (slope x length) past ``DRIFT_Z x sqrt(D x sent in it)`` (3, not
z: the test runs at every check of a long run, and bursts that queue for real pass two standard
errors often enough to stop a bursty server with room), with at least ``min_waiting`` not
served, at ``windows`` consecutive checks, trips the point too.  D here is the larger of the
span's dispersion and that of the sends' counts per check, measured five checks in (bursty sends
read as Poisson until the span's is, and their first bursts as a drift).  Within capacity the
waiting for a first token is stationary (a streaming server's first tokens keep pace, bursts
drain); past it, it grows by the overload's rate, and a slot-limited server's ends coming in
lumps (16 slots x 10 s: 16 every 10 s) no longer break the streak of the counts: at +100 %
(Poisson) 98 % of the runs are stopped within three service times of the queue forming, 78 %
before.  A client behind its schedule (``sent``'s ``late_s`` past ``window_s``) reads its first
tokens late too, so the drift is not judged while it is (the counts, with W, absorb it).

An end with no token by an error or the client's timeout is not served: a server that stops
answering has its requests end at the send rate by the client's timeout, and counted as served
they kept pace, so the point ran its whole duration.  While nothing has been served (and none
failed), the oldest waiting request is as old as the point, so t - W is the start and nothing
is due: no first token yet is no evidence.  A server that never answers is stopped a few
checks after the client's first timeouts; one that stops answering, a few checks after its
silence (streaming) or its requests' service time after it (not streaming).

Then sending stops, what is in flight gets ``drain_s`` to finish (the rest is cancelled), and
the point is recorded as saturated, so its latencies are not read as a steady state's.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

DISPERSION_MIN_BINS = 5   # the sends' dispersion is measured once there are this many spans of them
DRIFT_SPANS = 3           # the waiting requests' drift is fitted over this many spans (windows x window_s)
DRIFT_Z = 3.0             # standard errors of the sends' counts its growth must pass: it is judged at every
                          # check of a long run, against bursts that queue for real (more than the counts' z)


@dataclass
class SaturationRule:
    window_s: float = 2.0
    windows: int = 3
    min_achieved: float = 0.9   # served below this fraction of due (1/0.9: the smallest overload stopped)
    min_waiting: int = 8
    z: float = 2.0              # standard errors (Poisson counts) the shortfall must exceed
    drain_s: float = 10.0


@dataclass
class SaturationMonitor:
    """Told each send's time (``sent``), and fed ``(now_s, served, waiting, wait_s)`` once a window
    (times in seconds since the load started); ``check`` says when the rule trips (see the
    module's doc)."""

    rule: SaturationRule
    _sends: list[float] = field(default_factory=list)
    _t: list[float] = field(default_factory=lambda: [0.0])
    _counts: list[tuple[int, int]] = field(default_factory=lambda: [(0, 0)])
    _streak: list[str] = field(default_factory=list)
    _drift_streak: list[str] = field(default_factory=list)
    _failed: list[int] = field(default_factory=lambda: [0])
    streaming: bool = False     # a request was seen past its first token before its end (told by ``check``)
    late_s: float = 0.0         # the client's lag behind its schedule at the last send
    reason: str | None = None

    def sent(self, t_s: float, late_s: float = 0.0) -> None:
        """A request sent at ``t_s``, ``late_s`` after its schedule (the client's own lag)."""
        self.late_s = late_s
        if self._sends and t_s < self._sends[-1]:  # (a session's turn may come out of order)
            bisect.insort(self._sends, t_s)
        else:
            self._sends.append(t_s)

    def _at(self, t: float, k: int) -> float:
        """Count ``k`` (0 served, 1 waiting) at time ``t``, linear between checks."""
        if t <= self._t[0]:
            return float(self._counts[0][k])
        i = bisect.bisect_left(self._t, t)
        if i >= len(self._t):
            return float(self._counts[-1][k])
        t0, t1 = self._t[i - 1], self._t[i]
        c0, c1 = self._counts[i - 1][k], self._counts[i][k]
        return c0 + (c1 - c0) * (t - t0) / (t1 - t0) if t1 > t0 else float(c1)

    def _failed_at(self, t: float) -> int:
        """The requests ended with no token by the last check at or before ``t``."""
        return self._failed[max(bisect.bisect_right(self._t, t) - 1, 0)]

    def dispersion(self, now_s: float, bin_s: float | None = None) -> float:
        """The sends' index of dispersion: the variance of their counts in windows of the span's
        length (``windows x window_s``, or ``bin_s``) from the start to ``now_s``, over their mean; 1
        (Poisson's) unless above 1 by more than two of the standard errors Poisson counts give it
        (sqrt(2 / (windows - 1))), and until there are ``DISPERSION_MIN_BINS`` windows."""
        span = bin_s or self.rule.windows * self.rule.window_s
        bins = int(now_s // span)
        if bins < DISPERSION_MIN_BINS or not self._sends:
            return 1.0
        edges = np.searchsorted(self._sends, np.arange(bins + 1) * span, side="right")
        counts = np.diff(edges)
        mean = counts.mean()
        if mean <= 0:
            return 1.0
        d = float(counts.var(ddof=1) / mean)
        # Poisson's own counts give about 1 +- sqrt(2 / (bins - 1)): only a dispersion past two of those is the sends'
        return d if d > 1 + 2 * math.sqrt(2 / (bins - 1)) else 1.0

    def drift(self, now_s: float) -> tuple[float, int]:
        """(the growth of the requests not served over the last ``DRIFT_SPANS`` spans, fitted by least
        squares to the counts at the checks in them, x its length; the requests sent in it)."""
        length = DRIFT_SPANS * self.rule.windows * self.rule.window_s
        i = bisect.bisect_left(self._t, now_s - length - 1e-9)
        t = np.asarray(self._t[i:])
        if t.size < 3:
            return 0.0, 0
        y = np.asarray([c[1] for c in self._counts[i:]], dtype=np.float64)
        x = t - t.mean()
        slope = float((x * (y - y.mean())).sum() / (x * x).sum())
        sent = bisect.bisect_right(self._sends, now_s) - bisect.bisect_right(self._sends, now_s - length)
        return slope * length, sent

    def _drifting(self, now_s: float, waiting: int, failed: int) -> str | None:
        """The drift test (module doc): the requests not served rising faster than the sends' noise."""
        length = DRIFT_SPANS * self.rule.windows * self.rule.window_s
        # a client behind its schedule reads its first tokens late as well: its own backlog, not the server's
        if not self.streaming or now_s < length or self.late_s > self.rule.window_s:
            return None
        growth, sent = self.drift(now_s)
        # the sends' dispersion in windows of a check's length too: measured five checks in, where the
        # span's takes five spans (bursty sends read as Poisson until then, and their bursts as a drift)
        d = max(self.dispersion(now_s), self.dispersion(now_s, self.rule.window_s))
        margin = DRIFT_Z * math.sqrt(d * sent)
        if growth > margin and waiting + failed >= self.rule.min_waiting:
            failures = f", {failed} ended with none" if failed else ""
            return (f"at {now_s:.3g} s: +{growth:.3g} over the last {length:g} s (margin {margin:.3g} of {sent} sent), "
                    f"{waiting} waiting{failures}")
        return None

    def check(self, now_s: float, served: int, waiting: int, wait_s: float, failed: int = 0,
              streaming: bool = False) -> str | None:
        if self.reason is not None:
            return self.reason
        unserved = waiting + failed  # an end with no token (the client's timeout, an error) was not served
        self._t.append(now_s)
        self._counts.append((served, unserved))
        self._failed.append(failed)
        self.streaming = self.streaming or streaming
        drifting = self._drifting(now_s, waiting, failed)
        if drifting:
            self._drift_streak.append(drifting)
        else:
            self._drift_streak.clear()
        if len(self._drift_streak) >= self.rule.windows:
            self.reason = (f"over-saturated: at {self.rule.windows} checks {self.rule.window_s:g} s apart, the "
                           "requests waiting for a first token rose (a least-squares growth past "
                           f"{DRIFT_Z:g} standard errors of the sends' counts, as bursty as they are) ("
                           + "; ".join(self._drift_streak[-self.rule.windows:]) + ")")
            return self.reason
        span = self.rule.windows * self.rule.window_s
        lag = max(wait_s, 0.0)
        if now_s - lag <= 0:  # nothing served yet: the oldest request waiting is as old as the point
            self._streak.clear()
            return None
        # the last H seconds (H: the span, or W if longer) against the H seconds W earlier: the
        # requests sent then (the oldest waiting, which sets W, is not among them, nor by a rounding
        # the one sent at t - W) are the ones served now, whatever the wait of each; before W + H
        # into the point both windows are cut to the t - W seconds since the start
        horizon = max(span, lag)
        since = max(now_s - horizon, lag)
        due = (bisect.bisect_left(self._sends, now_s - lag - 1e-6)
               - bisect.bisect_left(self._sends, now_s - lag - horizon - 1e-6))
        done = served - self._at(since, 0)
        grew = unserved - self._at(now_s - span, 1)
        m = self.rule.min_achieved
        # the shortfall against m x due must exceed what chance explains in counts this small, as
        # bursty as the sends themselves are
        d = self.dispersion(now_s)
        short = m * due - done - self.rule.z * math.sqrt(max(d * (m * m * due + done), 0.0))
        # a server still filling serves more each window as its batch grows; one at its capacity, no more
        before = self._at(since, 0) - self._at(2 * since - now_s, 0)
        rising = done - before > self.rule.z * math.sqrt(d * (done + before))
        # requests ending with no token (the client's timeouts) while none was served in H: a server silent,
        # whatever the margin (no server with room times out, nor a fill-up)
        timing_out = failed > self._failed_at(now_s - span)
        silent = timing_out and done <= 0
        significant = (due >= self.rule.min_waiting and (short > 0 or silent) and (grew > 0 or silent) and not rising
                       and unserved >= self.rule.min_waiting)
        if significant:
            failures = f", {failed} ended with none" if failed else ""
            self._streak.append(f"at {now_s:.3g} s: {done:.3g} served in the last {now_s - since:.3g} s of {due} "
                                f"sent in the {now_s - since:.3g} s {lag:.3g} s earlier, {waiting} waiting"
                                f"{failures} (+{grew:.3g})")
        else:
            self._streak.clear()
        # judged on whole requests, a latency that rises reads as a queue until it levels: the shortfall
        # must last as long as the longest wait seen too, past a fill-up's rise (module doc)
        # (requests ending with no token are no fill-up's: with them rising, the usual streak)
        needed = (self.rule.windows if self.streaming or timing_out
                  else max(self.rule.windows, math.ceil(lag / self.rule.window_s)))
        if len(self._streak) >= needed:
            whole = ("" if needed == self.rule.windows else
                     f" (nothing streams: judged on whole requests, the shortfall must last the longest wait, "
                     f"{lag:.3g} s, as a fill-up's rising latency reads as a queue until it levels)")
            self.reason = (f"over-saturated: at {needed} checks {self.rule.window_s:g} s apart{whole}, the "
                           "requests served (first token, or an end with no error) in the last H "
                           f"seconds stayed below {self.rule.min_achieved:.0%} of those sent in the H seconds W "
                           "earlier (W: the longest wait for a first token seen) while the requests not served "
                           "rose (" + "; ".join(self._streak[-self.rule.windows:]) + ")")
        return self.reason


def waiting_stage(flying: Iterable[tuple[int | None, int]], ended: int, longest_ended_ns: int,
                  now_ns: int) -> tuple[int, int, float]:
    """What the monitor is fed, from the requests in flight as ``(first token ns or None, sent
    ns)``, the number that ended and the longest wait among them (ns, on the same clock):
    ``(served, waiting, wait_s)``: served = ended + in flight past their first token; waiting =
    in flight with none; wait_s = the longest of ``longest_ended_ns``, each first token's wait
    and each waiting request's age."""
    waiting, longest, n = 0, longest_ended_ns, 0
    for first, sent in flying:
        n += 1
        if first is None:
            waiting += 1
            longest = max(longest, now_ns - sent)
        else:
            longest = max(longest, first - sent)
    return ended + n - waiting, waiting, longest / 1e9


STREAMING_GAP_NS = 100_000_000   # a chunk this long after the first: streamed (a whole body's pieces come at once)


def streams(flying: Iterable[tuple[int | None, int | None]]) -> bool:
    """Whether a request in flight, ``(first token ns or None, last chunk ns or None)``, had a chunk
    ``STREAMING_GAP_NS`` or more after its first: the server streams (one that sends nothing before
    the end sends it at once, its pieces read within milliseconds)."""
    return any(first is not None and last is not None and last - first >= STREAMING_GAP_NS for first, last in flying)
