"""The proxy: an aiohttp server for callers, the streaming client's connections upstream.

Streaming generation (``POST /v1/completions`` and ``/v1/chat/completions`` with ``stream``)
goes to the side ``routing`` picks, over ``loadgen.client``'s keep-alive connections: each
side's request is timed as the load generator times its own (kernel receive stamps of every
chunk, ``sent_ns`` when the proxy wrote it upstream, ``scheduled_ns`` when the caller's request
reached the proxy, so ``sent_ns - scheduled_ns`` is the proxy's own delay) and becomes a row
of ``requests.parquet`` with its ``side`` and whether it was a ``shadow`` copy.  The body is
passed on unchanged (but for ``proxy.<side>_model``), the response's events too.

The candidate never fails a caller: a candidate-served request that fails before its first
event is run on the incumbent instead (the caller sees only the incumbent's response), one
that fails after is continued from the incumbent (``forward.Splice``); going to ``rollback``
cancels the candidate's requests in flight, which then take the same ways.  The incumbent's
own failures reach the caller as they would without the proxy.  Anything else (non-streaming
requests, ``/v1/models``, health) is passed through with aiohttp's client, the non-streaming
generation routed and recorded like the rest (one chunk at the end).
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import namedtuple
from dataclasses import dataclass

import aiohttp
import orjson
from aiohttp import web

from conf.schema import ClientTimeouts
from engines.http import auth_headers
from harness.proxy.forward import Forward, Splice
from harness.proxy.routing import CANDIDATE, INCUMBENT, Router, sticky_key
from loadgen.client import ClientConfig, StreamingClient
from loadgen.client.openai_stream import finish_text
from loadgen.records import RecordWriter, RequestRecord
from metrics.request_metrics import complete_record

perf_ns = time.perf_counter_ns
GENERATE = {"/v1/completions": "completions", "/v1/chat/completions": "chat"}
HOP_HEADERS = {"connection", "keep-alive", "transfer-encoding", "content-length", "host", "content-encoding"}

# What the promotion's controller gets of every finished row (``protocols.promote.run``).
Row = namedtuple("Row", "request_id side shadow arrive_ns sent_ns done_ns status ttft_s tpot_s e2el_s "
                        "output_tokens slo_ok compare text")


@dataclass
class SideConfig:
    name: str                      # incumbent | candidate
    url: str
    model: str | None = None       # replaces the caller's model name
    api_key: str | None = None
    timeouts: ClientTimeouts | None = None


def is_greedy(body: dict) -> bool:
    t = body.get("temperature")
    return (t is not None and float(t) == 0.0) or body.get("top_k") == 1


class Upstream:
    """One side: a streaming client per route (their connections stay open between requests)."""

    def __init__(self, cfg: SideConfig, prewarm: int = 0):
        self.cfg = cfg
        self.name = cfg.name
        self.prewarm = prewarm
        self.clients: dict[str, StreamingClient] = {}
        self.session: aiohttp.ClientSession | None = None
        self._payloads: dict[int, bytes] = {}

    async def start(self) -> None:
        for path, api in GENERATE.items():
            c = StreamingClient(ClientConfig(base_url=self.cfg.url, model=self.cfg.model or "", api=api,
                                             api_key=self.cfg.api_key, timeouts=self.cfg.timeouts or ClientTimeouts()))
            await c.__aenter__()
            self.clients[path] = c
        if self.prewarm:
            try:
                await self.clients["/v1/completions"].prewarm(self.prewarm)
            except OSError:
                pass  # a side that is down at start: requests will say so
        self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(
            total=(self.cfg.timeouts or ClientTimeouts()).total_s), auto_decompress=False)

    async def close(self) -> None:
        for c in self.clients.values():
            await c.__aexit__(None, None, None)
        if self.session is not None:
            await self.session.close()

    def payload(self, raw: bytes, body: dict) -> bytes:
        if not self.cfg.model:
            return raw
        return orjson.dumps({**body, "model": self.cfg.model})

    def start_stream(self, path: str, rec: RequestRecord, payload: bytes, sink) -> asyncio.Future:
        return self.clients[path].start(rec, payload, sink)

    def cancel(self, path: str, rec: RequestRecord) -> None:
        self.clients[path].cancel(rec)

    def headers(self, incoming) -> dict:
        h = {k: v for k, v in incoming.items() if k.lower() not in HOP_HEADERS and k.lower() != "authorization"}
        h.update(auth_headers(self.cfg.api_key))
        return h


class Recorder:
    """Finishes rows (token attribution, derived columns, SLO) and writes them to
    ``requests.parquet``; ``on_row`` gets each one's ``Row`` (the promotion's controller)."""

    def __init__(self, path, slo, on_row=None, keep_text: bool = True):
        self.slo = slo
        self.on_row = on_row
        self.keep_text = keep_text
        self.writer = RecordWriter(path) if path is not None else None
        self.rows = 0

    def finish(self, rec: RequestRecord, compare: bool) -> None:
        if not rec.text and rec.chunk_text:
            finish_text(rec)
        complete_record(rec, self.slo)
        if self.writer is not None:
            self.writer.append(rec)
        self.rows += 1
        if self.on_row is not None:
            self.on_row(Row(rec.request_id, rec.side, rec.shadow, rec.scheduled_ns, rec.sent_ns, rec.done_ns,
                            rec.status, rec.ttft_s, rec.tpot_s, rec.e2el_s, rec.output_tokens, rec.slo_ok, compare,
                            rec.text if (compare and rec.status == "ok" and self.keep_text) else None))

    def rotate(self, path) -> str | None:
        """Close this file (published) and write the next rows to ``path``; returns the closed one."""
        done = self.writer.close() if self.writer is not None else None
        self.writer = RecordWriter(path) if path is not None else None
        return done

    def close(self) -> str | None:
        done = self.writer.close() if self.writer is not None else None
        self.writer = None
        return done


class ProxyServer:
    def __init__(self, incumbent: SideConfig, candidate: SideConfig | None, router: Router, recorder: Recorder,
                 compare: str = "greedy", host: str = "127.0.0.1", port: int = 0, prewarm: int = 16,
                 tag: str = "p"):
        self.sides = {INCUMBENT: Upstream(incumbent, prewarm)}
        if candidate is not None:
            self.sides[CANDIDATE] = Upstream(candidate, prewarm)
        self.router = router
        self.recorder = recorder
        self.compare = compare
        self.host, self.port = host, port
        self.sticky = "session"
        self.tag = tag
        self._ids = itertools.count()
        self.inflight: dict[int, tuple[RequestRecord, str]] = {}
        self.failovers = {"before_first_event": 0, "mid_stream": 0}
        self.runner: web.AppRunner | None = None

    # ------------------------------------------------------------------------------------ life
    async def start(self) -> int:
        for s in self.sides.values():
            await s.start()
        app = web.Application(client_max_size=64 * 1024 * 1024)
        for path in GENERATE:
            app.router.add_post(path, self.generate)
        app.router.add_route("*", "/{tail:.*}", self.passthrough)
        self.runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self.runner.setup()
        site = web.TCPSite(self.runner, self.host, self.port, backlog=4096, reuse_address=True)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        for rec, path in list(self.inflight.values()):
            self.sides[rec.side].cancel(path, rec)
        await asyncio.sleep(0)
        if self.runner is not None:
            await self.runner.cleanup()
        for s in self.sides.values():
            await s.close()

    def set_mode(self, mode: str, share: float | None = None, mirror: float | None = None) -> int:
        """Change the routing now; ``rollback`` also cancels the candidate's requests in flight
        (served ones go on from the incumbent).  Returns when it took effect (perf_counter_ns)."""
        self.router.set(mode, share, mirror)
        at = perf_ns()
        if mode == "rollback":
            for rec, path in [v for v in self.inflight.values() if v[0].side == CANDIDATE]:
                self.sides[CANDIDATE].cancel(path, rec)
                rec.error = "cancelled by the proxy: rollback"
        return at

    def status(self) -> dict:
        """Per side: requests in flight and the longest wait for a first event among them (s)."""
        now = perf_ns()
        out = {s: [0, 0.0] for s in self.sides}
        for rec, _ in self.inflight.values():
            o = out[rec.side]
            o[0] += 1
            if rec.first_token_ns is None and rec.sent_ns is not None:
                o[1] = max(o[1], (now - rec.sent_ns) / 1e9)
        return out

    # ------------------------------------------------------------------------------------ requests
    def _rec(self, rid: str, side: str, shadow: bool, arrive: int, session: str | None, body: dict) -> RequestRecord:
        mt = body.get("max_tokens") or body.get("max_completion_tokens")
        return RequestRecord(request_id=rid, session_id=session, scheduled_ns=arrive, slot_ns=arrive, side=side,
                             shadow=shadow, max_tokens=int(mt) if isinstance(mt, int) else None)

    def _start(self, side: str, path: str, rec: RequestRecord, raw: bytes, body: dict, sink) -> asyncio.Future:
        up = self.sides[side]
        fut = up.start_stream(path, rec, up.payload(raw, body), sink)
        key = id(rec)
        self.inflight[key] = (rec, path)
        fut.add_done_callback(lambda _f: self.inflight.pop(key, None))
        return fut

    def _wants_compare(self, body: dict) -> bool:
        return self.compare == "all" or (self.compare == "greedy" and is_greedy(body))

    async def _first(self, fwd: Forward, fut: asyncio.Future) -> None:
        """Until the first whole event is held or the upstream request is over."""
        if fwd.pending or fut.done():
            return
        loop = asyncio.get_running_loop()
        fwd.waiter = loop.create_future()

        def wake(_f, w=fwd.waiter):
            if not w.done():
                w.set_result(None)

        fut.add_done_callback(wake)
        await fwd.waiter
        fwd.waiter = None

    async def generate(self, request: web.Request) -> web.StreamResponse:
        arrive = perf_ns()
        raw = await request.read()
        try:
            body = orjson.loads(raw)
            if not isinstance(body, dict):
                raise ValueError("not a JSON object")
        except ValueError as e:
            return web.json_response({"error": {"message": f"request body: {e}", "type": "invalid_request"}},
                                     status=400)
        path = request.path
        if not body.get("stream"):
            return await self.unary(request, path, raw, body, arrive)
        route = self.router.route(sticky_key(self.sticky, request.headers, body))
        rid = f"{self.tag}{next(self._ids)}"
        user = body.get("user")
        session = request.headers.get("X-Session-Id") or (user if isinstance(user, str) else None)
        compare = self._wants_compare(body)
        primary = route.primary
        fwd = Forward()
        rec = self._rec(rid, primary, False, arrive, session, body)
        fut = self._start(primary, path, rec, raw, body, fwd.sink)
        unrecorded = fut  # the caller's current upstream request, until its row is recorded
        resp = None
        if route.copy:
            other = INCUMBENT if primary == CANDIDATE else CANDIDATE
            copy = self._rec(rid, other, True, arrive, session, body)
            self._start(other, path, copy, raw, body, None).add_done_callback(
                lambda f: self.recorder.finish(f.result(), compare))
        fwd.on_closed = lambda: self.sides[primary].cancel(path, rec)
        try:
            await self._first(fwd, fut)
            if not fwd.pending:  # over before its first event: nothing reached the caller
                rec = fut.result()
                self.recorder.finish(rec, compare)
                unrecorded = None
                if primary != CANDIDATE or rec.status == "ok":
                    return self._error(rec)
                self.failovers["before_first_event"] += 1
                fwd = Forward()
                rec = self._rec(rid, INCUMBENT, False, arrive, session, body)
                fut = unrecorded = self._start(INCUMBENT, path, rec, raw, body, fwd.sink)
                fwd.on_closed = lambda: self.sides[INCUMBENT].cancel(path, rec)
                await self._first(fwd, fut)
                if not fwd.pending:
                    rec = fut.result()
                    self.recorder.finish(rec, compare)
                    unrecorded = None
                    return self._error(rec)
            resp = web.StreamResponse(status=200, headers={"Content-Type": "text/event-stream",
                                                           "Cache-Control": "no-cache"})
            resp.enable_chunked_encoding()
            await resp.prepare(request)
            first, fwd.pending = b"".join(fwd.pending), []
            await resp.write(first)  # the headers go with it
            fwd.go_direct(request.transport)
            rec = await asyncio.shield(fut)
            self.recorder.finish(rec, compare)
            unrecorded = None
            if rec.status != "ok" and rec.side == CANDIDATE and not fwd.closed:
                self.failovers["mid_stream"] += 1
                splice = Splice(fwd, len(rec.text))
                rec2 = self._rec(rid, INCUMBENT, False, arrive, session, body)
                fut = unrecorded = self._start(INCUMBENT, path, rec2, raw, body, splice.sink)
                fwd.on_closed = lambda: self.sides[INCUMBENT].cancel(path, rec2)
                rec = rec2
                self.recorder.finish(await asyncio.shield(fut), compare)
                unrecorded = None
            if not fwd.closed:
                await resp.write_eof()
            return resp
        except (asyncio.CancelledError, ConnectionResetError) as e:
            # the caller left (a ConnectionResetError writing the headers or the first event) or the
            # proxy is stopping: the upstream request is abandoned, and its row still recorded (as
            # cancelled) once its side has ended it
            if unrecorded is not None:
                if not fut.done():
                    self.sides[rec.side].cancel(path, rec)
                fut.add_done_callback(lambda f: None if f.cancelled() or f.exception() is not None
                                      else self.recorder.finish(f.result(), compare))
            if isinstance(e, asyncio.CancelledError):
                raise
            # nobody to answer: aiohttp's writing of this response meets the closed transport and
            # lets it go quietly (a re-raised error would be logged as the handler's, with a 500)
            return resp if resp is not None else web.Response(status=499)

    def _error(self, rec: RequestRecord) -> web.Response:
        """The upstream's failure as the caller would have had it: its status, or 502/504."""
        status = rec.http_status if rec.http_status and rec.http_status != 200 else (
            504 if rec.status == "timeout" else 502)
        return web.json_response({"error": {"message": f"upstream {rec.side}: {rec.error or rec.status}",
                                            "type": rec.status}}, status=status)

    async def unary(self, request: web.Request, path: str, raw: bytes, body: dict, arrive: int) -> web.Response:
        route = self.router.route(sticky_key(self.sticky, request.headers, body))
        rid = f"{self.tag}{next(self._ids)}"
        order = [route.primary] + ([INCUMBENT] if route.primary == CANDIDATE else [])
        for side in order:
            up = self.sides[side]
            rec = self._rec(rid, side, False, arrive, None, body)
            rec.sent_ns = perf_ns()
            try:
                async with up.session.post(up.cfg.url.rstrip("/") + path, data=up.payload(raw, body),
                                           headers=up.headers(request.headers)) as r:
                    data, status, ctype = await r.read(), r.status, r.headers.get("Content-Type")
            except (aiohttp.ClientError, TimeoutError) as e:
                rec.done_ns = perf_ns()
                rec.status, rec.error = "connection_error", f"{type(e).__name__}: {e}"
                self.recorder.finish(rec, False)
                if side == INCUMBENT:
                    return self._error(rec)
                continue
            rec.done_ns = rec.end_ns = rec.first_token_ns = perf_ns()
            rec.http_status = status
            if status == 200:
                try:
                    obj = orjson.loads(data)
                    c0 = (obj.get("choices") or [{}])[0]
                    text = c0.get("text") or (c0.get("message") or {}).get("content") or ""
                    rec.response_id = obj.get("id")
                    rec.usage_completion_tokens = (obj.get("usage") or {}).get("completion_tokens")
                    rec.usage_prompt_tokens = (obj.get("usage") or {}).get("prompt_tokens")
                    rec.chunk_ns, rec.chunk_text, rec.chunk_usage = [rec.end_ns], [text], [-1]
                    rec.finish_reason = c0.get("finish_reason")
                    rec.status = "ok"
                except (ValueError, AttributeError, IndexError) as e:
                    rec.status, rec.error = "invalid_response", f"{type(e).__name__}: {e}"
            else:
                rec.status, rec.error = "http_error", f"HTTP {status}: {data[:2000].decode('utf-8', 'replace')}"
            self.recorder.finish(rec, False)
            if status == 200 or side == INCUMBENT:
                return web.Response(body=data, status=status, headers={"Content-Type": ctype or "application/json"})
        return self._error(rec)

    async def passthrough(self, request: web.Request) -> web.StreamResponse:
        """Everything else goes to the incumbent as it came (``/v1/models``, health, metrics)."""
        up = self.sides[INCUMBENT]
        url = up.cfg.url.rstrip("/") + request.path_qs
        try:
            async with up.session.request(request.method, url, data=await request.read(),
                                          headers=up.headers(request.headers)) as r:
                data = await r.read()
                headers = {k: v for k, v in r.headers.items() if k.lower() not in HOP_HEADERS}
                return web.Response(body=data, status=r.status, headers=headers)
        except (aiohttp.ClientError, TimeoutError) as e:
            return web.json_response({"error": {"message": f"upstream incumbent: {type(e).__name__}: {e}",
                                                "type": "connection_error"}}, status=502)
