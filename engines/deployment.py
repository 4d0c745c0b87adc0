"""A deployment: replicas of one engine config behind a real router, or prefill and decode
pools with the KV cache moved between them, measured as one endpoint.

``make_served(cfg, run_dir)`` gives the session what it drives: the engine adapter itself
for ``deployment=single`` (today's behaviour), else a ``Deployment`` with the same lifecycle
(prepare, start, health, provenance, cache reset, stop, kill), whose ``base_url`` is the
router's.  Each replica is an adapter of ``engines/`` (``engines.replica_launch``) with its own name
(``r0``, ``r1`` ...; disaggregated ``p0 ..``, ``d0 ..``), port, cores or devices
(``engines.placement``), log file (``engine-<name>.log``) and, where the engine takes one,
the middleware that names it in every response header (``x-tokenfactory-replica``), so each
request row says which replica served it.  The router (``engines.routers``) starts once
every replica is healthy, in front of their URLs.

With live autoscaling (``deployment.autoscale.enabled``, ``engines.live_scaler``) the replicas
change while a load runs: ``new_replica`` makes one more (the next name, the first free
placement entry), ``start_replica`` / ``join`` start it and put it behind the router,
``leave`` / ``drain`` / ``retire`` take one out, let its requests finish and stop it.
``replicas`` is then the replicas serving now; ``retired`` those stopped, kept for the
records (their rows, provenance); ``serving_log`` every change of the serving count.

Replicas already up (``engine.replica_urls``, ``engine.launch=false``) get the harness's
router in front of them; an endpoint that is already a deployment (``engine=openai`` with
``engine.replica_metrics_urls``) is driven as one engine whose replicas' ``/metrics`` pages
are sampled one by one.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

from conf.schema import Client, EngineBase, Router, group, typed_engine
from conf.schema import Deployment as DeploymentSchema
from engines import deployment_record, prometheus
from engines.base import EngineAdapter, EngineError
from engines.readiness import become_ready, warm_up_request
from engines.registry import make_engine
from engines.replica_launch import make_replica, prepare_replica, start_replicas


@dataclass(frozen=True)
class ServedParts:
    """What ``make_served`` reads of the config, typed once (``served_parts``)."""
    deployment: DeploymentSchema
    router: Router
    engine: EngineBase
    client: Client


def make_served(cfg, run_dir):
    """What the session drives for the composed ``cfg``: an adapter (one engine) or a
    ``Deployment`` (``deployment.kind`` replicas or disaggregated, or replicas already up)."""
    parts = served_parts(cfg)
    dep, router_name, eng = parts.deployment, parts.router.name, parts.engine
    kind = dep.kind
    check_autoscale(parts)
    if eng.name == "dynamo":  # Dynamo's frontend routes between its own workers
        engine = make_engine(cfg.engine, run_dir)
        engine.configure(dep, router_name)
        return engine
    if kind == "single" and not eng.replica_urls:
        if router_name != "none":
            raise EngineError(f"router={router_name} routes between replicas: with deployment=single there is one "
                              "engine (use deployment=replicas deployment.replicas=N, or engine.replica_urls=[...] "
                              "for replicas already up)")
        engine = make_engine(cfg.engine, run_dir)
        engine.replica = "r0"
        metrics_urls = [str(u) for u in eng.replica_metrics_urls]
        if metrics_urls:
            return ExternalDeployment(engine, metrics_urls)
        return engine
    if router_name == "none":
        raise EngineError(f"deployment={kind} needs a router in front of its replicas: router=vllm or router=sglang")
    return Deployment(cfg, run_dir, parts)


def served_parts(cfg) -> ServedParts:
    """The composed ``cfg``'s deployment, router, engine and client sections as their schemas'
    dataclasses, converted once; a config with only an engine section (a test's, a tool's) gets
    the schemas' defaults for the rest (deployment=single, router=none)."""
    return ServedParts(deployment=group(cfg, "deployment", DeploymentSchema), router=group(cfg, "router", Router),
                       engine=typed_engine(cfg.engine), client=group(cfg, "client", Client))


def check_autoscale(parts: ServedParts) -> None:
    """``deployment.autoscale.enabled=true`` asks for what the harness can scale: replicas it
    launches on this machine behind a router, starting within ``[min_replicas, max_replicas]``
    (raised before anything starts, naming the key)."""
    dep = parts.deployment
    if not dep.autoscale.enabled:
        return
    from engines.autoscale_policy import ScalingPolicy

    kind = dep.kind
    if kind != "replicas":
        raise EngineError(f"deployment.autoscale.enabled=true scales the replicas of deployment=replicas, not "
                          f"deployment={kind} (use deployment=replicas router=vllm)")
    if parts.router.name == "none":
        raise EngineError("deployment.autoscale.enabled=true adds and removes replicas behind a router: "
                          "set router=vllm or router=sglang")
    if parts.engine.replica_urls or not parts.engine.launch:
        raise EngineError("deployment.autoscale.enabled=true starts and stops replicas itself: not with "
                          "engine.replica_urls or engine.launch=false")
    if dep.backend != "local":
        raise EngineError(f"deployment.autoscale.enabled=true scales local replicas; deployment.backend="
                          f"{dep.backend} is not supported")
    try:
        policy = ScalingPolicy(dep.autoscale)
    except ValueError as e:
        raise EngineError(str(e)) from None
    lo, hi = policy.autoscale.min_replicas, policy.autoscale.max_replicas
    if not lo <= int(dep.replicas) <= hi:
        raise EngineError(f"deployment.replicas={dep.replicas} (the replicas it starts with) is outside "
                          f"deployment.autoscale.min_replicas={lo} .. max_replicas={hi}")


class ExternalDeployment:
    """An endpoint that is already a deployment (an llm-d or Dynamo gateway): driven as the one
    engine it is, its replicas' ``/metrics`` pages (``engine.replica_metrics_urls``) sampled
    per replica, labelled ``r0``, ``r1`` ... in the order given."""

    def __init__(self, engine: EngineAdapter, metrics_urls: list[str]):
        self.__dict__["engine"] = engine
        self.__dict__["metrics_urls"] = metrics_urls

    def __getattr__(self, name):  # everything else is the endpoint's adapter
        return getattr(self.engine, name)

    def __setattr__(self, name, value):
        setattr(self.engine, name, value)

    @property
    def server_metric_map(self) -> dict:
        if "metric_map" not in self.__dict__:  # read once: the replicas' engine, from their first page
            self.__dict__["metric_map"] = (self.engine.server_metric_map
                                           or metric_map_for(self.metrics_urls[0], self.engine.auth()))
        return self.__dict__["metric_map"]

    def metrics_endpoints(self) -> list[tuple[str | None, str]]:
        return [(f"r{i}", url) for i, url in enumerate(self.metrics_urls)]

    def topology(self) -> dict:
        return {"kind": "external", "endpoint": self.engine.base_url, "replicas": len(self.metrics_urls),
                "replica_metrics_urls": self.metrics_urls, "router": "the endpoint's own"}

    def provenance(self) -> dict:
        return {**self.engine.provenance(), "deployment": self.topology()}


def metric_map_for(url: str, headers: dict) -> dict:
    """The adapter map that fits a replica's metrics page (vLLM's or SGLang's series)."""
    from engines.http import http_get
    from engines.sglang import SGLang
    from engines.vllm import VLLM

    try:
        status, body = http_get(url, timeout=5, headers=headers)
    except OSError as e:
        raise EngineError(f"engine.replica_metrics_urls: GET {url} failed: {e}") from None
    if status != 200:
        raise EngineError(f"engine.replica_metrics_urls: GET {url} answered HTTP {status}")
    text = body.decode("utf-8", "replace")
    for cls in (VLLM, SGLang):
        if any(series in text for series, _ in cls.server_metric_map.values()):
            return cls.server_metric_map
    raise EngineError(f"engine.replica_metrics_urls: {url} shows neither vLLM's nor SGLang's series")


class Member:
    """A process of the deployment as the watchdog sees it: a replica's adapter, or the router."""

    def __init__(self, label: str, target, replica: str | None):
        self.name = label                     # in the watchdog's messages: "engine=vllm replica r1 ..."
        self.target = target
        self.replica = replica                # None: the router
        self.health_path = getattr(target, "health_path", "/health")
        self.liveness_path = getattr(target, "liveness_path", None)

    @property
    def process(self):
        return self.target.process

    def health_ok(self, timeout: float = 5.0, path: str | None = None) -> bool:
        if isinstance(self.target, EngineAdapter):
            return self.target.health_ok(timeout=timeout, path=path)
        return self.target.health_ok(timeout)

    def kill(self) -> None:
        self.target.kill()


class Deployment:
    """Replicas of ``cfg.engine`` (placed by ``deployment.placement``) behind ``cfg.router``."""

    def __init__(self, cfg, run_dir, parts: ServedParts | None = None):
        from engines.placement import make_placer  # a deployment's parts, not one engine's
        from engines.routers import make_router

        parts = parts if parts is not None else served_parts(cfg)
        self.cfg = cfg.engine
        self.dep = parts.deployment
        self.run_dir = Path(run_dir)
        self.external = bool(parts.engine.replica_urls)
        if self.external and parts.engine.launch and parts.engine.name != "openai":
            raise EngineError("engine.replica_urls names replicas already up: set engine.launch=false "
                              "(the harness launches only the router in front of them)")
        self.placer = None if self.external else make_placer(self.dep, client_ray=parts.client.ray)
        if self.external:
            urls = [str(u).rstrip("/") for u in parts.engine.replica_urls]
            self.slots = [_ExternalSlot(f"r{i}", url) for i, url in enumerate(urls)]
        else:  # the placer's own slots: what it reserves and launches is what its record shows
            self.slots = self.placer.slots
        self.replicas: list[EngineAdapter] = []
        for slot in self.slots:
            ecfg = cfg.engine
            if self.external:  # the replica's own address; it is not launched
                ecfg = OmegaConf.merge(cfg.engine, {"base_url": slot.url, "launch": False})
            self.replicas.append(make_replica(ecfg, self.run_dir, slot.name))
        self.first = self.replicas[0]
        self.name = self.first.name
        self.router = make_router(cfg.router, self.run_dir)
        self.process = None                   # no single process: see ``members``
        self.started_ns: int | None = None
        self.healthy_ns: int | None = None
        self.ready_ns: int | None = None
        self.replica_ready_ns: dict[str, int] = {}
        self.prepared = False
        # live autoscaling (engines.live_scaler): the replicas stopped, and the serving count over time
        self.retired: list[EngineAdapter] = []
        self.starting: list[EngineAdapter] = []
        self.serving_log: list[tuple[int, int]] = []   # (perf_counter_ns, replicas serving from then)
        self.next_name = len(self.replicas)
        self.lock = threading.Lock()

    # --- what the session reads as it reads an adapter --------------------------------------
    launched = True  # the router is always the harness's own process, even before replicas already up
    base_url = property(lambda self: self.router.base_url)
    served_model = property(lambda self: self.first.served_model)
    tokenizer = property(lambda self: self.first.tokenizer)
    api_key = property(lambda self: self.first.api_key)
    model = property(lambda self: self.first.model)
    server_metric_map = property(lambda self: self.first.server_metric_map)
    metrics_path = property(lambda self: self.first.metrics_path)
    reset_path = property(lambda self: self.first.reset_path)
    health_path = property(lambda self: self.first.health_path)
    liveness_path = property(lambda self: self.first.liveness_path)

    def auth(self) -> dict:
        return self.first.auth()

    def dialect(self) -> dict:
        return self.first.dialect()

    def max_model_len(self):
        return self.first.max_model_len()

    def features(self) -> dict:
        return self.first.features()

    def feature_flags(self) -> list[str]:
        return self.first.feature_flags()

    @property
    def kind(self) -> str:
        return "replicas" if self.external else self.dep.kind

    def members(self) -> list[Member]:
        """Every process the watchdog looks at: the replicas it launched, then the router."""
        out = [Member(f"{r.name} replica {r.replica}", r, r.replica) for r in self.replicas if r.process is not None]
        return out + [Member(f"{self.name} deployment's router ({self.router.name}-router)", self.router, None)]

    def metrics_endpoints(self) -> list[tuple[str | None, str]]:
        return [(r.replica, r.base_url + r.metrics_path) for r in self.replicas if r.server_metric_map]

    def replica_names(self) -> dict[str, str]:
        """Header or URL -> replica name, for the client's ``replica`` column (a replica that
        autoscaling adds later names itself in the header: the client keeps a name it does not map)."""
        known = self.replicas + self.starting + self.retired
        out = {r.replica: r.replica for r in known}
        out.update({r.base_url: r.replica for r in known})
        return out

    def roles(self) -> dict[str, str]:
        return {s.name: s.role for s in self.slots}

    def survivors(self, dead: str) -> list[str]:
        """The replicas of ``dead``'s pool still running (it fails the whole deployment when none are)."""
        role = self.roles()[dead]
        return [r.replica for r in self.replicas if r.replica != dead and self.roles()[r.replica] == role
                and r.alive()]

    # --- lifecycle ---------------------------------------------------------------------------
    def prepare(self) -> None:
        """Each replica's model, flags, environment and address (reserved where it will run),
        and the router's address (the client's base URL is known before anything starts).
        The router's binary first: a missing one is named before any replica loads its model."""
        if self.prepared:
            return
        self.router.binary()
        self.prepared = True
        if self.placer is None:
            self.router.reserve()
        else:  # where the placement starts it (a Ray node's address)
            self.router.host, self.router.port = self.placer.reserve(self.placer.router_slot, self.router.host,
                                                                     port=self.router.port)
        for eng, slot in zip(self.replicas, self.slots):
            if self.external:
                eng.prepare()
                continue
            prepare_replica(eng, slot, self.placer, self.router, self.dep)

    def start(self, warm_up: bool = True) -> None:
        """Every replica at once (each waits for its own health and warm-up), then the router
        in front of them, then one request through the router."""
        self.prepare()
        self.started_ns = time.perf_counter_ns()
        # a disaggregated pool is warmed through the router: a prefill replica alone may not answer a whole request
        errors = start_replicas(self.replicas, warm_up and self.kind == "replicas")
        self.replica_ready_ns.update({r.replica: r.ready_ns for r in self.replicas if r.ready_ns is not None})
        if errors:
            self.stop()
            raise errors[0]

        def router_up() -> None:
            self.start_router()
            # from the deployment's start, as a fixed deployment's cost window counts its replicas
            self.serving_now(self.started_ns)

        become_ready(self, router_up, warm_up)  # the warm-up request through the router

    def start_router(self) -> None:
        roles = self.roles()
        urls = {r.replica: r.base_url for r in self.replicas}
        spawn = None
        if self.placer is not None:
            def spawn(argv, log, env):
                return self.placer.launch_router(argv, env, log)
        if self.kind == "disaggregated":
            prefill = [(urls[n], getattr(s, "bootstrap_port", None)) for n, s in
                       ((s.name, s) for s in self.slots) if roles[n] == "prefill"]
            decode = [urls[n] for n in urls if roles[n] == "decode"]
            self.router.start(prefill=prefill, decode=decode, spawn=spawn)
        else:
            self.router.start(workers=list(urls.values()), spawn=spawn)

    def warm_up(self) -> None:
        warm_up_request(self)

    def health_ok(self, timeout: float = 5.0, path: str | None = None) -> bool:
        return self.router.health_ok(timeout)

    def alive(self) -> bool:
        return self.router.alive() and all(r.alive() for r in self.replicas)

    def stop(self) -> None:
        """The router first (no new requests reach a replica that is going), then every replica
        (those autoscaling started, and any still starting, included)."""
        try:
            self.router.stop()
        finally:
            for r in self.replicas + self.starting:
                r.stop()
            if self.placer is not None:
                self.placer.close()

    def kill(self) -> None:
        self.router.kill()
        for r in self.replicas + self.starting:
            r.kill()

    # --- live autoscaling (engines.live_scaler) ------------------------------------------------
    def serving_now(self, t_ns: int | None = None) -> int:
        """Note the serving count from ``t_ns`` (now) on; returns the time noted."""
        t = t_ns or time.perf_counter_ns()
        self.serving_log.append((t, len(self.replicas)))
        return t

    def new_replica(self, name: str | None = None) -> EngineAdapter:
        """One replica more, prepared, not started: named ``r<next>`` (names of replicas that
        served are never reused, so a row's replica is one process), in the first placement
        entry no replica holds.  ``name``: a replica whose start failed, retried under its name
        (it served nothing); its old slot and record give way to the new one."""
        with self.lock:
            if name is not None:
                self.slots[:] = [s for s in self.slots if s.name != name]  # the placer's own list
                self.retired = [r for r in self.retired if r.replica != name]
            used = {self.slot(r.replica).index for r in self.replicas + self.starting}
            limit = self.dep.autoscale.max_replicas
            free = [i for i in range(limit) if i not in used]
            if not free:
                raise EngineError(f"deployment.autoscale.max_replicas={limit}: every replica slot is in use")
            if name is None:
                name = f"r{self.next_name}"
                self.next_name += 1
            slot = self.placer.add_slot(free[0], name)
            eng = make_replica(self.cfg, self.run_dir, name)
            self.starting.append(eng)
        try:
            prepare_replica(eng, slot, self.placer, self.router, self.dep)
        except BaseException:
            with self.lock:
                self.starting.remove(eng)
            raise
        return eng

    def slot(self, name: str):
        return next(s for s in self.slots if s.name == name)

    def start_replica(self, eng: EngineAdapter) -> None:
        """Launch a new replica and wait for its health and warm-up, as the first ones are."""
        eng.start(warm_up=True)  # stops its process itself if it fails (the caller cancels it)
        self.replica_ready_ns[eng.replica] = eng.ready_ns

    def cancel(self, eng: EngineAdapter) -> None:
        """A new replica that will not serve (its start failed, or the load ended first): stopped
        if it runs, its slot freed."""
        with self.lock:
            if eng in self.starting:
                self.starting.remove(eng)
        self.retire(eng)

    def join(self, eng: EngineAdapter) -> int:
        """Put a started replica behind the router; it serves once the router lists it healthy.
        Returns the serving log's time of it (perf_counter_ns)."""
        self.router.add_worker(eng.base_url)
        with self.lock:
            self.starting.remove(eng)
            self.replicas.append(eng)
            return self.serving_now()

    def leave(self, eng: EngineAdapter) -> int:
        """Take a replica from behind the router: no new request reaches it from here on.
        Returns the serving log's time of it (perf_counter_ns)."""
        with self.lock:
            if len(self.replicas) <= 1:
                raise EngineError(f"replica {eng.replica} is the deployment's last: it is not taken out")
        self.router.remove_worker(eng.base_url)
        with self.lock:
            self.replicas.remove(eng)
            return self.serving_now()

    def drain(self, eng: EngineAdapter, timeout_s: float, poll_s: float = 0.5) -> bool:
        """Wait until the replica has no request running or waiting (its own ``/metrics``), at
        most ``timeout_s``; False: it still had some (or its page never said) at the end."""
        deadline = time.monotonic() + timeout_s
        while True:
            values = eng.server_metrics() if eng.server_metric_map else {}
            if "running" in values and values.get("running", 0) + values.get("waiting", 0) <= 0:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(poll_s)

    def retire(self, eng: EngineAdapter) -> None:
        """Stop a replica taken out (its process group, as at the deployment's stop)."""
        eng.stop()
        self.placer.release(self.slot(eng.replica))
        with self.lock:
            if eng not in self.retired:
                self.retired.append(eng)

    def reset_cache(self) -> bool:
        """Every replica's prefix cache emptied (False where the engine has no way to)."""
        done = [r.reset_cache() for r in self.replicas]
        return all(done)

    def no_reset_route(self) -> str:
        return self.first.no_reset_route()

    # --- what it is --------------------------------------------------------------------------
    def version(self) -> str | None:
        return self.first.version()

    def topology(self) -> dict:
        return deployment_record.topology(self)

    def provenance(self) -> dict:
        return deployment_record.provenance(self)

    def replica_records(self, known: dict | None = None) -> dict:
        return deployment_record.replica_records(self, known)

    def server_metrics(self, text=None) -> dict:
        """The replicas' counters summed under the common names (gauges summed too)."""
        return prometheus.summed(r.server_metrics() for r in self.replicas)


class _ExternalSlot:
    """A replica already up at ``url`` (engine.replica_urls)."""

    def __init__(self, name: str, url: str):
        self.name, self.url, self.role, self.host, self.cpus, self.devices = name, url, "replica", None, None, None

