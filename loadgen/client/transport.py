"""The transport: one request in, one ``RequestRecord`` out, timed at the socket.

A pool of keep-alive HTTP/1.1 connections serves every request of a run.  Under Linux a
read's time is the kernel's receive timestamp of its bytes (``stamped_socket``; TLS runs in
memory over the same socket): when they reached this host, whatever the event loop was
busy with.  Elsewhere each connection is an asyncio ``Protocol`` whose ``data_received``
reads ``time.perf_counter_ns()`` before it parses anything (a library stream reader would
add a task switch and its buffering per read, which under hundreds of streams becomes
milliseconds).  Parsing waits for a deferred pass either way.  The SSE events a read
completes share its time; an event split over reads gets the time of the read that
completed it.  What the events mean is ``openai_stream``'s business, how requests are
worded ``dialect``'s.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from urllib.parse import urlsplit

import orjson

from engines.http import auth_headers
from loadgen.client.config import ClientConfig
from loadgen.client.dialect import RequestDialect
from loadgen.client.done_drain import DoneDrain
from loadgen.client.http1 import ChunkedDecoder, parse_head
from loadgen.client.openai_stream import OpenAIStream, finish_text
from loadgen.client.stamped_socket import ReadClock, kernel_stamps_supported, open_stamped, resolve
from loadgen.records import RequestRecord

perf_ns = time.perf_counter_ns
FLUSH_SLICE_NS = 200_000  # longest parse pass before the loop gets a turn


class _Conn(DoneDrain, asyncio.Protocol):
    """One keep-alive connection; carries at most one request at a time.

    ``data_received`` reads the clock before anything else, so a chunk's time is the moment
    its bytes reached the load generator, not the moment some task got round to parsing it.
    """

    def __init__(self, client: StreamingClient):
        self.client = client
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.reused = False
        self.idle_since = perf_ns()  # perf_counter_ns when it last went idle (the idle sweep reads it)
        self.swept = False           # closed by the idle sweep, which already took it off the idle list
        self.draining = False        # the request ended at [DONE]; the body's end is still to come
        self.inbox: list = []   # (perf_counter_ns, bytes) reads not parsed yet
        self.queued = False
        self._clear()

    def _clear(self) -> None:
        self.rec: RequestRecord | None = None
        self.fut: asyncio.Future | None = None
        self.payload = b""
        self.head_buf = b""
        self.head = None
        self.body_left = 0
        self.chunked: ChunkedDecoder | None = None
        self.stream: OpenAIStream | None = None
        self.got_bytes = False
        self.err_body = b""
        self.timer = None
        self.retried = False
        self.junk = False                # bytes after the body's end: the connection is not reused
        self.sink = None        # called with each body piece of a 200 response (the promotion proxy forwards them)

    # --- asyncio.Protocol ---------------------------------------------------------------
    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.data_received_at(data, perf_ns())

    def data_received_at(self, data: bytes, ns: int) -> None:
        # Stash only; parsing waits until every socket of this poll round has been read
        # (one deferred pass per round), so a burst of chunks on many connections is timed
        # at arrival instead of after the parsing of the ones before it.
        self.inbox.append((ns, data))
        if not self.queued:
            self.queued = True
            self.client._stamped(self)

    def drain_inbox(self) -> None:
        self.queued = False
        inbox = self.inbox
        if not inbox:
            return
        self.inbox = []
        for now, data in inbox:
            if self.draining:
                try:
                    self._drain_tail(data)
                except ValueError:  # the tail's framing is broken: the connection is not reused
                    self._tail_overdue()
                continue
            if self.rec is None:
                # Bytes nobody asked for: the connection's framing can no longer be trusted.
                if not self.closed:
                    self.closed = True
                    self.transport.close()
                return
            self.got_bytes = True
            try:
                self._feed(data, now)
            except (ValueError, TypeError, AttributeError, KeyError, orjson.JSONDecodeError) as e:
                self._finish("invalid_response", f"{type(e).__name__}: {e}"[:2000], reusable=False)

    def eof_received(self):
        return None  # close our side too

    def connection_lost(self, exc) -> None:
        self.drain_inbox()  # what arrived before the close comes first
        self.closed = True
        self.client._forget(self)
        if self.draining:  # the request ended at [DONE] already; the body's end is moot now
            self.draining = False
            self._cancel_timer()
        if self.rec is None:
            return
        if not self.got_bytes and self.reused and not self.retried:
            # The server closed an idle keep-alive connection as we wrote to it: resend once.
            rec, payload, fut, sink = self.rec, self.payload, self.fut, self.sink
            self._cancel_timer()
            self._clear()
            self.client._open_and_begin(rec, payload, fut, retried=True, sink=sink)
            return
        if self.head is not None and self.head.mode == "close":
            self._complete(perf_ns())
            return
        why = f"{type(exc).__name__}: {exc}" if exc else "connection closed by the server mid-response"
        self._finish("connection_error", why, reusable=False)

    # --- request lifecycle ----------------------------------------------------------------
    def begin(self, rec: RequestRecord, payload: bytes, fut: asyncio.Future, retried: bool = False,
              sink=None) -> None:
        self._clear()
        self.rec, self.payload, self.fut, self.retried, self.sink = rec, payload, fut, retried, sink
        self.client._active[id(rec)] = self
        rec.sent_ns = perf_ns()
        self.transport.write(payload)
        self._arm()

    def _arm(self) -> None:
        t = self.client.cfg.timeouts
        rec = self.rec
        deadline = rec.sent_ns + int(t.total_s * 1e9)
        if rec.first_token_ns is None:
            deadline = min(deadline, rec.sent_ns + int(t.ttft_s * 1e9))
        else:
            deadline = min(deadline, rec.end_ns + int(t.idle_s * 1e9))
        self.timer = self.client.loop.call_later(max(deadline - perf_ns(), 0) / 1e9, self._on_timer, deadline)

    def _on_timer(self, deadline: int) -> None:
        # One timer per request, re-armed only when it fires: no per-chunk timer churn.
        self.timer = None
        self.drain_inbox()
        if self.rec is None:
            return
        if perf_ns() < deadline - 500_000:
            self._arm()
            return
        t = self.client.cfg.timeouts
        rec = self.rec
        # Which limit hit: recompute the deadlines as they stand now.
        total = rec.sent_ns + int(t.total_s * 1e9)
        if perf_ns() >= total - 1_000_000:
            which, limit = "total", t.total_s
        elif rec.first_token_ns is None:
            which, limit = "ttft", t.ttft_s
        else:
            which, limit = "idle", t.idle_s
        if rec.first_token_ns is not None:
            fresh = rec.end_ns + int(t.idle_s * 1e9)
        else:
            fresh = rec.sent_ns + int(t.ttft_s * 1e9)
        if which != "total" and perf_ns() < min(fresh, total) - 500_000:
            self._arm()
            return
        self._finish("timeout", f"{which} timeout after {limit:g} s", reusable=False)

    def _cancel_timer(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def cancel(self) -> None:
        """The load generator gave up on the request (end of run, Ctrl-C)."""
        if self.rec is not None:
            self._finish("cancelled", "cancelled by the load generator", reusable=False)

    # --- parsing --------------------------------------------------------------------------
    def _feed(self, data: bytes, now: int) -> None:
        if self.head is None:
            buf = self.head_buf + data if self.head_buf else data
            i = buf.find(b"\r\n\r\n")
            if i < 0:
                if len(buf) > 65536:
                    raise ValueError("HTTP response headers longer than 64 KiB")
                self.head_buf = buf
                return
            self.head_buf = b""
            head = parse_head(buf[:i])
            if 100 <= head.status < 200:  # an interim response: the real one follows
                rest = buf[i + 4:]
                if rest:
                    self._feed(rest, now)
                return
            self.head = head
            self.rec.http_status = head.status
            client = self.client
            if client.replica_header is not None:  # one dict lookup per response
                said = head.headers.get(client.replica_header)
                if said is not None:
                    self.rec.replica = client.replica_names.get(said, said)
            data = buf[i + 4:]
            if head.mode == "chunked":
                self.chunked = ChunkedDecoder()
            elif head.mode == "length":
                self.body_left = head.length
            self.stream = OpenAIStream(self.rec)
            if not data and not (head.mode == "length" and head.length == 0):
                return
        head = self.head
        if head.mode == "chunked":
            pieces: list[bytes] = []
            self.chunked.feed(data, pieces)
            done = self.chunked.done
        elif head.mode == "length":
            if len(data) > self.body_left:  # the body is complete; what follows belongs to no response
                data, self.junk = data[:self.body_left], True
            self.body_left -= len(data)
            pieces = [data] if data else []
            done = self.body_left == 0
        else:
            pieces = [data]
            done = False
        if head.status != 200:
            for p in pieces:
                if len(self.err_body) < 2000:
                    self.err_body += p
        elif pieces:
            body = pieces[0] if len(pieces) == 1 else b"".join(pieces)
            if self.sink is not None:  # forwarded before it is parsed
                self.sink(body)
            first = self.rec.first_token_ns is None
            self.stream.feed(body, now)
            if first and self.rec.first_token_ns is not None and self.timer is not None:
                # The timer still waits for the TTFT deadline: from now on the idle limit rules.
                self._cancel_timer()
                self._arm()
            if self.stream.saw_done and not done:
                self._over_at_done()
                return
        if done:
            self._complete(now)

    def _complete(self, now: int) -> None:
        head = self.head
        reusable = head.keep_alive and not self.junk and not (self.chunked and self.chunked.extra)
        if head.status != 200:
            text = self.err_body[:2000].decode("utf-8", "replace")
            retry = head.headers.get("retry-after")  # said, not obeyed: a rejection is a measured outcome
            self._finish("http_error", f"HTTP {head.status}: {text}" + (f" (Retry-After: {retry})" if retry else ""),
                         reusable=reusable)
            return
        why = self.stream.not_sse(head.headers.get("content-type"))
        if why:
            self._finish("invalid_response", why, reusable=False)
            return
        tail = self.stream.unfinished()
        if tail:
            self._finish("invalid_response", f"stream ended inside an event: {tail[:200]!r}", reusable=False)
            return
        self._finish(None, None, reusable=reusable)

    def _finish(self, status: str | None, error: str | None, reusable: bool, drain: bool = False) -> None:
        rec, fut = self.rec, self.fut
        try:
            self._cancel_timer()
            self.client._active.pop(id(rec), None)
            rec.done_ns = perf_ns()
            finish_text(rec)
            said = self.stream.worker_said if self.stream is not None else None
            if said is not None:  # Dynamo names its worker in the stream, not in a header
                rec.replica = self.client.replica_names.get(said, said)
            if status is None:
                status, error = self.stream.outcome()
            key = self.client.cfg.api_key
            if error and key and key in error:  # a server that echoes the key (a 401 body, an error event)
                error = error.replace(key, "***redacted***")
            rec.status, rec.error = status, error
            self._clear()
            if not drain:  # (draining: the connection waits for the body's end first)
                self._to_pool(reusable, rec.done_ns)  # the stamp taken above: no clock read of its own
        finally:
            # Whatever went wrong above, the request ends: a future left pending would hang the run.
            if not fut.done():
                fut.set_result(rec)


class StreamingClient:
    """Sends requests over a pool of keep-alive connections; use as ``async with``.

    ``start(rec, payload)`` writes the request at once (on an idle pooled connection) and
    returns a future resolved with the filled record; ``send`` awaits it.
    """

    def __init__(self, cfg: ClientConfig):
        self.cfg = cfg
        u = urlsplit(cfg.url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"engine.base_url must be http(s)://HOST[:PORT], got {cfg.base_url!r}")
        self.host = u.hostname
        self.port = u.port or (443 if u.scheme == "https" else 80)
        self.ssl = u.scheme == "https"
        path = u.path + (("?" + u.query) if u.query else "")
        hostport = u.netloc.rsplit("@", 1)[-1]
        head = [f"POST {path} HTTP/1.1", f"Host: {hostport}", "Content-Type: application/json",
                "Accept: text/event-stream", "Connection: keep-alive"]
        head += [f"{k}: {v}" for k, v in auth_headers(cfg.api_key).items()]
        self._head = ("\r\n".join(head) + "\r\nContent-Length: ").encode()
        self.dialect = RequestDialect(cfg)
        self.loop: asyncio.AbstractEventLoop | None = None
        self._idle: list[_Conn] = []
        self._all: set[_Conn] = set()
        self._active: dict[int, object] = {}   # id(rec) -> _Conn or connecting task
        self._dirty: list[_Conn] = []          # connections with stamped, unparsed reads
        self._flush_soon = False
        # Open loop, the pool can run dry (more in flight than were prewarmed); a request
        # that finds it empty waits for a TCP connect, which is charged to its send lag.
        # Below this many idle connections, more are opened in the background.
        self._low_water = 0
        self._topping: asyncio.Task | None = None
        # What a burst opened past the prewarmed pool is closed again by a sweep on the loop,
        # every idle_close_s / 2, once idle for idle_close_s (see _sweep_idle).
        self._target = 0
        self._sweep: asyncio.TimerHandle | None = None
        self._clock = ReadClock() if (cfg.kernel_timestamps and kernel_stamps_supported()) else None
        self._ssl_context = ssl.create_default_context() if self.ssl and self._clock is not None else None
        self._addrs: list | None = None
        # The replica each response names (ClientConfig.replica_header, lower case as parse_head keeps names).
        self.replica_header = cfg.replica_header.lower() if cfg.replica_header else None
        self.replica_names = dict(cfg.replica_names)
        self.default_replica = cfg.default_replica

    def _stamped(self, conn: _Conn) -> None:
        self._dirty.append(conn)
        if not self._flush_soon:
            self._flush_soon = True
            self.loop.call_soon(self._flush)

    def _flush(self) -> None:
        # In slices of ~FLUSH_SLICE_NS, so a scheduled send waiting on the loop is not held
        # up by parsing a burst (chunk times are already taken; parsing can wait a round).
        self._flush_soon = False
        dirty = self._dirty
        end = perf_ns() + FLUSH_SLICE_NS
        i, n = 0, len(dirty)
        while i < n:
            dirty[i].drain_inbox()
            i += 1
            if not i & 15 and perf_ns() > end:
                break
        self._dirty = dirty[i:] if i < n else []
        if self._dirty:
            self._flush_soon = True
            self.loop.call_soon(self._flush)

    async def __aenter__(self):
        self.loop = asyncio.get_running_loop()
        if self.cfg.idle_close_s:
            self._sweep = self.loop.call_later(self.cfg.idle_close_s / 2, self._sweep_idle)
        return self

    async def __aexit__(self, *exc):
        if self._sweep is not None:
            self._sweep.cancel()
            self._sweep = None
        if self._topping is not None:
            self._topping.cancel()
        for c in list(self._active.values()):
            if isinstance(c, _Conn):
                c.cancel()
            else:
                c.cancel()
        for c in list(self._all):
            if not c.closed:
                c.closed = True
                c.transport.close()
        self._idle.clear()
        self._all.clear()
        await asyncio.sleep(0)

    def body(self, prompt, max_tokens: int, model: str | None = None) -> bytes:
        """The JSON request body for one prompt (framed into HTTP by ``start``)."""
        return self.dialect.body(prompt, max_tokens, model)

    def _request(self, payload: bytes) -> bytes:
        return self._head + str(len(payload)).encode() + b"\r\n\r\n" + payload

    @property
    def open_connections(self) -> int:
        """Connections open now, idle or carrying a request (connects under way excluded)."""
        return len(self._all)

    @property
    def idle_connections(self) -> int:
        return len(self._idle)

    SWEEP_BATCH = 128  # closes per pass: a pass costs the loop well under a millisecond

    def _sweep_idle(self) -> None:
        """Close pooled connections idle for ``idle_close_s`` while more are open than the
        prewarmed count, the oldest idle first, keeping at least the top-up's low-water mark
        idle (or the background top-up would open them again at once).  Only idle-list
        members are closed, so never a connection with a request in flight; the send path
        pays nothing (a connection's idle stamp is the end stamp its last response took)."""
        limit = self.cfg.idle_close_s
        cutoff = perf_ns() - int(limit * 1e9)
        excess = min(len(self._all) - self._target, len(self._idle) - self._low_water, self.SWEEP_BATCH)
        idle = self._idle
        if excess > 0 and idle and idle[0].idle_since <= cutoff:
            # The idle list is a stack (start pops the newest, a finished request pushes): its
            # bottom holds the longest idle.  Collect from the bottom, skipping any fresher one.
            drop = []
            for c in idle:
                if len(drop) >= excess:
                    break
                if c.idle_since <= cutoff:
                    drop.append(c)
            gone = set(map(id, drop))
            self._idle = [c for c in idle if id(c) not in gone]
            for c in drop:
                c.swept = True
                if not c.closed:
                    c.closed = True
                    c.transport.close()
        more = excess >= self.SWEEP_BATCH and bool(self._idle) and self._idle[0].idle_since <= cutoff
        self._sweep = self.loop.call_later(0.01 if more else limit / 2, self._sweep_idle)

    @property
    def timestamp_source(self) -> str:
        """Where chunk times come from: ``kernel`` (SO_TIMESTAMPNS) or ``read`` (perf_counter at the read)."""
        return "kernel" if self._clock is not None else "read"

    async def _connect(self) -> _Conn:
        t = self.cfg.timeouts
        if self._clock is not None:
            if self._addrs is None:
                self._addrs = await asyncio.wait_for(resolve(self.loop, self.host, self.port), t.connect_s)
            tr, conn = await asyncio.wait_for(
                open_stamped(self.loop, self._addrs, lambda: _Conn(self), self._clock, self._ssl_context,
                             self.host if self.ssl else None), t.connect_s)
            if not tr.stamps:  # the socket refused SO_TIMESTAMPNS: read times from now on
                self._clock = None
        else:
            ssl = True if self.ssl else None
            _, conn = await asyncio.wait_for(
                self.loop.create_connection(lambda: _Conn(self), self.host, self.port, ssl=ssl), t.connect_s)
        self._all.add(conn)
        return conn

    async def prewarm(self, n: int, top_up: bool = True) -> int:
        """Open up to ``n`` idle connections before the measured window; returns how many are idle.

        With ``top_up``, the pool is kept from running dry afterwards: once fewer than a
        quarter of ``n`` (at least 4) are idle, that many more are opened in the background."""
        want = max(int(n) - len(self._idle), 0)
        self._target = max(self._target, int(n))  # the idle sweep never closes below it
        opened = await self._open_idle(want)
        if top_up and opened == want:
            self._low_water = max(int(n) // 4, 4)
        return len(self._idle)

    async def _open_idle(self, want: int) -> int:
        """Open ``want`` connections into the idle pool, 64 at a time; stops at the first failure."""
        opened = 0
        for i in range(0, want, 64):
            got = await asyncio.gather(*(self._connect() for _ in range(min(64, want - i))), return_exceptions=True)
            conns = [g for g in got if isinstance(g, _Conn) and not g.closed]
            now = perf_ns()
            for c in conns:
                c.idle_since = now
            self._idle.extend(conns)
            opened += len(conns)
            if len(conns) < len(got):
                break
        return opened

    def _maybe_top_up(self) -> None:
        if len(self._idle) < self._low_water and self._topping is None:
            self._topping = self.loop.create_task(self._top_up())

    async def _top_up(self) -> None:
        try:
            if await self._open_idle(self._low_water) < self._low_water:
                self._low_water = 0  # the server refuses more connections: stop trying
        finally:
            self._topping = None

    def _forget(self, conn: _Conn) -> None:
        """A connection closed (by the server, by us, or dropped): it leaves the pool."""
        self._all.discard(conn)
        if conn.swept:  # the sweep took it off the idle list already: no O(pool) search
            return
        try:
            self._idle.remove(conn)
        except ValueError:
            pass

    def start(self, rec: RequestRecord, payload: bytes, sink=None) -> asyncio.Future:
        """Send now if a pooled connection is idle (else as soon as one is open); the future
        resolves with ``rec`` once the response is over, whatever its status.  ``sink``, if
        given, is called with every piece of a 200 response's body as it is read (de-chunked,
        before parsing)."""
        fut = self.loop.create_future()
        payload = self._request(payload)
        rec.replica = self.default_replica  # until the response head names one
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed and not conn.transport.is_closing():
                conn.begin(rec, payload, fut, sink=sink)
                if self._low_water:
                    self._maybe_top_up()
                return fut
        self._open_and_begin(rec, payload, fut, sink=sink)
        if self._low_water:
            self._maybe_top_up()
        return fut

    def _open_and_begin(self, rec, payload, fut, retried: bool = False, sink=None) -> None:
        task = self.loop.create_task(self._open_then_begin(rec, payload, fut, retried, sink))
        self._active[id(rec)] = task

    async def _open_then_begin(self, rec, payload, fut, retried, sink=None) -> None:
        t = self.cfg.timeouts
        err = None
        t_connect = perf_ns()
        try:
            conn = await self._connect()
            rec.connect_s = (perf_ns() - t_connect) / 1e9
        except asyncio.CancelledError:
            err = ("cancelled", "cancelled by the load generator")
        except TimeoutError:
            err = ("timeout", f"connect timeout after {t.connect_s:g} s")
        except OSError as e:
            err = ("connection_error", f"{type(e).__name__}: {e}")
        if err is None and (conn.closed or fut.done()):
            err = ("connection_error", "connection closed right after it opened")
        if err is not None:
            self._active.pop(id(rec), None)
            if rec.sent_ns is None:  # never sent: it was due when the connect began
                rec.sent_ns = t_connect
            rec.done_ns = perf_ns()
            if rec.connect_s is None:
                rec.connect_s = (rec.done_ns - t_connect) / 1e9
            rec.status, rec.error = err
            if not fut.done():
                fut.set_result(rec)
            return
        conn.begin(rec, payload, fut, retried=retried, sink=sink)

    def cancel(self, rec: RequestRecord) -> None:
        """Abandon ``rec``'s request: its record ends as ``cancelled``."""
        c = self._active.pop(id(rec), None)
        if isinstance(c, _Conn):
            c.cancel()
        elif c is not None:
            c.cancel()
            if rec.sent_ns is None:
                rec.sent_ns = perf_ns()
            rec.done_ns = perf_ns()
            rec.status, rec.error = "cancelled", "cancelled by the load generator"

    async def send(self, rec: RequestRecord, payload: bytes) -> RequestRecord:
        """Send one request, fill ``rec`` in place (timestamps, tokens, status) and return it."""
        fut = self.start(rec, payload)
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError:
            self.cancel(rec)
            raise
