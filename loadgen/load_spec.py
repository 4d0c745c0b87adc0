"""The load as the dispatcher runs it (``LoadSpec``): a point's typed ``load`` config
(conf/schema's ``Load``, held, not copied) with what only a run needs (the connections opened
before t0, the saturation guard resolved), checked (``validate``)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from conf.schema import Load, typed
from loadgen.arrivals import OPEN_LOOP

LOAD_KINDS = ("concurrency", "trace") + OPEN_LOOP


@dataclass
class LoadSpec:
    """The load as the dispatcher runs it: the point's typed ``load`` config plus what only a run needs."""
    load: Load  # conf.schema.Load, typed once (from_load)
    prewarm_connections: int | None = None  # connections opened before t0 (default: from the load)
    # open loop: stop early once over-saturated (loadgen.saturation); None: as off (the point's
    # steps resolve the config's null, harness.point.saturation_guard)
    stop_when_saturated: bool | None = False

    @classmethod
    def from_load(cls, load) -> LoadSpec:
        """From a ``load`` config (conf/schema's ``Load``: a composed node or a load point's mapping)."""
        t = typed(load, Load)
        return cls(t, stop_when_saturated=t.stop_when_saturated)

    @classmethod
    def of(cls, kind: str = "poisson", requests_to_send: int | None = None, warmup_requests: int = 0,
           drain_timeout_s: float | None = None, prewarm_connections: int | None = None,
           stop_when_saturated: bool | None = False, **load) -> LoadSpec:
        """A load built in code (tests, benchmarks, a worker's share): ``requests_to_send`` counts the
        warm-up; no warm-up and no drain timeout unless given (``load``: ``Load``'s other fields)."""
        n = requests_to_send - warmup_requests if requests_to_send is not None else None
        return cls(Load(kind=kind, num_requests=n, warmup_requests=warmup_requests,
                        drain_timeout_s=drain_timeout_s, **load), prewarm_connections, stop_when_saturated)

    @property
    def requests_to_send(self) -> int | None:
        """The requests to send: the user's ``load.num_requests`` (measured) plus ``load.warmup_requests``;
        None: bound by duration (or a trace's end).  summary.json's ``num_requests_planned`` is this count."""
        n = self.load.num_requests
        return n + self.load.warmup_requests if n is not None else None

    def share(self, requests_to_send: int | None, prewarm_connections: int | None, **load) -> LoadSpec:
        """One worker's share of this load: ``requests_to_send`` of it (warm-up included) and ``load``'s
        fields changed (``Load``'s).  Its ``num_requests`` is that count less the warm-up: an open-loop
        worker keeps the point's warm-up (request indices are the point's), so it may be zero or less."""
        t = replace(self.load, **load)
        n = requests_to_send - t.warmup_requests if requests_to_send is not None else None
        return replace(self, load=replace(t, num_requests=n), prewarm_connections=prewarm_connections)

    def validate(self, items=None) -> None:
        """Raise ValueError for a load that cannot run (``items``: the workload, where known)."""
        kind, n = self.load.kind, self.requests_to_send
        if kind == "concurrency" and getattr(items, "tasks", None) is not None:
            raise ValueError("load=concurrency does not run a task workload (a task's calls fan out): give tasks an "
                             "arrival process (load=poisson, gamma, constant or trace) and cap the calls in flight "
                             "with load.max_concurrency")
        if kind not in LOAD_KINDS:
            raise ValueError(f"load: unknown load {kind!r} (expected one of {', '.join(LOAD_KINDS)})")
        if kind != "trace" and n is None and self.load.duration_s is None:
            raise ValueError("load: set load.num_requests or load.duration_s")
        if n is not None and n < 1:
            raise ValueError(f"load.num_requests must be >= 1, got {n}")
        if kind == "concurrency" and (self.load.concurrency is None or self.load.concurrency < 1):
            raise ValueError(f"load.concurrency must be >= 1 for load=concurrency, got {self.load.concurrency}")
        if kind in OPEN_LOOP and (self.load.rate is None or self.load.rate <= 0):
            raise ValueError(f"load.rate must be > 0 for load={kind}, got {self.load.rate}")
