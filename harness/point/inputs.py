"""What a load point reads of the config, read once and typed (``PointInputs``), and the
over-saturation guard's default (``saturation_guard``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from conf.schema import Client, Deployment, Scenario, Slo, group, typed


@dataclass(frozen=True)
class PointInputs:
    """What a point's steps read of the config, read once when the point is made (``from_config``):
    the ``client`` and ``scenario`` groups typed whole (conf/schema's ``Client``, ``Scenario``; with
    ``slo`` and ``deployment`` typed for one value each), the rest as single values; the workload group
    stays a config node (``make_workload`` takes it)."""
    client: Client                       # client.* (workers, backend, prepare*, ray, limits)
    scenario: Scenario                   # scenario.* (kill_at_s, kill_signal, recovery_window, first_window_s)
    cache_state: str                     # engine.cache_state: warm, cold or primed
    on_failure: str                      # engine.on_failure: stop or restart
    progress: bool
    min_attainment: float | None         # slo.min_attainment
    experiment: str
    protocol: str | None
    track: str | None                    # the track's name, if the run is one of a track's
    workload: Any                        # the workload group (loadgen.workloads.build.make_workload)
    autoscaled: bool = False             # deployment.autoscale.enabled (saturation_guard)

    @classmethod
    def from_config(cls, cfg) -> PointInputs:
        attain = group(cfg, "slo", Slo).min_attainment
        return cls(
            client=typed(cfg.client, Client), scenario=group(cfg, "scenario", Scenario),
            cache_state=str(cfg.engine.cache_state), on_failure=str(cfg.engine.on_failure),
            progress=bool(cfg.progress), min_attainment=float(attain) if attain is not None else None,
            experiment=str(cfg.experiment), protocol=cfg.protocol.name, track=cfg.track,
            workload=cfg.workload, autoscaled=group(cfg, "deployment", Deployment).autoscale.enabled)

    @property
    def prepare_max_bytes(self) -> int:
        """``client.prepare_max_mb``, in bytes."""
        return int(self.client.prepare_max_mb * 2**20)


def saturation_guard(load: dict, autoscaled: bool) -> bool:
    """Whether the over-saturation guard stops the point (``load.stop_when_saturated``): as given,
    else on, but off for an autoscaled run, whose overload while a replica starts is what it
    measures (an autoscaled replay stopped at 688 of its 899 s never sent its last 105 requests)."""
    given = load.get("stop_when_saturated")
    return (not autoscaled) if given is None else bool(given)


