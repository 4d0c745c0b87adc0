"""The samplers ``telemetry.*`` asks for (see conf/config.yaml)."""

from __future__ import annotations

from metrics.telemetry.base import Sampler
from metrics.telemetry.dcgm import DcgmSampler
from metrics.telemetry.host import HostSampler
from metrics.telemetry.nvml import NvmlSampler
from metrics.telemetry.rapl import RaplSampler


def build_samplers(tcfg, pids: dict[str, int] | None = None) -> list[Sampler]:
    """The samplers ``telemetry.*`` asks for (conf/schema.py's ``Telemetry``)."""
    out: list[Sampler] = [HostSampler(pids)]
    if tcfg.nvml.enabled:
        devices = tcfg.nvml.devices
        out.append(NvmlSampler(list(devices) if devices is not None else None))
    out.append(DcgmSampler(tcfg.dcgm.url, tcfg.dcgm.timeout_s))
    if tcfg.rapl.enabled:
        out.append(RaplSampler(tcfg.rapl.root))
    return out
