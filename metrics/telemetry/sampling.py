"""When telemetry samples: every ``telemetry.interval_s`` through the window, or at its edges only.

A CPU engine (vLLM's CPU build, ``transformers serve --device cpu``) computes on the same cores
the load generator and the telemetry run on.  There, any process that wakes every half second
beside it, however little it does (a scrape of ``/metrics``, a read of ``/proc``), preempts the
engine's compute threads, which wait on each other at every step: on a 2-core host it halved a
closed loop's throughput against vLLM's CPU engine, and lowering the sampler's priority did not
help (docs/measured/vllm-cross-check.md).  So ``telemetry.sampling=auto`` samples at the window's
edges only (``edges``) when the engine runs on this host and the host has no GPU, and every
``interval_s`` (``periodic``) otherwise (an emulated engine, Dynamo's mocker, computes nothing to
disturb: periodic too).

At the edges only, every cumulative figure is still exact over the window (the engine's
counters and histograms, energy counters, CPU time, bytes sent), since each is a difference of
two readings; what is lost are the gauges' course inside it (``engine_running_mean``,
``engine_kv_cache_usage_max``, ...), which are then absent rather than read off two points.
"""

from __future__ import annotations

import glob
import ipaddress
import socket
from urllib.parse import urlsplit

SAMPLING = ("auto", "periodic", "edges")
PERIODIC, EDGES = "periodic", "edges"
# Device files of a GPU driver: a GPU the host has, also where NVML cannot be read.
GPU_DEVICE_FILES = ("/dev/nvidiactl", "/dev/nvidia[0-9]*", "/dev/kfd")


def sampling_mode(mode: str, engine_urls: list[str], gpu_seen: bool, emulated: bool = False) -> tuple[str, str]:
    """(``periodic`` or ``edges``, why) for ``telemetry.sampling=mode``, the engine's URLs (its
    endpoint and every ``/metrics`` page), whether this host has a GPU and whether the engine only
    emulates its timing (Dynamo's mocker: no compute threads to preempt)."""
    if mode not in SAMPLING:
        raise ValueError(f"telemetry.sampling={mode!r}: one of {', '.join(SAMPLING)}")
    if mode != "auto":
        return mode, f"telemetry.sampling={mode}"
    if gpu_seen:
        return PERIODIC, "auto: this host has a GPU"
    if emulated:
        return PERIODIC, "auto: the engine emulates its timing"
    away = [u for u in engine_urls if not on_this_host(u)]
    if away or not engine_urls:
        return PERIODIC, f"auto: the engine runs elsewhere ({away[0]})" if away else "auto: no engine URL"
    return EDGES, ("auto: the engine runs on this host's CPUs (no GPU here), where sampling in its window "
                   "slows it; telemetry.sampling=periodic samples every interval_s")


def on_this_host(url: str) -> bool:
    """Whether ``url``'s host is this machine: a loopback address, or one of its own."""
    host = urlsplit(url if "//" in url else "//" + url).hostname or ""
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:  # a name that does not resolve is not this machine's
        return False
    addrs = {info[4][0].split("%", 1)[0] for info in infos}
    return all(ipaddress.ip_address(a).is_loopback or ipaddress.ip_address(a).is_unspecified
               or a in own_addresses() for a in addrs)


def own_addresses() -> set[str]:
    """This machine's own IP addresses (every interface)."""
    import psutil

    return {a.address.split("%", 1)[0] for addrs in psutil.net_if_addrs().values() for a in addrs
            if a.family in (socket.AF_INET, socket.AF_INET6)}


def host_has_gpu() -> bool:
    """A GPU driver's device files on this host (NVIDIA or AMD)."""
    return any(glob.glob(p) for p in GPU_DEVICE_FILES)
