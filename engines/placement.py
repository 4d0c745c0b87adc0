"""Where each replica of a deployment runs: its slot (name, role, cores, devices), the address it
listens on, and the process that serves it, on this machine or on a node of a Ray cluster.

``engines.slots.plan_slots`` turns a ``Deployment`` into slots (pure): ``r0, r1, ...`` for replicas (and the
one engine of ``deployment=single``), ``p0.., d0..`` for disaggregated pools, prefill first;
``deployment.placement.cpus`` / ``devices`` give one entry per slot in that order, or none.
``make_placer`` picks the placer for ``deployment.backend`` (``PLACERS``); every placer:

- ``reserve(slot, host, port=None) -> (host, port)``: the address the replica will listen on
  (``deployment.first_port + slot.index`` when set, else a free port);
- ``launch(slot, argv, env, log_path)``: the engine process (``EngineProcess``'s interface),
  pinned with ``taskset -c CPUS`` and given ``CUDA_VISIBLE_DEVICES`` where the slot says;
- ``reserve(placer.router_slot, ...)`` then ``launch_router(argv, env, log_path, host)``: the
  router, never pinned;
- ``provenance()`` and ``close()`` (every process stopped, every Ray actor and group removed).

Pinning is by ``taskset`` prefixed to the command rather than ``sched_setaffinity`` in the
child: ``EngineProcess`` owns the ``Popen`` (no hook runs in the child), the logged command then
says the pinning and can be rerun as it stands, and every process the engine forks inherits it.

Ray (``deployment.backend=ray``): one placement group, one bundle per slot
(``placement.ray_bundle``) plus one for the router (``ROUTER_BUNDLE``), strategy
``placement.ray_strategy``.  ``STRICT_SPREAD`` wants a node per bundle, so there the router's
bundle is a group of its own (else N replicas on N nodes would need N + 1).  Each slot (and the
router) gets one Ray actor in its bundle; the actor picks the port on its own node (host: that
node's IP), starts the engine there with ``EngineProcess`` (its log at ``log_path`` on that node:
``tail`` reads it through the actor) and answers poll, stop, kill and stopped_pids.  The engine
is started through a parent-death guard (``PR_SET_PDEATHSIG``: SIGKILL when the actor's process
ends) so that an actor Ray kills (driver gone, ``ray.kill``) takes its engine with it; its
process group is still stopped as one by ``stop``/``kill``.
"""

from __future__ import annotations

import atexit
import os
import socket
import sys
import time
import weakref

from conf.schema import ClientRay
from engines.base import EngineError
from engines.process import EngineProcess
from engines.slots import (
    PlacementError,
    ReplicaSlot,
    as_deployment,
    check_cores,
    pick_port,
    pinned_command,
    plan_slot,
    plan_slots,
    router_slot,
    slot_record,
)

# What Ray puts in its workers' environment that a local launch would not have (the engine
# inherits the actor's environment): removed unless the driver has it too.
RAY_WORKER_ENV = ("OMP_NUM_THREADS",)
ROUTER_BUNDLE = {"CPU": 1.0}  # the router's own bundle (Ray): one core for a Rust proxy
# Runs before the engine's command (exec: same pid): SIGKILL when the parent (the Ray actor's
# main thread) ends; exits at once if the parent is already gone.  prctl(1) is PR_SET_PDEATHSIG.
PDEATH_GUARD = ("import ctypes,os,sys;ctypes.CDLL(None).prctl(1,9);"
                "os.getppid()==int(sys.argv[1]) or os._exit(70);os.execvp(sys.argv[2],sys.argv[2:])")


# ------------------------------------------------------------------------------------ local
class LocalPlacer:
    """Every replica a process on this machine."""

    backend = "local"

    def __init__(self, deployment, router: bool = True, client_ray=None, ready_timeout_s: float = 60.0):
        """(``client_ray`` and ``ready_timeout_s`` are the Ray placer's: unused here.)"""
        self.deployment = as_deployment(deployment)
        self.slots = plan_slots(self.deployment)
        for slot in self.slots:
            check_cores(slot, "this machine")
        self.router_slot = ReplicaSlot(name="router", role="router", index=len(self.slots)) if router else None
        self.processes: dict[str, EngineProcess] = {}
        self._taken: dict[str, set[int]] = {}

    def add_slot(self, index: int, name: str) -> ReplicaSlot:
        """One more replica slot (``plan_slot``), for live autoscaling; listed in ``slots``."""
        slot = plan_slot(self.deployment, index, name)
        check_cores(slot, "this machine")
        self.slots.append(slot)
        return slot

    def release(self, slot: ReplicaSlot) -> None:
        """A replica stopped for good (scaled down): its process is no longer this placer's to
        stop, and its port may be handed out again."""
        self.processes.pop(slot.name, None)
        if slot.host is not None:
            self._taken.get(slot.host, set()).discard(slot.port)

    def reserve(self, slot: ReplicaSlot, host: str = "127.0.0.1", port: int | None = None) -> tuple[str, int]:
        """``deployment.first_port + slot.index`` (a taken one is an error), else a free port on
        ``host``; ``port``: the router's own (``router.port``)."""
        taken = self._taken.setdefault(host, set())
        p = pick_port(slot, host, self.deployment.first_port, port, taken)
        taken.add(p)
        slot.host, slot.port, slot.node = host, p, socket.gethostname()
        return host, p

    def launch(self, slot: ReplicaSlot, argv, env, log_path) -> EngineProcess:
        if slot.port is None:
            raise RuntimeError(f"replica {slot.name}: reserve its address before launching it")
        argv, env = pinned_command(slot, argv, env)
        proc = EngineProcess(argv, log_path, env=env)
        proc.start()
        self.processes[slot.name] = proc
        return proc

    def launch_router(self, argv, env, log_path, host: str | None = None) -> EngineProcess:
        """The router (never pinned), once ``reserve(self.router_slot, ...)`` gave its address;
        ``host``: where its command makes it listen, if not the reserved host (0.0.0.0)."""
        slot = router_slot(self)
        if host is not None:
            slot.host = host
        proc = EngineProcess([str(a) for a in argv], log_path, env=dict(env or {}))
        proc.start()
        self.processes[slot.name] = proc
        return proc

    def provenance(self) -> dict:
        return {"backend": self.backend, "slots": [slot_record(s) for s in self.slots],
                "router": slot_record(self.router_slot) if self.router_slot else None}

    def close(self, grace_s: float = 15.0) -> None:
        for proc in reversed(list(self.processes.values())):
            proc.stop(grace_s)
        self.processes.clear()


# ------------------------------------------------------------------------------------ Ray
class SlotActor:
    """One slot on its Ray node: reserves the port there, runs the engine there (a plain actor:
    its calls run on the process's main thread, the parent the engine's death guard watches)."""

    def __init__(self, slot: ReplicaSlot):
        self.slot = slot
        self.proc: EngineProcess | None = None

    def hello(self) -> dict:
        import ray

        return {"node_id": ray.get_runtime_context().get_node_id(), "node_ip": ray.util.get_node_ip_address(),
                "hostname": socket.gethostname(), "actor_pid": os.getpid()}

    def reserve(self, first_port: int | None, port: int | None, taken: list[int]) -> tuple[str, int]:
        import ray

        check_cores(self.slot, f"Ray node {socket.gethostname()}")
        host = ray.util.get_node_ip_address()
        return host, pick_port(self.slot, host, first_port, port, set(taken))

    def start(self, argv: list[str], env: dict, log_path: str, unset: list[str]) -> int:
        argv, env = pinned_command(self.slot, argv, env)
        for key in unset:  # (this process is the slot's own: nothing else reads its environment)
            os.environ.pop(key, None)
        guarded = [sys.executable, "-c", PDEATH_GUARD, str(os.getpid()), *argv]
        self.proc = EngineProcess(guarded, log_path, env=env)
        self.proc.start()
        return self.proc.pid

    def poll(self) -> int | None:
        return self.proc.poll() if self.proc else None

    def tail(self, n: int = 40) -> str:
        return self.proc.tail(n) if self.proc else ""

    def stop(self, grace_s: float = 15.0) -> int | None:
        return self.proc.stop(grace_s) if self.proc else None

    def kill(self, wait_s: float = 10.0) -> int | None:
        return self.proc.kill(wait_s) if self.proc else None

    def stopped_pids(self) -> list[int]:
        return self.proc.stopped_pids() if self.proc else []


_REMOTE_SLOT_ACTOR = None


def remote_slot_actor():
    """``SlotActor`` as a Ray actor class, made once."""
    global _REMOTE_SLOT_ACTOR
    if _REMOTE_SLOT_ACTOR is None:
        import ray

        _REMOTE_SLOT_ACTOR = ray.remote(SlotActor)
    return _REMOTE_SLOT_ACTOR


def ray_error(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return f"{type(e).__name__}: {lines[-1] if lines else ''}"[:300]


class RemoteProcess:
    """An engine process on a Ray node, through its slot's actor (``EngineProcess``'s interface).
    ``pid`` is the pid on that node; an actor that died reports its engine dead (``lost``: why)."""

    CALL_S = 30.0  # the longest a quick call (poll, tail) may take: GetTimeoutError past it

    def __init__(self, actor, argv: list[str], log_path: str, pid: int, node_ip: str, node_id: str):
        self.actor, self.argv, self.log_path, self.pid = actor, argv, log_path, pid
        self.node_ip, self.node_id = node_ip, node_id
        self.lost: str | None = None
        self.started_ns = time.perf_counter_ns()  # on the driver's clock, once the node said it started

    def _call(self, method: str, *args, timeout: float | None = None):
        import ray

        if self.lost:
            return None
        try:
            return ray.get(getattr(self.actor, method).remote(*args), timeout=timeout or self.CALL_S)
        except ray.exceptions.RayActorError as e:
            self.lost = f"the Ray actor of pid {self.pid} on {self.node_ip} is gone: {ray_error(e)}"
            return None

    def poll(self) -> int | None:
        """The exit code; None while it runs, or while its actor is too busy to say (a slow
        node: the watchdog's health checks judge that); -9 once the actor is gone."""
        import ray

        try:
            code = self._call("poll")
        except ray.exceptions.GetTimeoutError:
            return None
        return -9 if self.lost else code

    def tail(self, n: int = 40) -> str:
        text = self._call("tail", n)
        return text if text is not None else (self.lost or "")

    def stop(self, grace_s: float = 15.0) -> int | None:
        code = self._call("stop", grace_s, timeout=grace_s + 30)
        return -9 if self.lost else code

    def kill(self, wait_s: float = 10.0) -> int | None:
        code = self._call("kill", wait_s, timeout=wait_s + 30)
        return -9 if self.lost else code

    def stopped_pids(self) -> list[int]:
        return self._call("stopped_pids") or []


def actor_options(bundle: dict) -> dict:
    """Ray's actor options that take exactly the bundle (CPU, GPU, memory and the rest)."""
    rest = {k: v for k, v in bundle.items() if k not in ("CPU", "GPU", "memory")}
    opts = {"num_cpus": bundle.get("CPU", 0), "num_gpus": bundle.get("GPU", 0)}
    if "memory" in bundle:
        opts["memory"] = bundle["memory"]
    if rest:
        opts["resources"] = rest
    return opts


class RayPlacer:
    """Every replica (and the router) a Ray actor in its own bundle of a placement group."""

    backend = "ray"

    def __init__(self, deployment, router: bool = True, client_ray=None, ready_timeout_s: float = 60.0):
        import ray
        from ray.util.placement_group import placement_group

        from engines.ray_cluster import connect

        self.deployment = d = as_deployment(deployment)
        self.slots = plan_slots(d)
        self.router_slot = ReplicaSlot(name="router", role="router", index=len(self.slots)) if router else None
        p = d.placement
        ray_cfg = client_ray if client_ray is not None else ClientRay()
        address, key = ray_cfg.address, "client.ray.address"
        if p.ray_address:
            address, key = p.ray_address, "deployment.placement.ray_address"
        try:
            connect(address, dict(ray_cfg.runtime_env or {}), key)
        except ValueError as e:
            raise PlacementError(str(e)) from None
        self.bundle = {k: float(v) for k, v in dict(p.ray_bundle).items()} or {"CPU": 0.001}  # never empty
        self.strategy = p.ray_strategy
        bundles = [dict(self.bundle) for _ in self.slots]
        self.router_own_group = router and self.strategy == "STRICT_SPREAD"
        if router and not self.router_own_group:
            bundles.append(dict(ROUTER_BUNDLE))
        self.groups = [placement_group(bundles, strategy=self.strategy)]
        if self.router_own_group:
            self.groups.append(placement_group([dict(ROUTER_BUNDLE)], strategy="PACK"))
        self.actors: dict[str, object] = {}
        self.info: dict[str, dict] = {}
        self.processes: dict[str, RemoteProcess] = {}
        self._closed = False
        atexit.register(RayPlacer._close_ref, weakref.ref(self))
        ready, _ = ray.wait([g.ready() for g in self.groups], num_returns=len(self.groups), timeout=ready_timeout_s)
        if len(ready) < len(self.groups):
            avail = ray.available_resources()
            nodes = len([n for n in ray.nodes() if n.get("Alive")])
            self.close()
            hint = (f" ({self.strategy} puts every bundle on a node of its own)"
                    if self.strategy == "STRICT_SPREAD" else "")
            raise PlacementError(
                f"deployment.backend=ray: the Ray cluster could not place {len(self.slots)} replica bundle(s) of "
                f"{self.bundle} (deployment.placement.ray_bundle)"
                + (f" and a router bundle of {ROUTER_BUNDLE}" if router else "")
                + f" with deployment.placement.ray_strategy={self.strategy}{hint} within {ready_timeout_s:g} s; "
                  f"the cluster has {nodes} node(s), available now: "
                  f"{ {k: v for k, v in sorted(avail.items()) if not k.startswith(('node:', 'bundle_group'))} }")

    def _where(self, slot: ReplicaSlot) -> tuple[object, int, dict]:
        """The placement group, bundle index and bundle of a slot."""
        if slot.role == "router":
            if self.router_own_group:
                return self.groups[1], 0, ROUTER_BUNDLE
            return self.groups[0], len(self.slots), ROUTER_BUNDLE
        return self.groups[0], slot.index, self.bundle

    def _actor(self, slot: ReplicaSlot):
        import ray
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        if slot.name not in self.actors:
            pg, i, bundle = self._where(slot)
            actor = remote_slot_actor().options(
                max_restarts=0, max_concurrency=1, **actor_options(bundle),
                scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=i),
            ).remote(slot)
            self.actors[slot.name] = actor
            self.info[slot.name] = ray.get(actor.hello.remote(), timeout=RemoteProcess.CALL_S * 4)
        return self.actors[slot.name]

    def reserve(self, slot: ReplicaSlot, host: str | None = None, port: int | None = None) -> tuple[str, int]:
        """The port is found on the slot's node and the host is that node's IP (``host`` is the
        local backend's: a Ray replica listens where it runs)."""
        import ray

        actor = self._actor(slot)
        node = self.info[slot.name]["node_id"]
        taken = [s.port for s in [*self.slots, self.router_slot] if s is not None and s is not slot
                 and s.node == node and s.port]
        try:
            h, p = ray.get(actor.reserve.remote(self.deployment.first_port, port, taken),
                           timeout=RemoteProcess.CALL_S)
        except ray.exceptions.RayTaskError as e:
            cause = getattr(e, "cause", None)
            if isinstance(cause, PlacementError):  # the message of the node's check, without the traceback
                raise PlacementError(str(cause)) from None
            raise
        slot.host, slot.port, slot.node = h, p, node
        return h, p

    def launch(self, slot: ReplicaSlot, argv, env, log_path) -> RemoteProcess:
        import ray

        if slot.port is None:
            raise RuntimeError(f"replica {slot.name}: reserve its address before launching it")
        actor = self._actor(slot)
        argv = [str(a) for a in argv]
        info = self.info[slot.name]
        env = dict(env or {})
        # Ray sets OMP_NUM_THREADS to the actor's CPUs (torch would then run 1 thread for a
        # {CPU: 1} bundle): the engine gets the driver's, as a local launch would, or none.
        for key in RAY_WORKER_ENV:
            if key in os.environ:
                env.setdefault(key, os.environ[key])
        unset = [k for k in RAY_WORKER_ENV if k not in env]
        try:
            pid = ray.get(actor.start.remote(argv, env, str(log_path), unset), timeout=RemoteProcess.CALL_S)
        except ray.exceptions.RayTaskError as e:  # (a command not found on that node)
            cause = getattr(e, "cause", None)
            if isinstance(cause, RuntimeError):
                raise EngineError(f"replica {slot.name} on Ray node {info['node_ip']}: {cause}") from None
            raise
        full, _ = pinned_command(slot, argv, env)
        proc = RemoteProcess(actor, full, str(log_path), pid, info["node_ip"], info["node_id"])
        self.processes[slot.name] = proc
        return proc

    def launch_router(self, argv, env, log_path, host: str | None = None) -> RemoteProcess:
        """The router in its own bundle, once ``reserve(self.router_slot)`` gave its address (it
        listens on its node's IP: ``host`` is the local backend's)."""
        return self.launch(router_slot(self), argv, env, log_path)

    def provenance(self) -> dict:
        from ray.util.placement_group import placement_group_table

        groups = []
        for g in self.groups:
            try:
                t = placement_group_table(g)
            except Exception:  # noqa: BLE001 - removed already
                t = {}
            groups.append({"id": g.id.hex(), "strategy": t.get("strategy", self.strategy),
                           "bundles": [dict(b) for b in g.bundle_specs],
                           "bundle_nodes": {int(k): v for k, v in (t.get("bundles_to_node_id") or {}).items()}})
        return {"backend": self.backend, "slots": [slot_record(s) for s in self.slots],
                "router": slot_record(self.router_slot) if self.router_slot else None,
                "placement_groups": groups,
                "nodes": {name: {"node_ip": i["node_ip"], "hostname": i["hostname"]} for name, i in self.info.items()}}

    def close(self, grace_s: float = 15.0) -> None:
        """Stop every engine (through its actor), kill the actors, remove the groups; the death
        guard ends an engine whose actor would not answer."""
        import ray

        if self._closed:
            return
        self._closed = True
        live = [p for p in self.processes.values() if not p.lost]
        if live:  # all at once: each actor waits out its own engine's grace
            ray.wait([p.actor.stop.remote(grace_s) for p in live], num_returns=len(live), timeout=grace_s + 30)
        for actor in self.actors.values():
            try:
                ray.kill(actor, no_restart=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
        for g in self.groups:
            try:
                ray.util.remove_placement_group(g)
            except Exception:  # noqa: BLE001 - already removed, or Ray shut down
                pass
        self.processes.clear()
        self.actors.clear()

    @staticmethod
    def _close_ref(ref) -> None:
        placer = ref()
        if placer is not None:
            try:
                placer.close(grace_s=5.0)
            except Exception:  # noqa: BLE001 - Ray already shut down at exit
                pass


PLACERS = {"local": LocalPlacer, "ray": RayPlacer}


def make_placer(deployment, *, router: bool = True, client_ray=None, ready_timeout_s: float = 60.0):
    """The placer of ``deployment.backend``.  ``router``: reserve a place for the router too;
    ``client_ray``: the ``client.ray`` config as ``ClientRay`` (its address and runtime_env are used when
    ``deployment.placement.ray_address`` is null)."""
    d = as_deployment(deployment)
    return PLACERS[d.backend](d, router=router, client_ray=client_ray, ready_timeout_s=ready_timeout_s)
