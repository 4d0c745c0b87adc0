"""How the proxy's process runs: its CPUs, its scheduling priority and its garbage collector.

A chunk waits in the proxy for as long as the process is off its CPU or busy elsewhere, so
both ends of that are the proxy's to control:

- ``proxy.cpus`` pins the process (``sched_setaffinity``), ``proxy.nice`` sets its nice
  value, ``proxy.realtime`` puts it in ``SCHED_FIFO`` at that priority (1-99): it then runs
  the moment a read is ready instead of waiting out another process's time slice on a shared
  core (measured in ``benchmarks/proxy_overhead.py``: that wait, not the proxy's own work, was
  most of its p99 on a core shared with a server).  The kernel's real-time throttling
  (``sched_rt_runtime_us``, 95 % by default) still leaves the core's other tenants a share.
- ``quiet_gc``: Python's cyclic collector, at its default thresholds, ran a collection every
  ~700 container allocations (a few per request here) and a full one over every object
  alive, up to ~40 ms once the proxy was serving.  Everything alive once the proxy is up
  (modules, the app, pooled connections) is frozen out of the collector's reach and the
  young generation is collected every 20 000 allocations, so a collection is rare and short.
"""

from __future__ import annotations

import gc
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from conf.schema import Proxy

GC_THRESHOLDS = (20_000, 20, 1_000)


def parse_cpus(spec: str) -> set[int]:
    """A CPU list as ``taskset`` writes it ("1", "0,2", "2-3"); errors name ``proxy.cpus``."""
    out: set[int] = set()
    for part in str(spec).split(","):
        lo, _, hi = part.strip().partition("-")
        try:
            a, b = int(lo), int(hi or lo)
        except ValueError:
            raise ValueError(f"proxy.cpus={spec!r}: expected a CPU list such as 1, 0,2 or 2-3") from None
        if a < 0 or b < a:
            raise ValueError(f"proxy.cpus={spec!r}: {part!r} is not a CPU range")
        out.update(range(a, b + 1))
    return out


def check_placement(p: Proxy) -> None:
    """What ``place`` would refuse, said before anything starts (errors name the key)."""
    if p.cpus is not None:
        cpus = parse_cpus(p.cpus)
        if hasattr(os, "sched_getaffinity"):
            have = os.sched_getaffinity(0)
            if not cpus & have:
                raise ValueError(f"proxy.cpus={p.cpus!r}: none of these CPUs is available to this process "
                                 f"(available: {','.join(map(str, sorted(have)))})")
    if p.realtime is not None and p.nice is not None:
        raise ValueError("proxy.realtime and proxy.nice: give one (nice does not apply under SCHED_FIFO)")


def place(p: Proxy) -> list[str]:
    """Apply ``proxy.cpus``, ``proxy.nice`` and ``proxy.realtime`` to this process; returns what
    was applied, for the start line.  A refusal by the kernel is an error naming the key."""
    check_placement(p)
    done = []
    if p.cpus is not None:
        cpus = parse_cpus(p.cpus) & os.sched_getaffinity(0)
        os.sched_setaffinity(0, cpus)
        done.append("cpus " + ",".join(map(str, sorted(cpus))))
    if p.nice is not None:
        try:
            os.setpriority(os.PRIO_PROCESS, 0, p.nice)
        except PermissionError:
            raise ValueError(f"proxy.nice={p.nice}: lowering the nice value needs CAP_SYS_NICE (root); "
                             "leave proxy.nice unset or give a value >= the current one") from None
        done.append(f"nice {p.nice}")
    if p.realtime is not None:
        try:
            os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(p.realtime))
        except PermissionError:
            raise ValueError(f"proxy.realtime={p.realtime}: SCHED_FIFO needs CAP_SYS_NICE (root, or "
                             "`setcap cap_sys_nice+ep` on the interpreter); leave proxy.realtime unset") from None
        done.append(f"SCHED_FIFO {p.realtime}")
    return done


def quiet_gc() -> None:
    """Freeze what is alive and collect the young generation rarely (module doc)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)
