"""Dispatch: turns a workload and a load shape into timed requests, and records every one.

Open loop (poisson, constant, gamma, trace): each request has a scheduled time
(``scheduled_ns``); it is sent at that time whatever the server is doing, and the lag
between schedule and send is recorded.  Closed loop (concurrency): ``C`` users each send
their next request as soon as their previous one ends; the schedule is the moment the user
became free.

Sessions (``followup``, see loadgen/sessions.py): when a request ends, ``followup(record)``
may return the next turn of its session and a think time; it is scheduled that long after
the end (open loop: as its own task; closed loop: by the same user).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from loadgen.arrivals import OPEN_LOOP, arrival_offsets
from loadgen.client import StreamingClient
from loadgen.records import RecordWriter, RequestRecord
from loadgen.workload import WorkItem

perf_ns = time.perf_counter_ns
LOAD_KINDS = ("concurrency", "trace") + OPEN_LOOP


@dataclass
class LoadSpec:
    kind: str = "poisson"
    rate: float | None = None
    concurrency: int | None = None
    num_requests: int | None = None
    duration_s: float | None = None
    warmup_requests: int = 0
    burstiness: float = 1.0
    max_concurrency: int | None = None
    seed: int = 0
    drain_timeout_s: float | None = None  # after duration_s: how long in-flight requests may finish

    def label(self) -> str:
        if self.kind == "concurrency":
            return f"concurrency={self.concurrency}"
        if self.kind == "trace":
            return "trace"
        return f"{self.kind} rate={self.rate:g}/s"

    def validate(self) -> None:
        if self.kind not in LOAD_KINDS:
            raise ValueError(f"load: unknown load {self.kind!r} (expected one of {', '.join(LOAD_KINDS)})")
        if self.kind != "trace" and self.num_requests is None and self.duration_s is None:
            raise ValueError("load: set load.num_requests or load.duration_s")
        if self.num_requests is not None and int(self.num_requests) < 1:
            raise ValueError(f"load.num_requests must be >= 1, got {self.num_requests}")
        if self.kind == "concurrency" and (self.concurrency is None or int(self.concurrency) < 1):
            raise ValueError(f"load.concurrency must be >= 1 for load=concurrency, got {self.concurrency}")
        if self.kind in OPEN_LOOP and (self.rate is None or float(self.rate) <= 0):
            raise ValueError(f"load.rate must be > 0 for load={self.kind}, got {self.rate}")


class Dispatcher:
    """Runs one load point; every request ends as one record handed to ``writer``."""

    def __init__(self, client: StreamingClient, writer: RecordWriter,
                 finalize: Callable[[RequestRecord], None] | None = None,
                 on_done: Callable[[RequestRecord], None] | None = None,
                 followup: Callable[[RequestRecord], tuple[WorkItem, float] | None] | None = None):
        self.client = client
        self.followup = followup
        self._closed = False
        self._end_ns: int | None = None
        self.writer = writer
        self.finalize = finalize
        self.on_done = on_done
        self.in_flight: set[asyncio.Task] = set()
        self.sent = 0

    def _record(self, item: WorkItem, scheduled_ns: int, warmup: bool) -> RequestRecord:
        return RequestRecord(request_id=item.request_id, scheduled_ns=scheduled_ns, session_id=item.session_id,
                             turn=item.turn, warmup=warmup, expected_prompt_tokens=item.prompt_tokens,
                             max_tokens=item.max_tokens)

    def _store(self, rec: RequestRecord) -> None:
        if self.finalize is not None:
            self.finalize(rec)
        self.writer.append(rec)
        if self.on_done is not None:
            self.on_done(rec)
        if self.followup is not None and not self._closed:
            nxt = self.followup(rec)
            if nxt is not None:
                self._spawn_turn(*nxt)

    def _spawn_turn(self, item: WorkItem, think_s: float) -> None:
        target = perf_ns() + int(think_s * 1e9)
        if self._end_ns is not None and target > self._end_ns:
            return
        rec = self._record(item, target, False)

        async def later() -> RequestRecord:
            await asyncio.sleep(max((target - perf_ns()) / 1e9, 0))
            return await self._one(rec, self.client.body(item.prompt, item.max_tokens))

        task = asyncio.get_running_loop().create_task(later())
        self.in_flight.add(task)
        task.add_done_callback(self.in_flight.discard)
        self.sent += 1

    async def _session_turns(self, rec: RequestRecord) -> None:
        """Closed loop: the user who sent ``rec`` goes on with the rest of its session."""
        while self.followup is not None and (nxt := self.followup(rec)) is not None:
            item, think_s = nxt
            if self._end_ns is not None and perf_ns() + think_s * 1e9 > self._end_ns:
                return
            rec = self._record(item, perf_ns() + int(think_s * 1e9), False)
            await asyncio.sleep(think_s)
            self.sent += 1
            await self._one(rec, self.client.body(item.prompt, item.max_tokens))

    async def _one(self, rec: RequestRecord, payload: bytes) -> RequestRecord:
        try:
            await self.client.send(rec, payload)
        except asyncio.CancelledError:
            self._store(rec)
            raise
        self._store(rec)
        return rec

    async def run(self, items: Iterator[WorkItem], spec: LoadSpec) -> dict:
        spec.validate()
        if spec.num_requests is not None:
            items = itertools.islice(items, int(spec.num_requests))
        t0 = perf_ns() + 5_000_000  # a few ms to get the first request's payload ready
        try:
            if spec.kind == "concurrency":
                await self._closed_loop(items, spec, t0)
            else:
                await self._open_loop(items, spec, t0)
            await self._drain(spec)
        finally:
            for task in list(self.in_flight):
                task.cancel()
            if self.in_flight:
                await asyncio.gather(*self.in_flight, return_exceptions=True)
        return {"start_ns": t0, "end_ns": perf_ns(), "sent": self.sent}

    async def _drain(self, spec: LoadSpec) -> None:
        timeout = spec.drain_timeout_s if spec.duration_s is not None else None
        deadline = perf_ns() + int(timeout * 1e9) if timeout is not None else None
        while self.in_flight:  # a loop: session turns add tasks while others finish
            left = (deadline - perf_ns()) / 1e9 if deadline is not None else None
            if left is not None and left <= 0:
                return
            await asyncio.wait(set(self.in_flight), timeout=left, return_when=asyncio.FIRST_COMPLETED)

    def _spawn(self, rec: RequestRecord, payload: bytes) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(self._one(rec, payload))
        self.in_flight.add(task)
        task.add_done_callback(self.in_flight.discard)
        self.sent += 1
        return task

    async def _open_loop(self, items: Iterator[WorkItem], spec: LoadSpec, t0: int) -> None:
        n = int(spec.num_requests) if spec.num_requests is not None else None
        offsets = None
        if spec.kind != "trace":
            # For a duration-bound run, draw enough arrivals to cover the duration comfortably.
            n_draw = n if n is not None else int(float(spec.rate) * float(spec.duration_s) * 1.5 + 100)
            offsets = arrival_offsets(spec.kind, float(spec.rate), n_draw, spec.burstiness, spec.seed)
        limit = asyncio.Semaphore(int(spec.max_concurrency)) if spec.max_concurrency else None
        end_ns = t0 + int(float(spec.duration_s) * 1e9) if spec.duration_s is not None else None
        self._end_ns = end_ns
        for i, item in enumerate(items):
            if offsets is not None:
                if i >= len(offsets):
                    break
                off = float(offsets[i])
            else:
                if item.arrival_s is None:
                    raise ValueError(f"load=trace needs arrival times; request {item.request_id} has none")
                off = float(item.arrival_s)
            target = t0 + int(off * 1e9)
            if end_ns is not None and target > end_ns:
                break
            payload = self.client.body(item.prompt, item.max_tokens)
            rec = self._record(item, target, i < spec.warmup_requests)
            delay = (target - perf_ns()) / 1e9
            if delay > 0:
                await asyncio.sleep(delay)
            if limit is not None:
                await limit.acquire()
                task = self._spawn(rec, payload)
                task.add_done_callback(lambda _t: limit.release())
            else:
                self._spawn(rec, payload)

    async def _closed_loop(self, items: Iterator[WorkItem], spec: LoadSpec, t0: int) -> None:
        counter = itertools.count()
        end_ns = t0 + int(float(spec.duration_s) * 1e9) if spec.duration_s is not None else None
        self._closed, self._end_ns = True, end_ns
        delay = (t0 - perf_ns()) / 1e9
        if delay > 0:
            await asyncio.sleep(delay)

        async def user() -> None:
            ready = t0
            for item in items:  # a shared iterator: each user takes the next request
                if end_ns is not None and perf_ns() > end_ns:
                    return
                i = next(counter)
                payload = self.client.body(item.prompt, item.max_tokens)
                rec = self._record(item, ready, i < spec.warmup_requests)
                self.sent += 1
                await self._one(rec, payload)
                await self._session_turns(rec)
                ready = perf_ns()

        users = [asyncio.ensure_future(user()) for _ in range(int(spec.concurrency))]
        try:
            await asyncio.gather(*users)
        finally:
            for u in users:
                u.cancel()
            await asyncio.gather(*users, return_exceptions=True)
