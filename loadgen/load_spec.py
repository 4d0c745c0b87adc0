"""The load as the dispatcher runs it (``LoadSpec``): a point's ``load`` config
(conf/schema.py's ``Load``) with what only a run needs (the warm-up included in the requests to
send, the connections opened before t0, the saturation guard resolved), checked (``validate``)."""

from __future__ import annotations

from dataclasses import dataclass

from conf.schema import Load, typed
from loadgen.arrivals import OPEN_LOOP

LOAD_KINDS = ("concurrency", "trace") + OPEN_LOOP


@dataclass
class LoadSpec:
    kind: str = "poisson"
    rate: float | None = None
    concurrency: int | None = None
    # the requests to send: the user's load.num_requests (measured) plus load.warmup_requests; None: bound
    # by duration (or a trace's end).  summary.json's num_requests_planned is this count.
    requests_to_send: int | None = None
    duration_s: float | None = None
    warmup_requests: int = 0
    burstiness: float = 1.0
    max_concurrency: int | None = None
    seed: int = 0
    drain_timeout_s: float | None = None  # after duration_s: how long in-flight requests may finish
    prewarm_connections: int | None = None  # connections opened before t0 (default: from the load)
    # open loop: stop early once over-saturated (loadgen.saturation); None: as off (the point's
    # steps resolve the config's null, harness.point.saturation_guard)
    stop_when_saturated: bool | None = False

    @classmethod
    def from_load(cls, load) -> LoadSpec:
        """From a ``load`` config (conf/schema.py's ``Load``: a composed node or a load point's
        mapping); warm-up requests come on top of the measured ``num_requests`` (``requests_to_send``)."""
        t = typed(load, Load)
        n = t.num_requests
        return cls(kind=t.kind, rate=t.rate, concurrency=t.concurrency,
                   requests_to_send=n + t.warmup_requests if n is not None else None, duration_s=t.duration_s,
                   warmup_requests=t.warmup_requests, burstiness=t.burstiness, max_concurrency=t.max_concurrency,
                   seed=t.seed, drain_timeout_s=t.drain_timeout_s, stop_when_saturated=t.stop_when_saturated)

    def validate(self, items=None) -> None:
        """Raise ValueError for a load that cannot run (``items``: the workload, where known)."""
        if self.kind == "concurrency" and getattr(items, "tasks", None) is not None:
            raise ValueError("load=concurrency does not run a task workload (a task's calls fan out): give tasks an "
                             "arrival process (load=poisson, gamma, constant or trace) and cap the calls in flight "
                             "with load.max_concurrency")
        if self.kind not in LOAD_KINDS:
            raise ValueError(f"load: unknown load {self.kind!r} (expected one of {', '.join(LOAD_KINDS)})")
        if self.kind != "trace" and self.requests_to_send is None and self.duration_s is None:
            raise ValueError("load: set load.num_requests or load.duration_s")
        if self.requests_to_send is not None and self.requests_to_send < 1:
            raise ValueError(f"load.num_requests must be >= 1, got {self.requests_to_send}")
        if self.kind == "concurrency" and (self.concurrency is None or self.concurrency < 1):
            raise ValueError(f"load.concurrency must be >= 1 for load=concurrency, got {self.concurrency}")
        if self.kind in OPEN_LOOP and (self.rate is None or self.rate <= 0):
            raise ValueError(f"load.rate must be > 0 for load={self.kind}, got {self.rate}")
