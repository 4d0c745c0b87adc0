"""Over-saturation: an open-loop point whose queue grows without bound is stopped early.

Past the engine's capacity an open loop keeps sending while completions fall behind: the
requests in flight pile up, every latency measured is mostly queueing that grows with the
run's length, and waiting for the backlog to drain wastes the time a sweep has.  The rule
(checked every ``window_s``): in ``windows`` consecutive windows the completions are below
``min_achieved`` x the sends, and the requests in flight rose in each (and are at least
``min_in_flight``).  Then sending stops, what is in flight gets ``drain_s`` to finish (the
rest is cancelled), and the point is recorded as saturated, so its latencies are not read
as a steady state's.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SaturationRule:
    window_s: float = 2.0
    windows: int = 3
    min_achieved: float = 0.7
    min_in_flight: int = 8
    drain_s: float = 10.0


@dataclass
class SaturationMonitor:
    """Fed ``(sent, completed, in_flight)`` once a window; ``check`` says when the rule trips."""

    rule: SaturationRule
    _last: tuple[int, int, int] | None = None
    _streak: list[str] = field(default_factory=list)
    reason: str | None = None

    def check(self, sent: int, completed: int, in_flight: int) -> str | None:
        if self.reason is not None:
            return self.reason
        last, self._last = self._last, (sent, completed, in_flight)
        if last is None:
            return None
        w = self.rule.window_s
        sends, done = (sent - last[0]) / w, (completed - last[1]) / w
        growing = in_flight > last[2] and in_flight >= self.rule.min_in_flight
        if sends > 0 and done < self.rule.min_achieved * sends and growing:
            self._streak.append(f"{done:.3g} of {sends:.3g} req/s completed, {in_flight} in flight")
        else:
            self._streak.clear()
        if len(self._streak) >= self.rule.windows:
            self.reason = (f"over-saturated: for {len(self._streak)} windows of {w:g} s the completions stayed "
                           f"below {self.rule.min_achieved:.0%} of the sends while the requests in flight rose ("
                           + "; ".join(self._streak[-self.rule.windows:]) + ")")
        return self.reason
