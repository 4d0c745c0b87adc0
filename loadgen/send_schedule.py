"""When each request of a load point is sent: the open loop's schedule (``schedule``, one
definition shared by the dispatcher and the worker processes), the point's requests in send order
(``prepared_entries``), the connections opened before t0 (``prewarm_count``), the wait until a
send's time (``wait_until``) and the interpreter held quiet during the load
(``hold_interpreter_quiet``); and a request's record, born at its scheduled time
(``scheduled_record``)."""

from __future__ import annotations

import asyncio
import gc
import sys
import time
from collections.abc import Callable, Iterator

from loadgen.arrivals import arrival_offsets
from loadgen.load_spec import LoadSpec
from loadgen.prepare import Prepared
from loadgen.records import RequestRecord
from loadgen.workloads.item import WorkItem

perf_ns = time.perf_counter_ns
SPIN_NS = 500_000  # yield-spin this long before a scheduled send (event-loop timers are ms-grained)
# Longest single timer sleep: uvloop's long timers fire late in proportion to their length
# (one sleep of 3 s woke 2.2 ms late here, every time; in steps of 50 ms, on time).
MAX_SLEEP_NS = 50_000_000


def schedule(items: Iterator[WorkItem], load: LoadSpec, t0: int) -> Iterator[tuple[int, WorkItem, int]]:
    """Open loop: ``(index, item, target_ns)`` for every request, in send order.

    One definition of the schedule, shared by the single-process dispatcher and by the
    worker processes (which each take every n-th entry of the same schedule)."""
    n, ld = load.requests_to_send, load.load
    offsets = None
    if ld.kind != "trace":
        # For a duration-bound run, draw enough arrivals to cover the duration comfortably.
        n_draw = n if n is not None else int(ld.rate * ld.duration_s * 1.5 + 100)
        offsets = arrival_offsets(ld.kind, ld.rate, n_draw, ld.burstiness, ld.seed)
    end_ns = t0 + int(ld.duration_s * 1e9) if ld.duration_s is not None else None
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


def prepared_entries(body: Callable, items: Iterator[WorkItem], load: LoadSpec, plan) -> Iterator[Prepared]:
    """The point's requests in send order, each prepared (``body``: the client's request encoder)
    as it is taken (lazily); ``plan``: a worker's share of the open loop's schedule, if given."""

    def entry(i: int, it: WorkItem, off) -> Prepared:
        return Prepared(i, it, off, body(it.prompt, it.max_tokens, it.model),
                        tuple((c, body(c.prompt, c.max_tokens, c.model)) for c in it.companions))
    if plan is not None:
        return (entry(i, it, off) for i, it, off in plan)
    if load.load.kind == "concurrency":
        return (entry(i, it, None) for i, it in enumerate(items))
    return (entry(i, it, off) for i, it, off in schedule(items, load, 0))


def prewarm_count(load: LoadSpec) -> int:
    """The connections opened before t0 (``load.prewarm_connections``, else from the load)."""
    if load.prewarm_connections is not None:
        return load.prewarm_connections
    # A request is over at [DONE]; its connection is idle again once the body's end follows
    # (a separate write on vLLM, ~0.1 ms later): the user's next send takes a spare meanwhile
    # instead of a connect in the measured window.
    ld = load.load
    if ld.kind == "concurrency":
        return ld.concurrency + max(1, ld.concurrency // 8)
    if ld.max_concurrency:
        return ld.max_concurrency + max(1, ld.max_concurrency // 8)
    return min(int(ld.rate) + 1, 256) if ld.rate else 16


async def wait_until(target_ns: int, spin_ns: int = SPIN_NS) -> None:
    """Sleep until ``target_ns`` (perf_counter_ns): timers of at most ``MAX_SLEEP_NS`` for
    the bulk, then yield-spin (``asyncio.sleep(0)``) for the last ``spin_ns``."""
    while True:
        left = target_ns - perf_ns()
        if left <= 0:
            return
        if left > spin_ns:
            await asyncio.sleep(min(left - spin_ns, MAX_SLEEP_NS) / 1e9)
        else:
            await asyncio.sleep(0)


def hold_interpreter_quiet() -> Callable[[], None]:
    """For the load: every object alive now out of the collector's reach (a full collection
    over a large heap stalls the event loop for tens of ms, which would show up as latency),
    and a short GIL switch interval (a background thread, the producer or the record writer,
    holding the GIL when the loop wakes would keep it waiting up to 5 ms by default).  Returns
    the call that puts both back."""
    frozen = hasattr(gc, "freeze")
    if frozen:
        gc.freeze()  # no collect first: with torch loaded it alone takes ~0.2 s
    switch = sys.getswitchinterval()
    sys.setswitchinterval(min(switch, 0.0002))

    def restore() -> None:
        sys.setswitchinterval(switch)
        if frozen:
            gc.unfreeze()
    return restore


def scheduled_record(item: WorkItem, scheduled_ns: int, warmup: bool) -> RequestRecord:
    """``item``'s record, born at its scheduled time (``slot_ns`` too, unless the request has to
    wait for a ``max_concurrency`` slot: ``Dispatcher.acquire_slot``)."""
    rec = RequestRecord(request_id=item.request_id, scheduled_ns=scheduled_ns, slot_ns=scheduled_ns,
                        session_id=item.session_id, turn=item.turn, prefix_group=item.prefix_group, warmup=warmup,
                        expected_prompt_tokens=item.prompt_tokens, max_tokens=item.max_tokens,
                        lora=item.model)
    if item.task_id is not None:
        rec.task_id, rec.node, rec.parents, rec.attempt = item.task_id, item.node, list(item.parents), item.attempt
        rec.tool_s, rec.task_calls, rec.check = item.tool_s, item.task_calls, item.check
    return rec
