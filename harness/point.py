"""One load point as named steps, in the order ``POINT_STEPS`` runs them.

Each step is ``step(session, point)``: ``session`` is the ``EngineSession`` (engine,
telemetry, client config, prompt builder), ``point`` the ``PointRun`` that carries what
earlier steps made.  A protocol can run its own list (skip the cache reset, add a fault
between dispatch and the window's close, ...).  ``summary.json`` is written last of the
files: a folder without it is not a finished run.
"""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from engines.base import EngineError
from engines.tiny_model import cache_root
from harness import results_io, workload_describe
from harness.errors import UserError
from loadgen.client import StreamingClient
from loadgen.dispatch import Dispatcher, LoadSpec
from loadgen.prepare import PrepareCache, PrepareOptions, source_hash
from loadgen.records import RecordWriter, read_requests
from loadgen.workers import run_workers
from loadgen.workloads.build import make_workload
from metrics.energy import steady_capacity
from metrics.engine_counters import engine_summary
from metrics.request_metrics import complete_record
from metrics.summary import summarize
from protocols.plan import RunSpec, offered_load

perf_ns = time.perf_counter_ns
# The code that shapes prepared requests: a change to it invalidates the cache.
PREPARE_CODE = source_hash("loadgen.workloads", "loadgen.client.dialect", "loadgen.prepare", "loadgen.dispatch")


@dataclass
class PointRun:
    spec: RunSpec
    run_dir: Path
    last: bool                           # the engine is stopped when this point ends
    window_open_ns: int                  # this point's observation window opened here
    load: LoadSpec | None = None
    items: object = None                 # the workload's iterator of WorkItems
    workload_stats: dict = field(default_factory=dict)
    writer: RecordWriter | None = None
    stats: dict = field(default_factory=dict)   # the dispatcher's: start_ns, end_ns, sent, timestamp_source
    client_cpu_s: float = 0.0
    engine_alive: bool = True
    window_close_ns: int | None = None
    telemetry_path: Path | None = None
    requests: pa.Table | None = None
    summary: dict = field(default_factory=dict)
    progress: object = None              # the point's progress bars (dispatch)


# ---------------------------------------------------------------------------------- steps
def prepare_folder(s, p: PointRun) -> None:
    """The run folder, without what a previous, interrupted attempt left under final names."""
    p.run_dir.mkdir(parents=True, exist_ok=True)
    for stale in ("summary.json", "requests.parquet"):
        (p.run_dir / stale).unlink(missing_ok=True)
    p.load = LoadSpec.from_load(p.spec.load)


def reset_cache(s, p: PointRun) -> None:
    """``engine.cache_state=cold``: empty the engine's prefix cache before the load."""
    if s.cfg.engine.cache_state != "cold":
        return
    try:
        if not s.engine.reset_cache():
            raise UserError(f"engine={s.engine.name} has no way to reset its cache; use engine.cache_state=warm")
    except EngineError as e:
        raise UserError(str(e)) from None


def engine_counters_start(s, p: PointRun) -> None:
    """The run's own share of the engine's counters starts here."""
    if s.engine_metrics:
        s.telemetry.engine_snapshot("start")


def build_workload(s, p: PointRun) -> None:
    try:
        p.items = make_workload(s.cfg.workload, s.builder, p.load.num_requests, s.engine.max_model_len())
    except ValueError as e:
        raise UserError(str(e)) from None


def describe_workload(s, p: PointRun) -> None:
    """workload.json in the run folder (logged to MLflow with it); the figures (workload.html)
    once, in the experiment's folder and its MLflow parent run."""
    first = not s.workload_figures_written
    try:
        p.workload_stats = workload_describe.describe(s.cfg, p.run_dir, n=p.load.num_requests,
                                                      table=getattr(p.items, "table", None), count=s.builder.count,
                                                      html_dir=s.out, figures_too=first, load=p.spec.load)
    except ValueError as e:
        raise UserError(str(e)) from None
    if first:
        s.workload_figures_written = True
        if s.mlflow:
            s.mlflow.log_parent_artifact(s.out / workload_describe.HTML_NAME)


def dispatch(s, p: PointRun) -> None:
    """Send the load and record every request (one process, or ``client.workers`` of them)."""
    p.writer = RecordWriter(p.run_dir / "requests.parquet")
    p.progress = _Progress(s, p)
    on_done = p.progress.on_done
    followup = getattr(p.items, "followup", None)

    def finalize(rec) -> None:
        complete_record(rec, s.slo, s.count_tokens)

    prep = _prepare_options(s, p, followup)

    async def go():
        async with StreamingClient(s.client_cfg) as client:
            d = Dispatcher(client, p.writer, finalize=finalize, on_done=on_done, followup=followup, prepare=prep)
            return await d.run(p.items, p.load)

    _event_loop_policy()
    n_workers = int(s.cfg.client.workers)
    try:
        try:
            if s.cfg.client.backend == "ray":  # one shared schedule over Ray actors on the cluster's nodes
                p.stats = _ray_dispatch(s, p, on_done, followup)
            elif n_workers > 1:  # one shared schedule over forked load-generator processes
                p.stats = run_workers(n_workers, s.client_cfg, p.items, p.load, p.writer, finalize, on_done,
                                      followup=followup)
            else:
                p.stats = asyncio.run(go())
        except ValueError as e:
            raise UserError(f"{p.spec.label}: {e}") from None
    except BaseException:
        p.writer.abort()
        # kept beside requests.parquet.partial, under a name that never reads as complete
        s.telemetry.write_window(p.run_dir / "telemetry.parquet.partial", p.window_open_ns, perf_ns())
        p.progress.close()
        raise
    p.client_cpu_s = p.stats["cpu_s"]  # from t0 on: building requests ahead is reported apart
    p.progress.close()
    p.writer.close()


def engine_counters_end(s, p: PointRun) -> None:
    """Before the engine may be stopped by ``close_window``."""
    if s.engine_metrics:
        s.telemetry.engine_snapshot("end")


def close_window(s, p: PointRun) -> None:
    """Stop the engine after the last point (or a dead one), close the window and write its
    telemetry; what is older is on disk, so memory stays one window's worth."""
    p.engine_alive = s.engine.alive()
    if p.last or not p.engine_alive:
        if s.engine_metrics and p.engine_alive:
            s.telemetry.remove_engine()  # its page goes away with the engine
        s.engine.stop()
    p.window_close_ns = perf_ns()
    tel = s.telemetry
    tel.sample_now()  # a sample after the window closes
    tel.mark("load_start", p.stats["start_ns"], p.spec.label)
    tel.mark("load_end", p.stats["end_ns"], p.spec.label)
    keep = [s.idle_interval] if s.idle_interval else []
    p.telemetry_path = Path(tel.write_window(p.run_dir / "telemetry.parquet", p.window_open_ns, p.window_close_ns,
                                             also=keep))
    tel.forget_before(p.window_close_ns, keep=keep)


def summarise(s, p: PointRun) -> None:
    """``summary.json``'s numbers, from requests.parquet, the window and its telemetry."""
    p.requests = read_requests(p.run_dir / "requests.parquet")
    telemetry = pq.read_table(p.telemetry_path)
    capacity, why = steady_capacity(p.spec.load)
    summary = summarize(p.requests, s.slo, p.window_open_ns, p.window_close_ns, cost_cfg=s.container["cost"],
                        max_schedule_lag_ms=float(s.cfg.client.max_schedule_lag_ms),
                        telemetry=telemetry, steady_capacity=capacity, steady_reason=why,
                        expected_turns=getattr(p.items, "expected_turns", None))
    load_s = (p.stats["end_ns"] - p.stats["start_ns"]) / 1e9
    summary.update({
        "label": p.spec.label, "offered_load": offered_load(p.spec.load), "load_kind": p.spec.load.get("kind"),
        "client_cpu_s": p.client_cpu_s, "client_cpu_util": p.client_cpu_s / load_s if load_s > 0 else float("nan"),
        "chunk_timestamps": p.stats.get("timestamp_source", "read"),  # kernel receive stamps or read times
        "engine_alive_after": p.engine_alive,
        "engine_startup_s": (s.engine.ready_ns - s.engine.started_ns) / 1e9,
        "cache_state": s.cfg.engine.cache_state,
        # stopped early as over-saturated (loadgen.saturation): its latencies are not a steady state's
        "saturated": bool(p.stats.get("saturated")), "saturation_reason": p.stats.get("saturated"),
    })
    summary.update(_clock_keys(s, p.stats))
    prep = p.stats.get("prepare") or {}  # requests built off the send loop (loadgen/prepare.py)
    summary.update({f"prepare_{k}": prep.get(k) for k in ("mode", "seconds", "tokens_per_s", "cached", "stalls",
                                                           "streamed")})
    summary.update(workload_describe.summary_keys(p.workload_stats, p.items))
    if s.engine_metrics:
        summary.update(engine_summary(telemetry))
    summary.update(_roofline(s, summary))
    exp = p.requests.column("expected_prompt_tokens").to_numpy(zero_copy_only=False)
    got = p.requests.column("prompt_tokens").to_numpy(zero_copy_only=False)
    with np.errstate(invalid="ignore"):
        summary["prompt_tokens_mismatch"] = int(np.nansum(exp.astype(float) != got.astype(float)))
    p.summary = summary


def write_results(s, p: PointRun) -> None:
    run_meta = {"index": p.spec.index, "label": p.spec.label, "load": p.spec.load, "repeat": p.spec.repeat,
                "config": s.name, "block": s.block, "role": p.spec.tags.get("role", "point"),
                "window_start_ns": p.window_open_ns,
                "window_end_ns": p.window_close_ns, "fixed_conditions": s.fixed_conditions()}
    results_io.write_json(p.run_dir / "run.json", run_meta)
    results_io.write_yaml(p.run_dir / "config.yaml", {**s.safe_config, "load": p.spec.load})
    results_io.write_json(p.run_dir / "provenance.json", s.engine_prov)
    results_io.write_json(p.run_dir / "summary.json", p.summary)  # last: marks the run complete


def log_mlflow(s, p: PointRun) -> None:
    if not s.mlflow:
        return
    eng = s.engine_prov.get("engine") or {}
    params = {**s.safe_config, "load": p.spec.load,
              "engine_resolved": {"version": eng.get("engine_version"),
                                  "feature_flags": " ".join(eng.get("feature_flags") or []),
                                  "command": " ".join(eng.get("command") or [])}}
    name = f"{s.name}/block{s.block}/{p.spec.label}" if s.name else f"{s.out.name}/{p.spec.label}"
    tags = {"label": p.spec.label, **({"config": s.name, "block": str(s.block)} if s.name else {})}
    s.mlflow.log_child(name, params, p.summary, p.run_dir, tags=tags)


def print_point(s, p: PointRun) -> None:
    m = p.summary
    if (m.get("prepare_seconds") or 0) >= 1 or m.get("prepare_cached"):
        how = "from the cache" if m["prepare_cached"] else (
            f"in {m['prepare_seconds']:.1f} s ({m['prepare_tokens_per_s']:,.0f} prompt tokens/s)")
        print(f"  requests prepared {how}; {m['prepare_stalls']} sends waited for one", flush=True)
    print(f"  {p.spec.label}: {m['completed']}/{m['num_requests']} ok, "
          f"{m['output_throughput']:.1f} out tok/s, p99 TTFT {m['p99_ttft_ms']:.1f} ms, "
          f"goodput {m['goodput_rps']:.2f} req/s -> {p.run_dir}", flush=True)
    if m["energy_available"]:
        energy = f"energy {m['energy_j']:.1f} J ({m['energy_source']}, {m['energy_method']})"
    elif s.energy_reason_said:  # the reason is long and the same for every point: say it in full once
        energy = "energy unavailable (energy_unavailable_reason in summary.json)"
    else:
        s.energy_reason_said = True
        energy = f"energy unavailable: {m['energy_unavailable_reason']}"
    print(f"  cost {m.get('cost_total', float('nan')):.4g} {m.get('cost_currency', '')} over "
          f"{m['window_s']:.1f} s, {m.get('cost_per_mtok_good', float('nan')):.4g} per M good tok; {energy}",
          flush=True)


def engine_survived(s, p: PointRun) -> None:
    """An engine that died during the point ends the sweep; what finished is kept."""
    if not p.engine_alive:
        raise UserError(f"engine={s.engine.name} died during {p.spec.label}; finished requests are kept in "
                        f"{p.run_dir / 'requests.parquet'}.\nlast lines of its log:\n"
                        f"{s.engine.process.tail() if s.engine.process else ''}")


POINT_STEPS = (prepare_folder, reset_cache, engine_counters_start, build_workload, describe_workload, dispatch,
               engine_counters_end, close_window, summarise, write_results, log_mlflow, print_point,
               engine_survived)


# ---------------------------------------------------------------------------------- before launch
def prebuild(s, specs) -> int:
    """Before the engine starts: build each point's requests into the on-disk prepare cache,
    in the order the points will run, then put the prompt builder back where it was.  No
    observation window then holds the harness's own building: without this, the first config
    of an experiment paid (in its engine's window, so its cost) for the prompts every later
    config read from the cache.  Stops at a multi-turn workload (its later turns depend on
    replies, and so does the builder's state after it).  Returns the points built."""
    c = s.cfg.client
    if not c.prepare_cache or c.prepare == "stream" or int(c.workers) > 1:
        return 0
    from loadgen.client.dialect import RequestDialect

    start_state = s.builder.rng.bit_generator.state
    body = RequestDialect(s.client_cfg)
    built = 0
    try:
        for spec in specs:
            p = PointRun(spec=spec, run_dir=s.out, last=False, window_open_ns=0, load=LoadSpec.from_load(spec.load))
            build_workload(s, p)
            if getattr(p.items, "followup", None) is not None:
                break
            p.progress = _Progress(s, p)
            opts = _prepare_options(s, p, None)
            if opts.cache is None:
                break
            Dispatcher(body, None, prepare=opts).prepare_only(p.items, p.load).close()
            p.progress.close()
            built += 1
    finally:
        s.builder.rng.bit_generator.state = start_state
    return built


# ---------------------------------------------------------------------------------- helpers
def _roofline(s, summary: dict) -> dict:
    """Measured over the roofline of the served model on ``hardware`` (metrics/roofline.py):
    only where the model's config.json is readable and the profile has the peak rates."""
    from metrics.roofline import canonical_dtype, read_model_config, run_roofline

    fixed = s.fixed_conditions()
    try:
        shape = read_model_config(s.engine.model)
        dtype = fixed.get("weight_dtype")
        dtype = canonical_dtype(dtype if dtype and dtype != "auto" else (shape.dtype or "bf16"))
        kv = fixed.get("kv_cache_dtype")
        kv = canonical_dtype(kv) if kv and kv != "auto" else dtype
        return run_roofline(summary, shape, s.container["hardware"], dtype, kv)
    except (OSError, ValueError, KeyError) as e:
        return {"roofline_unavailable_reason": str(e)[:300]}


class _Progress:
    """tqdm bars (``progress=true``): the requests being built ahead, then those finished."""

    def __init__(self, s, p: PointRun):
        self.on = bool(s.cfg.progress)
        self.label = f"[{p.spec.index + 1}/{s.total_points}] {p.spec.label}"
        self.total = p.load.num_requests
        self.bars: list = []
        self.done_bar = None
        self.counts = {"ok": 0, "fail": 0}

    def _bar(self, **kw):
        from tqdm import tqdm

        bar = tqdm(file=sys.stderr, dynamic_ncols=True, **kw)
        self.bars.append(bar)
        return bar

    def preparing(self, total: int | None):
        """The per-request tick of building requests ahead (loadgen.prepare)."""
        bar = self._bar(total=total, desc=f"{self.label}: preparing", unit="req", leave=False) if self.on else None
        return bar.update if bar is not None else (lambda _n: None)

    def on_done(self, rec) -> None:
        self.counts["ok" if rec.status == "ok" else "fail"] += 1
        if not self.on:
            return
        if self.done_bar is None:  # made at the first answer, after any preparation bar
            self.done_bar = self._bar(total=self.total, desc=self.label, unit="req")
        self.done_bar.update(1)
        self.done_bar.set_postfix(ok=self.counts["ok"], failed=self.counts["fail"], refresh=False)

    def close(self) -> None:
        for bar in self.bars:
            bar.close()


def _prepare_options(s, p: PointRun, followup) -> PrepareOptions:
    """``client.prepare*`` as the dispatcher takes them, with the on-disk cache where it applies:
    not for sessions (their later turns depend on the replies) and only when building ahead."""
    c = s.cfg.client
    cache = None
    if c.prepare_cache and followup is None and c.prepare != "stream":
        items = p.items

        def end_state() -> dict:
            return {"rng": s.builder.rng.bit_generator.state, "skipped": getattr(items, "skipped", 0)}

        def on_hit(state: dict) -> None:
            s.builder.rng.bit_generator.state = state["rng"]  # as if the prompts had been built here
            if hasattr(items, "skipped"):
                items.skipped = state["skipped"]

        cache = PrepareCache(cache_root() / "prepared", {
            "workload": s.container["workload"], "load": p.spec.load, "num_requests": p.load.num_requests,
            "max_model_len": s.engine.max_model_len(), "tokenizer": s.tokenizer_digest(), "chat": s.builder.chat,
            "client": {k: getattr(s.client_cfg, k) for k in ("model", "api", "extra_body", "continuous_usage",
                                                              "exact_output")},
            "rng": s.builder.rng.bit_generator.state, "code": PREPARE_CODE}, end_state, on_hit)
    return PrepareOptions(mode=c.prepare, ahead_s=float(c.prepare_ahead_s), max_bytes=int(c.prepare_max_mb * 2**20),
                          cache=cache, progress=p.progress.preparing)


class _CountTokens:
    """The session's token counter without the session: it travels to Ray workers by pickle."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def __call__(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])


def _ray_dispatch(s, p: PointRun, on_done, followup) -> dict:
    """``client.backend=ray``: ``client.workers`` Ray actors share the schedule (loadgen/ray_workers.py)."""
    import functools

    try:
        from loadgen.ray_workers import RaySettings, run_ray_workers
    except ImportError as e:
        raise UserError(f"client.backend=ray needs Ray ({e}): pip install -e '.[ray]'") from None
    finalize = functools.partial(complete_record, slo=s.slo, count_tokens=_CountTokens(s.tokenizer))
    return run_ray_workers(int(s.cfg.client.workers), s.client_cfg, p.items, p.load, p.writer, finalize, on_done,
                           followup=followup, settings=RaySettings.from_config(s.cfg.client.ray))


def _clock_keys(s, stats: dict) -> dict:
    """Ray workers: each one's clock error on the driver's clock; a run whose largest exceeds
    ``client.max_clock_error_ms`` is client-limited (its timings are not trusted to that
    precision); a worker that died leaves the run incomplete."""
    if stats.get("backend") != "ray":
        return {}
    err, limit = float(stats["clock_error_ms"]), float(s.cfg.client.max_clock_error_ms)
    out = {"client_backend": "ray", "client_workers": stats["workers"], "clock_error_ms": err,
           "clock_workers": stats["clock"], "clock_limited": not err <= limit,
           "incomplete": bool(stats.get("incomplete")), "incomplete_reason": stats.get("incomplete_reason")}
    if out["clock_limited"]:
        out.update(client_limited=True,
                   client_limited_reason=f"clock error {err:.3f} ms > client.max_clock_error_ms={limit:g}")
    return out


def _event_loop_policy() -> None:
    try:
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass
