"""One engine config, up: the engine process, the telemetry around it, and what the load
points run against it share (client config, prompt builder, idle baseline, windows).

Windows: the first load point's observation window opens when the engine is started, each
later point's when the previous one closed, and the last one closes when the engine has
stopped, so the windows tile the engine's whole life and their costs add up to the bill.
One telemetry collector samples from before the engine starts to after it stops; each
window's rows (and the idle baseline taken once the engine is up) go to its
``telemetry.parquet``, written in the telemetry process while the next point runs (its window
opens at that close), and on disk before the point's ``summary.json`` marks it complete.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from conf.schema import ClientTimeouts, Scenario, group, typed
from engines.base import EngineAdapter, EngineError, emulation
from engines.deployment import make_served
from harness import provenance, results_io
from harness.engine_faults import EngineFaults
from harness.errors import UserError
from harness.mlflow_log import MlflowLogger
from harness.otlp_export import OtlpExporter
from loadgen.client import ClientConfig
from loadgen.workloads.prompts import PromptBuilder, load_tokenizer
from metrics.slo import SLO
from metrics.telemetry.engine import ROUTER_SOURCE
from metrics.telemetry.process import TelemetryError, TelemetryProcess
from metrics.telemetry.sampling import PERIODIC, host_has_gpu, sampling_mode

# What the console said already: an emulated engine is said once an experiment (a process), not at every
# launch of a comparison's repeats; the experiment's warnings count its runs (harness.caveats).
_SAID_EMULATED: set[tuple[str, str]] = set()


def emulated_line(engine: str, emu: dict) -> str:
    """The console's EMULATED line for an engine whose timings are emulated, the first time this process
    launches it with that timing source; "" after that, and for a real engine."""
    if not emu.get("emulated") or (engine, str(emu.get("timing_source"))) in _SAID_EMULATED:
        return ""
    _SAID_EMULATED.add((engine, str(emu.get("timing_source"))))
    return (f"EMULATED: engine={engine}'s timings come from {emu['timing_source']}, not from a real engine; every "
            "record of this run says so (summary.json emulated, timing_source)")


class EngineSession:
    """``start()`` launches the engine and everything around it, ``run_point`` runs one load
    point's steps (``harness.point``), ``stop()`` releases it all (also after errors)."""

    def __init__(self, cfg: DictConfig, out: Path, mlflow: MlflowLogger | None = None, total_points: int = 1,
                 name: str | None = None, block: int = 0, otlp: OtlpExporter | None = None):
        self.cfg = cfg
        self.out = out                      # the session's folder (engine.log, workload.html)
        self.name = name                    # the config's name in a comparison (None in a sweep)
        self.block = block                  # the comparison's block (0 in a sweep)
        self.mlflow = mlflow
        self.otlp = otlp                    # each run's summary to an OTLP endpoint (export.otlp_endpoint)
        self.total_points = total_points    # for progress labels
        self.container = OmegaConf.to_container(cfg, resolve=True)
        self.safe_config = results_io.redact(self.container)
        self.slo = SLO.from_config(cfg.slo)
        try:  # one engine's adapter, or a deployment with the same lifecycle (engines.deployment)
            self.engine: EngineAdapter = make_served(cfg, out)
        except EngineError as e:
            raise UserError(str(e)) from None
        self.telemetry: TelemetryProcess | None = None
        self.telemetry_sampling = (PERIODIC, "")  # (periodic or edges, why): metrics.telemetry.sampling
        self.engine_metrics = False              # the engine's /metrics is sampled
        self.builder: PromptBuilder | None = None
        self.tokenizer = None
        self._tokenizer_digest: str | None = None
        self.client_cfg: ClientConfig | None = None
        self.engine_prov: dict | None = None
        self.idle_interval: tuple[int, int] | None = None
        self.window_open_ns: int | None = None   # where the next point's window opens
        self.workload_figures_written = False    # workload.html is drawn once per experiment folder
        self.workload_descriptions: dict = {}    # each point's, computed before the start (harness.point.prebuild)
        self.faults = EngineFaults(self)         # the watchdog and what it found (harness.engine_faults)
        self.cold_start = group(cfg, "scenario", Scenario).cold_start  # no warm-up, no idle baseline (scenarios)
        self.points_run = 0                      # load points run on this engine launch
        self.engine_launch: tuple | None = None  # the first launch's (started, healthy, ready) ns
        self.restarted_before_s: float | None = None  # engine.on_failure=restart: the restart the next point holds
        # where a rerun resumes: a comparison's session folder is <experiment>/<config>/block<b>
        self.experiment_dir = out.parent.parent if name and out.parent.name == name else out

    # ------------------------------------------------------------------------------------
    def start(self, points=()) -> None:
        """Telemetry, the harness's own setup and ``points``' requests (``harness.point.prebuild``)
        first, then the engine: its observation window holds no work of the harness's."""
        tcfg = self.cfg.telemetry
        deferred = self.build_ahead(points)
        try:  # out of this process: sampling must never hold the load generator's GIL
            self.telemetry = TelemetryProcess(self.container["telemetry"], {"loadgen": os.getpid()})
            self.telemetry_sampling = self._sampling_mode(str(tcfg.sampling))
            self.telemetry.start(periodic=self.telemetry_sampling[0] == PERIODIC)
        except TelemetryError as e:
            raise UserError(f"telemetry: {e}") from None
        if self.telemetry_sampling[0] != PERIODIC:
            print(f"telemetry: at each window's edges only ({self.telemetry_sampling[1]})", flush=True)
        print(f"starting engine={self.engine.name}" + (f" ({self.name})" if self.name else "") + " ...", flush=True)
        self.telemetry.sample_now()  # a sample before the first window opens
        try:
            self.engine.start(warm_up=not self.cold_start)
        except EngineError as e:
            raise UserError(str(e)) from None
        self.watch_processes()
        self.refresh_replica_names()
        line = emulated_line(self.engine.name, emulation(self.engine))
        if line:
            print(line, flush=True)
        if tcfg.engine.enabled:  # the engine's own /metrics, once it is up
            self.add_engine_metrics()
        print(f"engine ready at {self.engine.base_url} after "
              f"{(self.engine.ready_ns - self.engine.started_ns) / 1e9:.1f} s", flush=True)
        if deferred is not None:
            try:
                self._client_setup()  # the same error again, if the engine's start did not fix it
            except UserError:
                self.engine.stop()
                raise
        self.engine_launch = (self.engine.started_ns, self.engine.healthy_ns, self.engine.ready_ns)
        self.faults.start_watch()
        self.engine_prov = provenance.collect(self.engine.provenance(), self.container.get("hardware"))
        if not self.cold_start:  # a cold start's load begins as soon as the engine is ready
            self.idle_baseline(float(tcfg.idle_baseline_s))
        self.window_open_ns = self.engine.started_ns

    def _sampling_mode(self, mode: str) -> tuple[str, str]:
        """``telemetry.sampling`` resolved (``metrics.telemetry.sampling``): the engine's endpoint and
        pages are known once it is prepared, the GPUs from NVML or the driver's device files."""
        nvml_read = bool(self.cfg.telemetry.nvml.enabled) and "nvml" not in self.telemetry.unavailable
        urls = [self.engine.base_url, *(url for _, url in self.engine.metrics_endpoints())]
        return sampling_mode(mode, urls, gpu_seen=nvml_read or host_has_gpu(),
                             emulated=bool(emulation(self.engine)["emulated"]))

    def build_ahead(self, points=()) -> UserError | None:
        """What needs no engine running, before its start: the engine's model, tokenizer and port, the
        prompt builder and the client's config, then ``points``' workloads built, described and their
        requests prepared (``harness.point.prebuild``).  Returns the tokenizer's error where it is not on
        disk yet or broken (the engine may fetch the model; its own errors come first, and the requests
        are then built inside the window), else None."""
        try:
            self.engine.prepare()  # the model, tokenizer and port, known before launch
        except EngineError as e:
            raise UserError(str(e)) from None
        try:
            self._client_setup(local_only=True)
        except UserError as e:
            return e
        if points:
            from harness.point import prebuild

            prebuild(self, points)  # each point's workload built once: described, its requests prepared
        return None

    def restart_engine(self, why: str) -> float:
        """Kill the engine (whatever is left of it) and start it again on the same port, with
        telemetry following the new process; returns the seconds it took.  The watchdog is the
        caller's business (a restart in place runs on the watchdog's own thread)."""
        eng, tel = self.engine, self.telemetry
        if self.engine_metrics:
            tel.remove_engine()  # the dead engine's pages; the new ones are added below
        eng.kill()
        t0 = time.perf_counter_ns()
        for proc in served_processes(eng).values():
            if getattr(proc, "log_path", None) and Path(proc.log_path).exists():
                with open(proc.log_path, "ab") as log:  # so the log says where one life ended
                    log.write(f"\n=== tokenfactory: engine restarted ({why.splitlines()[0]}) ===\n".encode())
        eng.start(warm_up=not self.cold_start)
        self.watch_processes()
        self.refresh_replica_names()
        if self.engine_metrics:
            self.add_engine_metrics()
        tel.mark("engine_restarted", eng.ready_ns, why.splitlines()[0][:200])
        return (eng.ready_ns - t0) / 1e9

    def watch_processes(self) -> None:
        """The telemetry's per-process CPU and memory of every engine process on this host
        (``engine`` for one engine; ``engine:<replica>`` and ``router`` for a deployment)."""
        for label, proc in served_processes(self.engine).items():
            if proc.pid is not None and not getattr(proc, "node_ip", None):  # a Ray replica's pid is on its node
                self.telemetry.watch_process(label, proc.pid)

    def add_engine_metrics(self) -> None:
        """Sample each ``/metrics`` page of the engine (one per replica of a deployment), and the
        page of the router in front of them where it has one (``source = router``)."""
        eng = self.engine
        if not eng.server_metric_map:
            return
        ok = [self.telemetry.add_engine(url, eng.server_metric_map, eng.auth(), replica=replica)
              for replica, url in eng.metrics_endpoints()]
        router = eng.router_metrics() if hasattr(eng, "router_metrics") else None
        if router is not None:
            ok.append(self.telemetry.add_engine(router[0], router[1], eng.auth(), source=ROUTER_SOURCE))
        self.engine_metrics = bool(ok) and all(ok)

    def _client_setup(self, local_only: bool = False) -> None:
        """The tokenizer, the prompt builder and the client's config: nothing here needs the
        engine running (the base URL and served model are known once it is prepared)."""
        cfg = self.cfg
        try:
            self.tokenizer = load_tokenizer(self.engine.tokenizer, local_only=local_only)
            dialect = self.engine.dialect()
            self.builder = PromptBuilder(self.tokenizer, seed=int(cfg.workload.seed), chat=dialect["api"] == "chat")
        except ValueError as e:
            raise UserError(str(e)) from None
        self.client_cfg = ClientConfig(
            base_url=self.engine.base_url, model=self.engine.served_model, api=dialect["api"],
            api_key=self.engine.api_key, timeouts=typed(cfg.client.timeouts, ClientTimeouts),
            extra_body=dialect["extra_body"], continuous_usage=dialect["continuous_usage"],
            idle_close_s=cfg.client.idle_close_s, **self.replica_fields())

    def refresh_replica_names(self) -> None:
        """Names an engine learns only once it is up (Dynamo's worker instance ids), for the
        client's ``replica`` column; the client's config was built before the start."""
        if self.client_cfg is not None and hasattr(self.engine, "replica_names"):
            self.client_cfg.replica_names = self.engine.replica_names()

    def replica_fields(self) -> dict:
        """How the client names each row's replica: the response header a deployment's replicas
        set (mapped to their names); ``r0`` for the one engine the harness launched; an endpoint
        it did not launch (possibly a gateway) by its header where it sends one, else ``unknown``."""
        eng, header = self.engine, self.cfg.deployment.replica_header
        if hasattr(eng, "replica_names"):
            return {"replica_header": header, "replica_names": eng.replica_names(), "default_replica": "unknown"}
        if not eng.launched:  # an endpoint we did not start may be a gateway: its header, if any
            return {"replica_header": header, "replica_names": {}, "default_replica": "unknown"}
        return {"replica_header": None, "replica_names": {}, "default_replica": "r0"}

    def tokenizer_digest(self) -> str:
        """A hash of the tokenizer's whole definition (vocabulary, merges, normaliser, template)."""
        if self._tokenizer_digest is None:
            import hashlib

            tok = self.tokenizer
            backend = getattr(tok, "backend_tokenizer", None)
            text = backend.to_str() if backend is not None else repr(sorted(tok.get_vocab().items()))
            text += str(getattr(tok, "chat_template", ""))
            self._tokenizer_digest = hashlib.sha256(text.encode()).hexdigest()
        return self._tokenizer_digest

    def fixed_conditions(self) -> dict:
        """What must not differ between runs that are compared (step 1 of the seed's protocol):
        model and its revision, tokenizer (by content), weight and KV precision, quantisation,
        how requests are worded (sampling: tokenfactory sends no sampling parameters, so the
        engine's defaults apply), the workload and the SLO."""
        eng = (self.engine_prov or {}).get("engine") or {}
        eff = eng.get("effective") or {}
        feats = eng.get("features") or {}
        model_cfg = eng.get("model_config") or {}
        dialect = eng.get("dialect") or {}
        return {
            "model": eng.get("model"),
            "model_revision": eng.get("model_revision") or eff.get("revision"),
            "tokenizer_sha256": self.tokenizer_digest(),
            "weight_dtype": str(eff.get("dtype") or feats.get("dtype") or model_cfg.get("torch_dtype")
                                or model_cfg.get("dtype") or "auto"),
            "kv_cache_dtype": str(eff.get("kv_cache_dtype") or feats.get("kv_cache_dtype") or "auto"),
            "quantization": str(eff.get("quantization") or feats.get("quantization") or "none"),
            "sampling": {"api": dialect.get("api"), "request_fields": dialect.get("extra_body"),
                         "parameters": "the engine's defaults (none sent)"},
            "workload": self.container.get("workload"),
            "slo": self.container.get("slo"),
        }

    def count_tokens(self, text: str) -> int:
        """Tokens of an output text under the served model's tokenizer (token attribution's fallback)."""
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def idle_baseline(self, seconds: float) -> None:
        """Engine up, no load: the power the devices draw doing nothing (only where power is measured)."""
        if seconds <= 0 or not self.telemetry.measures_energy:
            return
        print(f"idle baseline: {seconds:g} s of power with the engine up and no load", flush=True)
        a = self.telemetry.mark("idle_baseline_start", self.telemetry.sample_now())
        time.sleep(seconds)
        b = self.telemetry.mark("idle_baseline_end", self.telemetry.sample_now())
        self.idle_interval = (a, b)

    def stop(self) -> None:
        self.faults.stop_watch()  # before the engine goes on purpose
        self.engine.stop()
        if self.telemetry is not None:
            self.telemetry.stop()

    def topology(self) -> dict:
        """What serves the load (the seven-step record's devices and topology)."""
        top = getattr(self.engine, "topology", None)
        return top() if top is not None else {"kind": "single", "replicas": 1, "router": "none"}

    def use_workload(self, fields: dict) -> None:
        """Run the next points with these workload fields set (a protocol whose points differ in
        their requests' lengths, not only in load: protocol=profile's ladders); the engine, its
        prompt builder and the windows stay as they are.  Each run's config.yaml says which."""
        cfg = self.cfg.copy()
        cfg.workload = OmegaConf.merge(cfg.workload, fields)
        self.cfg = cfg
        self.container = OmegaConf.to_container(cfg, resolve=True)
        self.safe_config = results_io.redact(self.container)
        self.workload_descriptions = {}  # described under the old fields

    def run_point(self, spec, last: bool, steps=None):
        """Run one load point's steps (default ``harness.point.POINT_STEPS``); returns its ``PointRun``."""
        from harness.point import POINT_STEPS, PointInputs, PointRun

        point = PointRun(spec=spec, run_dir=self.out / spec.subdir if spec.subdir else self.out, last=last,
                         window_open_ns=self.window_open_ns, inputs=PointInputs.from_config(self.cfg))
        for step in steps or POINT_STEPS:
            step(self, point)
        self.window_open_ns = point.window_close_ns
        self.points_run += 1
        return point



def served_processes(engine) -> dict:
    """label -> process handle of every process the harness launched for ``engine``."""
    members = getattr(engine, "members", None)
    if members is None:
        return {"engine": engine.process} if engine.process is not None else {}
    return {(f"engine:{m.replica}" if m.replica else "router"): m.process for m in members()
            if m.process is not None}
