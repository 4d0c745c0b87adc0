"""Dispatch: turns a workload and a load shape into timed requests, and records every one.

Open loop (poisson, constant, gamma, trace): each request has a scheduled time
(``scheduled_ns``); it is sent at that time whatever the server is doing, and the lag
between schedule and send is recorded.  Closed loop (concurrency): ``C`` users each send
their next request as soon as their previous one ends; the schedule is the moment the user
became free.

Sessions (``followup``, see loadgen/sessions.py): when a request ends, ``followup(record)``
may return the next turn of its session and a think time; it is scheduled that long after
the end (open loop: as its own task; closed loop: by the same user).  Tasks (DAGs of calls,
loadgen/workloads/tasks.py; open loop only): ``followup`` returns a list, the calls the
ended one made ready, each with its wait; a task's other roots go with its first one
(``WorkItem.companions``, sent at the same scheduled time), and a sink's success rule is
judged on its record before it is stored (``check_ok``).  With ``duration_s`` no task starts
after the end, but a started task's calls are still sent during the drain (until
``duration_s + drain_timeout_s``): cutting them at the end would count the task as not
completed; what the drain still cuts is counted as censored (``metrics.tasks``).

Timing: requests are prepared (prompt built, body encoded) before they are due and off the
loop (``loadgen.prepare``); session turns after the first are built on a worker thread
during their think time.  The connection pool is opened before the measured window; each
open-loop send sleeps until shortly before its time and then yields to the event loop in a
tight loop (``asyncio.sleep(0)``) until the time comes, so event-loop timers' millisecond
rounding does not become schedule lag while the sockets of running streams keep being
served.  The request is written from the dispatcher's own coroutine (no task start in
between).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable, Iterator

from loadgen.client import StreamingClient
from loadgen.followups import FollowUps
from loadgen.load_spec import LoadSpec
from loadgen.prepare import PrepareOptions, RequestSource, prepare
from loadgen.records import RecordWriter, RequestRecord
from loadgen.saturation import SaturationRule
from loadgen.saturation_watch import SaturationWatch
from loadgen.send_schedule import (
    SPIN_NS,
    hold_interpreter_quiet,
    prepared_entries,
    prewarm_count,
    scheduled_record,
    wait_until,
)
from loadgen.workloads.item import WorkItem

__all__ = ["Dispatcher", "LoadSpec"]  # (LoadSpec: loadgen.load_spec, where the dispatcher's callers found it)
perf_ns = time.perf_counter_ns


class Dispatcher:
    """Runs one load point; every request ends as one record handed to ``writer``."""

    def __init__(self, client: StreamingClient, writer: RecordWriter,
                 finalize: Callable[[RequestRecord], None] | None = None,
                 on_done: Callable[[RequestRecord], None] | None = None,
                 followup: Callable[[RequestRecord], tuple[WorkItem, float] | None] | None = None,
                 prepare: PrepareOptions | str | None = None):
        self.client = client
        self.followup = followup
        self.prepare_opts = prepare if isinstance(prepare, PrepareOptions) else PrepareOptions(mode=prepare or "auto")
        self.source: RequestSource | None = None
        self._followups: FollowUps | None = None  # sessions' turns and tasks' calls (loadgen.followups)
        self.saturation_rule = SaturationRule()
        self.saturated: str | None = None      # why the point was stopped as over-saturated
        self.saturated_ns: int | None = None   # when it was
        self._watch: SaturationWatch | None = None  # an open loop under the rule (stop_when_saturated)
        self.aborted: str | None = None        # why the point was stopped from outside (``abort``)
        self.t0: int | None = None             # the schedule's origin, once the load starts
        self._users: list[asyncio.Future] = []  # closed loop's users
        self.completed = 0                     # requests whose response is over (the saturation rule counts them)
        self.failed_untokened = 0              # of those, ended by an error or the client's timeout with no token
        self._closed = False
        self.end_ns: int | None = None
        self.task_end_ns: int | None = None   # the last time a started task's call may be sent
        self.writer = writer
        self.finalize = finalize
        self.on_done = on_done
        self.in_flight: set[asyncio.Task] = set()
        self.pending: dict[int, tuple] = {}  # id(rec) -> (rec, future) for requests sent with client.start
        self.spin_ns = SPIN_NS
        self.sent = 0
        self.limit: asyncio.Semaphore | None = None  # open loop's max_concurrency, session turns too
        self._slot_ns = 0  # when the last request that waited for a slot got one

    async def acquire_slot(self, rec: RequestRecord) -> None:
        """Wait for a ``max_concurrency`` slot; a wait is queueing (``slot_ns``), not the client's lag."""
        if self.limit.locked():
            await self.limit.acquire()
            rec.slot_ns = self._slot_ns = perf_ns()
        else:
            await self.limit.acquire()
            if self._slot_ns > rec.scheduled_ns:
                # Due while the sender was still waiting for an earlier request's slot: it queued
                # as long (a slot freed since then is why none is awaited now).
                rec.slot_ns = self._slot_ns

    def abort(self, reason: str) -> None:
        """Stop the point now (the engine failed, say): nothing more is sent, and every request
        in flight is cancelled and recorded with ``reason`` as its error.  Call it on the loop
        (from another thread: ``loop.call_soon_threadsafe``)."""
        if self.aborted is not None:
            return
        self.aborted = reason
        for rec, _fut in list(self.pending.values()):
            self.client.cancel(rec)
        for task in [*self.in_flight, *self._users]:
            task.cancel()

    def _store(self, rec: RequestRecord) -> None:
        if self.aborted is not None and rec.status == "cancelled":
            rec.error = self.aborted
        self.completed += 1
        if rec.first_token_ns is None and rec.status != "ok":  # not served: the saturation rule's evidence
            self.failed_untokened += 1
        if self._watch is not None:
            self._watch.ended(rec)
        if self.finalize is not None:
            self.finalize(rec)
        if rec.check is not None:  # a task's sink: judged on its final record, before it is written
            rec.check_ok = bool(rec.check(rec))
        self.writer.append(rec)
        if self.on_done is not None:
            self.on_done(rec)
        if self._followups is not None and not self._closed:
            self.track(asyncio.get_running_loop().create_task(self._followups.after_open(rec)))

    async def send_one(self, rec: RequestRecord, payload: bytes) -> RequestRecord:
        try:
            await self.client.send(rec, payload)
        except asyncio.CancelledError:
            self._store(rec)
            raise
        self._store(rec)
        return rec

    async def run(self, items: Iterator[WorkItem], load: LoadSpec, t0: int | None = None,
                  plan=None, ready=None) -> dict:
        """Run one load point.  ``t0`` (perf_counter_ns), ``plan`` (open loop: ``(index, item,
        offset_ns)`` entries, offsets from t0) and ``ready`` (an awaitable factory called after
        the connection pool is warm, returning t0) serve the worker processes."""
        load.validate(items)
        if load.requests_to_send is not None:
            items = itertools.islice(items, load.requests_to_send)
        self.source = prepare(prepared_entries(self.client.body, items, load, plan), self.prepare_opts,
                              total=len(plan) if plan is not None else load.requests_to_send)
        if self.followup is not None:
            self._followups = FollowUps(self, self.followup)
        prewarm = getattr(self.client, "prewarm", None)
        if prewarm is not None:
            # Closed loop or capped: the users never need more connections than were opened (but
            # for a server that holds a body's end back after [DONE]: then the next send opens one).
            await prewarm(prewarm_count(load), top_up=load.load.kind != "concurrency" and not load.load.max_concurrency)
        self.source.start(asyncio.get_running_loop())
        await self.source.head_start()
        restore_interpreter = hold_interpreter_quiet()
        try:
            if ready is not None:
                t0 = await ready()
            if t0 is None:
                t0 = perf_ns() + 5_000_000  # a few ms for the loop to settle before the first send
            self.t0 = t0
            cpu_t0 = time.process_time()  # the client's CPU from here on: building ahead is not counted
            if load.load.duration_s is not None:
                self.end_ns = t0 + int(load.load.duration_s * 1e9)
                if load.load.drain_timeout_s is not None:
                    self.task_end_ns = self.end_ns + int(load.load.drain_timeout_s * 1e9)
            if load.load.kind == "concurrency":
                await self._closed_loop(load, t0)
            else:
                await self._open_loop(load, t0)
            await self._drain(load)
        finally:
            restore_interpreter()
            self.source.close()
            for rec, _fut in list(self.pending.values()):
                self.client.cancel(rec)  # resolves the future: the record is stored as cancelled
            for task in list(self.in_flight):
                task.cancel()
            if self.in_flight:
                await asyncio.gather(*self.in_flight, return_exceptions=True)
            await asyncio.sleep(0)  # let the futures' done-callbacks store the cancelled records
            if self._followups is not None:
                self._followups.close()
        return {"start_ns": t0, "end_ns": perf_ns(), "sent": self.sent, "cpu_s": time.process_time() - cpu_t0,
                "saturated": self.saturated, "aborted": self.aborted,
                "saturated_after_s": (self.saturated_ns - t0) / 1e9 if self.saturated_ns is not None else None,
                "timestamp_source": getattr(self.client, "timestamp_source", "read"),
                "prepare": self.source.stats.as_dict()}

    def prepare_only(self, items: Iterator[WorkItem], load: LoadSpec):
        """Build a point's requests as ``run`` would (same order, same options and cache) without
        sending any: the harness does it before an engine starts (``harness.point.prebuild``)."""
        load.validate()
        if load.requests_to_send is not None:
            items = itertools.islice(items, load.requests_to_send)
        entries = prepared_entries(self.client.body, items, load, None)
        return prepare(entries, self.prepare_opts, total=load.requests_to_send)

    async def _drain(self, load: LoadSpec) -> None:
        timeout = load.load.drain_timeout_s if load.load.duration_s is not None else None
        # drain_timeout_s counts from the end of duration_s (the last send may come before it):
        # a started task's calls may be sent until then too (``_task_end_ns``)
        deadline = max(perf_ns(), self.end_ns or 0) + int(timeout * 1e9) if timeout is not None else None
        while True:  # session turns may add requests while others finish
            waiting = set(self.in_flight) | {f for _r, f in self.pending.values()}
            if not waiting:
                return
            left = (deadline - perf_ns()) / 1e9 if deadline is not None else None
            if left is not None and left <= 0:
                return
            await asyncio.wait(waiting, timeout=left)

    async def wait_until(self, target_ns: int) -> None:
        """Sleep until ``target_ns`` (perf_counter_ns; ``loadgen.send_schedule.wait_until``)."""
        await wait_until(target_ns, self.spin_ns)

    def launch(self, rec: RequestRecord, payload: bytes, release=None) -> None:
        """Send ``rec`` now; it is stored when its response is over."""
        self.sent += 1
        if self._watch is not None:  # the saturation rule's clock: when each request went, and its wait
            self._watch.sent(rec)
        start = getattr(self.client, "start", None)
        if start is None:  # a client with only ``send``: one task per request
            task = self.track(asyncio.get_running_loop().create_task(self.send_one(rec, payload)))
            if release is not None:
                task.add_done_callback(lambda _t: release())
            return
        fut = start(rec, payload)
        key = id(rec)
        self.pending[key] = (rec, fut)

        def done(_f) -> None:
            self.pending.pop(key, None)
            if release is not None:
                release()
            self._store(rec)

        fut.add_done_callback(done)

    def track(self, task: asyncio.Task) -> asyncio.Task:
        """Keep ``task`` among those in flight until it ends (the drain waits for them)."""
        self.in_flight.add(task)
        task.add_done_callback(self.in_flight.discard)
        return task

    async def _open_loop(self, load: LoadSpec, t0: int) -> None:
        """Send each prepared request at t0 + its offset (open loop); with
        ``load.stop_when_saturated``, stop early once the over-saturation rule trips."""
        limit = asyncio.Semaphore(load.load.max_concurrency) if load.load.max_concurrency else None
        self.limit = limit
        source = self.source
        warmup = load.load.warmup_requests
        # (a max_concurrency cap keeps the backlog in the client, as queue wait: no rule there)
        watch = None
        if load.stop_when_saturated and not limit:
            self._watch = SaturationWatch(self.saturation_rule, t0)
            watch = asyncio.ensure_future(self._watch_saturation())
        try:
            await self._send_prepared(source, t0, warmup, limit)
        finally:
            if watch is not None:
                watch.cancel()
        if self.saturated:
            await self._cut_backlog()

    async def _watch_saturation(self) -> None:
        """Until the over-saturation rule trips (``loadgen.saturation_watch``): then, why and when."""
        self.saturated, self.saturated_ns = await self._watch.until_saturated(
            lambda: (self.completed, self.failed_untokened))

    async def _cut_backlog(self) -> None:
        """Saturated: what is in flight gets ``drain_s`` to finish; the rest is cancelled."""
        waiting = set(self.in_flight) | {f for _r, f in self.pending.values()}
        if waiting:
            await asyncio.wait(waiting, timeout=self.saturation_rule.drain_s)
        for rec, _fut in list(self.pending.values()):
            self.client.cancel(rec)
        await asyncio.sleep(0)

    async def _send_prepared(self, source, t0: int, warmup: int, limit) -> None:
        while self.saturated is None and self.aborted is None:
            p = source.pop_ready()
            if p is None:
                p = await source.next()  # the producer is behind (or done): wait for it
                if p is None:
                    return
            target = t0 + p.offset_ns
            source.note_progress(p.offset_ns, target)
            rec = scheduled_record(p.item, target, p.index < warmup)
            await self.wait_until(target)
            if self.aborted is not None:
                return
            companions = ((scheduled_record(c, target, rec.warmup), b) for c, b in p.companions)
            for r, payload in [(rec, p.payload), *companions]:
                if limit is not None:
                    await self.acquire_slot(r)
                    self.launch(r, payload, limit.release)
                else:
                    self.launch(r, payload)

    async def _closed_loop(self, load: LoadSpec, t0: int) -> None:
        end_ns = t0 + int(load.load.duration_s * 1e9) if load.load.duration_s is not None else None
        self._closed, self.end_ns = True, end_ns
        delay = (t0 - perf_ns()) / 1e9
        if delay > 0:
            await asyncio.sleep(delay)
        source = self.source

        async def user() -> None:
            ready = t0
            try:
                while self.aborted is None:
                    p = source.pop_ready() or await source.next()  # a shared source: each user takes the next
                    if p is None or (end_ns is not None and perf_ns() > end_ns) or self.aborted is not None:
                        return
                    rec = scheduled_record(p.item, ready, p.index < load.load.warmup_requests)
                    self.sent += 1
                    await self.send_one(rec, p.payload)  # (cancelling the user cancels the request too)
                    if self._followups is not None:
                        await self._followups.session_turns(rec)
                    ready = perf_ns()
            except asyncio.CancelledError:
                if self.aborted is None:  # cancelled by the caller, not by ``abort``
                    raise

        users = self._users = [asyncio.ensure_future(user()) for _ in range(load.load.concurrency)]
        try:
            await asyncio.gather(*users)
        finally:
            for u in users:
                u.cancel()
            await asyncio.gather(*users, return_exceptions=True)
