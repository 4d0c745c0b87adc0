"""The ``load`` group: the arrival process of a load point (conf/load/*.yaml)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from omegaconf import MISSING

from conf.schema.rules import checked

LOAD_KINDS = ("poisson", "constant", "gamma", "concurrency", "trace")


@dataclass
class Load:
    # arrival process (load=NAME): poisson | constant | gamma (open loop), concurrency (closed), trace
    kind: str = checked(MISSING, choices=LOAD_KINDS)
    rate: Optional[float] = checked(None, gt=0)       # open loop: requests/s
    concurrency: Optional[int] = checked(None, ge=1)  # closed loop: users
    burstiness: float = checked(1.0, gt=0)            # gamma shape (1: Poisson)
    num_requests: Optional[int] = checked(None, ge=1)  # measured requests (warm-up on top)
    duration_s: Optional[float] = checked(None, gt=0)  # alternative: stop sending after this long
    warmup_requests: int = checked(2, ge=0)           # inside the cost window, outside latency statistics
    max_concurrency: Optional[int] = checked(None, ge=1)  # cap on requests in flight
    drain_timeout_s: float = checked(120.0, ge=0)     # after duration_s, how long in-flight requests may finish
    # open loop: stop a point whose backlog grows without bound; null: on, but off where
    # deployment.autoscale.enabled (an overload while a replica starts is what that run measures)
    stop_when_saturated: Optional[bool] = None
    seed: int = 0
