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
import gc
import itertools
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from conf.schema import Load, typed
from loadgen.arrivals import OPEN_LOOP, arrival_offsets
from loadgen.client import StreamingClient
from loadgen.prepare import Prepared, PrepareOptions, RequestSource, prepare
from loadgen.records import RecordWriter, RequestRecord
from loadgen.saturation import SaturationMonitor, SaturationRule, streams, waiting_stage
from loadgen.workloads.item import WorkItem

perf_ns = time.perf_counter_ns
SPIN_NS = 500_000  # yield-spin this long before a scheduled send (event-loop timers are ms-grained)
# Longest single timer sleep: uvloop's long timers fire late in proportion to their length
# (one sleep of 3 s woke 2.2 ms late here, every time; in steps of 50 ms, on time).
MAX_SLEEP_NS = 50_000_000
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
    prewarm_connections: int | None = None  # connections opened before t0 (default: from the load)
    # open loop: stop early once over-saturated (loadgen.saturation); None: as off (the point's
    # steps resolve the config's null, harness.point.saturation_guard)
    stop_when_saturated: bool | None = False

    @classmethod
    def from_load(cls, load) -> LoadSpec:
        """From a ``load`` config (conf/schema.py's ``Load``: a composed node or a load point's
        mapping); warm-up requests come on top of the measured ``num_requests``."""
        t = typed(load, Load)
        n = t.num_requests
        return cls(kind=t.kind, rate=t.rate, concurrency=t.concurrency,
                   num_requests=n + t.warmup_requests if n is not None else None, duration_s=t.duration_s,
                   warmup_requests=t.warmup_requests, burstiness=t.burstiness, max_concurrency=t.max_concurrency,
                   seed=t.seed, drain_timeout_s=t.drain_timeout_s, stop_when_saturated=t.stop_when_saturated)

    def validate(self, items=None) -> None:
        """Raise ValueError for a load that cannot run (``items``: the workload, where known)."""
        if self.kind == "concurrency" and getattr(items, "tasks", None) is not None:
            raise ValueError("load=concurrency does not run a task workload (a task's calls fan out): give tasks an "
                             "arrival process (load=poisson, gamma, constant or trace) and cap the calls in flight "
                             "with load.max_concurrency")
        if self.kind not in LOAD_KINDS:
            raise ValueError(f"load: unknown load {self.kind!r} (expected one of {', '.join(LOAD_KINDS)})")
        if self.kind != "trace" and self.num_requests is None and self.duration_s is None:
            raise ValueError("load: set load.num_requests or load.duration_s")
        if self.num_requests is not None and self.num_requests < 1:
            raise ValueError(f"load.num_requests must be >= 1, got {self.num_requests}")
        if self.kind == "concurrency" and (self.concurrency is None or self.concurrency < 1):
            raise ValueError(f"load.concurrency must be >= 1 for load=concurrency, got {self.concurrency}")
        if self.kind in OPEN_LOOP and (self.rate is None or self.rate <= 0):
            raise ValueError(f"load.rate must be > 0 for load={self.kind}, got {self.rate}")


def _freeze_gc() -> bool:
    """Move every object alive now (models, tokenizers, imported modules) out of the
    collector's reach for the run: a full collection over a large heap stalls the event
    loop for tens of ms, which would show up as latency."""
    if not hasattr(gc, "freeze"):
        return False
    gc.freeze()  # no collect first: with torch loaded it alone takes ~0.2 s
    return True


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
        self._turns: ThreadPoolExecutor | None = None  # builds session turns off the loop
        self.saturation_rule = SaturationRule()
        self.saturated: str | None = None      # why the point was stopped as over-saturated
        self.saturated_ns: int | None = None   # when it was
        self._monitor: SaturationMonitor | None = None
        # open loop under the monitor: id(rec) -> (rec, when it was sent), in send order
        self._flying: dict[int, tuple[RequestRecord, int]] = {}
        self._max_wait_ns = 0                  # the longest wait for a first token (or the end) among those that ended
        self.aborted: str | None = None        # why the point was stopped from outside (``abort``)
        self.t0: int | None = None             # the schedule's origin, once the load starts
        self._users: list[asyncio.Future] = []  # closed loop's users
        self.completed = 0                     # requests whose response is over (the saturation rule counts them)
        self.failed_untokened = 0              # of those, ended by an error or the client's timeout with no token
        self._closed = False
        self._end_ns: int | None = None
        self._task_end_ns: int | None = None   # the last time a started task's call may be sent
        self.writer = writer
        self.finalize = finalize
        self.on_done = on_done
        self.in_flight: set[asyncio.Task] = set()
        self.pending: dict[int, tuple] = {}  # id(rec) -> (rec, future) for requests sent with client.start
        self.spin_ns = SPIN_NS
        self.sent = 0
        self._limit: asyncio.Semaphore | None = None  # open loop's max_concurrency, session turns too
        self._slot_ns = 0  # when the last request that waited for a slot got one

    def _record(self, item: WorkItem, scheduled_ns: int, warmup: bool) -> RequestRecord:
        # slot_ns = scheduled_ns unless the request has to wait for a max_concurrency slot
        rec = RequestRecord(request_id=item.request_id, scheduled_ns=scheduled_ns, slot_ns=scheduled_ns,
                            session_id=item.session_id, turn=item.turn, prefix_group=item.prefix_group, warmup=warmup,
                            expected_prompt_tokens=item.prompt_tokens, max_tokens=item.max_tokens,
                            lora=item.model)
        if item.task_id is not None:
            rec.task_id, rec.node, rec.parents, rec.attempt = item.task_id, item.node, list(item.parents), item.attempt
            rec.tool_s, rec.task_calls, rec.check = item.tool_s, item.task_calls, item.check
        return rec

    async def _acquire_slot(self, rec: RequestRecord) -> None:
        """Wait for a ``max_concurrency`` slot; a wait is queueing (``slot_ns``), not the client's lag."""
        if self._limit.locked():
            await self._limit.acquire()
            rec.slot_ns = self._slot_ns = perf_ns()
        else:
            await self._limit.acquire()
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
        flying = self._flying.pop(id(rec), None)
        if flying is not None:
            first = rec.first_token_ns if rec.first_token_ns is not None else perf_ns()
            self._max_wait_ns = max(self._max_wait_ns, first - flying[1])
        if self.finalize is not None:
            self.finalize(rec)
        if rec.check is not None:  # a task's sink: judged on its final record, before it is written
            rec.check_ok = bool(rec.check(rec))
        self.writer.append(rec)
        if self.on_done is not None:
            self.on_done(rec)
        if self.followup is not None and not self._closed:
            task = asyncio.get_running_loop().create_task(self._next_turn(rec))
            self.in_flight.add(task)
            task.add_done_callback(self.in_flight.discard)

    def _build_turn(self, rec: RequestRecord):
        """On the turns thread: the session's next turn after ``rec`` (prompt and body), or None."""
        nxt = self.followup(rec)
        if nxt is None or isinstance(nxt, list):
            return None
        item, think_s = nxt
        return item, think_s, self.client.body(item.prompt, item.max_tokens, item.model)

    def _build_calls(self, rec: RequestRecord) -> list:
        """On the turns thread: what ``rec``'s end made ready (a task's calls, or a session's next
        turn), each as (item, wait_s, body)."""
        nxt = self.followup(rec)
        if nxt is None:
            return []
        pairs = nxt if isinstance(nxt, list) else [nxt]
        return [(item, wait_s, self.client.body(item.prompt, item.max_tokens, item.model)) for item, wait_s in pairs]

    async def _next_turn(self, rec: RequestRecord) -> None:
        """Open loop: what ``rec``'s end made ready: the session's next turn ``think_s`` after, or a
        task's calls, each its tool time after its last parent ended (built meanwhile off the
        loop; a build longer than the wait shows as the call's lag)."""
        ended = rec.done_ns or perf_ns()
        built = await asyncio.get_running_loop().run_in_executor(self._turns, self._build_calls, rec)
        if not built or self.saturated or self.aborted:
            return
        first, *more = built
        for b in more:  # a fan-out: each call waits on its own
            task = asyncio.get_running_loop().create_task(self._send_at(rec, ended, *b))
            self.in_flight.add(task)
            task.add_done_callback(self.in_flight.discard)
        await self._send_at(rec, ended, *first)

    async def _send_at(self, rec: RequestRecord, ended: int, item: WorkItem, wait_s: float, payload: bytes) -> None:
        target = ended + int(wait_s * 1e9)
        # a started task's calls may still go during the drain (cut there, the task is censored:
        # metrics.tasks), a session's later turns not past the end
        end = self._task_end_ns if item.task_id is not None else self._end_ns
        if end is not None and target > end:
            return
        # a task's later calls are warm-up calls when the task's first were (sessions: as before)
        nxt = self._record(item, target, rec.warmup and item.task_id is not None)
        await self.wait_until(target)
        if self.saturated or self.aborted:
            return
        if self._limit is not None:  # a session's next turn counts against the cap too
            await self._acquire_slot(nxt)
            self._launch(nxt, payload, self._limit.release)
        else:
            self._launch(nxt, payload)

    async def _session_turns(self, rec: RequestRecord) -> None:
        """Closed loop: the user who sent ``rec`` goes on with the rest of its session."""
        loop = asyncio.get_running_loop()
        while self.followup is not None:
            ended = rec.done_ns or perf_ns()
            built = await loop.run_in_executor(self._turns, self._build_turn, rec)
            if built is None:
                return
            item, think_s, payload = built
            target = ended + int(think_s * 1e9)
            if self._end_ns is not None and target > self._end_ns:
                return
            rec = self._record(item, target, False)
            await self.wait_until(target)
            self.sent += 1
            await self._one(rec, payload)

    async def _one(self, rec: RequestRecord, payload: bytes) -> RequestRecord:
        try:
            await self.client.send(rec, payload)
        except asyncio.CancelledError:
            self._store(rec)
            raise
        self._store(rec)
        return rec

    async def run(self, items: Iterator[WorkItem], spec: LoadSpec, t0: int | None = None,
                  plan=None, ready=None) -> dict:
        """Run one load point.  ``t0`` (perf_counter_ns), ``plan`` (open loop: ``(index, item,
        offset_ns)`` entries, offsets from t0) and ``ready`` (an awaitable factory called after
        the connection pool is warm, returning t0) serve the worker processes."""
        spec.validate(items)
        if spec.num_requests is not None:
            items = itertools.islice(items, spec.num_requests)
        self.source = prepare(self._entries(items, spec, plan), self.prepare_opts,
                              total=len(plan) if plan is not None else spec.num_requests)
        if self.followup is not None:
            self._turns = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tokenfactory-turns")
        prewarm = getattr(self.client, "prewarm", None)
        if prewarm is not None:
            # Closed loop or capped: the users never need more connections than were opened (but
            # for a server that holds a body's end back after [DONE]: then the next send opens one).
            await prewarm(self._prewarm_count(spec), top_up=spec.kind != "concurrency" and not spec.max_concurrency)
        self.source.start(asyncio.get_running_loop())
        await self.source.head_start()
        frozen = _freeze_gc()
        # A background thread (the producer, the record writer) holding the GIL when the loop
        # wakes would keep it waiting up to the switch interval (5 ms by default).
        switch = sys.getswitchinterval()
        sys.setswitchinterval(min(switch, 0.0002))
        try:
            if ready is not None:
                t0 = await ready()
            if t0 is None:
                t0 = perf_ns() + 5_000_000  # a few ms for the loop to settle before the first send
            self.t0 = t0
            cpu_t0 = time.process_time()  # the client's CPU from here on: building ahead is not counted
            if spec.duration_s is not None:
                self._end_ns = t0 + int(spec.duration_s * 1e9)
                if spec.drain_timeout_s is not None:
                    self._task_end_ns = self._end_ns + int(spec.drain_timeout_s * 1e9)
            if spec.kind == "concurrency":
                await self._closed_loop(spec, t0)
            else:
                await self._open_loop(spec, t0)
            await self._drain(spec)
        finally:
            sys.setswitchinterval(switch)
            if frozen:
                gc.unfreeze()
            self.source.close()
            for rec, _fut in list(self.pending.values()):
                self.client.cancel(rec)  # resolves the future: the record is stored as cancelled
            for task in list(self.in_flight):
                task.cancel()
            if self.in_flight:
                await asyncio.gather(*self.in_flight, return_exceptions=True)
            await asyncio.sleep(0)  # let the futures' done-callbacks store the cancelled records
            if self._turns is not None:
                self._turns.shutdown(wait=False, cancel_futures=True)
        return {"start_ns": t0, "end_ns": perf_ns(), "sent": self.sent, "cpu_s": time.process_time() - cpu_t0,
                "saturated": self.saturated, "aborted": self.aborted,
                "saturated_after_s": (self.saturated_ns - t0) / 1e9 if self.saturated_ns is not None else None,
                "timestamp_source": getattr(self.client, "timestamp_source", "read"),
                "prepare": self.source.stats.as_dict()}

    def prepare_only(self, items: Iterator[WorkItem], spec: LoadSpec):
        """Build a point's requests as ``run`` would (same order, same options and cache) without
        sending any: the harness does it before an engine starts (``harness.point.prebuild``)."""
        spec.validate()
        if spec.num_requests is not None:
            items = itertools.islice(items, spec.num_requests)
        return prepare(self._entries(items, spec, None), self.prepare_opts, total=spec.num_requests)

    def _entries(self, items: Iterator[WorkItem], spec: LoadSpec, plan) -> Iterator[Prepared]:
        """The point's requests in send order, each prepared as it is taken (lazily)."""
        body = self.client.body

        def entry(i: int, it: WorkItem, off) -> Prepared:
            return Prepared(i, it, off, body(it.prompt, it.max_tokens, it.model),
                            tuple((c, body(c.prompt, c.max_tokens, c.model)) for c in it.companions))
        if plan is not None:
            return (entry(i, it, off) for i, it, off in plan)
        if spec.kind == "concurrency":
            return (entry(i, it, None) for i, it in enumerate(items))
        return (entry(i, it, off) for i, it, off in self.schedule(items, spec, 0))

    @staticmethod
    def _prewarm_count(spec: LoadSpec) -> int:
        if spec.prewarm_connections is not None:
            return spec.prewarm_connections
        # A request is over at [DONE]; its connection is idle again once the body's end follows
        # (a separate write on vLLM, ~0.1 ms later): the user's next send takes a spare meanwhile
        # instead of a connect in the measured window.
        if spec.kind == "concurrency":
            return spec.concurrency + max(1, spec.concurrency // 8)
        if spec.max_concurrency:
            return spec.max_concurrency + max(1, spec.max_concurrency // 8)
        return min(int(spec.rate) + 1, 256) if spec.rate else 16

    async def _drain(self, spec: LoadSpec) -> None:
        timeout = spec.drain_timeout_s if spec.duration_s is not None else None
        # drain_timeout_s counts from the end of duration_s (the last send may come before it):
        # a started task's calls may be sent until then too (``_task_end_ns``)
        deadline = max(perf_ns(), self._end_ns or 0) + int(timeout * 1e9) if timeout is not None else None
        while True:  # session turns may add requests while others finish
            waiting = set(self.in_flight) | {f for _r, f in self.pending.values()}
            if not waiting:
                return
            left = (deadline - perf_ns()) / 1e9 if deadline is not None else None
            if left is not None and left <= 0:
                return
            await asyncio.wait(waiting, timeout=left)

    async def wait_until(self, target_ns: int) -> None:
        """Sleep until ``target_ns`` (perf_counter_ns): timers of at most ``MAX_SLEEP_NS`` for
        the bulk, then yield-spin."""
        spin = self.spin_ns
        while True:
            left = target_ns - perf_ns()
            if left <= 0:
                return
            if left > spin:
                await asyncio.sleep(min(left - spin, MAX_SLEEP_NS) / 1e9)
            else:
                await asyncio.sleep(0)

    def _launch(self, rec: RequestRecord, payload: bytes, release=None) -> None:
        """Send ``rec`` now; it is stored when its response is over."""
        self.sent += 1
        if self._monitor is not None:  # the saturation rule's clock: when each request went, and its wait
            now = perf_ns()
            self._flying[id(rec)] = (rec, now)
            self._monitor.sent((now - self.t0) / 1e9, (now - max(rec.scheduled_ns, rec.slot_ns)) / 1e9)
        start = getattr(self.client, "start", None)
        if start is None:  # a client with only ``send``: one task per request
            task = self._spawn_task(rec, payload)
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

    def _spawn_task(self, rec: RequestRecord, payload: bytes) -> asyncio.Task:
        task = asyncio.get_running_loop().create_task(self._one(rec, payload))
        self.in_flight.add(task)
        task.add_done_callback(self.in_flight.discard)
        return task

    @staticmethod
    def schedule(items: Iterator[WorkItem], spec: LoadSpec, t0: int) -> Iterator[tuple[int, WorkItem, int]]:
        """Open loop: ``(index, item, target_ns)`` for every request, in send order.

        One definition of the schedule, shared by the single-process dispatcher and by the
        worker processes (which each take every n-th entry of the same schedule)."""
        n = spec.num_requests
        offsets = None
        if spec.kind != "trace":
            # For a duration-bound run, draw enough arrivals to cover the duration comfortably.
            n_draw = n if n is not None else int(spec.rate * spec.duration_s * 1.5 + 100)
            offsets = arrival_offsets(spec.kind, spec.rate, n_draw, spec.burstiness, spec.seed)
        end_ns = t0 + int(spec.duration_s * 1e9) if spec.duration_s is not None else None
        for i, item in enumerate(items):
            if offsets is not None:
                if i >= len(offsets):
                    return
                off = float(offsets[i])
            else:
                if item.arrival_s is None:
                    raise ValueError(f"load=trace needs arrival times; request {item.request_id} has none")
                off = float(item.arrival_s)
            target = t0 + int(off * 1e9)
            if end_ns is not None and target > end_ns:
                return
            yield i, item, target

    async def _open_loop(self, spec: LoadSpec, t0: int) -> None:
        """Send each prepared request at t0 + its offset (open loop); with
        ``spec.stop_when_saturated``, stop early once the over-saturation rule trips."""
        limit = asyncio.Semaphore(spec.max_concurrency) if spec.max_concurrency else None
        self._limit = limit
        source = self.source
        warmup = spec.warmup_requests
        # (a max_concurrency cap keeps the backlog in the client, as queue wait: no rule there)
        watch = None
        if spec.stop_when_saturated and not limit:
            self._monitor = SaturationMonitor(self.saturation_rule)
            watch = asyncio.ensure_future(self._watch_saturation())
        try:
            await self._send_prepared(source, t0, warmup, limit)
        finally:
            if watch is not None:
                watch.cancel()
        if self.saturated:
            await self._cut_backlog()

    async def _watch_saturation(self) -> None:
        """Every window, the stage where a backlog waits (``loadgen.saturation``): the requests
        served (past their first token, or ended without an error), those still waiting for one,
        those that ended with none by an error or the client's timeout (not served), and the
        longest wait seen (the slowest first token, or the oldest request still waiting)."""
        while self.saturated is None:
            await asyncio.sleep(self.saturation_rule.window_s)
            now = perf_ns()
            failed = self.failed_untokened
            served, waiting, wait_s = waiting_stage(((r.first_token_ns, sent) for r, sent in self._flying.values()),
                                                    self.completed - failed, self._max_wait_ns, now)
            streaming = streams((r.first_token_ns, r.end_ns) for r, _sent in self._flying.values())
            self.saturated = self._monitor.check((now - self.t0) / 1e9, served, waiting, wait_s, failed=failed,
                                                 streaming=streaming)
            if self.saturated:
                self.saturated_ns = now

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
            rec = self._record(p.item, target, p.index < warmup)
            await self.wait_until(target)
            if self.aborted is not None:
                return
            for r, payload in [(rec, p.payload), *((self._record(c, target, rec.warmup), b) for c, b in p.companions)]:
                if limit is not None:
                    await self._acquire_slot(r)
                    self._launch(r, payload, limit.release)
                else:
                    self._launch(r, payload)

    async def _closed_loop(self, spec: LoadSpec, t0: int) -> None:
        end_ns = t0 + int(spec.duration_s * 1e9) if spec.duration_s is not None else None
        self._closed, self._end_ns = True, end_ns
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
                    rec = self._record(p.item, ready, p.index < spec.warmup_requests)
                    self.sent += 1
                    await self._one(rec, p.payload)  # (cancelling the user cancels the request too)
                    await self._session_turns(rec)
                    ready = perf_ns()
            except asyncio.CancelledError:
                if self.aborted is None:  # cancelled by the caller, not by ``abort``
                    raise

        users = self._users = [asyncio.ensure_future(user()) for _ in range(spec.concurrency)]
        try:
            await asyncio.gather(*users)
        finally:
            for u in users:
                u.cancel()
            await asyncio.gather(*users, return_exceptions=True)
