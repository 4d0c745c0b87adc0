"""Spreading one load point over several load-generator processes.

One Python process keeps its clock honest up to some tens of thousands of chunks per
second (``benchmarks/loadgen_fidelity.py`` measures where); beyond that, ``run_workers``
forks ``n`` worker processes.  They share one schedule: the parent fixes ``t0`` (a
``perf_counter_ns`` time, CLOCK_MONOTONIC, the same clock in every process on the host)
once every worker has its connection pool open, and open-loop request ``i`` of the single
schedule goes to worker ``i % n`` at exactly the time the single-process dispatcher would
have sent it.  Closed loop: the users (``load.concurrency``) are dealt out over the
workers, and so are the requests.  Each worker streams its records to a part file; the
parent merges the parts into the one ``requests.parquet`` the run writes anyway, so the
results' format does not change.

Workers are forked (not spawned) so that the tokenizer-based token counter and the
finalize callback travel without pickling; they import nothing new after the fork.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import time
import traceback
from collections.abc import Callable, Iterable

import pyarrow as pa

from loadgen.client import ClientConfig, StreamingClient
from loadgen.dispatch import Dispatcher, LoadSpec
from loadgen.records import RecordWriter, RequestRecord
from loadgen.send_schedule import prewarm_count, schedule
from loadgen.workloads.item import WorkItem
from resultfiles import parquet
from resultfiles.whole import partial_path

perf_ns = time.perf_counter_ns
START_MARGIN_NS = 20_000_000  # from "all workers ready" to t0: time for the message to reach them


class RequestStatus:
    """What a worker reports to the parent per finished request (progress bars, counts)."""

    __slots__ = ("status", "request_id")

    def __init__(self, status: str, request_id: str):
        self.status = status
        self.request_id = request_id


def _share(total: int, n: int, w: int) -> int:
    return total // n + (1 if w < total % n else 0)


def dealt_items(items: Iterable[WorkItem], load: LoadSpec, workers: str) -> Iterable[WorkItem]:
    """The point's items as ``split_load`` deals them out, once the load is checked: the first
    ``requests_to_send`` of them, as a list; a closed loop must have that count (``workers``: how the
    error names the setting that asked for workers)."""
    load.validate(items)
    if load.requests_to_send is not None:
        return list(itertools.islice(items, load.requests_to_send))
    if load.load.kind == "concurrency":
        raise ValueError(f"{workers} with load=concurrency needs load.num_requests "
                         "(the requests are dealt out to the workers before the start)")
    return items


def split_load(items: Iterable[WorkItem], load: LoadSpec, n: int, t0_placeholder: int = 0):
    """Deal one load point out to ``n`` workers: ``[(load_w, items_w, plan_w)]``.

    Open loop: ``plan_w`` holds worker w's ``(index, item, offset_ns)`` entries, every n-th
    entry of the one schedule (offsets relative to t0).  Closed loop: ``plan_w`` is None and
    the worker runs ``load_w.concurrency`` users over ``items_w``."""
    if n < 1:
        raise ValueError(f"client.workers must be >= 1, got {n}")
    out = []
    if load.load.kind == "concurrency":
        items = list(items)
        conc = load.load.concurrency
        if n > conc:
            raise ValueError(f"client.workers={n} is more than load.concurrency={conc}: some workers would idle")
        warm = load.load.warmup_requests
        for w in range(n):
            its = items[w::n]
            sw = load.share(len(its), None, concurrency=_share(conc, n, w), warmup_requests=_share(warm, n, w),
                            max_concurrency=None)
            out.append((sw, its, None))
        return out
    # Lazily consumed: a duration-bound run takes only the items its duration holds.
    sched = list(schedule(iter(items), load, t0_placeholder))
    for w in range(n):
        mine = sched[w::n]
        sw = load.share(None if load.load.duration_s is not None else max(len(mine), 1),
                        max(prewarm_count(load) // n, 1) if load.prewarm_connections is None else
                        _share(load.prewarm_connections, n, w),
                        max_concurrency=_share(load.load.max_concurrency, n, w) if load.load.max_concurrency else None)
        out.append((sw, [it for _, it, _ in mine], [(i, it, off - t0_placeholder) for i, it, off in mine]))
    return out


def merge_parts(parts: list[str], writer: RecordWriter,
                convert: Callable[[int, pa.Table], pa.Table] | None = None) -> set[str]:
    """Merge the workers' part files (part ``w`` from worker ``w``) into ``writer``: one file,
    one row per request, the same schema, each row marked with its worker.  ``convert(w,
    table)`` rewrites a worker's rows on the way (another host's clock onto the driver's).
    Returns the request ids; a request recorded by two workers is an error."""
    seen: set[str] = set()
    for w, part in enumerate(parts):
        if not os.path.exists(part):
            continue
        f = parquet.open_file(part)
        for g in range(f.num_row_groups):
            t = f.read_row_group(g)
            t = t.set_column(t.schema.get_field_index("worker"), "worker", pa.array([w] * t.num_rows, pa.int32()))
            if convert is not None:
                t = convert(w, t)
            ids = t.column("request_id").to_pylist()
            dup = seen.intersection(ids)
            if dup:
                raise RuntimeError(f"request ids {sorted(dup)[:5]} recorded by two workers")
            seen.update(ids)
            writer.append_table(t)
    return seen


def _worker_main(w: int, cfg: ClientConfig, load: LoadSpec, items, plan, part: str,
                 finalize, conn, status_q, followup=None) -> None:
    """Body of one forked worker; reports ``("ok", stats)`` or ``("error", text)`` on ``conn``."""
    try:
        try:
            import uvloop

            asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
        except ImportError:
            pass
        writer = RecordWriter(part, batch_size=512)
        pending: list = []

        def on_done(rec: RequestRecord) -> None:
            pending.append((rec.status, rec.request_id))
            if len(pending) >= 32:
                status_q.put(list(pending))
                pending.clear()

        async def ready() -> int:
            conn.send(("ready", w))
            return conn.recv()  # t0 from the parent

        async def go():
            async with StreamingClient(cfg) as client:
                # The parent built every prompt before the fork: only bodies are left to encode.
                d = Dispatcher(client, writer, finalize=finalize, on_done=on_done, followup=followup, prepare="all")
                return await d.run(iter(items), load, plan=plan, ready=ready)

        stats = asyncio.run(go())  # its cpu_s: from t0 on
        writer.close()
        if pending:
            status_q.put(list(pending))
        conn.send(("ok", stats))
    except BaseException as e:  # noqa: BLE001 - the parent reports it with the worker's number
        try:
            conn.send(("error", f"worker {w}: {type(e).__name__}: {e}\n{traceback.format_exc()[-3000:]}"))
        except Exception:  # noqa: BLE001 - the parent is gone: nobody to tell
            pass
        os._exit(1)
    os._exit(0)


def run_workers(n: int, cfg: ClientConfig, items: Iterable[WorkItem], load: LoadSpec, writer: RecordWriter,
                finalize: Callable | None = None,
                on_done: Callable | None = None, followup: Callable | None = None) -> dict:
    """Run one load point over ``n`` forked worker processes; every record ends in ``writer``.

    Returns the dispatcher's stats (``start_ns`` = the shared t0, ``end_ns``, ``sent``) plus
    ``cpu_s`` (the workers' and the parent's CPU from t0 on; ``workers_cpu_s`` the workers'
    alone).  ``on_done`` gets an object with ``status`` and ``request_id`` per finished
    request (for progress displays).  ``followup`` (sessions) runs in the worker that ran the
    previous turn."""
    import multiprocessing as mp

    items = dealt_items(items, load, "client.workers > 1")
    ctx = mp.get_context("fork")
    status_q = ctx.SimpleQueue()
    parts = [f"{writer.path}.worker{w}" for w in range(n)]
    shares = split_load(items, load, n)
    procs, pipes = [], []
    try:
        for w, (sw, its, plan) in enumerate(shares):
            parent_end, child_end = ctx.Pipe()
            p = ctx.Process(target=_worker_main, name=f"tokenfactory-loadgen-{w}", daemon=True,
                            args=(w, cfg, sw, its, plan, parts[w], finalize, child_end, status_q,
                                  followup))
            p.start()
            child_end.close()
            procs.append(p)
            pipes.append(parent_end)
        for c in pipes:  # every pool is open: fix the shared t0
            msg = c.recv()
            if msg[0] != "ready":
                raise RuntimeError(msg[1])
        t0 = perf_ns() + START_MARGIN_NS
        for c in pipes:
            c.send(t0)
        cpu_t0 = time.process_time()
        results = [None] * n
        waiting = set(range(n))
        while waiting:
            while not status_q.empty():
                for status, rid in status_q.get():
                    if on_done is not None:
                        on_done(RequestStatus(status, rid))
            for w in list(waiting):
                if pipes[w].poll(0.02):
                    msg = pipes[w].recv()
                    if msg[0] != "ok":
                        raise RuntimeError(msg[1])
                    results[w] = msg[1]
                    waiting.discard(w)
                elif not procs[w].is_alive() and not pipes[w].poll(0):
                    raise RuntimeError(f"load-generator worker {w} died (exit code {procs[w].exitcode})")
        for p in procs:
            p.join(10)
        while not status_q.empty():
            for status, rid in status_q.get():
                if on_done is not None:
                    on_done(RequestStatus(status, rid))
        seen = merge_parts(parts, writer)
        sent = sum(r["sent"] for r in results)
        if len(seen) != sent:
            raise RuntimeError(f"workers sent {sent} requests but recorded {len(seen)}")
        return {"start_ns": t0, "end_ns": max(r["end_ns"] for r in results), "sent": sent,
                # "read" if any worker fell back to read times
                "timestamp_source": min((r.get("timestamp_source", "read") for r in results),
                                        key=("read", "kernel").index),
                # the workers' CPU from t0 on, and the parent's (merging, progress) from t0 on
                "cpu_s": sum(r["cpu_s"] for r in results) + time.process_time() - cpu_t0, "workers": n,
                "workers_cpu_s": sum(r["cpu_s"] for r in results),
                # a worker that found its share over-saturated stopped it (loadgen.saturation)
                "saturated": next((r["saturated"] for r in results if r.get("saturated")), None),
                "saturated_after_s": min((r["saturated_after_s"] for r in results
                                          if r.get("saturated_after_s") is not None), default=None),
                "prepare": {**results[0]["prepare"], "requests": sum(r["prepare"]["requests"] for r in results)}}
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join(5)
        for part in parts:
            for path in (part, partial_path(part)):
                if os.path.exists(path):
                    os.unlink(path)
