"""The router processes of a deployment: vllm-router and sglang-router in front of the replicas.

Both are Rust binaries shipped in PyPI wheels (``vllm-router``, ``sglang-router``), started from
their console scripts: ``vllm-router ARGS`` and ``sglang-router launch ARGS`` (the latter is
``sgl-model-gateway``; ``smg`` and ``amg`` are the same script).  Every flag emitted here is in
the ``--help`` of the installed version (saved under tests/engines/data/, and the tests check
the flags still exist there):

- plain replicas: ``--worker-urls URL...``, ``--policy P``;
- prefill/decode: vllm-router ``--vllm-pd-disaggregation``, sglang-router
  ``--pd-disaggregation``; then ``--prefill URL [BOOTSTRAP_PORT]`` once per prefill worker (no
  port: the router's own default, none) and ``--decode URL`` once per decode worker;
  ``--policy`` then applies to both pools (``--prefill-policy`` / ``--decode-policy`` through
  ``router.extra_args`` where they differ);
- always ``--host``, ``--port``, ``--prometheus-host`` / ``--prometheus-port`` (both routers
  default to 29000, so two routers, or a router next to anything else on 29000, would collide),
  ``--worker-startup-timeout-secs`` (``router.startup_timeout_s``) and
  ``--worker-startup-check-interval 1`` (the default, 30 s, makes a router started next to a
  replica that is still loading wait half a minute after it is up).

Workers added and removed while it runs (live autoscaling, ``engines.live_scaler``): vllm-router
``POST /add_worker?url=URL`` and ``POST /remove_worker?url=URL`` (200, "Successfully added
worker: URL"); sglang-router 0.3 (sgl-model-gateway) answers those with 404 and takes ``POST
/workers`` with ``{"url": URL}`` (202: queued) and ``DELETE /workers/<id>``, the id being the
UUID ``GET /workers`` lists beside the URL (tested against both binaries with fake workers).
Either way the router has the worker once ``GET /workers`` lists it healthy, and has let it
go once it no longer lists it.  Arrivals: each router counts the requests it routes,
``vllm_router_requests_total`` (label ``route``: only the ``/v1/...`` routes, never
``/health``) and ``smg_router_requests_total`` (labels per endpoint and streaming); summed over
their label sets (``requests_total``) they are the arrivals the ``utilisation`` signal reads.

Health: ``GET /health`` answers 200 once the router serves; ``GET /workers`` lists the workers it
has registered with ``is_healthy`` (both routers), which ``start`` waits on for every worker.
The routers retry a failed request on another worker by default (``--retry-max-retries``, 5) and
open a circuit breaker on failures: add ``--disable-retries`` / ``--disable-circuit-breaker`` in
``router.extra_args`` to see every worker failure as a failed request.

Which worker served a request: neither router adds a header of its own naming the worker, but
both forward the worker's response headers to the client unchanged (tested against the real
binaries with fake workers that set ``x-tokenfactory-replica``: the client sees the header of the
worker that answered, streamed and not), except ``x-request-id``, which the router sets itself
(the client's ``x-request-id`` when it sent one, also forwarded to the worker; else its own
``cmpl-...`` id).  So the replica is known from a header the replica itself sets, or by matching
the request id the client sends in ``x-request-id`` against the replica's own logs; an engine
that sets no such header leaves it unknown.  vllm-router's ``cache_aware`` policy also POSTs
``/v1/completions/render`` (or the chat equivalent) to every worker before routing a request,
to tokenize it: those calls reach the replicas but are not completions.

What each router sends in prefill/decode mode (tested with fake workers; the KV transfer itself
is the engines' business):

- vllm-router (vLLM's NIXL connector protocol): first the prefill worker gets the request with
  ``max_tokens: 1``, ``min_tokens: 1``, ``stream: false`` and ``kv_transfer_params:
  {do_remote_decode: true, do_remote_prefill: false, remote_*: null}``; it must answer JSON
  whose ``kv_transfer_params`` (``remote_engine_id``, ``remote_block_ids``, ``remote_host``,
  ``remote_port``, ...) the router then puts into the decode worker's request (the client's
  own ``max_tokens`` and ``stream``); the client gets the decode worker's answer and headers.
  The workers are vLLM servers started with ``--kv-transfer-config
  '{"kv_connector":"NixlConnector","kv_role":"kv_producer"|"kv_consumer"}'`` (vllm-router's
  docs/model-routing/pd-disaggregation.md); ``--kv-connector mooncake|moriio`` selects the
  other protocols.
- sglang-router (SGLang's bootstrap protocol): the same request goes to a prefill and a decode
  worker at once, both with ``bootstrap_host`` (the prefill worker's host), ``bootstrap_port``
  (the port given after its ``--prefill`` URL, else null) and one random ``bootstrap_room``;
  the client gets the decode worker's answer.  The workers are SGLang servers with
  ``--disaggregation-mode prefill|decode``; the port is the prefill server's
  ``--disaggregation-bootstrap-port`` (8998 by default).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

from engines import prometheus
from engines.base import EngineError, interpreter_package_version, redact_argv
from engines.http import http_get, http_post, http_request, retry_until
from engines.process import EngineProcess, ProcessHolder, free_port, port_in_use


class Router(ProcessHolder):
    """One router process in front of worker URLs (plain replicas, or prefill and decode pools)."""

    name = "base"
    executable = ""                       # the console script the wheel installs
    subcommand: tuple[str, ...] = ()      # what follows the executable before the flags
    package = ""                          # its PyPI distribution
    policies: tuple[str, ...] = ()        # its --policy choices (its --help)
    default_policy = ""                   # its --policy default (its --help)
    pd_flag = ""                          # the flag that turns on prefill/decode mode
    health_path = "/health"
    workers_path = "/workers"
    requests_metric = ""                  # its own counter of the requests it routes (module doc)

    def __init__(self, cfg, run_dir: str | os.PathLike):
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.host = str(cfg.host)
        self.port: int | None = int(cfg.port) if cfg.port is not None else None
        self.metrics_port: int | None = None
        self.process: EngineProcess | None = None
        self.workers: list[str] = []
        self.prefill: list[tuple[str, int | None]] = []
        self.decode: list[str] = []
        self.started_ns: int | None = None
        self.ready_ns: int | None = None
        if cfg.policy is not None and str(cfg.policy) not in self.policies:
            raise EngineError(f"router.policy={cfg.policy} is not a policy of router={self.name}; "
                              f"its policies: {', '.join(self.policies)}")

    # --- configuration -------------------------------------------------------------------
    @property
    def policy_used(self) -> str:
        """The policy in effect: the configured one, else the router's own default."""
        return str(self.cfg.policy) if self.cfg.policy is not None else self.default_policy

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def metrics_url(self) -> str | None:
        """The router's own Prometheus page (its request counts and latencies per worker)."""
        return f"http://{self.host}:{self.metrics_port}/metrics" if self.metrics_port else None

    def binary(self) -> str:
        """``router.binary``, else the console script next to this Python, else on PATH."""
        if self.cfg.binary:
            found = shutil.which(str(self.cfg.binary))
            if found is None:
                raise EngineError(f"router.binary={self.cfg.binary} is not found (no such executable file, "
                                  "nor a command on PATH)")
            return found
        beside = Path(sys.executable).parent / self.executable
        if beside.exists():
            return str(beside)
        found = shutil.which(self.executable)
        if found:
            return found
        raise EngineError(f"router={self.name}: {self.executable} is not installed (not next to "
                          f"{sys.executable}, not on PATH); pip install {self.package} or set "
                          "router.binary=PATH")

    def command(self, workers: list[str] = (), prefill: list[tuple[str, int | None]] = (),
                decode: list[str] = ()) -> list[str]:
        """The router's argument list for plain ``workers`` (URLs) or ``prefill`` (URL, bootstrap
        port or None) and ``decode`` pools; picks free ports where none is configured."""
        workers, prefill, decode = list(workers), list(prefill), list(decode)
        if workers and (prefill or decode):
            raise EngineError(f"router={self.name}: give either plain workers or prefill/decode pools, not both")
        if not workers and not (prefill and decode):
            raise EngineError(f"router={self.name} needs worker URLs, or both prefill and decode URLs")
        if self.port is None:
            self.port = free_port(self.host)
        if self.metrics_port is None:
            self.metrics_port = free_port(self.host)
        argv = [self.binary(), *self.subcommand, "--host", self.host, "--port", str(self.port)]
        if workers:
            argv += ["--worker-urls", *[_url(u) for u in workers]]
        else:
            argv.append(self.pd_flag)
            for url, bootstrap in prefill:
                argv += ["--prefill", _url(url)] + ([str(int(bootstrap))] if bootstrap is not None else [])
            for url in decode:
                argv += ["--decode", _url(url)]
        if self.cfg.policy is not None:
            argv += ["--policy", str(self.cfg.policy)]
        argv += ["--prometheus-host", self.host, "--prometheus-port", str(self.metrics_port),
                 "--worker-startup-timeout-secs", str(max(1, math.ceil(float(self.cfg.startup_timeout_s)))),
                 "--worker-startup-check-interval", "1"]
        return argv + [str(a) for a in self.cfg.extra_args]

    def worker_flags(self, engine: str) -> list[str]:
        """Flags a worker of ``engine`` (the engine adapter's name) needs for this router."""
        return []

    # --- lifecycle -----------------------------------------------------------------------
    def reserve(self) -> None:
        """Fix the router's port before anything starts (the client's base URL is the router's)."""
        if self.port is None:
            self.port = free_port(self.host)
        elif port_in_use(self.host, self.port):
            raise EngineError(f"router.port={self.port} is already in use on {self.host}; "
                              "choose another port or leave router.port unset to pick a free one")

    def start(self, workers: list[str] = (), prefill: list[tuple[str, int | None]] = (),
              decode: list[str] = (), spawn=None) -> None:
        """Launch the router (with ``spawn(argv, log_path, env)`` where a placement starts it
        elsewhere), wait for its health route and for every worker to be registered and
        healthy in it; stops it again on any failure."""
        if self.port is not None and port_in_use(self.host, self.port):
            raise EngineError(f"router.port={self.port} is already in use on {self.host}; "
                              "choose another port or leave router.port unset to pick a free one")
        argv = self.command(workers, prefill, decode)
        self.workers = [_url(u) for u in workers]
        self.prefill = [(_url(u), b) for u, b in prefill]
        self.decode = [_url(u) for u in decode]
        self.started_ns = time.perf_counter_ns()
        if spawn is not None:
            self.process = spawn(argv, self.run_dir / "router.log", {})
        else:
            self.process = EngineProcess(argv, self.run_dir / "router.log")
            self.process.start()
        try:
            self.wait_ready(float(self.cfg.startup_timeout_s))
        except BaseException:
            self.stop()
            raise
        self.ready_ns = time.perf_counter_ns()

    def wait_ready(self, timeout_s: float) -> None:
        expected = set(self.workers) | {u for u, _ in self.prefill} | set(self.decode)
        missing: list[str] = sorted(expected)

        def ready() -> bool:
            p = self.process
            if p is not None and p.poll() is not None:
                raise EngineError(
                    f"router={self.name} exited with code {p.poll()} before it was healthy.\n"
                    f"command: {' '.join(redact_argv(p.argv))}\nlast lines of {p.log_path}:\n{p.tail()}")
            if not self.health_ok():
                return False
            healthy = self.healthy_workers()
            missing[:] = sorted(expected - healthy) if healthy is not None else sorted(expected)
            return not missing

        def never() -> EngineError:
            tail = f"\nlast lines of {self.process.log_path}:\n{self.process.tail()}" if self.process else ""
            return EngineError(f"router={self.name} at {self.base_url} was not ready within "
                               f"router.startup_timeout_s={timeout_s:g} (GET {self.health_path}, then "
                               f"{self.workers_path}; workers not healthy in it: "
                               f"{', '.join(missing) or 'none'}){tail}")

        retry_until(ready, timeout_s, 0.25, on_timeout=never)

    def healthy_workers(self) -> set[str] | None:
        """The worker URLs the router has registered and counts healthy (None: no answer)."""
        listed = self.listed_workers()
        return None if listed is None else {u for u, w in listed.items() if w.get("is_healthy")}

    def listed_workers(self) -> dict[str, dict] | None:
        """URL -> the router's own entry of every worker it has registered (None: no answer)."""
        try:
            status, body = http_get(self.base_url + self.workers_path, timeout=5)
            listed = json.loads(body)["workers"] if status == 200 else None
        except (OSError, ValueError, KeyError, TypeError):
            return None
        if not isinstance(listed, list):
            return None
        return {_url(w["url"]): w for w in listed if isinstance(w, dict) and w.get("url")}

    # --- workers added and removed while it runs (module doc) -----------------------------
    def add_worker(self, url: str, timeout_s: float | None = None) -> None:
        """Put ``url`` behind the running router; returns once the router lists it healthy."""
        url = _url(url)
        timeout_s = float(self.cfg.startup_timeout_s) if timeout_s is None else float(timeout_s)
        self.change_workers(url, "adding", self.request_add(url), (200, 201, 202),
                            lambda: url in (self.healthy_workers() or set()), timeout_s,
                            f"was added but not listed healthy in {self.workers_path} within {timeout_s:g} s")
        if url not in self.workers:
            self.workers.append(url)

    def remove_worker(self, url: str, timeout_s: float = 30.0) -> None:
        """Take ``url`` from behind the router: no new request goes to it once this returns
        (the router no longer lists it); requests it is serving go on to their end."""
        url = _url(url)
        self.change_workers(url, "removing", self.request_remove(url), (200, 202, 204),
                            lambda: (listed := self.listed_workers()) is not None and url not in listed, timeout_s,
                            f"is still listed in {self.workers_path} {timeout_s:g} s after its removal")
        if url in self.workers:
            self.workers.remove(url)

    def change_workers(self, url: str, doing: str, answer: tuple[int, bytes], ok: tuple[int, ...],
                       done: Callable[[], bool], timeout_s: float, not_done: str) -> None:
        """A change of the worker set the router was asked for (``answer``: its HTTP status and body,
        an error unless in ``ok``), waited for until ``done()`` (its listing shows it) within
        ``timeout_s``; ``not_done`` says, after the worker's URL, what it shows instead."""
        status, body = answer
        if status not in ok:
            raise EngineError(f"router={self.name}: {doing} worker {url} got HTTP {status}: "
                              f"{body[:300].decode('utf-8', 'replace')}{self._log_tail()}")

        def never() -> EngineError:
            return EngineError(f"router={self.name} at {self.base_url}: worker {url} {not_done}{self._log_tail()}")

        retry_until(done, timeout_s, 0.25, on_timeout=never)

    def request_add(self, url: str) -> tuple[int, bytes]:
        return http_post(f"{self.base_url}/add_worker?url={urllib.parse.quote(url, safe=':/')}", None, timeout=30)

    def request_remove(self, url: str) -> tuple[int, bytes]:
        return http_post(f"{self.base_url}/remove_worker?url={urllib.parse.quote(url, safe=':/')}", None,
                         timeout=30)

    def requests_total(self) -> float | None:
        """The requests the router has routed since it started (its own counter, summed over
        its label sets); None where its metrics page does not answer."""
        return self.requests_read()[0]

    def requests_read(self) -> tuple[float | None, str | None]:
        """``requests_total`` with why a reading is not one: ``(value, None)``; ``(None, why)``
        where the metrics page did not answer; ``(0.0, why)`` where it answered without the
        counter (a router that has routed nothing yet has no such series, and neither has one
        whose counter was renamed: the caller tells them apart)."""
        if not self.metrics_url:
            return None, f"router={self.name} has no metrics page"
        try:
            status, body = http_get(self.metrics_url, timeout=5)
            if status != 200:
                return None, f"router={self.name} metrics page {self.metrics_url}: HTTP {status}"
            samples, _ = prometheus.parse(body.decode("utf-8", "replace"))
        except (OSError, ValueError) as e:
            return None, f"router={self.name} metrics page {self.metrics_url}: {type(e).__name__}: {e}"
        values = [s.value for s in samples if s.name == self.requests_metric]
        if not values:
            return 0.0, (f"router={self.name} metrics page {self.metrics_url} has no {self.requests_metric} "
                         "series (renamed in this router's version, or nothing routed yet)")
        return sum(values), None

    def _log_tail(self) -> str:
        p = self.process
        return f"\nlast lines of {p.log_path}:\n{p.tail()}" if p is not None else ""

    def health_ok(self, timeout: float = 5.0) -> bool:
        try:
            status, _ = http_get(self.base_url + self.health_path, timeout=timeout)
            return status == 200
        except OSError:
            return False

    # --- what the router is --------------------------------------------------------------
    def version(self) -> str | None:
        """The router's own version (its package's, as the interpreter of its script sees it)."""
        try:
            return metadata.version(self.package)
        except metadata.PackageNotFoundError:
            return None

    def provenance(self) -> dict:
        return {
            "router": self.name,
            "router_version": self.version(),
            "policy": self.policy_used,
            "policy_configured": self.cfg.policy,
            "command": redact_argv(self.process.argv) if self.process else None,
            "workers": list(self.workers),
            "prefill": [[u, b] for u, b in self.prefill],
            "decode": list(self.decode),
            "base_url": self.base_url,
            "metrics_url": self.metrics_url,
        }


class VllmRouter(Router):
    name = "vllm"
    executable = "vllm-router"
    package = "vllm-router"
    policies = ("random", "round_robin", "cache_aware", "kv_aware", "power_of_two", "consistent_hash",
                "sticky_least_loaded")
    default_policy = "cache_aware"
    pd_flag = "--vllm-pd-disaggregation"
    requests_metric = "vllm_router_requests_total"

    def worker_flags(self, engine: str) -> list[str]:
        """vLLM workers serve ``/v1/completions/render`` (what ``cache_aware`` tokenizes prompts
        with) only with ``--enable-scale-out`` (vLLM 0.32: HTTP 403 otherwise, and the policy
        then routes as if no prompt shared a prefix: measured, docs/measured/deployments.md)."""
        return ["--enable-scale-out"] if engine == "vllm" else []

    def version(self) -> str | None:
        # vllm-router has no --version: ask the interpreter its console script runs under.
        try:
            python = _script_interpreter(self.binary())
        except EngineError:
            python = None
        return (interpreter_package_version(python, "vllm_router", timeout=30) if python else None) \
            or super().version()


class SglangRouter(Router):
    name = "sglang"
    executable = "sglang-router"
    subcommand = ("launch",)
    package = "sglang-router"
    policies = ("random", "round_robin", "cache_aware", "power_of_two", "manual")
    default_policy = "cache_aware"
    pd_flag = "--pd-disaggregation"
    requests_metric = "smg_router_requests_total"

    def request_add(self, url: str) -> tuple[int, bytes]:
        return http_post(f"{self.base_url}/workers", {"url": url}, timeout=30)

    def request_remove(self, url: str) -> tuple[int, bytes]:
        entry = (self.listed_workers() or {}).get(url)
        if entry is None or not entry.get("id"):
            return 404, f"worker {url} is not listed in {self.workers_path}".encode()
        return http_request("DELETE", f"{self.base_url}/workers/{entry['id']}", timeout=30)

    def version(self) -> str | None:
        """Its ``--version`` ("sgl-model-gateway 0.3.2"): the version number."""
        try:
            out = subprocess.run([self.binary(), "--version"], capture_output=True, text=True, timeout=30)
        except (OSError, subprocess.SubprocessError, EngineError):
            return super().version()
        words = out.stdout.split()
        return words[-1] if out.returncode == 0 and words else super().version()


ROUTERS: dict[str, type[Router]] = {"vllm": VllmRouter, "sglang": SglangRouter}


def make_router(cfg, run_dir: str | os.PathLike) -> Router:
    """The router of ``cfg`` (the router group); ``router.name=none`` is the caller's to handle."""
    try:
        cls = ROUTERS[str(cfg.name)]
    except KeyError:
        raise EngineError(f"router.name={cfg.name} is not a router; choose one of: "
                          f"{', '.join(sorted(ROUTERS))}") from None
    return cls(cfg, run_dir)


def _url(url: str) -> str:
    return str(url).rstrip("/")


def _script_interpreter(binary: str) -> str | None:
    """The interpreter of a console script's ``#!`` line (None: not a Python script)."""
    path = shutil.which(binary) or binary
    try:
        with open(path, "rb") as f:
            first = f.readline(500).decode("utf-8", "replace").strip()
    except OSError:
        return None
    if first.startswith("#!") and "python" in first:
        return first[2:].split()[0]
    return None
