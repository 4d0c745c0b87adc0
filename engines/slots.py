"""A deployment's slots, planned without looking at any machine: each replica's name, role, cores
and devices (``plan_slots``, ``plan_slot`` for one that live autoscaling adds), and what a slot
implies where it runs: its cores checked (``check_cores``), its command pinned
(``pinned_command``: ``taskset`` and ``CUDA_VISIBLE_DEVICES``), its port picked (``pick_port``).
The placers (``engines.placement``) reserve and launch them."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass

from conf.schema import Deployment, typed
from engines.base import EngineError
from engines.process import free_port, port_in_use


class PlacementError(EngineError):
    """A deployment that cannot be placed as configured; the message names the field."""


@dataclass
class ReplicaSlot:
    name: str                   # r0.. (replicas, single), p0.. d0.. (disaggregated), router
    role: str                   # replica | prefill | decode | router
    index: int                  # position among the slots (placement lists, first_port, Ray bundle)
    cpus: str | None = None     # taskset core list
    devices: str | None = None  # CUDA_VISIBLE_DEVICES
    host: str | None = None     # once reserved: the address it listens on
    port: int | None = None
    node: str | None = None     # the Ray node id, or this machine's hostname




def as_deployment(deployment) -> Deployment:
    return deployment if isinstance(deployment, Deployment) else typed(deployment, Deployment)


def describe(d: Deployment) -> str:
    if d.kind == "disaggregated":
        return f"deployment.kind=disaggregated: {d.prefill} prefill + {d.decode} decode"
    if d.kind == "replicas":
        return f"deployment.kind=replicas, deployment.replicas={d.replicas}"
    return "deployment.kind=single"


def parse_cores(spec: str) -> set[int]:
    """A taskset core list ("0", "2-3", "0,2", "0-3,8") as a set; ValueError if malformed."""
    out: set[int] = set()
    for part in str(spec).split(","):
        lo, dash, hi = part.strip().partition("-")
        if not lo.isdigit() or (dash and not hi.isdigit()):
            raise ValueError(spec)
        a, b = int(lo), int(hi) if dash else int(lo)
        if b < a:
            raise ValueError(spec)
        out.update(range(a, b + 1))
    return out


def plan_slots(deployment) -> list[ReplicaSlot]:
    """The slots of a deployment, prefill before decode; no machine is looked at.  With live
    autoscaling (``deployment.autoscale.enabled``) the placement lists hold one entry per
    replica up to ``autoscale.max_replicas``: the first ``deployment.replicas`` are the slots
    started with the deployment, the next ones those scaling adds (``plan_slot``)."""
    d = as_deployment(deployment)
    if d.kind == "disaggregated":
        roles = [("prefill", "p", i) for i in range(d.prefill)] + [("decode", "d", i) for i in range(d.decode)]
    else:
        roles = [("replica", "r", i) for i in range(d.replicas if d.kind == "replicas" else 1)]
    n = len(roles)
    scaling = d.kind == "replicas" and d.autoscale.enabled
    listed = d.autoscale.max_replicas if scaling else n
    p = d.placement
    for key, values in (("cpus", p.cpus), ("devices", p.devices)):
        if values and scaling and len(values) < listed:
            raise PlacementError(
                f"deployment.placement.{key} has {len(values)} entries but deployment.autoscale.max_replicas="
                f"{listed}: with deployment.autoscale.enabled=true give one per replica it may run "
                f"({listed}: a replica scaling adds takes the next entry), or none")
        if values and not scaling and len(values) != n:
            raise PlacementError(
                f"deployment.placement.{key} has {len(values)} entries for {n} replica(s) ({describe(d)}): "
                f"give one per replica, in the order prefill then decode, or none")
        for i, v in enumerate(values):
            if not str(v).strip():
                raise PlacementError(f"deployment.placement.{key}[{i}] is empty")
    for i, spec in enumerate(p.cpus):
        try:
            parse_cores(spec)
        except ValueError:
            raise PlacementError(f"deployment.placement.cpus[{i}]={spec!r}: expected a core list "
                                 "such as 0, 2-3 or 0,2") from None
    return [ReplicaSlot(name=f"{prefix}{k}", role=role, index=i,
                        cpus=str(p.cpus[i]).strip() if p.cpus else None,
                        devices=str(p.devices[i]).strip() if p.devices else None)
            for i, (role, prefix, k) in enumerate(roles)]


def plan_slot(deployment, index: int, name: str | None = None) -> ReplicaSlot:
    """A replica of ``deployment=replicas`` in placement entry ``index`` (its cores, devices and
    ``first_port + index``), named ``name`` (default ``r<index>``), as ``plan_slots`` makes
    them: a replica live autoscaling adds."""
    p = as_deployment(deployment).placement
    for key, values in (("cpus", p.cpus), ("devices", p.devices)):
        if values and index >= len(values):
            raise PlacementError(f"deployment.placement.{key} has {len(values)} entries: none for replica "
                                 f"r{index} (give one per replica up to deployment.autoscale.max_replicas)")
    return ReplicaSlot(name=name or f"r{index}", role="replica", index=index,
                       cpus=str(p.cpus[index]).strip() if p.cpus else None,
                       devices=str(p.devices[index]).strip() if p.devices else None)


def check_cores(slot: ReplicaSlot, where: str) -> None:
    """The slot's cores must be ones this process may run on (``where``: this machine, a node)."""
    if slot.cpus is None:
        return
    have = os.sched_getaffinity(0)
    missing = sorted(parse_cores(slot.cpus) - have)
    if missing:
        raise PlacementError(
            f"deployment.placement.cpus[{slot.index}]={slot.cpus!r} (replica {slot.name}): "
            f"{where} has no core {','.join(map(str, missing))} (cores available: {core_list(have)})")


def core_list(cores) -> str:
    """A set of cores as a taskset list (0-3,8)."""
    out, run = [], []
    for c in sorted(cores):
        if run and c == run[-1] + 1:
            run.append(c)
            continue
        if run:
            out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
        run = [c]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return ",".join(out)


def pinned_command(slot: ReplicaSlot, argv, env) -> tuple[list[str], dict]:
    """The slot's command and environment: taskset for its cores, CUDA_VISIBLE_DEVICES for its
    devices."""
    if isinstance(argv, str):
        raise TypeError("engine commands are argument lists, never shell strings")
    argv = [str(a) for a in argv]
    env = dict(env or {})
    if slot.cpus is not None:
        argv = ["taskset", "-c", slot.cpus, *argv]
    if slot.devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = slot.devices
    return argv, env


def pick_port(slot: ReplicaSlot, host: str, first_port: int | None, port: int | None, taken: set[int]) -> int:
    """``port`` if given (the router's), else ``first_port + slot.index``, else a free port not
    in ``taken`` (ports already handed out on that host)."""
    if port is not None:
        if port in taken or port_in_use(host, port):
            raise PlacementError(f"router.port={port}: port {port} on {host} is taken")
        return port
    if first_port is not None and slot.role != "router":
        p = first_port + slot.index
        if p > 65535:
            raise PlacementError(f"deployment.first_port={first_port}: replica {slot.name} would listen on "
                                 f"{p} (first_port + {slot.index}), past 65535")
        if p in taken or port_in_use(host, p):
            raise PlacementError(f"deployment.first_port={first_port}: port {p} (replica {slot.name}, "
                                 f"first_port + {slot.index}) on {host} is taken")
        return p
    for _ in range(100):
        p = free_port(host)
        if p not in taken:
            return p
    raise PlacementError(f"no free port on {host} for replica {slot.name}")


def router_slot(placer) -> ReplicaSlot:
    slot = placer.router_slot
    if slot is None:
        raise RuntimeError("this placer was made without a router (make_placer(..., router=False))")
    if slot.port is None:
        raise RuntimeError("reserve the router's address (placer.reserve(placer.router_slot, host)) "
                           "before launching it")
    return slot


def slot_record(slot: ReplicaSlot) -> dict:
    return {k: v for k, v in asdict(slot).items() if k != "index"}

