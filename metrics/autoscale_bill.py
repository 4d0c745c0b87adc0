"""A live-autoscaled deployment's replicas over an observation window (``deployment.autoscale.
enabled``; ``engines.live_scaler`` scales, ``autoscale.json`` records it): what they served and
what was paid for them.

Input: the serving log, ``[(t, n), ...]`` in time order: from ``t`` on, ``n`` replicas serve
(behind the router); the first entry is the deployment's start with the replicas it started
with (so, as a fixed deployment's cost window does, their own start is counted), then one
entry per replica added to or removed from the router.  ``starting``: one ``(from, to)`` per
replica the scaler started, from the policy's decision to its joining the router (or to its
start's failure or cancellation: a failed start is paid until it failed, no longer);
``draining``: one per replica scaled down, from its leaving the router to its process's stop.
The window is ``[start, end]``, the observation window the cost counts (``window_s``).  Times
in any one unit, ``unit_s`` seconds each (perf_counter_ns: 1e-9).

- ``serving_replica_seconds`` = ∫ n(t) dt over the window (n before the log's first entry: 0).
- ``starting_replica_seconds`` = Σ |starting interval ∩ window| (cold starts, provision_s included);
  ``draining_replica_seconds`` = Σ |draining interval ∩ window|.
- ``paid_replica_seconds`` = starting + serving + draining: what the cost bills
  (``metrics.cost.fleet_cost``), the plan's and the validation's name for the same quantity.
- ``replicas_mean`` = ``paid_replica_seconds`` / window seconds.
- ``replicas_max`` = the most replicas paid for at once in the window (changes at one instant
  taken together; stretches no longer than ``min_hold_s`` left out).
- ``autoscale_scale_ups``: replicas added to the router in the window (entries where n rose,
  counted by how much); ``autoscale_scale_downs``: replicas taken out of it (n fell).
"""

from __future__ import annotations

import math

BILL_KEYS = ("starting_replica_seconds", "serving_replica_seconds", "draining_replica_seconds",
             "paid_replica_seconds")


def serving_at(log: list[tuple[int, int]], t_ns: int) -> int:
    """n at ``t_ns``: the last entry at or before it (0 before the first)."""
    n = 0
    for t, k in log:
        if t > t_ns:
            break
        n = k
    return n


def overlap(intervals, start: float, end: float) -> float:
    """Σ |[a, b] ∩ [start, end]| over ``(a, b)`` intervals (the module doc's sums, in the input's unit)."""
    return sum(max(0.0, min(b, end) - max(a, start)) for a, b in intervals)


def replica_figures(log: list[tuple[int, int]], start_ns: int, end_ns: int, starting=(), draining=(),
                    unit_s: float = 1e-9, min_hold_s: float = 0.0) -> dict:
    """The module doc's figures over ``[start_ns, end_ns]``."""
    window_s = (end_ns - start_ns) * unit_s
    n = serving_at(log, start_ns)
    t, area, ups, downs = start_ns, 0.0, 0, 0
    for when, k in log:
        if when <= start_ns:
            continue
        if when >= end_ns:
            break
        area += n * (when - t) * unit_s
        ups += max(0, k - n)
        downs += max(0, n - k)
        t, n = when, k
    area += n * (end_ns - t) * unit_s
    starting, draining = list(starting), list(draining)
    start_s = overlap(starting, start_ns, end_ns) * unit_s
    drain_s = overlap(draining, start_ns, end_ns) * unit_s
    paid = start_s + area + drain_s
    return {"starting_replica_seconds": start_s, "serving_replica_seconds": area,
            "draining_replica_seconds": drain_s, "paid_replica_seconds": paid,
            "replicas_mean": paid / window_s if window_s > 0 else math.nan,
            "replicas_max": paid_max(log, start_ns, end_ns, starting + draining, min_hold_s / unit_s),
            "autoscale_scale_ups": ups, "autoscale_scale_downs": downs}


def paid_max(log, start, end, extra, min_hold: float = 0.0) -> int:
    """The most replicas paid for at once over ``[start, end]``: serving (the log) plus those
    in an ``extra`` interval, every change at one instant applied before the count is read."""
    deltas: dict[float, int] = {}
    prev = 0
    for t, k in log:
        deltas[t] = deltas.get(t, 0) + k - prev
        prev = k
    for a, b in extra:
        if b > a:
            deltas[a] = deltas.get(a, 0) + 1
            deltas[b] = deltas.get(b, 0) - 1
    times = sorted(deltas)
    most, n = 0, 0
    for i, t in enumerate(times):
        n += deltas[t]
        upto = times[i + 1] if i + 1 < len(times) else math.inf
        if upto > start and t < end and min(upto, end) - max(t, start) > min_hold:
            most = max(most, n)
    return most
