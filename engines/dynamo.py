"""NVIDIA Dynamo: its OpenAI frontend (``python -m dynamo.frontend``, the router) and N workers
(``python -m dynamo.mocker``, or ``dynamo.vllm`` / ``dynamo.sglang`` / ``dynamo.trtllm`` on a GPU
host), each a process of its own started from the interpreter ``engine.python`` names.

They find each other through Dynamo's file discovery (``--discovery-backend file`` under a
folder of this session's own, ``DYN_FILE_KV``), requests go over TCP and events over ZMQ, all
bound to the loopback address: no etcd, no NATS.  The frontend is this adapter's ``base_url``
and process; the workers are members of a deployment as ``engines.deployment``'s replicas are
(``r0``, ``r1`` ...; disaggregated ``p0 ..`` and ``d0 ..``): each has its own log
(``engine-<name>.log``), its own Prometheus page (Dynamo's system server, ``DYN_SYSTEM_PORT``,
which carries the mocker's vLLM-style ``vllm:*`` gauges) sampled per worker, and its own
watchdog, so a worker killed mid-run is named and counted while the others serve on.  The
frontend's own page (``/metrics`` on its HTTP port: requests as it answered them, its queue,
its TTFT and ITL histograms) is sampled in the same rounds as the router's (``FRONTEND_METRICS``).

Which worker served a request: every request asks for ``nvext.extra_fields=["worker_id"]``
and the frontend answers with ``nvext.worker_id.decode_worker_id`` (the worker's instance id)
in the stream; the client maps that id to the worker's name (read from the ``worker_id``
label of each worker's own metrics page once it is up).  A response without it: ``unknown``.

Mocker workers emulate an engine (continuous batching, chunked prefill, KV blocks with prefix
caching and preemption) and time it by a model, not by running one: every run on them says
so (``emulation``: ``summary.json``'s ``emulated`` and ``timing_source``, provenance, the
console and the report).
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time

from engines import prometheus
from engines.base import EngineAdapter, EngineError, interpreter_distribution_versions, redact_argv
from engines.http import http_get, retry_until
from engines.process import EngineProcess, ProcessHolder, port_in_use
from engines.readiness import become_ready

WORKER_KINDS = ("mocker", "vllm", "sglang", "trtllm")
# The planes every process shares: file discovery, TCP requests, ZMQ events (no etcd or NATS).
PLANES = ["--discovery-backend", "file", "--request-plane", "tcp", "--event-plane", "zmq"]
# Dynamo names the interface its response streams listen on (not an address): the loopback one.
LOOPBACK_INTERFACE = "lo"
# The mocker's timing when neither a profile nor aiconfigurator is named: Dynamo's polynomial fit.
POLYNOMIAL = "mocker-polynomial"
MOCKER_KNOBS = frozenset({"prefix_caching", "chunked_prefill", "max_num_batched_tokens", "max_num_seqs",
                          "kv_cache_dtype"})
# A worker's page (Dynamo's system server): the mocker's vLLM-style gauges and Dynamo's own counters.
WORKER_METRICS = {
    "running": ("vllm:num_requests_running", None),
    "waiting": ("vllm:num_requests_waiting", None),
    "kv_cache_usage": ("vllm:kv_cache_usage_perc", None),
    "preemptions": ("vllm:num_preemptions_total", None),
    "worker_requests": ("dynamo_component_requests_total", {"dynamo_endpoint": "generate"}),
    "worker_inflight": ("dynamo_component_inflight_requests", {"dynamo_endpoint": "generate"}),
}
# The frontend's page (Dynamo 1.4.2): every series summed over its labels (models, endpoints,
# request types); ``requests_ok`` those it answered with status="success".  The histograms'
# sums and counts give the frontend's own mean TTFT, ITL and request time over a run
# (``metrics.engine_counters.router_summary``), beside the client's.
FRONTEND_METRICS = {
    "requests": ("dynamo_frontend_requests_total", None),
    "requests_ok": ("dynamo_frontend_requests_total", {"status": "success"}),
    "inflight": ("dynamo_frontend_inflight_requests", None),
    "queued": ("dynamo_frontend_queued_requests", None),
    "disconnected_clients": ("dynamo_frontend_disconnected_clients", None),
    "output_tokens": ("dynamo_frontend_output_tokens_total", None),
    "ttft_time_sum": ("dynamo_frontend_time_to_first_token_seconds_sum", None),
    "ttft_time_count": ("dynamo_frontend_time_to_first_token_seconds_count", None),
    "itl_time_sum": ("dynamo_frontend_inter_token_latency_seconds_sum", None),
    "itl_time_count": ("dynamo_frontend_inter_token_latency_seconds_count", None),
    "request_time_sum": ("dynamo_frontend_request_duration_seconds_sum", None),
    "request_time_count": ("dynamo_frontend_request_duration_seconds_count", None),
}


def timing_source(mocker) -> str:
    """How a mocker worker times its steps: ``mocker-profile:PATH`` (a measured profile,
    ``--planner-profile-data``), ``mocker-aic:SYSTEM/BACKEND[/VERSION]`` (aiconfigurator's
    model, ``--aic-perf-model``), else ``mocker-polynomial`` (Dynamo's built-in fit)."""
    if mocker.planner_profile_data:
        return f"mocker-profile:{mocker.planner_profile_data}"
    if mocker.aic_system:
        parts = [str(mocker.aic_system), str(mocker.aic_backend or mocker.engine_type)]
        if mocker.aic_backend_version:
            parts.append(str(mocker.aic_backend_version))
        return "mocker-aic:" + "/".join(parts)
    return POLYNOMIAL


def emulation_of(engine_cfg) -> dict:
    """Whether the engine config ``engine_cfg`` (a composed ``engine`` group) runs an emulated
    engine, and by what: ``engine=dynamo`` with mocker workers is; anything else is measured."""
    if engine_cfg.get("name") != "dynamo" or engine_cfg.get("worker") != "mocker":
        return {"emulated": False, "timing_source": "measured"}
    m = engine_cfg.mocker
    return {"emulated": True, "timing_source": timing_source(m), "emulator": "dynamo.mocker",
            "emulated_engine": str(m.engine_type), "speedup_ratio": float(m.speedup_ratio)}


def mocker_flags(mocker) -> list[str]:
    """``engine.mocker.*`` as ``dynamo.mocker`` flags (null: the mocker's own default)."""
    m = mocker
    argv = ["--engine-type", str(m.engine_type), "--speedup-ratio", f"{float(m.speedup_ratio):g}"]
    for value, flag in ((m.decode_speedup_ratio, "--decode-speedup-ratio"),
                        (m.num_gpu_blocks, "--num-gpu-blocks-override"), (m.block_size, "--block-size"),
                        (m.preemption_mode, "--preemption-mode"),
                        (m.startup_time_s, "--startup-time"), (m.planner_profile_data, "--planner-profile-data"),
                        (m.kv_transfer_bandwidth, "--kv-transfer-bandwidth")):
        if value is not None:
            argv += [flag, f"{value:g}" if isinstance(value, float) else str(value)]
    if m.aic_system:
        argv += ["--aic-perf-model", "--aic-system", str(m.aic_system)]
        for value, flag in ((m.aic_backend, "--aic-backend"), (m.aic_backend_version, "--aic-backend-version"),
                            (m.aic_tp_size, "--aic-tp-size")):
            if value is not None:
                argv += [flag, str(value)]
    if m.reasoning:
        argv += ["--reasoning", json.dumps(dict(m.reasoning), sort_keys=True)]
    return argv


def system_port(host: str, taken: set[int] = frozenset(), tries: int = 200) -> int:
    """A free port for a worker's system server below 32768: Dynamo 1.4 reads DYN_SYSTEM_PORT as
    a signed 16-bit number, so the kernel's ephemeral ports (32768 and up) are refused."""
    import random

    rng = random.Random()
    for _ in range(tries):
        port = rng.randrange(20000, 32768)
        if port not in taken and not port_in_use(host, port):
            return port
    raise EngineError(f"engine=dynamo: no free port for a worker's metrics page on {host} in 20000-32767")


class Worker(ProcessHolder):
    """One Dynamo worker process as the watchdog and the telemetry see it: its name, role,
    process, log and metrics page (its liveness: the page answers)."""

    def __init__(self, name: str, role: str, host: str):
        self.name = f"dynamo worker {name}"
        self.target = self
        self.replica = name
        self.role = role                     # replica (aggregated) | prefill | decode
        self.host = host
        self.system_port: int | None = None
        self.process: EngineProcess | None = None
        self.instance_id: str | None = None  # Dynamo's id of it, as the frontend names it in nvext.worker_id
        self.health_path = "/metrics"
        self.liveness_path = None

    @property
    def metrics_url(self) -> str:
        return f"http://{self.host}:{self.system_port}/metrics"

    def health_ok(self, timeout: float = 5.0, path: str | None = None) -> bool:
        try:
            status, _ = http_get(self.metrics_url, timeout=timeout)
            return status == 200
        except OSError:
            return False

    def server_metrics(self, metric_map: dict) -> dict[str, float]:
        """Its page's values under the common names of ``metric_map``; {} where it does not answer."""
        try:
            status, body = http_get(self.metrics_url, timeout=5)
        except OSError:
            return {}
        if status != 200:
            return {}
        return prometheus.common_values(body.decode("utf-8", "replace"), metric_map)

    def read_instance_id(self) -> str | None:
        """The worker's instance id: the ``worker_id`` label (hex) of its own page, in decimal
        as the frontend writes it in ``nvext.worker_id``."""
        try:
            status, body = http_get(self.metrics_url, timeout=5)
        except OSError:
            return None
        if status != 200:
            return None
        try:
            samples, _ = prometheus.parse(body.decode("utf-8", "replace"))
        except ValueError:
            return None
        for s in samples:
            wid = s.labels.get("worker_id")
            if s.name == "dynamo_component_requests_total" and s.labels.get("dynamo_endpoint") == "generate" and wid:
                try:
                    return str(int(wid, 16))
                except ValueError:
                    return None
        return None


class Dynamo(EngineAdapter):
    name = "dynamo"
    health_path = "/health"
    module = "dynamo.frontend"
    supported_features = MOCKER_KNOBS
    takes_exact_output = True
    server_metric_map = WORKER_METRICS

    def __init__(self, cfg, run_dir):
        super().__init__(cfg, run_dir)
        self.kind = "replicas"                 # replicas (aggregated) | disaggregated: set by ``configure``
        self.counts = {"replica": int(cfg.workers)}
        self.workers: list[Worker] = []
        self.kv_dir: str | None = None
        self._versions: dict | None = None

    # --- configuration -------------------------------------------------------------------
    def configure(self, deployment, router_name: str) -> None:
        """The worker set from ``deployment``: ``single`` is ``engine.workers`` aggregated
        workers, ``disaggregated`` ``deployment.prefill`` prefill and ``deployment.decode``
        decode workers.  Dynamo's frontend is the router (``engine.router_mode``)."""
        if router_name != "none":
            raise EngineError(f"engine=dynamo: Dynamo's frontend is the router (engine.router_mode="
                              f"{self.cfg.router_mode}); router={router_name} would put another in front of it")
        kind = deployment.kind if deployment is not None else "single"
        if kind == "replicas":
            raise EngineError("engine=dynamo: the number of aggregated workers is engine.workers=N "
                              "(deployment=replicas launches engines behind router=vllm|sglang)")
        if kind == "disaggregated":
            if self.cfg.worker != "mocker":
                raise EngineError(f"engine=dynamo deployment=disaggregated: launched here for mocker workers "
                                  f"only (engine.worker={self.cfg.worker}: start its workers yourself)")
            self.kind = "disaggregated"
            self.counts = {"prefill": int(deployment.prefill), "decode": int(deployment.decode)}
        if deployment is not None and deployment.backend != "local":
            raise EngineError(f"engine=dynamo: its processes run on this machine; deployment.backend="
                              f"{deployment.backend} is not supported")

    @property
    def emulated(self) -> bool:
        return self.cfg.worker == "mocker"

    def emulation(self) -> dict:
        """Whether this engine's timings are emulated, and by what (``summary.json``'s
        ``emulated`` and ``timing_source``; provenance holds the rest)."""
        return emulation_of(self.cfg)

    def check_features(self) -> None:
        super().check_features()
        if self.features() and self.cfg.worker in ("sglang", "trtllm"):
            raise EngineError(f"engine=dynamo engine.worker={self.cfg.worker}: engine.features.* are translated for "
                              "mocker and vllm workers; give the worker's own flags in engine.worker_args")
        if self.cfg.planner:
            raise EngineError("engine.planner=true: Dynamo's planner scales workers through a Kubernetes or "
                              "virtual connector that tokenfactory does not drive yet; run with engine.planner=false")

    def feature_flags(self) -> list[str]:
        """``engine.features.*`` under the mocker's (vLLM-style) flags."""
        f = self.features()
        argv: list[str] = []
        for knob, flag in (("prefix_caching", "enable-prefix-caching"), ("chunked_prefill", "enable-chunked-prefill")):
            if knob in f:
                argv.append(f"--{flag}" if f[knob] else f"--no-{flag}")
        for knob, flag in (("max_num_batched_tokens", "--max-num-batched-tokens"), ("max_num_seqs", "--max-num-seqs"),
                           ("kv_cache_dtype", "--kv-cache-dtype")):
            if knob in f:
                argv += [flag, str(f[knob])]
        return argv

    def dialect(self) -> dict:
        """The shared dialect, plus ``nvext.extra_fields=["worker_id"]``: the frontend then names
        the worker that served each request in its stream."""
        d = super().dialect()
        nvext = dict(d["extra_body"].get("nvext") or {})
        nvext["extra_fields"] = sorted({*(nvext.get("extra_fields") or []), "worker_id"})
        d["extra_body"] = {**d["extra_body"], "nvext": nvext}
        return d

    # --- commands ------------------------------------------------------------------------
    def launch_command(self) -> list[str]:
        """The frontend: its HTTP address, the router mode, the shared planes, its own flags."""
        return [self.python(), "-m", "dynamo.frontend", "--http-host", self.host, "--http-port", str(self.port),
                "--router-mode", str(self.cfg.router_mode), *PLANES, *[str(a) for a in self.cfg.frontend_args]]

    def full_command(self) -> list[str]:
        return self.launch_command() + [str(a) for a in self.cfg.extra_args]

    def worker_command(self, role: str) -> list[str]:
        """One worker: ``dynamo.<engine.worker>`` on the model, the shared planes, its role's
        flags (disaggregated), the mocker's timing flags, the features, ``engine.worker_args``."""
        kind = self.cfg.worker
        model_flag = "--model" if kind == "vllm" else "--model-path"
        argv = [self.python(), "-m", f"dynamo.{kind}", model_flag, str(self.model), *PLANES]
        if self.cfg.served_model_name:
            argv += ["--served-model-name" if kind != "mocker" else "--model-name", str(self.cfg.served_model_name)]
        if self.cfg.max_model_len and kind in ("mocker", "vllm"):
            argv += ["--max-model-len", str(int(self.cfg.max_model_len))]
        if kind == "mocker":
            argv += mocker_flags(self.cfg.mocker)
            if role in ("prefill", "decode"):
                argv += ["--disaggregation-mode", role]
        return argv + self.feature_flags() + [str(a) for a in self.cfg.worker_args]

    def worker_env(self, worker: Worker) -> dict[str, str]:
        """A worker's environment: the shared discovery folder, its metrics page's port, and
        every listener on the loopback address."""
        return {**self.shared_env(), "DYN_SYSTEM_HOST": worker.host,
                "DYN_SYSTEM_PORT": str(worker.system_port), "TOKENFACTORY_REPLICA": worker.replica}

    def shared_env(self) -> dict[str, str]:
        """Every process's: the session's discovery folder; requests and response streams on the
        loopback address when the frontend listens there (Dynamo's default is the host's own)."""
        env = {**self.launch_env(), "DYN_FILE_KV": str(self.kv_dir), "DYN_TCP_RPC_HOST": self.host}
        if self.host.startswith("127.") or self.host in ("localhost", "::1"):
            env["DYN_TCP_RESPONSE_STREAM_HOST"] = LOOPBACK_INTERFACE
        return env

    # --- lifecycle -----------------------------------------------------------------------
    def prepare(self) -> None:
        if not self.launched:
            raise EngineError("engine=dynamo launches Dynamo's frontend and workers; for a Dynamo deployment "
                              "already up use engine=openai engine.base_url=URL (engine.replica_metrics_urls "
                              "for its workers' pages)")
        if self.cfg.command:
            raise EngineError("engine=dynamo builds its frontend's and workers' commands; use "
                              "engine.frontend_args / engine.worker_args / engine.extra_args instead of engine.command")
        if not self.cfg.python:
            import importlib.util

            if importlib.util.find_spec("dynamo") is None:  # this interpreter has no Dynamo: name the fix
                raise EngineError("engine=dynamo needs engine.python=/path/to/dynamo-venv/bin/python (an "
                                  "interpreter with ai-dynamo>=1.4.2; `bash .ci/dynamo_venv.sh` builds one and "
                                  "prints it)")
        super().prepare()
        if not self.workers:
            names = {"replica": "r", "prefill": "p", "decode": "d"}
            self.workers = [Worker(f"{names[role]}{i}", role, self.host)
                            for role, n in self.counts.items() for i in range(n)]
        taken: set[int] = set()
        for w in self.workers:
            w.system_port = system_port(self.host, taken)
            taken.add(w.system_port)

    def start(self, warm_up: bool = True) -> None:
        """Every worker and the frontend at once, each its own process group; healthy when the
        frontend lists the model and every worker's ``generate`` endpoint, and every worker's
        page answers (its instance id read from it); then one request."""
        self.prepare()
        self.kv_dir = tempfile.mkdtemp(prefix="tokenfactory-dynamo-kv-")
        self.started_ns = time.perf_counter_ns()

        def come_up() -> None:
            for w in self.workers:
                w.process = EngineProcess(self.worker_command(w.role), self.run_dir / f"engine-{w.replica}.log",
                                          env=self.worker_env(w))
                w.process.start()
            self.process = EngineProcess(self.full_command(), self.run_dir / self.log_name, env=self.shared_env())
            self.process.start()
            self.wait_ready(float(self.cfg.startup_timeout_s))

        become_ready(self, come_up, warm_up)

    def wait_ready(self, timeout_s: float) -> None:
        want = len([w for w in self.workers if w.role != "prefill"])

        def ready() -> bool:
            procs = [("frontend", self.process)] + [(f"worker {w.replica}", w.process) for w in self.workers]
            for label, proc in procs:
                if proc.poll() is not None:
                    raise EngineError(f"engine=dynamo: the {label} exited with code {proc.poll()} before it was "
                                      f"ready.\ncommand: {' '.join(redact_argv(proc.argv))}\nlast lines of "
                                      f"{proc.log_path}:\n{proc.tail()}")
            health = self.get_json("/health", timeout=2)
            if not isinstance(health, dict):
                return False
            generate = [i for i in health.get("instances") or [] if i.get("endpoint") == "generate"]
            if len(generate) < want or not (self.get_json("/v1/models", timeout=2) or {}).get("data"):
                return False
            for w in self.workers:
                if w.instance_id is None:
                    w.instance_id = w.read_instance_id()
            return all(w.instance_id is not None for w in self.workers)

        def never() -> EngineError:
            tails = "\n".join(f"last lines of {p.log_path}:\n{p.tail(15)}"
                              for p in [self.process] + [w.process for w in self.workers] if p is not None)
            return EngineError(f"engine=dynamo at {self.base_url}: the frontend and its {len(self.workers)} "
                               f"worker(s) were not ready within {timeout_s:g} s (GET /health lists each worker's "
                               f"generate endpoint)\n{tails}")

        retry_until(ready, timeout_s, 0.5, on_timeout=never, resolution=0.02)  # start-up timed to 2 % of the wait

    def alive(self) -> bool:
        """The frontend and every worker (ProcessHolder's meaning of alive for each)."""
        return super().alive() and all(w.alive() for w in self.workers)

    def stop(self) -> None:
        """The frontend first (no new request reaches a worker that is going), then every worker;
        the discovery folder last."""
        try:
            super().stop()
        finally:
            for w in self.workers:
                w.stop()
            if self.kv_dir:
                shutil.rmtree(self.kv_dir, ignore_errors=True)

    def kill(self) -> None:
        super().kill()
        for w in self.workers:
            w.kill()
            w.instance_id = None  # a restarted worker registers under a new id

    # --- as a deployment (the session's watchdog, telemetry and rows) -------------------
    def members(self) -> list:
        """Every process the watchdog looks at, as ``engines.deployment.Member`` s are seen: each
        worker (a replica), then the frontend (the router, ``replica`` None)."""
        return [w for w in self.workers if w.process is not None] + [Frontend(self)]

    def roles(self) -> dict[str, str]:
        return {w.replica: w.role for w in self.workers}

    def survivors(self, dead: str) -> list[str]:
        """The workers of ``dead``'s pool still running (none: the whole engine fails)."""
        role = self.roles()[dead]
        return [w.replica for w in self.workers if w.replica != dead and w.role == role and w.alive()]

    def replica_names(self) -> dict[str, str]:
        """Instance id (as ``nvext.worker_id`` gives it) -> worker name, for each row's ``replica``."""
        return {w.instance_id: w.replica for w in self.workers if w.instance_id is not None}

    def metrics_endpoints(self) -> list[tuple[str | None, str]]:
        return [(w.replica, w.metrics_url) for w in self.workers if w.system_port is not None]

    def router_metrics(self) -> tuple[str, dict]:
        """The frontend's page, on its HTTP port."""
        return self.base_url + "/metrics", FRONTEND_METRICS

    def server_metrics(self, text=None) -> dict:
        """The workers' counters and gauges summed under the common names."""
        return prometheus.summed(w.server_metrics(self.server_metric_map) for w in self.workers)

    def topology(self) -> dict:
        pools: dict[str, list[str]] = {}
        for w in self.workers:
            pools.setdefault(w.role, []).append(w.replica)
        out = {"kind": self.kind, "replicas": len(self.workers), "pools": {r: len(n) for r, n in pools.items()},
               "replica_names": pools, "router": "dynamo-frontend", "router_policy": str(self.cfg.router_mode),
               "backend": "local", "worker": str(self.cfg.worker), "planner": bool(self.cfg.planner)}
        if self.kind == "disaggregated":
            out["prefill_decode"] = f"{len(pools.get('prefill', []))}:{len(pools.get('decode', []))}"
        return out

    # --- what it is ----------------------------------------------------------------------
    def versions(self) -> dict:
        """``ai-dynamo`` and ``ai-dynamo-runtime`` as the engine's interpreter has them."""
        if self._versions is None:
            self._versions = interpreter_distribution_versions(self.python(), ("ai-dynamo", "ai-dynamo-runtime"))
        return self._versions

    def version(self) -> str | None:
        return self.versions().get("ai-dynamo")

    def provenance(self) -> dict:
        p = super().provenance()
        p["versions"] = self.versions()
        p["emulation"] = self.emulation()
        p["deployment"] = self.topology()
        p["router"] = {"name": "dynamo-frontend", "router_mode": str(self.cfg.router_mode), "base_url": self.base_url,
                       "command": p.get("command")}
        p["planner"] = bool(self.cfg.planner)
        p["replicas"] = {w.replica: {"role": w.role, "worker": str(self.cfg.worker), "metrics_url": w.metrics_url,
                                     "instance_id": w.instance_id,
                                     "command": redact_argv(w.process.argv) if w.process is not None else None,
                                     "engine_version": p.get("engine_version")}
                         for w in self.workers}
        p["how_rows_name_workers"] = ("nvext.worker_id.decode_worker_id in each response's stream (asked for with "
                                      "nvext.extra_fields), mapped to the worker whose metrics page carries that "
                                      "worker_id; unknown where a response carries none")
        return p

    def reset_cache(self) -> bool:
        return False

    def no_reset_route(self) -> str:
        return "engine=dynamo has no route that empties its workers' prefix caches; use engine.cache_state=warm"


class Frontend(ProcessHolder):
    """The frontend as the watchdog sees it (the deployment's router): killing it kills it alone."""

    def __init__(self, engine: Dynamo):
        self.engine = engine
        self.name = "dynamo frontend"
        self.target = self
        self.replica = None
        self.health_path = engine.health_path
        self.liveness_path = None

    @property
    def process(self):
        return self.engine.process

    def health_ok(self, timeout: float = 5.0, path: str | None = None) -> bool:
        return self.engine.health_ok(timeout=timeout)

