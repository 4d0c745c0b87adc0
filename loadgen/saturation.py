"""Over-saturation: an open-loop point whose queue grows without bound is stopped early.

Past the engine's capacity an open loop keeps sending while completions fall behind: the
requests in flight pile up, every latency measured is mostly queueing that grows with the
run's length, and waiting for the backlog to drain wastes the time a sweep has.

The rule is judged on the time scale of the requests' own latency, so that the ramp of long
requests is not read as a backlog: a server that takes 10 s a request at 2 req/s has 20 in
flight after 10 s and none completed, and is nowhere near its capacity.  The monitor is told
when each request was sent, and every ``window_s`` the time since the load started, the
requests completed (any status) and in flight, and ``latency_s`` = L: the longest latency
seen so far, the slowest completed request's end-to-end time or the age of the oldest request
still in flight, whichever is longer.  At time t:

    due  = requests sent before t - L    (at latency L every one of them has ended)
    done = requests completed since L    (the same length of time, t - L, later)

A server that keeps pace completes as many as were due, whatever its latency and however the
latencies spread (the two counts differ only by the requests that end near either edge);
one past its capacity completes at its own rate while the sends go on, so ``done`` falls
ever further below ``due`` and the requests in flight rise.  The point trips when

    done < m x due - z x sqrt(m^2 x due + done)      (m = min_achieved; Poisson counts)

with ``due >= min_in_flight``, while the requests in flight rose over the last ``windows x
window_s`` (and are at least ``min_in_flight``), at ``windows`` consecutive checks.  During
the ramp the oldest request in flight is as old as the point, so t - L is the start and
nothing is due: no completion yet is no evidence.  A server that completes nothing at all is
left to the client's timeout.

Then sending stops, what is in flight gets ``drain_s`` to finish (the rest is cancelled), and
the point is recorded as saturated, so its latencies are not read as a steady state's.
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass, field


@dataclass
class SaturationRule:
    window_s: float = 2.0
    windows: int = 3
    min_achieved: float = 0.7
    min_in_flight: int = 8
    z: float = 2.0              # standard errors (Poisson counts) the shortfall must exceed
    drain_s: float = 10.0


@dataclass
class SaturationMonitor:
    """Told each send's time (``sent``), and fed ``(now_s, completed, in_flight, latency_s)`` once a
    window (times in seconds since the load started); ``check`` says when the rule trips (see the
    module's doc)."""

    rule: SaturationRule
    _sends: list[float] = field(default_factory=list)
    _t: list[float] = field(default_factory=lambda: [0.0])
    _counts: list[tuple[int, int]] = field(default_factory=lambda: [(0, 0)])
    _streak: list[str] = field(default_factory=list)
    reason: str | None = None

    def sent(self, t_s: float) -> None:
        if self._sends and t_s < self._sends[-1]:  # (a session's turn may come out of order)
            bisect.insort(self._sends, t_s)
        else:
            self._sends.append(t_s)

    def _at(self, t: float, k: int) -> float:
        """Count ``k`` (0 completed, 1 in flight) at time ``t``, linear between checks."""
        if t <= self._t[0]:
            return float(self._counts[0][k])
        i = bisect.bisect_left(self._t, t)
        if i >= len(self._t):
            return float(self._counts[-1][k])
        t0, t1 = self._t[i - 1], self._t[i]
        c0, c1 = self._counts[i - 1][k], self._counts[i][k]
        return c0 + (c1 - c0) * (t - t0) / (t1 - t0) if t1 > t0 else float(c1)

    def check(self, now_s: float, completed: int, in_flight: int, latency_s: float) -> str | None:
        if self.reason is not None:
            return self.reason
        self._t.append(now_s)
        self._counts.append((completed, in_flight))
        span = self.rule.windows * self.rule.window_s
        lag = max(latency_s, 0.0)
        if now_s - lag <= 0:  # the ramp: the oldest request in flight is as old as the point
            self._streak.clear()
            return None
        # due: sent before t - L (the oldest request in flight, which sets L, is not due, nor by a
        # rounding the one sent then); done: completed since L, the same length of time later
        due = bisect.bisect_left(self._sends, now_s - lag - 1e-6)
        done = completed - self._at(lag, 0)
        grew = in_flight - self._at(now_s - span, 1)
        m = self.rule.min_achieved
        # the shortfall against m x due must exceed what chance explains in counts this small
        short = m * due - done - self.rule.z * math.sqrt(max(m * m * due + done, 0.0))
        if (due >= self.rule.min_in_flight and short > 0 and grew > 0
                and in_flight >= self.rule.min_in_flight):
            self._streak.append(f"at {now_s:.3g} s: {done:.3g} completed since {lag:.3g} s of {due} sent "
                                f"before {now_s - lag:.3g} s, {in_flight} in flight (+{grew:.3g})")
        else:
            self._streak.clear()
        if len(self._streak) >= self.rule.windows:
            self.reason = (f"over-saturated: at {self.rule.windows} checks {self.rule.window_s:g} s apart, the "
                           f"requests completed in the last t - L seconds (L: the longest latency seen) stayed "
                           f"below {self.rule.min_achieved:.0%} of those sent in the first t - L while the requests "
                           "in flight rose (" + "; ".join(self._streak[-self.rule.windows:]) + ")")
        return self.reason
