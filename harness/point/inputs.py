"""What a load point reads of the config, read once and typed (``PointInputs``), and the
over-saturation guard's default (``saturation_guard``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class PointInputs:
    """What a point's steps read of the config, typed, read once when the point is made
    (``from_config``); the groups another module takes whole (the workload, ``client.ray``)
    stay config nodes."""
    cache_state: str                     # engine.cache_state: warm, cold or primed
    on_failure: str                      # engine.on_failure: stop or restart
    workers: int                         # client.workers
    backend: str                         # client.backend: local or ray
    max_schedule_lag_ms: float
    max_clock_error_ms: float
    token_mismatch_tolerance: int        # client.token_mismatch_tolerance (metrics.token_accounting)
    token_mismatch_threshold: float      # client.token_mismatch_threshold
    prepare: str                         # client.prepare: auto, all or stream
    prepare_cache: bool
    prepare_ahead_s: float
    prepare_max_bytes: int               # client.prepare_max_mb, in bytes
    progress: bool
    kill_at_s: float | None              # scenario.kill_at_s (None: no kill)
    kill_signal: str
    recovery_window: int | None
    first_window_s: float | None
    min_attainment: float | None         # slo.min_attainment
    experiment: str
    protocol: str | None
    track: str | None                    # the track's name, if the run is one of a track's
    workload: Any                        # the workload group (loadgen.workloads.build.make_workload)
    ray: Any                             # client.ray (loadgen.ray_workers.RaySettings.from_config)
    autoscaled: bool = False             # deployment.autoscale.enabled (saturation_guard)

    @classmethod
    def from_config(cls, cfg) -> PointInputs:
        c, sc = cfg.client, cfg.get("scenario") or {}
        recovery, first, attain = sc.get("recovery_window"), sc.get("first_window_s"), cfg.slo.get("min_attainment")
        return cls(
            cache_state=str(cfg.engine.cache_state), on_failure=str(cfg.engine.on_failure),
            workers=int(c.workers), backend=str(c.get("backend", "local")),
            max_schedule_lag_ms=float(c.max_schedule_lag_ms), max_clock_error_ms=float(c.max_clock_error_ms),
            token_mismatch_tolerance=int(c.token_mismatch_tolerance),
            token_mismatch_threshold=float(c.token_mismatch_threshold),
            prepare=str(c.prepare), prepare_cache=bool(c.prepare_cache), prepare_ahead_s=float(c.prepare_ahead_s),
            prepare_max_bytes=int(c.prepare_max_mb * 2**20), progress=bool(cfg.progress),
            kill_at_s=sc.get("kill_at_s"), kill_signal=str(sc.get("kill_signal") or "SIGKILL"),
            recovery_window=int(recovery) if recovery is not None else None,
            first_window_s=float(first) if first is not None else None,
            min_attainment=float(attain) if attain is not None else None,
            experiment=str(cfg.experiment), protocol=cfg.protocol.get("name"), track=cfg.get("track"),
            workload=cfg.workload, ray=c.ray,
            autoscaled=bool(((cfg.get("deployment") or {}).get("autoscale") or {}).get("enabled", False)))


def saturation_guard(load: dict, autoscaled: bool) -> bool:
    """Whether the over-saturation guard stops the point (``load.stop_when_saturated``): as given,
    else on, but off for an autoscaled run, whose overload while a replica starts is what it
    measures (an autoscaled replay stopped at 688 of its 899 s never sent its last 105 requests)."""
    given = load.get("stop_when_saturated")
    return (not autoscaled) if given is None else bool(given)


