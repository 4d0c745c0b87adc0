"""Requests prepared off the send loop: prompts built and bodies encoded before they are due.

Building one prompt of a few thousand tokens takes milliseconds (the tokenizer checks its
exact count); done on the event loop between sends, one long prompt delays every send due
behind it.  So the dispatcher never builds: it takes ``Prepared`` requests (item, body,
offset from t0) from a ``RequestSource``, filled in one of two ways (``client.prepare``):

- ``all``: every request of the point is built before the measured window opens (a progress
  bar says how far), and the result is kept in a cache keyed by a hash of everything that
  shapes the bodies (``PrepareCache``), so a repeat does not rebuild;
- ``stream``: a producer thread builds the requests in order and keeps up to
  ``client.prepare_ahead_s`` seconds of the schedule (at least 64 requests) ready.  The
  tokenizer's encoding, most of the work, runs in Rust without the GIL; the producer
  thread runs at the lowest CPU priority (back at the process's own while it is falling
  behind, where the system allows: on a host busy with other work a nice-19 thread gets
  almost no CPU, and the lag then grew without bound), and while it has a few requests in hand it does
  not start a build that would still run when the next send is due (it knows the next due
  time and how long its builds take), so on a client confined to one core the loop finds
  the core and the GIL free when it wakes;
- ``auto`` (default): ``all`` while the bodies fit in ``client.prepare_max_mb``, the rest
  streamed.

A send whose request is not ready when due waits for it (``stalls`` counts them): that wait
is the client's own delay and shows in its schedule lag.  Session turns after the first
depend on the previous reply; the dispatcher builds them on its own worker thread during
the think time (``Dispatcher``).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from loadgen.workloads.item import WorkItem

perf_ns = time.perf_counter_ns
PREPARE_MODES = ("auto", "all", "stream")
MIN_AHEAD = 64              # stream: at least this many requests ready, whatever their times
GATE_MIN_READY = 8          # stream: with fewer ready, build whatever the next send's time
GATE_MARGIN_NS = 500_000    # ... else only when the next send is this much beyond the build's end
LOW_NICE = 19               # stream: the producer's priority while it is ahead


@dataclass(slots=True)
class Prepared:
    index: int                # position in the point's request order
    item: WorkItem
    offset_ns: int | None     # open loop: when it is due, from t0; closed loop: None (when a user is free)
    payload: bytes            # the encoded JSON body
    companions: tuple = ()    # a task's other roots, sent with it: (item, payload) pairs


@dataclass
class PrepareStats:
    mode: str
    requests: int = 0
    prompt_tokens: int = 0
    build_s: float = 0.0      # wall time spent building (before t0 for ``all``, the producer's for ``stream``)
    before_t0_s: float = 0.0  # wall time from start to the first request being ready to go
    cached: bool = False
    stalls: int = 0           # sends whose request was not ready when due
    streamed: int = 0         # requests built by the producer thread

    def as_dict(self) -> dict:
        return {"mode": self.mode, "requests": self.requests, "prompt_tokens": self.prompt_tokens,
                "seconds": self.build_s, "before_t0_s": self.before_t0_s, "cached": self.cached,
                "stalls": self.stalls, "streamed": self.streamed,
                "tokens_per_s": self.prompt_tokens / self.build_s if self.build_s > 0 else float("nan")}


@dataclass
class PrepareOptions:
    mode: str = "auto"
    ahead_s: float = 10.0
    max_bytes: int = 2 << 30
    cache: PrepareCache | None = None
    progress: Callable[[int | None], Callable[[int], None]] | None = None  # total -> per-request tick
    extra: dict = field(default_factory=dict)

    def __post_init__(self):
        if self.mode not in PREPARE_MODES:
            raise ValueError(f"client.prepare={self.mode!r}: expected one of {', '.join(PREPARE_MODES)}")


class RequestSource:
    """Prepared requests in send order: those built ahead, then the producer's."""

    def __init__(self, ready: list[Prepared], stream: Iterator[Prepared] | None, opts: PrepareOptions,
                 stats: PrepareStats):
        self._ready = deque(ready)
        self._stats = stats
        self._producer = _Producer(stream, opts.ahead_s, stats) if stream is not None else None

    @property
    def stats(self) -> PrepareStats:
        return self._stats

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._producer is not None:
            self._producer.start(loop)

    async def head_start(self, timeout_s: float = 60.0) -> None:
        """Before t0: let the producer get ``MIN_AHEAD`` requests (or all) ready, so the first
        sends do not race it for the core."""
        pr = self._producer
        deadline = perf_ns() + int(timeout_s * 1e9)
        while pr is not None and len(pr.buf) < MIN_AHEAD and not pr.finished_building and perf_ns() < deadline:
            await asyncio.sleep(0.005)

    def pop_ready(self) -> Prepared | None:
        """The next request if it is ready now, else None (see ``finished``)."""
        if self._ready:
            return self._ready.popleft()
        if self._producer is not None:
            return self._producer.pop()
        return None

    @property
    def finished(self) -> bool:
        return not self._ready and (self._producer is None or self._producer.finished)

    async def next(self) -> Prepared | None:
        """The next request, waiting for the producer if it is behind; None when there are no more."""
        p = self.pop_ready()
        if p is not None:
            return p
        if self.finished:
            return None
        self._stats.stalls += 1
        return await self._producer.wait()

    def note_progress(self, offset_ns: int, next_due_ns: int | None = None) -> None:
        """The dispatcher has reached ``offset_ns`` of the schedule (the producer keeps ahead of
        it); its next send is due at ``next_due_ns`` (perf_counter_ns), if it knows."""
        if self._producer is not None:
            self._producer.position_ns = offset_ns
            self._producer.next_due_ns = next_due_ns

    def close(self) -> None:
        if self._producer is not None:
            self._producer.stop()


class _Producer:
    """Builds requests on a thread, ``ahead_s`` of schedule (and ``MIN_AHEAD`` requests) ahead."""

    def __init__(self, it: Iterator[Prepared], ahead_s: float, stats: PrepareStats):
        self.it = it
        self.ahead_ns = int(ahead_s * 1e9)
        self.stats = stats
        self.buf: deque[Prepared] = deque()
        self.finished_building = False
        self.error: BaseException | None = None
        self.position_ns = 0                  # how far the dispatcher is, on the schedule's clock
        self.next_due_ns: int | None = None   # when the dispatcher's next send is due (perf_counter_ns)
        self.build_ns = 0.0                   # a build's time, moving average
        self._stop = threading.Event()
        self._space = threading.Event()       # set when the dispatcher took from a full buffer
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiter: asyncio.Future | None = None
        self._thread = threading.Thread(target=self._run, name="tokenfactory-prepare", daemon=True)

    @property
    def finished(self) -> bool:
        return self.finished_building and not self.buf

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._thread.start()

    def _full(self, p: Prepared) -> bool:
        if len(self.buf) < MIN_AHEAD:
            return False
        return p.offset_ns is None or p.offset_ns - self.position_ns > self.ahead_ns

    def _nice(self, value: int) -> bool:
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), value)  # this thread only (Linux)
            return True
        except (AttributeError, OSError):  # no such call, or lowering the nice value is not allowed here
            return False

    def _run(self) -> None:
        try:
            base = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        except (AttributeError, OSError):
            base = None
        low = self._nice(LOW_NICE)
        switch = low and base is not None and base < LOW_NICE
        try:
            it = iter(self.it)
            while True:
                # Falling behind (few ready): back to the process's priority until a full buffer.
                if switch and low and len(self.buf) < GATE_MIN_READY:
                    low = not self._nice(base)
                    switch = not low  # not allowed to go back up: stay low, and stop trying
                elif switch and not low and len(self.buf) >= MIN_AHEAD:
                    low = self._nice(LOW_NICE)
                self._hold_for_the_next_send()
                t0 = perf_ns()
                p = next(it, None)
                if p is None:
                    return
                self.build_ns += (perf_ns() - t0 - self.build_ns) / 8
                while self._full(p) and not self._stop.is_set():
                    self._space.wait(0.005)
                    self._space.clear()
                if self._stop.is_set():
                    return
                self.buf.append(p)
                self.stats.streamed += 1
                self._wake()
        except BaseException as e:  # noqa: BLE001 - handed to the dispatcher, which raises it
            self.error = e
        finally:
            self.finished_building = True
            self._wake()

    def _hold_for_the_next_send(self) -> None:
        """Do not start a build that would still run when the next send is due (while enough
        requests are in hand that waiting cannot starve the dispatcher)."""
        while not self._stop.is_set() and len(self.buf) >= GATE_MIN_READY:
            due = self.next_due_ns
            slack = due - perf_ns() if due is not None else None
            if slack is None or slack > self.build_ns + GATE_MARGIN_NS or slack < -50_000_000:
                return  # room before the next send, or the dispatcher is not waiting for one
            time.sleep(max(slack, 0) / 1e9 + 0.0002)

    def _wake(self) -> None:
        w = self._waiter
        if w is not None and self._loop is not None:
            self._loop.call_soon_threadsafe(_resolve, w)

    def pop(self) -> Prepared | None:
        if self.error is not None and not self.buf:
            raise self.error
        try:
            p = self.buf.popleft()
        except IndexError:
            return None
        self._space.set()
        return p

    async def wait(self) -> Prepared | None:
        while True:
            p = self.pop()
            if p is not None:
                return p
            if self.finished:
                if self.error is not None:
                    raise self.error
                return None
            self._waiter = self._loop.create_future()
            if self.buf or self.finished_building:  # filled between the check and the future
                self._waiter = None
                continue
            await self._waiter
            self._waiter = None

    def stop(self) -> None:
        self._stop.set()
        self._space.set()


def _resolve(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)


def prepare(entries: Iterator[Prepared], opts: PrepareOptions, total: int | None = None) -> RequestSource:
    """Build ``entries`` (a lazy iterator: the workload's prompts are built as it is consumed)
    as ``opts.mode`` says; ``total`` (when known) sizes the progress bar."""
    stats = PrepareStats(mode=opts.mode)
    w0 = perf_ns()
    if opts.mode != "stream" and opts.cache is not None:
        hit = opts.cache.load()
        if hit is not None:
            stats.cached, stats.requests = True, len(hit)
            stats.prompt_tokens = sum(p.item.prompt_tokens for p in hit)
            stats.before_t0_s = (perf_ns() - w0) / 1e9
            return RequestSource(hit, None, opts, stats)
    ready: list[Prepared] = []
    rest: Iterator[Prepared] | None = None
    if opts.mode != "stream":
        tick = opts.progress(total) if opts.progress is not None else None
        size = 0
        it = iter(entries)
        for p in it:
            ready.append(p)
            size += len(p.payload)
            if tick is not None:
                tick(1)
            if opts.mode == "auto" and size > opts.max_bytes:
                rest = it  # over the memory budget: the rest is streamed
                break
        stats.build_s = (perf_ns() - w0) / 1e9
        if rest is None and opts.cache is not None:
            opts.cache.store(ready)
    else:
        rest = iter(entries)
    stats.requests = len(ready)
    stats.prompt_tokens = sum(p.item.prompt_tokens for p in ready)
    stats.before_t0_s = (perf_ns() - w0) / 1e9
    counted = _counting(rest, stats) if rest is not None else None
    return RequestSource(ready, counted, opts, stats)


def _counting(it: Iterator[Prepared], stats: PrepareStats) -> Iterator[Prepared]:
    """The producer's entries, with their building time and tokens added to ``stats``."""
    while True:
        t0 = perf_ns()
        p = next(it, None)
        if p is None:
            return
        stats.build_s += (perf_ns() - t0) / 1e9
        stats.requests += 1
        stats.prompt_tokens += p.item.prompt_tokens
        yield p


class PrepareCache:
    """Prepared requests on disk (Arrow IPC), under a hash of everything that shapes them (the
    caller's ``key_parts``: workload config, request count, tokenizer, dialect, the prompt
    builder's random state and code).  ``on_hit(state)`` restores what building would have
    left behind (the builder's random state, JSON); ``end_state()`` gives it when storing.
    The folder keeps at most ``max_bytes``, least recently used files first out."""

    def __init__(self, folder: str | os.PathLike, key_parts: dict, end_state: Callable[[], object],
                 on_hit: Callable[[object], None], max_bytes: int = 5 << 30):
        self.folder = Path(folder)
        self.key = hashlib.sha256(json.dumps(key_parts, sort_keys=True, default=str).encode()).hexdigest()[:32]
        self.path = self.folder / f"{self.key}.arrow"
        self.end_state, self.on_hit, self.max_bytes = end_state, on_hit, max_bytes

    def load(self) -> list[Prepared] | None:
        import pyarrow as pa

        try:
            with pa.memory_map(str(self.path)) as src:
                table = pa.ipc.open_file(src).read_all()
        except (OSError, pa.ArrowInvalid):
            return None
        meta = json.loads(table.schema.metadata[b"tokenfactory"])
        d = table.to_pydict()
        models = d.get("model") or [None] * table.num_rows  # a file from before workload.lora
        entries = [Prepared(index=d["index"][i],
                            item=WorkItem(request_id=d["request_id"][i], prompt="", prompt_tokens=d["prompt_tokens"][i],
                                          max_tokens=d["max_tokens"][i], arrival_s=d["arrival_s"][i],
                                          session_id=d["session_id"][i], turn=d["turn"][i],
                                          model=models[i]),
                            offset_ns=d["offset_ns"][i], payload=d["payload"][i])
                   for i in range(table.num_rows)]
        os.utime(self.path)  # recently used: kept longest
        self.on_hit(meta["end_state"])
        return entries

    def store(self, entries: list[Prepared]) -> None:
        import pyarrow as pa

        cols = {"index": [p.index for p in entries], "request_id": [p.item.request_id for p in entries],
                "prompt_tokens": [p.item.prompt_tokens for p in entries],
                "max_tokens": [p.item.max_tokens for p in entries], "arrival_s": [p.item.arrival_s for p in entries],
                "session_id": [p.item.session_id for p in entries], "turn": [p.item.turn for p in entries],
                "model": [p.item.model for p in entries],
                "offset_ns": [p.offset_ns for p in entries], "payload": [p.payload for p in entries]}
        schema = pa.schema([("index", pa.int64()), ("request_id", pa.string()), ("prompt_tokens", pa.int64()),
                            ("max_tokens", pa.int64()), ("arrival_s", pa.float64()), ("session_id", pa.string()),
                            ("turn", pa.int32()), ("model", pa.string()), ("offset_ns", pa.int64()),
                            ("payload", pa.binary())],
                           metadata={"tokenfactory": json.dumps({"end_state": self.end_state()})})
        self.folder.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(self.path.name + f".{os.getpid()}.partial")
        with pa.OSFile(str(tmp), "wb") as sink, pa.ipc.new_file(sink, schema) as w:
            w.write_table(pa.table(cols, schema=schema))
        os.replace(tmp, self.path)
        self._trim()

    def _trim(self) -> None:
        files = sorted(self.folder.glob("*.arrow"), key=lambda p: p.stat().st_mtime)
        total = sum(p.stat().st_size for p in files)
        for p in files:
            if total <= self.max_bytes or p == self.path:
                continue
            total -= p.stat().st_size
            p.unlink(missing_ok=True)


def source_hash(*packages: str) -> str:
    """A hash of the source files of ``packages`` (dotted names): code that shapes prompts."""
    import importlib

    h = hashlib.sha256()
    for name in packages:
        mod = importlib.import_module(name)
        root = Path(mod.__file__).parent if mod.__file__.endswith("__init__.py") else Path(mod.__file__)
        files = sorted(root.rglob("*.py")) if root.is_dir() else [root]
        for f in files:
            h.update(f.read_bytes())
    return h.hexdigest()
