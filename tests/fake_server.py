"""The fake OpenAI-compatible streaming server of the tests: one scripted HTTP/1.1 server that
records its own ground truth (loopback only).

Each POST is answered by ``script(body, k)`` (``k``: the server's request number) -> a list of
steps: ``bytes`` (written at once), a float (sleep that many seconds), ``CLOSE`` (drop the
connection), ``RESET`` (drop it with a TCP reset), or a callable (called at that moment, e.g. to
stamp the ground truth of the write that follows).  GET ``/health`` and ``/v1/models`` (an
engine's probes) get a small answer without reaching the script; other GETs a 404.

Without a script the server is an OpenAI-compatible engine (``openai_script``): each request's
behaviour is chosen by its prompt text, its model name or a ``fake`` request field:
``mode:NAME`` (see ``MODES``), optionally ``k=`` tokens per chunk, ``n=`` chunks, ``gap_ms=``
between them, ``ttft_ms=`` to the first one, ``word=`` the output's word and ``knee_rps=`` a
capacity knee; ``ks=1.3.2`` tokens per chunk chunk by chunk (a speculative engine's steps; the
last value repeats); chat only: ``mode:reasoning`` sends its first ``r=`` chunks as reasoning deltas
in field ``field=reasoning`` (vLLM >= 0.11; ``reasoning_content`` before), ``mode:tool_call`` sends
its chunks as ``delta.tool_calls`` (the function name first, then argument pieces).  It logs,
per response id, the ``perf_counter_ns()`` at which it wrote each token chunk (``truth``).

The server runs on its own thread and event loop, so blocking code (worker processes) can use
it and the client under test does not share a loop with it; it records every request's body
and headers and the monotonic time just before every write.  With ``process=True`` it runs in
a forked child instead, so that its write times are not disturbed by the client under test
sharing its interpreter; what it recorded is then fetched from the child at each access.
``open_connections`` counts the connections open now; with ``idle_close_s`` the server closes a
keep-alive connection idle that long between requests, as a real server does.  With
``response_headers`` every POST's answer carries those headers too (after its status line), as an
engine replica that names itself in a header would.  With ``slots=N`` it answers at most N POSTs at
a time and queues the rest first come first served, as a server with a fixed number of slots does
(``max_queued``: the most that waited at once); without, it answers every request at once.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import re
import socket
import struct
import threading
import time
import uuid

import orjson

CLOSE = object()
RESET = object()
MODELS = orjson.dumps({"object": "list", "data": [{"id": "fake", "object": "model", "max_model_len": 4096}]})
HEAD_CHUNKED = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Transfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n")
END = b"0\r\n\r\n"


def chunk(payload: bytes) -> bytes:
    """One HTTP chunk."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def event(obj) -> bytes:
    return b"data: " + (obj if isinstance(obj, bytes) else orjson.dumps(obj)) + b"\n\n"


def completion(rid: str, text: str | None, finish=None, usage=None) -> dict:
    d = {"id": rid, "object": "text_completion", "choices": [] if text is None else
         [{"index": 0, "text": text, "finish_reason": finish}]}
    if usage is not None:
        d["usage"] = usage
    return d


def plain(status: str, body: bytes, ctype: str = "text/plain; charset=utf-8") -> bytes:
    """A whole non-streamed response (``status``: "500 Internal Server Error")."""
    return (b"HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s"
            % (status.encode(), ctype.encode(), len(body), body))


# --- the OpenAI-compatible engine ----------------------------------------------------------
MODES = ("ok", "http500", "http429", "stall_first", "stall_mid", "disconnect", "badjson",
         "truncated", "no_output", "role_only_first", "error_event", "coalesced", "reasoning", "tool_call")


def _params(text: str, ttft_ms: float = 10.0) -> dict:
    out = {"mode": "ok", "k": 1, "n": 5, "gap_ms": 5.0, "ttft_ms": ttft_ms, "word": "tok"}
    for key, val in re.findall(r"(\w+)[:=]([\w.]+)", text):
        if key in ("mode", "word", "field"):  # word: the output text's word (a config whose outputs differ)
            out[key] = val
        elif key in ("k", "n"):
            out[key] = int(val)
        elif key == "r" and val.isdigit():
            out[key] = int(val)
        elif key == "ks" and all(x.isdigit() for x in val.split(".")):
            out[key] = [int(x) for x in val.split(".")]
        elif key in ("gap_ms", "ttft_ms", "knee_rps"):
            out[key] = float(val)
    return out


def openai_script(truth: dict, continuous_usage: bool = True, knee_rps: float | None = None,
                  ttft_ms: float = 10.0):
    """The script of an OpenAI-compatible engine whose behaviour each request chooses (see the
    module's doc); ``truth`` gets, per response id, ``{"chunk_ns": [...], "tokens": [...], "mode"}``.

    A capacity knee: a request that arrives less than 1/knee_rps after the one before (an arrival
    rate >= knee_rps) gets its first token after 300 ms instead of ttft_ms; a request whose model
    name or prompt says knee_rps:N has that knee instead.  ``ttft_ms``: the first token's delay
    unless a request says otherwise (a slower server with the same model name)."""
    arrivals: list[float] = []

    def script(body: dict, k: int) -> list:
        prompt = body.get("prompt") or body["messages"][-1]["content"]
        # behaviour from the prompt, or from the model name (engine.model=fake-ttft_ms:40) or a
        # "fake" request field (+engine.request_extra.fake=gap_ms:2): a harness run's prompts
        # come from a tokenizer, the others from its config
        p = _params(f"{body.get('model', '')} {body.get('fake', '')} {prompt}", ttft_ms)
        mode, per, n = p["mode"], p["k"], p["n"]
        knee = p.get("knee_rps", knee_rps)  # a config's own knee (engine.model=fake-knee_rps:20) wins
        if knee is not None:
            now = time.perf_counter()
            if arrivals and now - arrivals[-1] < 1 / knee:
                p["ttft_ms"] = 300.0
            arrivals.append(now)
        rid = "fake-" + uuid.uuid4().hex[:12]
        rec = truth[rid] = {"chunk_ns": [], "tokens": [], "mode": mode, "model": body.get("model")}
        if mode == "http500":
            return [plain("500 Internal Server Error", b"internal error: out of memory")]
        if mode == "http429":
            return [plain("429 Too Many Requests", b"too many requests")]
        chat = "messages" in body

        def data(text, cum=None, finish=None, usage=None, key="content") -> bytes:
            choice = {"index": 0, "finish_reason": finish}
            if chat and key == "tool_calls":
                fn = {"name": "get_weather", "arguments": ""} if text is None else {"arguments": text}
                choice["delta"] = {"tool_calls": [{"index": 0, "type": "function", "function": fn}]}
            elif chat:
                choice["delta"] = {key: text} if text is not None else {}
            else:
                choice["text"] = text or ""
            obj = {"id": rid, "object": "chunk", "choices": [choice]}
            if body.get("model") is not None:  # echoed, as an engine does (a LoRA adapter's name)
                obj["model"] = body["model"]
            if usage is not None:
                obj["usage"] = usage
            elif cum is not None and continuous_usage:
                obj["usage"] = {"prompt_tokens": 7, "completion_tokens": cum, "total_tokens": 7 + cum}
            return event(obj)

        def stamp(tokens: int):
            return lambda: (rec["chunk_ns"].append(time.perf_counter_ns()), rec["tokens"].append(tokens))

        steps: list = [HEAD_CHUNKED]
        if mode == "role_only_first" and chat:
            steps.append(chunk(event({"id": rid, "choices": [{"index": 0, "delta": {"role": "assistant"}}]})))
        steps.append(p["ttft_ms"] / 1e3)
        if mode == "stall_first":
            steps.append(30.0)
        if mode == "badjson":
            return steps + [chunk(b"data: {not json\n\n"), END]
        if mode == "error_event":
            return steps + [chunk(b'data: {"error": {"message": "model crashed", "code": 500}}\n\n'), END]
        if mode == "no_output":
            return steps + [chunk(data("", finish="stop", usage={"prompt_tokens": 7, "completion_tokens": 0})),
                            chunk(event(b"[DONE]")), END]
        cum = 0
        pending = b""
        ks = p.get("ks")
        for i in range(n):
            per = ks[min(i, len(ks) - 1)] if ks else p["k"]
            cum += per
            key = "content"
            if mode == "reasoning" and i < p.get("r", 3):
                key = p.get("field", "reasoning")
            elif mode == "tool_call":
                key = "tool_calls"
            text = None if key == "tool_calls" and i == 0 else f"{p['word']} " * per
            piece = data(text, cum=cum, key=key)
            if mode == "coalesced":
                pending += piece  # written together with the next one: one network read
                if i % 2 == 0 and i != n - 1:
                    continue
                piece, pending = pending, b""
            steps += [stamp(per), chunk(piece)]
            if mode == "stall_mid" and i == 1:
                steps.append(30.0)
            if mode == "disconnect" and i == 1:
                return steps + [CLOSE]
            if i != n - 1:
                steps.append(p["gap_ms"] / 1e3)
        if mode == "truncated":
            return steps + [END]  # the body ends without finish_reason or [DONE]
        usage = {"prompt_tokens": 7, "completion_tokens": cum, "total_tokens": 7 + cum}
        return steps + [chunk(data(None if chat else "", finish="length", usage=usage)),
                        chunk(event(b"[DONE]")), END]

    return script


# --- the server ----------------------------------------------------------------------------
class FakeServer:
    def __init__(self, script=None, *, continuous_usage: bool = True, knee_rps: float | None = None,
                 ttft_ms: float = 10.0, ssl_context=None, process: bool = False, idle_close_s: float | None = None,
                 response_headers: dict[str, str] | None = None, slots: int | None = None):
        self.truth: dict[str, dict] = {}  # response id -> ground truth (the OpenAI script's)
        self.script = script or openai_script(self.truth, continuous_usage, knee_rps, ttft_ms)
        self.ssl_context = ssl_context  # serve https
        self.process = process
        self._requests: list[dict] = []
        self._headers: list[dict] = []
        self._paths: list[str] = []
        self._connections = 0
        self._open = 0
        self.idle_close_s = idle_close_s
        self.response_headers = b"".join(b"%s: %s\r\n" % (k.encode(), v.encode())
                                         for k, v in (response_headers or {}).items())
        self._writes: list[tuple[int, int]] = []  # (request number, perf_counter_ns before the write)
        self._in_flight = 0
        self._max_in_flight = 0
        self.slots = slots
        self._slots: asyncio.Semaphore | None = None
        self._queued = 0
        self._max_queued = 0
        self._proc = None
        self._pipe = None
        if not process:
            self.loop = asyncio.new_event_loop()
            self._ready = threading.Event()
            self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> FakeServer:
        if self.process:
            ctx = multiprocessing.get_context("fork")
            self._pipe, child = ctx.Pipe()
            self._proc = ctx.Process(target=self._child, args=(child,), daemon=True)
            self._proc.start()
            if not self._pipe.poll(10):
                raise RuntimeError("the fake server's process did not start")
            self.port = self._pipe.recv()
            return self
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc) -> None:
        if self._proc is not None:
            self._sync("stop")
            self._proc.join(10)
            if self._proc.is_alive():
                self._proc.kill()
            self._pipe.close()
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)

    @property
    def url(self) -> str:
        return f"{'https' if self.ssl_context else 'http'}://127.0.0.1:{self.port}"

    base_url = url

    # What the server saw; in process mode, fetched from the child at each access.
    @property
    def requests(self) -> list[dict]:
        self._sync()
        return self._requests

    @property
    def headers(self) -> list[dict]:
        """Each POST's request headers, in the order of requests."""
        self._sync()
        return self._headers

    @property
    def paths(self) -> list[str]:
        """Each POST's request path, in the order of requests."""
        self._sync()
        return self._paths

    @property
    def writes(self) -> list[tuple[int, int]]:
        self._sync()
        return self._writes

    @property
    def connections(self) -> int:
        self._sync()
        return self._connections

    @property
    def max_in_flight(self) -> int:
        """The most requests it was answering at once."""
        self._sync()
        return self._max_in_flight

    @property
    def max_queued(self) -> int:
        """With ``slots``: the most requests that waited for a slot at once."""
        self._sync()
        return self._max_queued

    @property
    def open_connections(self) -> int:
        """The connections open now."""
        self._sync()
        return self._open

    def _state(self) -> tuple:
        return (self._requests, self._headers, self._paths, self._writes, self._connections, self._max_in_flight,
                self._open, self._max_queued, self.truth)

    def _sync(self, cmd: str = "state") -> None:
        if self._proc is None or not self._proc.is_alive():
            return
        self._pipe.send(cmd)
        if self._pipe.poll(10):
            (self._requests, self._headers, self._paths, self._writes, self._connections, self._max_in_flight,
             self._open, self._max_queued, truth) = self._pipe.recv()
            self.truth.clear()
            self.truth.update(truth)

    def _child(self, conn) -> None:
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()

        def command() -> None:
            cmd = conn.recv()
            conn.send(self._state())
            if cmd == "stop":
                self.loop.stop()

        self.loop.add_reader(conn.fileno(), command)
        self._ready_hook = lambda: conn.send(self.port)
        self._run()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0,
                                                                   ssl=self.ssl_context))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        hook = getattr(self, "_ready_hook", None)
        if hook is not None:
            hook()
        self.loop.run_forever()
        server.close()
        self.loop.set_exception_handler(lambda loop, ctx: None)  # handlers cancelled mid-sleep are expected
        tasks = asyncio.all_tasks(self.loop)
        for t in tasks:
            t.cancel()
        if tasks:  # gather() of nothing asks for the thread's loop, which a policy installed since may not know
            self.loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        self.loop.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._connections += 1
        self._open += 1
        try:
            while True:
                try:
                    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.idle_close_s)
                except TimeoutError:  # idle between requests: a real server's keep-alive timeout
                    writer.close()
                    return
                lines = head.decode().split("\r\n")
                headers = dict(line.split(":", 1) for line in lines[1:] if ":" in line)
                headers = {name.strip(): value.strip() for name, value in headers.items()}
                n = next((int(v) for h, v in headers.items() if h.lower() == "content-length"), 0)
                if not head.startswith((b"GET ", b"POST ")):
                    # not an HTTP/1.1 request this server answers (e.g. the HTTP/2 preface "PRI *
                    # HTTP/2.0" a client tries first): drop it, as an HTTP/1.1-only server does
                    writer.close()
                    return
                if head.startswith(b"GET "):
                    path = lines[0].split()[1]
                    if path == "/health":
                        writer.write(plain("200 OK", b"ok"))
                    elif path == "/v1/models":
                        writer.write(plain("200 OK", MODELS, "application/json"))
                    else:
                        writer.write(plain("404 Not Found", b"not found"))
                    continue
                body = orjson.loads(await reader.readexactly(n)) if n else {}
                k = len(self._requests)
                self._requests.append(body)
                self._headers.append(headers)
                self._paths.append(lines[0].split()[1])
                self._in_flight += 1
                self._max_in_flight = max(self._max_in_flight, self._in_flight)
                try:
                    if self.slots is not None:
                        if self._slots is None:
                            self._slots = asyncio.Semaphore(self.slots)
                        waits = self._slots.locked()  # every slot taken: it queues
                        self._queued += waits
                        self._max_queued = max(self._max_queued, self._queued)
                        try:
                            await self._slots.acquire()
                        finally:
                            self._queued -= waits
                    try:
                        if not await self._answer(self.script(body, k), k, writer):
                            return
                    finally:
                        if self.slots is not None:
                            self._slots.release()
                finally:
                    self._in_flight -= 1
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()
        finally:
            self._open -= 1

    async def _answer(self, steps, k: int, writer: asyncio.StreamWriter) -> bool:
        """Play the steps; False when they dropped the connection."""
        for step in steps:
            if step is CLOSE:
                writer.close()
                return False
            if step is RESET:  # SO_LINGER 0: close() sends RST instead of FIN
                writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                                           struct.pack("ii", 1, 0))
                writer.transport.abort()
                return False
            if isinstance(step, (int, float)):
                await asyncio.sleep(step)
                continue
            if callable(step):
                step()
                continue
            if self.response_headers and step.startswith(b"HTTP/1.1 "):
                status, _, rest = step.partition(b"\r\n")
                step = status + b"\r\n" + self.response_headers + rest
            self._writes.append((k, time.perf_counter_ns()))
            writer.write(step)
            await writer.drain()
        return True
