"""``telemetry.*``: background sampling of the host, the GPUs and the engine's own /metrics."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

from conf.schema.rules import checked


@dataclass
class Nvml:
    enabled: bool = True
    devices: Optional[List[int]] = None       # NVML indices to sample; null: every GPU


@dataclass
class Dcgm:
    url: Optional[str] = None                 # a DCGM exporter, e.g. http://127.0.0.1:9400/metrics
    timeout_s: float = checked(2.0, gt=0)


@dataclass
class Rapl:
    enabled: bool = True
    root: str = "/sys/class/powercap"


@dataclass
class EngineScrape:
    enabled: bool = True                      # sample the engine's own /metrics page every interval_s


@dataclass
class Telemetry:
    interval_s: float = checked(0.5, gt=0)    # background sampling period (host, GPUs, engine /metrics)
    # periodic: every interval_s; edges: at each window's edges only; auto: edges where the engine
    # computes on this host's CPUs (no GPU here), whose cores sampling takes (metrics/telemetry/sampling.py)
    sampling: str = checked("auto", choices=("auto", "periodic", "edges"))
    idle_baseline_s: float = checked(5.0, ge=0)  # engine up, no load: seconds of idle power (where measured)
    engine: EngineScrape = field(default_factory=EngineScrape)
    nvml: Nvml = field(default_factory=Nvml)
    dcgm: Dcgm = field(default_factory=Dcgm)
    rapl: Rapl = field(default_factory=Rapl)

