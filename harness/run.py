"""Experiment orchestration: plan -> engine up -> each load point -> summaries, MLflow, report.

Windows: the first load point's observation window opens when its engine is started, each
later point's when the previous one closed, and the last one closes when the engine has
stopped, so the windows tile the engine's whole life and their costs add up to the bill.
One telemetry collector samples from before the engine starts to after it stops; each
window's rows (and the idle baseline taken once the engine is up) go to its telemetry.parquet.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
from omegaconf import DictConfig, OmegaConf

from engines.base import EngineError
from engines.registry import make_engine
from harness import provenance, report, results_io, workload_describe
from harness.mlflow_log import MlflowLogger, tracking_uri
from loadgen.client import ClientConfig, StreamingClient, Timeouts
from loadgen.dispatch import Dispatcher, LoadSpec
from loadgen.workloads.prompts import PromptBuilder, load_tokenizer
from loadgen.records import RecordWriter, read_requests
from loadgen.workloads.synthetic import synthetic_items
from loadgen.workloads.traces.readers import FORMATS as TRACE_FORMATS
from loadgen.workloads.traces.replay import TraceWorkload, check_workload
from loadgen.workers import run_workers
from metrics.cost import check_profile
from metrics.energy import steady_capacity
from metrics.request_metrics import complete_record
from metrics.slo import SLO
from metrics.summary import summarize
from metrics.telemetry.collector import TelemetryCollector
from metrics.telemetry.engine import EngineMetricsSampler
from metrics.telemetry.sources import build_samplers
from protocols.plan import RunSpec, offered_load, plan_runs

perf_ns = time.perf_counter_ns


class UserError(Exception):
    """A problem the user can fix (bad config, engine that will not start); printed without a traceback."""


def _event_loop_policy() -> None:
    try:
        import uvloop  # noqa: F401

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass


def load_spec(load: dict, warmup: int) -> LoadSpec:
    n = load.get("num_requests")
    return LoadSpec(
        kind=load.get("kind"), rate=load.get("rate"), concurrency=load.get("concurrency"),
        # warm-up requests come on top of the measured ones
        num_requests=(int(n) + warmup) if n is not None else None,
        duration_s=load.get("duration_s"), warmup_requests=warmup,
        burstiness=float(load.get("burstiness") or 1.0), max_concurrency=load.get("max_concurrency"),
        seed=int(load.get("seed") or 0), drain_timeout_s=load.get("drain_timeout_s"))


def _items(cfg: DictConfig, builder: PromptBuilder, n: int | None, max_len: int | None):
    name = cfg.workload.get("name")
    if name == "synthetic":
        return synthetic_items(cfg.workload, builder, n, max_len)
    if name in TRACE_FORMATS:  # a TraceWorkload: also carries .table, .followup (sessions), .expected_turns
        try:
            return TraceWorkload(cfg.workload, builder, n, max_len)
        except ValueError as e:
            raise UserError(str(e)) from None
    raise UserError(f"workload={name}: unknown workload (known: synthetic, {', '.join(TRACE_FORMATS)})")


SWEPT_KEYS: set[str] = set()  # set by the CLI from a -m command line


def swept_keys(argv: list[str]) -> set[str]:
    """Override keys that a multirun sweeps: a top-level comma in the value, or a sweep function."""
    keys = set()
    for a in argv:
        if "=" not in a or a.startswith("-"):
            continue
        key, val = a.split("=", 1)
        depth = 0
        for ch in val:
            depth += ch in "[{(" and 1 or (-1 if ch in "]})" else 0)
            if ch == "," and depth == 0:
                keys.add(key.lstrip("+~"))
                break
        if val.startswith(("range(", "choice(", "glob(", "interval(")):
            keys.add(key.lstrip("+~"))
    return keys


def _multirun_subdir() -> str:
    """Under ``-m``, each job writes its own folder below output_dir, named after its swept values."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        hc = HydraConfig.get()
    except (ImportError, ValueError):
        return ""
    if hc.mode != RunMode.MULTIRUN:
        return ""
    parts = [o for o in hc.overrides.task if o.split("=", 1)[0].lstrip("+~") in SWEPT_KEYS]
    name = ",".join(parts) or "default"
    return f"job{hc.job.num}-" + "".join(c if c.isalnum() or c in "._=,-" else "_" for c in name)[:120]


class Experiment:
    def __init__(self, cfg: DictConfig):
        self.cfg = cfg
        self.container = OmegaConf.to_container(cfg, resolve=True)
        self.safe_config = results_io.redact(self.container)
        try:
            self.plan: list[RunSpec] = plan_runs(cfg)
            self.slo = SLO.from_config(cfg.slo)
            check_profile(self.container.get("cost"))
            check_workload(cfg.workload, cfg.engine.get("max_model_len"))  # a bad trace fails before the engine starts
            for r in self.plan:
                load_spec(r.load, int(r.load.get("warmup_requests") or 0)).validate()
        except ValueError as e:
            raise UserError(str(e)) from None
        out = cfg.get("output_dir") or os.path.join("results", str(cfg.experiment), results_io.new_run_id())
        self.out = Path(out) / _multirun_subdir()
        self.engine = None
        self.mlflow: MlflowLogger | None = None

    def run_dir(self, spec: RunSpec) -> Path:
        return self.out / spec.subdir if spec.subdir else self.out

    # ------------------------------------------------------------------------------------
    def run(self) -> Path:
        cfg = self.cfg
        todo = [r for r in self.plan if not (cfg.get("resume", True) and results_io.run_complete(self.run_dir(r)))]
        done_before = len(self.plan) - len(todo)
        self.out.mkdir(parents=True, exist_ok=True)
        if done_before:
            print(f"resuming {self.out}: {done_before} of {len(self.plan)} load points already complete")
        if len(self.plan) > 1:
            results_io.write_yaml(self.out / "config.yaml", self.safe_config)
        if not todo:
            return self._finish()
        self._start_mlflow()
        self.engine = make_engine(cfg.engine, self.out)
        tcfg = self.container.get("telemetry") or {}
        self.telemetry = TelemetryCollector(None, build_samplers(tcfg, {"loadgen": os.getpid()}),
                                            float(tcfg.get("interval_s") or 0.5)).start()
        self.idle_interval = None
        status = "FAILED"
        try:
            print(f"starting engine={self.engine.name} ...", flush=True)
            self.telemetry.sample_now()  # a sample before the first window opens
            try:
                self.engine.start()
            except EngineError as e:
                raise UserError(str(e)) from None
            if self.engine.process is not None:
                self.telemetry.watch_process("engine", self.engine.process.pid)
            self.engine_sampler = None
            if self.engine.server_metric_map:  # the engine's own /metrics, once it is up
                self.engine_sampler = EngineMetricsSampler(
                    self.engine.server_metrics, {k: v[0] for k, v in self.engine.server_metric_map.items()})
                self.telemetry.add_sampler(self.engine_sampler)
            print(f"engine ready at {self.engine.base_url} after "
                  f"{(self.engine.ready_ns - self.engine.started_ns) / 1e9:.1f} s", flush=True)
            tok = load_tokenizer(self.engine.tokenizer)
            dialect = self.engine.dialect()
            self.builder = PromptBuilder(tok, seed=int(cfg.workload.get("seed") or cfg.seed or 0),
                                         chat=dialect["api"] == "chat")
            self.count_tokens = lambda s: len(tok(s, add_special_tokens=False)["input_ids"])
            self.client_cfg = ClientConfig(
                base_url=self.engine.base_url, model=self.engine.served_model, api=dialect["api"],
                api_key=self.engine.api_key, timeouts=Timeouts.from_config(cfg.client.get("timeouts")),
                extra_body=dialect["extra_body"], continuous_usage=dialect["continuous_usage"])
            self.engine_prov = provenance.collect(self.engine.provenance())
            self._idle_baseline(float(tcfg.get("idle_baseline_s") or 0))
            window_open = self.engine.started_ns
            for i, spec in enumerate(todo):
                last = i == len(todo) - 1
                window_open = self._run_point(spec, window_open, last)
            status = "FINISHED"
        except KeyboardInterrupt:
            status = "KILLED"
            print(f"\nto resume, run the same command with output_dir={self.out}", file=sys.stderr, flush=True)
            raise
        finally:
            self.engine.stop()
            self.telemetry.stop()
            if self.mlflow:
                self.mlflow.end_parent(status)
        return self._finish()

    def _energy_unavailable(self, summary: dict) -> str:
        # The reason is long and the same for every point: say it in full once.
        if getattr(self, "_said_energy_reason", False):
            return "energy unavailable (energy_unavailable_reason in summary.json)"
        self._said_energy_reason = True
        return f"energy unavailable: {summary['energy_unavailable_reason']}"

    def _idle_baseline(self, seconds: float) -> None:
        """Engine up, no load: the power the devices draw doing nothing (only where power is measured)."""
        if seconds <= 0 or not self.telemetry.measures_energy:
            return
        print(f"idle baseline: {seconds:g} s of power with the engine up and no load", flush=True)
        a = self.telemetry.mark("idle_baseline_start", self.telemetry.sample_now())
        time.sleep(seconds)
        b = self.telemetry.mark("idle_baseline_end", self.telemetry.sample_now())
        self.idle_interval = (a, b)

    def _start_mlflow(self) -> None:
        if not self.cfg.mlflow.get("enabled", True):
            return
        uri = tracking_uri(self.cfg.mlflow.get("tracking_uri"))
        self.mlflow = MlflowLogger(uri, str(self.cfg.experiment))
        marker = self.out / "mlflow_parent.txt"
        prev = marker.read_text().strip() if marker.exists() else None
        pid = self.mlflow.start_parent(self.out.name, self.safe_config, tags={"output_dir": str(self.out.resolve())},
                                       run_id=prev)
        results_io.write_atomic(marker, pid + "\n")

    def _finish(self) -> Path:
        if self.cfg.report.get("enabled", True):
            path = report.render(self.out)
            if self.mlflow:
                self.mlflow.log_parent_artifact(path)
            print(f"report: {path}")
        print(f"results: {self.out}")
        return self.out

    # ------------------------------------------------------------------------------------
    def _run_point(self, spec: RunSpec, window_open_ns: int, last: bool) -> int:
        run_dir = self.run_dir(spec)
        run_dir.mkdir(parents=True, exist_ok=True)
        for stale in ("summary.json", "requests.parquet"):
            (run_dir / stale).unlink(missing_ok=True)
        warmup = int(spec.load.get("warmup_requests") or 0)
        lspec = load_spec(spec.load, warmup)
        cache_state = self.cfg.engine.get("cache_state") or "warm"
        if cache_state not in ("cold", "warm"):
            raise UserError(f"engine.cache_state must be cold or warm, got {cache_state!r}")
        if cache_state == "cold":
            try:
                if not self.engine.reset_cache():
                    raise UserError(f"engine={self.engine.name} has no way to reset its cache; "
                                    "use engine.cache_state=warm")
            except EngineError as e:
                raise UserError(str(e)) from None
        engine_sampler = self.engine_sampler
        if engine_sampler is not None:  # the run's own share of the engine's counters starts here
            self.telemetry.record(engine_sampler.rows(engine_sampler.snapshot("start"), "start"))
        writer = RecordWriter(run_dir / "requests.parquet")
        n_total = lspec.num_requests
        counts = {"ok": 0, "fail": 0}
        bar = None
        if self.cfg.get("progress", True):
            from tqdm import tqdm

            bar = tqdm(total=n_total, desc=f"[{spec.index + 1}/{len(self.plan)}] {spec.label}", unit="req",
                       file=sys.stderr, dynamic_ncols=True)

        def on_done(rec) -> None:
            counts["ok" if rec.status == "ok" else "fail"] += 1
            if bar is not None:
                bar.update(1)
                bar.set_postfix(ok=counts["ok"], failed=counts["fail"], refresh=False)

        items = _items(self.cfg, self.builder, lspec.num_requests, self.engine.max_model_len())
        wl_stats = self._describe_workload(run_dir, items, lspec.num_requests)
        cpu0 = time.process_time()

        def finalize(rec) -> None:
            complete_record(rec, self.slo, self.count_tokens)

        async def go():
            async with StreamingClient(self.client_cfg) as client:
                d = Dispatcher(client, writer, finalize=finalize, on_done=on_done,
                               followup=getattr(items, "followup", None))
                return await d.run(items, lspec)

        _event_loop_policy()
        n_workers = int(self.cfg.client.get("workers") or 1)
        try:
            try:
                if n_workers > 1:  # one shared schedule over forked load-generator processes
                    stats = run_workers(n_workers, self.client_cfg, items, lspec, writer, finalize, on_done,
                                        followup=getattr(items, "followup", None))
                else:
                    stats = asyncio.run(go())
            except ValueError as e:
                raise UserError(f"{spec.label}: {e}") from None
        except BaseException:
            writer.abort()
            # kept beside requests.parquet.partial, under a name that never reads as complete
            self.telemetry.write_window(run_dir / "telemetry.parquet.partial", window_open_ns, perf_ns())
            if bar is not None:
                bar.close()
            raise
        client_cpu_s = time.process_time() - cpu0 + stats.get("client_cpu_s", 0.0)
        if bar is not None:
            bar.close()
        writer.close()
        if engine_sampler is not None:  # before the engine may be stopped below
            self.telemetry.record(engine_sampler.rows(engine_sampler.snapshot("end"), "end"))
        engine_alive = self.engine.alive()
        if last or not engine_alive:
            if engine_sampler is not None and engine_alive:
                self.telemetry.remove_sampler(engine_sampler)  # its page goes away with the engine
            self.engine.stop()
        window_close = perf_ns()
        self.telemetry.sample_now()  # a sample after the window closes
        self.telemetry.mark("load_start", stats["start_ns"], spec.label)
        self.telemetry.mark("load_end", stats["end_ns"], spec.label)
        tel_path = self.telemetry.write_window(run_dir / "telemetry.parquet", window_open_ns, window_close,
                                               also=[self.idle_interval] if self.idle_interval else [])
        # The next window opens here: what is older is on disk (memory stays one window's worth).
        self.telemetry.forget_before(window_close, keep=[self.idle_interval] if self.idle_interval else [])

        table = read_requests(run_dir / "requests.parquet")
        capacity, why = steady_capacity(spec.load)
        summary = summarize(table, self.slo, window_open_ns, window_close,
                            cost_cfg=self.container.get("cost"),
                            max_schedule_lag_ms=float(self.cfg.client.get("max_schedule_lag_ms") or 10),
                            telemetry=pq.read_table(tel_path), steady_capacity=capacity, steady_reason=why,
                            expected_turns=getattr(items, "expected_turns", None))
        load_s = (stats["end_ns"] - stats["start_ns"]) / 1e9
        summary.update({
            "label": spec.label, "offered_load": offered_load(spec.load), "load_kind": spec.load.get("kind"),
            "client_cpu_s": client_cpu_s, "client_cpu_util": client_cpu_s / load_s if load_s > 0 else float("nan"),
            "chunk_timestamps": stats.get("timestamp_source", "read"),  # kernel receive stamps or read times
            "engine_alive_after": engine_alive,
            "engine_startup_s": (self.engine.ready_ns - self.engine.started_ns) / 1e9,
            "cache_state": cache_state,
        })
        summary.update(workload_describe.summary_keys(wl_stats, items))
        if engine_sampler is not None:
            summary.update(engine_sampler.summary())
        exp = table.column("expected_prompt_tokens").to_numpy(zero_copy_only=False)
        got = table.column("prompt_tokens").to_numpy(zero_copy_only=False)
        with np.errstate(invalid="ignore"):
            summary["prompt_tokens_mismatch"] = int(np.nansum(exp.astype(float) != got.astype(float)))

        run_meta = {"index": spec.index, "label": spec.label, "load": spec.load, "repeat": spec.repeat,
                    "window_start_ns": window_open_ns, "window_end_ns": window_close}
        results_io.write_json(run_dir / "run.json", run_meta)
        results_io.write_yaml(run_dir / "config.yaml", {**self.safe_config, "load": spec.load})
        results_io.write_json(run_dir / "provenance.json", self.engine_prov)
        results_io.write_json(run_dir / "summary.json", summary)  # last: marks the run complete
        if self.mlflow:
            eng = self.engine_prov.get("engine") or {}
            params = {**self.safe_config, "load": spec.load,
                      "engine_resolved": {"version": eng.get("engine_version"),
                                          "feature_flags": " ".join(eng.get("feature_flags") or []),
                                          "command": " ".join(eng.get("command") or [])}}
            self.mlflow.log_child(f"{self.out.name}/{spec.label}", params, summary, run_dir,
                                  tags={"label": spec.label})
        print(f"  {spec.label}: {summary['completed']}/{summary['num_requests']} ok, "
              f"{summary['output_throughput']:.1f} out tok/s, p99 TTFT {summary['p99_ttft_ms']:.1f} ms, "
              f"goodput {summary['goodput_rps']:.2f} req/s -> {run_dir}", flush=True)
        print(f"  cost {summary.get('cost_total', float('nan')):.4g} {summary.get('cost_currency', '')} over "
              f"{summary['window_s']:.1f} s, {summary.get('cost_per_mtok_good', float('nan')):.4g} per M good tok; "
              + (f"energy {summary['energy_j']:.1f} J ({summary['energy_source']}, {summary['energy_method']})"
                 if summary["energy_available"] else self._energy_unavailable(summary)),
              flush=True)
        if not engine_alive:
            raise UserError(f"engine={self.engine.name} died during {spec.label}; finished requests are kept in "
                            f"{run_dir / 'requests.parquet'}.\nlast lines of its log:\n"
                            f"{self.engine.process.tail() if self.engine.process else ''}")
        return window_close

    def _describe_workload(self, run_dir: Path, items, n) -> dict:
        """workload.json in the run folder (logged to MLflow with it); the figures
        (workload.html) once, in the experiment's folder and its MLflow parent run."""
        html = self.out / workload_describe.HTML_NAME
        first = not getattr(self, "_workload_figures", False)
        try:
            stats = workload_describe.describe(self.cfg, run_dir, n=n, table=getattr(items, "table", None),
                                               count=self.builder.count, html_dir=self.out, figures_too=first)
        except ValueError as e:
            raise UserError(str(e)) from None
        if first:
            self._workload_figures = True
            if self.mlflow:
                self.mlflow.log_parent_artifact(html)
        return stats


def run_experiment(cfg: DictConfig) -> Path:
    return Experiment(cfg).run()
