"""A live-autoscaled deployment's replicas over an observation window (``deployment.autoscale.
enabled``; ``engines.scaling`` scales, ``autoscale.json`` records it).

Input: the serving log, ``[(t_ns, n), ...]`` in time order: from ``t_ns`` on, ``n`` replicas
serve (behind the router); the first entry is the deployment's start with the replicas it
started with (so, as a fixed deployment's cost window does, their own start is counted), then
one entry per replica added to or removed from the router.  The window is ``[start_ns,
end_ns]``, the observation window the cost counts (``window_s``).

- ``replica_seconds_serving`` = ∫ n(t) dt over the window (n before the log's first entry: 0).
- ``replicas_mean`` = ``replica_seconds_serving`` / window seconds.
- ``replicas_max`` = the largest n at any time in the window.
- ``autoscale_scale_ups``: replicas added to the router in the window (entries where n rose,
  counted by how much); ``autoscale_scale_downs``: replicas taken out of it (n fell).
"""

from __future__ import annotations

import math


def serving_at(log: list[tuple[int, int]], t_ns: int) -> int:
    """n at ``t_ns``: the last entry at or before it (0 before the first)."""
    n = 0
    for t, k in log:
        if t > t_ns:
            break
        n = k
    return n


def replica_figures(log: list[tuple[int, int]], start_ns: int, end_ns: int) -> dict:
    """The module doc's figures over ``[start_ns, end_ns]``."""
    window_s = (end_ns - start_ns) / 1e9
    n = serving_at(log, start_ns)
    t, area, most, ups, downs = start_ns, 0.0, n, 0, 0
    for when, k in log:
        if when <= start_ns:
            continue
        if when >= end_ns:
            break
        area += n * (when - t) / 1e9
        ups += max(0, k - n)
        downs += max(0, n - k)
        t, n = when, k
        most = max(most, n)
    area += n * (end_ns - t) / 1e9
    return {"replica_seconds_serving": area, "replicas_mean": area / window_s if window_s > 0 else math.nan,
            "replicas_max": most, "autoscale_scale_ups": ups, "autoscale_scale_downs": downs}
