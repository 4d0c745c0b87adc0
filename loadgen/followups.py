"""What a request's end makes ready, sent in its time (``followup``: loadgen/workloads/sessions.py,
tasks.py): open loop, a session's next turn ``think_s`` after, or a task's calls, each its tool time
after its last parent ended (``after_open``); closed loop, the user who sent the request goes on
with the rest of its session (``session_turns``).  Each is built (prompt and body) on a thread of
its own, off the event loop, during the wait: a build longer than the wait shows as the request's
lag.  The dispatcher (``loadgen.dispatch.Dispatcher``) sends them and records them."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

from loadgen.records import RequestRecord
from loadgen.send_schedule import scheduled_record
from loadgen.workloads.item import WorkItem

perf_ns = time.perf_counter_ns


class Sender(Protocol):
    """What the follow-ups use of the dispatcher that sends them (``loadgen.dispatch.Dispatcher``,
    which imports this module: a Protocol, not the class)."""

    client: Any                        # its body(prompt, max_tokens, model) encodes a request
    saturated: str | None
    aborted: str | None
    end_ns: int | None                 # no session turn after this (duration_s)
    task_end_ns: int | None            # no task call after this (duration_s + drain_timeout_s)
    limit: asyncio.Semaphore | None    # the open loop's max_concurrency
    sent: int

    async def wait_until(self, target_ns: int) -> None: ...

    async def acquire_slot(self, rec: RequestRecord) -> None: ...

    def launch(self, rec: RequestRecord, payload: bytes, release: Callable | None = None) -> None: ...

    async def send_one(self, rec: RequestRecord, payload: bytes) -> RequestRecord: ...

    def track(self, task: asyncio.Task) -> None: ...


class FollowUps:
    """One point's follow-ups, sent through its dispatcher ``d``; ``close`` ends the build thread."""

    def __init__(self, d: Sender, followup: Callable):
        self.d = d
        self.followup = followup
        self.turns = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tokenfactory-turns")

    def close(self) -> None:
        self.turns.shutdown(wait=False, cancel_futures=True)

    def _build_turn(self, rec: RequestRecord):
        """On the turns thread: the session's next turn after ``rec`` (prompt and body), or None."""
        nxt = self.followup(rec)
        if nxt is None or isinstance(nxt, list):
            return None
        item, think_s = nxt
        return item, think_s, self.d.client.body(item.prompt, item.max_tokens, item.model)

    def _build_calls(self, rec: RequestRecord) -> list:
        """On the turns thread: what ``rec``'s end made ready (a task's calls, or a session's next
        turn), each as (item, wait_s, body)."""
        nxt = self.followup(rec)
        if nxt is None:
            return []
        pairs = nxt if isinstance(nxt, list) else [nxt]
        body = self.d.client.body
        return [(item, wait_s, body(item.prompt, item.max_tokens, item.model)) for item, wait_s in pairs]

    async def after_open(self, rec: RequestRecord) -> None:
        """Open loop: what ``rec``'s end made ready, each sent at its time."""
        d = self.d
        ended = rec.done_ns or perf_ns()
        built = await asyncio.get_running_loop().run_in_executor(self.turns, self._build_calls, rec)
        if not built or d.saturated or d.aborted:
            return
        first, *more = built
        for b in more:  # a fan-out: each call waits on its own
            d.track(asyncio.get_running_loop().create_task(self._send_at(rec, ended, *b)))
        await self._send_at(rec, ended, *first)

    async def _send_at(self, rec: RequestRecord, ended: int, item: WorkItem, wait_s: float, payload: bytes) -> None:
        d = self.d
        target = ended + int(wait_s * 1e9)
        # a started task's calls may still go during the drain (cut there, the task is censored:
        # metrics.tasks), a session's later turns not past the end
        end = d.task_end_ns if item.task_id is not None else d.end_ns
        if end is not None and target > end:
            return
        # a task's later calls are warm-up calls when the task's first were (sessions: as before)
        nxt = scheduled_record(item, target, rec.warmup and item.task_id is not None)
        await d.wait_until(target)
        if d.saturated or d.aborted:
            return
        if d.limit is not None:  # a session's next turn counts against the cap too
            await d.acquire_slot(nxt)
            d.launch(nxt, payload, d.limit.release)
        else:
            d.launch(nxt, payload)

    async def session_turns(self, rec: RequestRecord) -> None:
        """Closed loop: the user who sent ``rec`` goes on with the rest of its session."""
        d = self.d
        loop = asyncio.get_running_loop()
        while True:
            ended = rec.done_ns or perf_ns()
            built = await loop.run_in_executor(self.turns, self._build_turn, rec)
            if built is None:
                return
            item, think_s, payload = built
            target = ended + int(think_s * 1e9)
            if d.end_ns is not None and target > d.end_ns:
                return
            rec = scheduled_record(item, target, False)
            await d.wait_until(target)
            d.sent += 1
            await d.send_one(rec, payload)
