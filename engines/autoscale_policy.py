"""The autoscaling policy of a deployment (``deployment.autoscale``): how many replicas it
wants for what it observes.  One definition, used twice: the harness scales real replicas
by it during a load (live), and ``tokenfactory plan`` simulates a fleet by it, so a plan's
prediction can be checked against a real replay of the same policy.

Every ``interval_s`` the policy reads its signal over the trailing ``window_s``:

- ``utilisation``: arrivals in the window / window_s / (replicas x ``capacity_rps``); the
  replicas it wants are ``ceil(rate / (target x capacity_rps))``;
- ``queue``: requests in flight (sent, not finished); it wants ``ceil(in_flight / target)``.

Both are clamped to ``[min_replicas, max_replicas]``.  It scales up at once (a replica
then takes ``provision_s`` plus its cold start to serve) and down to the most replicas it
asked for over the trailing ``scale_down_delay_s`` (the stabilisation window of
Kubernetes' HorizontalPodAutoscaler), so a dip shorter than that stops no replica.
Replicas counted are those serving plus those starting: a replica on its way is not asked
for twice.

Pure: the typed config and numbers in, a replica count out; the clock is the caller's (seconds, any origin).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from conf.schema import Autoscale

SIGNALS = ("utilisation", "queue")


@dataclass(frozen=True)
class ScalingPolicy:
    """``deployment.autoscale`` (typed: ``conf.schema.typed(node, Autoscale)``) as the policy runs it.
    A plan fills the two values the config may leave null from its measurements; the config's
    own value wins where it is set (``capacity_rps``, ``cold_start_s``)."""
    autoscale: Autoscale
    measured_capacity_rps: float | None = None  # one replica's measured max load under the SLO (plan)
    measured_cold_start_s: float | None = None  # the measured engine start, engine_startup_s (plan)

    def __post_init__(self):
        a = self.autoscale
        if a.signal not in SIGNALS:
            raise ValueError(f"deployment.autoscale.signal={a.signal!r}: expected one of {', '.join(SIGNALS)}")
        if not a.target > 0:
            raise ValueError(f"deployment.autoscale.target={a.target}: must be > 0")
        if a.signal == "utilisation" and not (self.capacity_rps and self.capacity_rps > 0):
            raise ValueError("deployment.autoscale.signal=utilisation needs deployment.autoscale.capacity_rps "
                             "(one replica's capacity in requests/s: a measured max load under the SLO)")
        if a.min_replicas > a.max_replicas:
            raise ValueError(f"deployment.autoscale.min_replicas={a.min_replicas} is above "
                             f"max_replicas={a.max_replicas}")

    @property
    def capacity_rps(self) -> float | None:
        """One replica's capacity (requests/s): the config's, else the measured one."""
        value = self.autoscale.capacity_rps if self.autoscale.capacity_rps is not None else self.measured_capacity_rps
        return float(value) if value is not None else None

    @property
    def cold_start_s(self) -> float | None:
        """From the decision to a new replica serving, less ``provision_s``: the config's, else the measured one."""
        value = self.autoscale.cold_start_s if self.autoscale.cold_start_s is not None else self.measured_cold_start_s
        return float(value) if value is not None else None

    def record(self) -> dict:
        """The policy as autoscale.json and plan.json write it: its settings, capacity and cold start resolved."""
        a = self.autoscale
        return {"signal": a.signal, "target": float(a.target), "capacity_rps": self.capacity_rps,
                "window_s": float(a.window_s), "interval_s": float(a.interval_s),
                "scale_down_delay_s": float(a.scale_down_delay_s), "min_replicas": int(a.min_replicas),
                "max_replicas": int(a.max_replicas), "provision_s": float(a.provision_s),
                "cold_start_s": self.cold_start_s}

    def wanted(self, value: float) -> int:
        """Replicas the signal's ``value`` asks for (requests/s, or requests in flight), clamped."""
        a = self.autoscale
        per_replica = a.target * self.capacity_rps if a.signal == "utilisation" else a.target
        # a hair below an exact multiple is that multiple (float noise must not add a replica)
        n = math.ceil(value / per_replica - 1e-9) if value > 0 else 0
        return max(a.min_replicas, min(a.max_replicas, n))

    def utilisation(self, rate_rps: float, replicas: int) -> float:
        """Arrival rate over the replicas' capacity (the ``utilisation`` signal's own quantity)."""
        if not self.capacity_rps or replicas <= 0:
            return math.inf if rate_rps > 0 else 0.0
        return rate_rps / (replicas * self.capacity_rps)


class Autoscaler:
    """The policy's decisions over time: ``decide(now_s, value, current)`` gives the replica
    count to have (serving plus starting), holding the scale-down stabilisation window."""

    def __init__(self, policy: ScalingPolicy):
        self.policy = policy
        self.asked: deque[tuple[float, int]] = deque()   # (time, replicas wanted) within the window
        self.decisions: list[dict] = []                  # every change: time, from, to, signal value

    def decide(self, now_s: float, value: float, current: int) -> int:
        p, a = self.policy, self.policy.autoscale
        want = p.wanted(value)
        self.asked.append((now_s, want))
        while self.asked and self.asked[0][0] < now_s - a.scale_down_delay_s:
            self.asked.popleft()
        if want > current:
            to = want
        elif want < current:
            # the most asked for over the stabilisation window, never above what is there
            to = min(current, max(w for _, w in self.asked))
        else:
            to = current
        to = max(a.min_replicas, min(a.max_replicas, to))
        if to != current:
            self.decisions.append({"t_s": now_s, "from": current, "to": to, "signal": a.signal, "value": value})
        return to


class ArrivalWindow:
    """Arrival times in the trailing window, for the ``utilisation`` signal: ``rate(now)``
    is arrivals in ``(now - window_s, now]`` / window_s (over the time elapsed while the
    window is not yet full, so the first decisions are not underestimates)."""

    def __init__(self, window_s: float, origin_s: float = 0.0):
        self.window_s = window_s
        self.origin_s = origin_s
        self.times: deque[float] = deque()

    def add(self, t_s: float) -> None:
        self.times.append(t_s)

    def rate(self, now_s: float) -> float:
        while self.times and self.times[0] <= now_s - self.window_s:
            self.times.popleft()
        span = min(self.window_s, now_s - self.origin_s)
        return len(self.times) / span if span > 0 else 0.0
