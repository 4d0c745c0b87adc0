"""The ``dispatch`` step: the load sent and every request recorded, in this process, over
forked worker processes (``client.workers``) or over Ray actors (``client.backend=ray``); and
how a point's requests are prepared ahead (``prepare_options``, shared with ``prebuild``)."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from engines.tiny_model import cache_root
from harness import autoscale_record as autoscale
from harness import results_io
from harness.errors import UserError
from harness.point.point_run import PointRun
from harness.point.progress import Progress
from harness.point.session import PointSession
from loadgen.client import StreamingClient
from loadgen.dispatch import Dispatcher
from loadgen.prepare import PrepareCache, PrepareOptions, source_hash
from loadgen.records import RecordWriter
from loadgen.workers import run_workers
from metrics.request_metrics import complete_record

perf_ns = time.perf_counter_ns
# The code that shapes prepared requests: a change to it invalidates the cache (the send order
# and offsets: loadgen.send_schedule, out of loadgen.dispatch since issue 42, and loadgen.load_spec).
PREPARE_CODE = source_hash("loadgen.workloads", "loadgen.client.dialect", "loadgen.prepare", "loadgen.dispatch",
                           "loadgen.send_schedule", "loadgen.load_spec")


def point_progress(s: PointSession, p: PointRun) -> Progress:
    """The point's bars, labelled with its place among the session's points."""
    return Progress(p.inputs.progress, f"[{p.spec.index + 1}/{s.total_points}] {p.spec.title}",
                    p.load.requests_to_send)


def dispatch(s: PointSession, p: PointRun) -> None:
    """Send the load and record every request (one process, or ``client.workers`` of them)."""
    p.writer = RecordWriter(p.run_dir / results_io.REQUESTS)
    p.progress = point_progress(s, p)
    on_done = p.progress.on_done
    followup = getattr(p.items, "followup", None)

    def finalize(rec) -> None:
        complete_record(rec, s.slo, s.count_tokens)

    prep = prepare_options(s, p, followup)
    dispatchers: list = []  # the load's t0 (the scaler's origin) is its dispatcher's

    async def go():
        async with StreamingClient(s.client_cfg) as client:
            d = Dispatcher(client, p.writer, finalize=finalize, on_done=on_done, followup=followup, prepare=prep)
            dispatchers.append(d)
            s.faults.attach(d)  # the watchdog may abort it; the scenario's kill is timed from its t0
            try:
                return await d.run(p.items, p.load)
            finally:
                s.faults.detach()

    _event_loop_policy()
    n_workers = p.inputs.client.workers
    _arm_faults(s, p, n_workers)
    single = n_workers <= 1 and p.inputs.client.backend != "ray"
    autoscale.start(s, p, (lambda: dispatchers[0].t0 if dispatchers else None) if single else None)
    try:
        try:
            if p.inputs.client.backend == "ray":  # one shared schedule over Ray actors on the cluster's nodes
                p.stats = _ray_dispatch(s, p, on_done, followup)
            elif n_workers > 1:  # one shared schedule over forked load-generator processes
                p.stats = run_workers(n_workers, s.client_cfg, p.items, p.load, p.writer, finalize, on_done,
                                      followup=followup)
            else:
                p.stats = asyncio.run(go())
        except ValueError as e:
            raise UserError(f"{p.spec.title}: {e}") from None
        finally:
            autoscale.stop(s, p)  # the load is over: no more decisions, replicas on their way waited for
    except BaseException:
        p.writer.abort()
        # kept beside requests.parquet.partial, under a name that never reads as complete
        s.telemetry.write_window(Path(results_io.partial_path(p.run_dir / results_io.TELEMETRY)), p.window_open_ns,
                                 perf_ns())
        p.progress.close()
        raise
    p.client_cpu_s = p.stats["cpu_s"]  # from t0 on: building requests ahead is reported apart
    p.progress.close()
    p.writer.close()



def _arm_faults(s: PointSession, p: PointRun, n_workers: int) -> None:
    """The scenario's kill for this point (load points only, not probes or searches)."""
    kill_at = p.inputs.scenario.kill_at_s if p.spec.tags.get("role", "point") == "point" else None
    if kill_at is not None and (n_workers > 1 or p.inputs.client.backend != "local"):
        raise UserError("scenario.kill_at_s times the kill from the load's start in this process: use "
                        "client.workers=1 (and client.backend=local)")
    if kill_at is not None and not s.engine.launched:
        raise UserError(f"scenario.kill_at_s kills an engine tokenfactory launched; engine={s.engine.name} "
                        "has launch=false")
    s.faults.arm(kill_at, p.inputs.scenario.kill_signal)



def prepare_options(s: PointSession, p: PointRun, followup) -> PrepareOptions:
    """``client.prepare*`` as the dispatcher takes them, with the on-disk cache where it applies:
    not for sessions (their later turns depend on the replies) and only when building ahead."""
    c = p.inputs.client
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
            # (the key's name is kept: renamed, every cached entry would be built again)
            "workload": s.container["workload"], "load": p.spec.load, "num_requests": p.load.requests_to_send,
            "max_model_len": s.engine.max_model_len(), "tokenizer": s.tokenizer_digest(), "chat": s.builder.chat,
            "client": {k: getattr(s.client_cfg, k) for k in ("model", "api", "extra_body", "continuous_usage",
                                                              "exact_output")},
            "rng": s.builder.rng.bit_generator.state, "code": PREPARE_CODE}, end_state, on_hit)
    return PrepareOptions(mode=c.prepare, ahead_s=c.prepare_ahead_s, max_bytes=p.inputs.prepare_max_bytes,
                          cache=cache, progress=p.progress.preparing)


class _CountTokens:
    """The session's token counter without the session: it travels to Ray workers by pickle."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer

    def __call__(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])


def _ray_dispatch(s: PointSession, p: PointRun, on_done, followup) -> dict:
    """``client.backend=ray``: ``client.workers`` Ray actors share the schedule (loadgen/ray_workers.py)."""
    import functools

    try:
        from loadgen.ray_workers import run_ray_workers
    except ImportError as e:
        raise UserError(f"client.backend=ray needs Ray ({e}): pip install -e '.[ray]'") from None
    finalize = functools.partial(complete_record, slo=s.slo, count_tokens=_CountTokens(s.tokenizer))
    return run_ray_workers(p.inputs.client.workers, s.client_cfg, p.items, p.load, p.writer, finalize, on_done,
                           followup=followup, settings=p.inputs.client.ray)


def _event_loop_policy() -> None:
    try:
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass
