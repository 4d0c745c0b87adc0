"""The samplers ``telemetry.*`` asks for (see conf/config.yaml)."""

from __future__ import annotations

from metrics.telemetry.base import Sampler
from metrics.telemetry.dcgm import DcgmSampler
from metrics.telemetry.host import HostSampler
from metrics.telemetry.nvml import NvmlSampler
from metrics.telemetry.rapl import RaplSampler


def build_samplers(tcfg, pids: dict[str, int] | None = None) -> list[Sampler]:
    """The samplers ``telemetry.*`` asks for (see conf/config.yaml)."""
    tcfg = tcfg or {}
    out: list[Sampler] = [HostSampler(pids)]
    nv = tcfg.get("nvml") or {}
    if nv.get("enabled", True):
        devices = nv.get("devices")
        out.append(NvmlSampler(list(devices) if devices is not None else None))
    dc = tcfg.get("dcgm") or {}
    out.append(DcgmSampler(dc.get("url"), float(dc.get("timeout_s") or 2.0)))
    rp = tcfg.get("rapl") or {}
    if rp.get("enabled", True):
        out.append(RaplSampler(rp.get("root") or "/sys/class/powercap"))
    return out
