"""Load-generator workers on a Ray cluster (``client.backend=ray``): one schedule over hosts.

Each worker is a Ray actor running today's load generator (``Dispatcher`` over
``StreamingClient``: its own uvloop, kernel receive stamps) on its node.  The schedule is
split as ``client.workers`` splits it on one host (``loadgen.workers.split_load``): open-loop
request ``i`` of the one schedule goes to worker ``i % n`` at its time; closed loop deals the
users and requests out.  Placement: a Ray placement group of one bundle per worker
(``client.ray.num_cpus`` and ``client.ray.resources`` each), ``SPREAD`` over the nodes or
``PACK`` onto few.

Clocks: the driver measures each worker's offset to its own ``perf_counter_ns`` by round
trips over Ray (best of ``client.ray.clock_samples``, ``loadgen.clock_sync``) before the
start, every ``client.ray.clock_every_s`` during the run and after it; t0 is fixed on the
driver's clock and handed to each worker on its own clock.  Every ``*_ns`` of a worker's rows
is converted to the driver's clock when the parts are merged, and each worker's offset error
bound is returned (``clock``) for the run's summary (``client.max_clock_error_ms``).

Records: each worker hands its finished records over in batches when polled (the driver
writes them to a part file per worker as they come, so a worker that dies loses only what it
had not handed over yet); the parts are merged into the one ``requests.parquet``
(``loadgen.workers.merge_parts``), each row carrying its worker and host.  A worker that dies
mid-run: the requests it was given and did not hand back are recorded ``cancelled`` with the
reason (sent or due by then: in flight; later: never sent), the others go on, and the stats
say ``incomplete``.

This module imports Ray; the harness imports it only when ``client.backend=ray``.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable, Iterable

import pyarrow as pa
import ray

from conf.schema import ClientRay
from engines.ray_cluster import connect
from loadgen.client import ClientConfig, StreamingClient
from loadgen.clock_sync import ClockModel, convert_table, measure
from loadgen.dispatch import Dispatcher, LoadSpec
from loadgen.records import HOST, SCHEMA, RecordWriter, RequestRecord
from loadgen.workers import RequestStatus, dealt_items, merge_parts, split_load
from loadgen.workloads.item import WorkItem
from resultfiles import parquet
from resultfiles.whole import partial_path

perf_ns = time.perf_counter_ns
POLL_S = 0.25  # how often the driver collects finished records (and notices a dead worker)


# ------------------------------------------------------------------------------ worker side
class _Outbox(RecordWriter):
    """The worker's finished records, columnar as the record writer keeps them, until the
    driver takes them (``take``): the event loop appends, a Ray call thread takes."""

    def __init__(self):  # no file: the rows leave through Ray
        self.rows = 0
        self._lock = threading.Lock()
        self._reset()

    def append(self, rec: RequestRecord) -> None:
        with self._lock:
            super().append(rec)

    def flush(self) -> None:  # (called by append at batch_size: batches leave only through take)
        pass

    batch_size = 1 << 62

    def take(self) -> pa.Table | None:
        with self._lock:
            if not self._n_buf:
                return None
            t = self._table()
            self.rows += self._n_buf
            self._reset()
        return t


class LoadWorker:
    """One load-generator worker (a threaded Ray actor: ``run`` holds one thread for the
    run, clock reads and record takes come on others)."""

    def __init__(self, w: int, cfg: ClientConfig, load: LoadSpec, items, plan, finalize, followup):
        self.w, self.cfg, self.load, self.items, self.plan = w, cfg, load, items, plan
        self.finalize, self.followup = finalize, followup
        self.outbox = _Outbox()
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._t0: asyncio.Future | None = None

    def hello(self) -> dict:
        ctx = ray.get_runtime_context()
        return {"host": HOST, "pid": os.getpid(), "node_id": ctx.get_node_id(),
                "node_ip": ray.util.get_node_ip_address()}

    def clock(self) -> int:
        return perf_ns()

    def is_ready(self) -> bool:
        return self._ready.is_set()

    def start(self, t0: int) -> None:
        """t0 on this worker's clock (the driver converted it)."""
        self._loop.call_soon_threadsafe(self._t0.set_result, int(t0))

    def take(self) -> pa.Table | None:
        return self.outbox.take()

    def runq_s(self) -> float:
        """Seconds this worker's threads were runnable but waiting for a CPU (the host's
        other load stalling it, whatever its own code does)."""
        import glob

        total = 0
        for f in glob.glob(f"/proc/{os.getpid()}/task/*/schedstat"):
            try:
                with open(f) as fh:
                    total += int(fh.read().split()[1])
            except (OSError, IndexError, ValueError):
                pass
        return total / 1e9

    def run(self) -> dict:
        try:
            import uvloop

            loop = uvloop.new_event_loop()
        except ImportError:
            loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        self._loop = loop

        async def ready() -> int:
            self._t0 = loop.create_future()
            self._ready.set()
            return await self._t0

        async def go():
            async with StreamingClient(self.cfg) as client:
                # The driver built every prompt: only bodies are left to encode.
                d = Dispatcher(client, self.outbox, finalize=self.finalize, followup=self.followup, prepare="all")
                return await d.run(iter(self.items), self.load, plan=self.plan, ready=ready)

        try:
            return loop.run_until_complete(go())
        finally:
            loop.close()


# ------------------------------------------------------------------------------ driver side
def _ray_error(e: BaseException) -> str:
    """Ray's error, short: its last line, cut after the first two sentences."""
    text = str(e).strip().splitlines()
    last = text[-1] if text else ""
    return f"{type(e).__name__}: {'. '.join(last.split('. ')[:2])}"[:300]


class _Worker:
    """The driver's view of one worker: its actor, share of the load, clock, part file."""

    def __init__(self, w: int, actor, load: LoadSpec, items: list, plan, part: str):
        self.w, self.actor, self.load, self.items, self.plan, self.part = w, actor, load, items, plan, part
        self.info: dict = {}
        self.clock = ClockModel()
        self.run_ref = None
        self.result: dict | None = None
        self.dead: str | None = None      # why it died
        self.dead_at_ns: int | None = None
        self.ids: set[str] = set()        # request ids it handed back
        self._pq: parquet.StreamWriter | None = None

    def measure_clock(self, n: int) -> None:
        self.clock.add(measure(lambda: ray.get(self.actor.clock.remote()), n, perf_ns))

    def store(self, table: pa.Table | None, on_done) -> None:
        if table is None or not table.num_rows:
            return
        if self._pq is None:
            self._pq = parquet.StreamWriter(self.part, SCHEMA)
        self._pq.write(table)
        ids = table.column("request_id").to_pylist()
        self.ids.update(ids)
        if on_done is not None:
            for status, rid in zip(table.column("status").to_pylist(), ids):
                on_done(RequestStatus(status, rid))

    def close(self) -> None:
        if self._pq is not None:
            self._pq.publish()
            self._pq = None

    def convert(self, table: pa.Table) -> pa.Table:
        """This worker's rows with every ``*_ns`` on the driver's clock."""
        return convert_table(table, self.clock)

    def lost_records(self, t0: int, warmup: int, reason: str) -> list[RequestRecord]:
        """The requests given to this (dead) worker that it never handed back, as cancelled."""
        out = []
        if self.plan is not None:
            entries = [(i, it, t0 + off) for i, it, off in self.plan]
        else:  # closed loop: no schedule; the worker's own warm-up share comes first
            entries = [(i, it, None) for i, it in enumerate(self.items)]
        for i, it, sched in entries:
            if it.request_id in self.ids:
                continue
            due = sched is None or self.dead_at_ns is None or sched <= self.dead_at_ns
            why = ("in flight or due" if due else "not sent yet") + f" when {reason}"
            out.append(RequestRecord(request_id=it.request_id, scheduled_ns=sched, slot_ns=sched,
                                     session_id=it.session_id, turn=it.turn, prefix_group=it.prefix_group,
                                     warmup=i < warmup,
                                     expected_prompt_tokens=it.prompt_tokens, max_tokens=it.max_tokens,
                                     lora=it.model, status="cancelled", error=why, worker=self.w,
                                     worker_host=self.info.get("host")))
        return out


def _placement(n: int, s: ClientRay):
    from ray.util.placement_group import placement_group

    bundle = {"CPU": s.num_cpus, **s.resources} if s.num_cpus else dict(s.resources)
    if not bundle:
        bundle = {"CPU": 0.001}  # a bundle cannot be empty
    pg = placement_group([dict(bundle) for _ in range(n)], strategy="SPREAD" if s.placement == "spread" else "PACK")
    ready, _ = ray.wait([pg.ready()], timeout=s.placement_timeout_s)
    if not ready:
        ray.util.remove_placement_group(pg)
        raise ValueError(f"client.workers={n}: the Ray cluster could not place {n} workers of {bundle} each within "
                         f"client.ray.placement_timeout_s={s.placement_timeout_s:g} s (cluster resources: "
                         f"{ray.cluster_resources()}); lower client.ray.num_cpus or add nodes")
    return pg, bundle


def run_ray_workers(n: int, cfg: ClientConfig, items: Iterable[WorkItem], load: LoadSpec, writer: RecordWriter,
                    finalize: Callable | None = None, on_done: Callable | None = None,
                    followup: Callable | None = None, settings: ClientRay | None = None,
                    on_ready: Callable[[list[dict]], None] | None = None) -> dict:
    """Run one load point over ``n`` Ray actors; every record ends in ``writer`` on the driver's
    clock.  Returns the stats of ``loadgen.workers.run_workers`` plus ``clock`` (per worker:
    host, node, offset, error bound, drift), ``clock_error_ms`` (the largest), ``incomplete``
    and ``incomplete_reason`` (a worker died).  ``on_ready`` gets the workers' ``hello``
    (host, pid, node) once all are placed (tests use it to kill one)."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    s = settings or ClientRay()
    items = dealt_items(items, load, "client.workers")
    shares = split_load(items, load, n)
    connect(s.address, s.runtime_env)
    pg, bundle = _placement(n, s)
    cls = ray.remote(LoadWorker)
    workers: list[_Worker] = []
    try:
        for w, (sw, its, plan) in enumerate(shares):
            actor = cls.options(
                num_cpus=bundle.get("CPU", 0), resources={k: v for k, v in bundle.items() if k != "CPU"} or None,
                max_concurrency=4, max_restarts=0, name=None,
                scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=w),
            ).remote(w, cfg, sw, its, plan, finalize, followup)
            workers.append(_Worker(w, actor, sw, its, plan, f"{writer.path}.ray{w}"))
        for wk, info in zip(workers, ray.get([wk.actor.hello.remote() for wk in workers])):
            wk.info = info
        if on_ready is not None:
            on_ready([wk.info for wk in workers])
        for wk in workers:
            wk.run_ref = wk.actor.run.remote()
        _wait_ready(workers)
        for wk in workers:  # every pool is open: the clocks, then the shared t0
            wk.measure_clock(max(s.clock_samples, 16))
        t0 = perf_ns() + int(s.start_margin_ms * 1e6)
        runq0 = _runq(workers)
        for wk in workers:
            wk.actor.start.remote(wk.clock.to_remote(t0))
        cpu_t0 = time.process_time()
        _collect(workers, s, on_done, t0)
        for wk in workers:
            if not wk.dead:
                try:
                    wk.measure_clock(s.clock_samples)
                except ray.exceptions.RayError as e:  # gone after its run: its last measurement stands
                    wk.dead_at_ns = wk.dead_at_ns or perf_ns()
                    wk.info["after_run"] = _ray_error(e)
            wk.close()
        runq = {w: v - runq0.get(w, 0.0) for w, v in _runq(workers).items()}
        dead = [wk for wk in workers if wk.dead]
        models = {wk.w: wk.clock for wk in workers}
        seen = merge_parts([wk.part for wk in workers], writer,
                           convert=lambda w, t: workers[w].convert(t))
        for wk in dead:
            for rec in wk.lost_records(t0, load.load.warmup_requests, wk.dead):
                if finalize is not None:
                    finalize(rec)
                writer.append(rec)
                seen.add(rec.request_id)
                if on_done is not None:
                    on_done(rec)
        live = [wk for wk in workers if not wk.dead]
        sent = sum(wk.result["sent"] for wk in live) + sum(len(wk.ids) for wk in dead)
        got = sum(len(wk.ids) for wk in live)
        if got != sum(wk.result["sent"] for wk in live):
            raise RuntimeError(f"Ray workers sent {sum(wk.result['sent'] for wk in live)} requests "
                               f"but handed back {got}")
        ends = [int(models[wk.w].to_driver(wk.result["end_ns"])) for wk in live]
        clock = [{"worker": wk.w, **{k: wk.info.get(k) for k in ("host", "node_id", "node_ip", "pid")},
                  **models[wk.w].describe(), "runq_s": runq.get(wk.w), "died": wk.dead} for wk in workers]
        results = [wk.result for wk in live]
        return {"start_ns": t0, "end_ns": max(ends) if ends else perf_ns(), "sent": sent,
                "timestamp_source": min((r.get("timestamp_source", "read") for r in results),
                                        key=("read", "kernel").index, default="read"),
                "cpu_s": sum(r["cpu_s"] for r in results) + time.process_time() - cpu_t0, "workers": n,
                "workers_cpu_s": sum(r["cpu_s"] for r in results),
                "saturated": next((r["saturated"] for r in results if r.get("saturated")), None),
                "saturated_after_s": min((r["saturated_after_s"] for r in results
                                          if r.get("saturated_after_s") is not None), default=None),
                "prepare": ({**results[0]["prepare"], "requests": sum(r["prepare"]["requests"] for r in results)}
                            if results else {}),
                "backend": "ray", "clock": clock,
                "clock_error_ms": max((c["error_ms"] for c in clock), default=float("nan")),
                "incomplete": bool(dead),
                "incomplete_reason": "; ".join(wk.dead for wk in dead) or None,
                "requests_recorded": len(seen)}
    finally:
        for wk in workers:
            wk.close()
            try:
                ray.kill(wk.actor)
            except Exception:  # noqa: BLE001 - already gone
                pass
        ray.util.remove_placement_group(pg)
        for wk in workers:
            for path in (wk.part, partial_path(wk.part)):
                if os.path.exists(path):
                    os.unlink(path)


def _runq(workers: list[_Worker]) -> dict[int, float]:
    live = [wk for wk in workers if not wk.dead]
    try:
        return dict(zip((wk.w for wk in live), ray.get([wk.actor.runq_s.remote() for wk in live], timeout=30)))
    except ray.exceptions.RayError:
        return {}


def _wait_ready(workers: list[_Worker], timeout_s: float = 600.0) -> None:
    """Every worker has its pool open and its requests prepared (or one failed: its error)."""
    deadline = time.monotonic() + timeout_s
    pending = list(workers)
    while pending:
        done, _ = ray.wait([wk.run_ref for wk in pending], timeout=0)
        for wk in pending:
            if wk.run_ref in done:  # run ended before the start: an error (raised here)
                ray.get(wk.run_ref)
                raise RuntimeError(f"Ray load-generator worker {wk.w} ended before the start")
        flags = ray.get([wk.actor.is_ready.remote() for wk in pending])
        pending = [wk for wk, ok in zip(pending, flags) if not ok]
        if pending and time.monotonic() > deadline:
            raise RuntimeError(f"Ray load-generator workers {[wk.w for wk in pending]} not ready after {timeout_s:g} s")
        if pending:
            time.sleep(0.01)


def _collect(workers: list[_Worker], s: ClientRay, on_done, t0: int) -> None:
    """Until every worker has finished or died: take finished records every ``POLL_S``,
    measure the clocks every ``clock_every_s``; a dead worker is marked and the rest go on."""
    running = {wk.run_ref: wk for wk in workers}
    next_clock = time.monotonic() + s.clock_every_s

    def died(wk: _Worker, e: BaseException) -> None:
        wk.dead_at_ns = perf_ns()
        wk.dead = (f"load-generator worker {wk.w} on {wk.info.get('host')} (node {str(wk.info.get('node_id'))[:12]}, "
                   f"pid {wk.info.get('pid')}) died: {_ray_error(e)}")
        running.pop(wk.run_ref, None)

    while running:
        done, _ = ray.wait(list(running), timeout=POLL_S, num_returns=len(running))
        for ref in done:
            wk = running[ref]
            try:
                wk.result = ray.get(ref)
            except ray.exceptions.RayError as e:
                died(wk, e)
                continue
            running.pop(ref)
        for wk in workers:
            if wk.dead:
                continue
            try:
                wk.store(ray.get(wk.actor.take.remote()), on_done)
            except ray.exceptions.RayError as e:
                if not wk.dead:
                    died(wk, e)
        if time.monotonic() >= next_clock:
            next_clock = time.monotonic() + s.clock_every_s
            for wk in workers:
                if wk.run_ref in running:
                    try:
                        wk.measure_clock(s.clock_samples)
                    except ray.exceptions.RayError as e:
                        died(wk, e)
