"""A fake OpenAI-compatible streaming server for tests, which records its own ground truth.

It runs on its own thread and event loop (so the client under test does not share a loop
with it) and logs, per request, the ``perf_counter_ns()`` at which it wrote each chunk.  The
behaviour of each request is chosen by the prompt text: ``mode:NAME`` (see ``MODES``),
optionally with ``k=`` tokens per chunk, ``n=`` chunks and ``gap_ms=`` between them.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time
import uuid

from aiohttp import web

MODES = ("ok", "http500", "http429", "stall_first", "stall_mid", "disconnect", "badjson",
         "truncated", "no_output", "role_only_first", "error_event", "coalesced")


def _params(prompt: str, ttft_ms: float = 10.0) -> dict:
    out = {"mode": "ok", "k": 1, "n": 5, "gap_ms": 5.0, "ttft_ms": ttft_ms, "word": "tok"}
    for key, val in re.findall(r"(\w+)[:=]([\w.]+)", prompt):
        if key in ("mode", "word"):  # word: the output text's word (a config whose outputs differ)
            out[key] = val
        elif key in ("k", "n"):
            out[key] = int(val)
        elif key in ("gap_ms", "ttft_ms", "knee_rps"):
            out[key] = float(val)
    return out


class FakeServer:
    def __init__(self, continuous_usage: bool = True, knee_rps: float | None = None, ttft_ms: float = 10.0):
        self.continuous_usage = continuous_usage
        self.ttft_ms = ttft_ms  # the first token's delay unless a request says otherwise (a slower server)
        # A capacity knee: a request that arrives less than 1/knee_rps after the one before (an
        # arrival rate >= knee_rps) gets its first token after 300 ms instead of ttft_ms; a request
        # whose model name or prompt says knee_rps:N has that knee instead.
        self.knee_rps = knee_rps
        self.arrivals: list[float] = []
        self.truth: dict[str, dict] = {}  # response id -> {"chunk_ns": [...], "tokens": [...], "mode": ...}
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self.loop = asyncio.new_event_loop()
        self.port = None
        self._started = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    # --- lifecycle ---------------------------------------------------------------------
    def __enter__(self):
        self._thread.start()
        self._started.wait(10)
        return self

    def __exit__(self, *exc):
        fut = asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self.loop)
        try:
            fut.result(5)
        except Exception:  # noqa: BLE001 - a stalled handler may not close in time; the loop stops anyway
            pass

        async def cancel_rest():
            rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
            for t in rest:
                t.cancel()
            await asyncio.gather(*rest, return_exceptions=True)

        try:
            asyncio.run_coroutine_threadsafe(cancel_rest(), self.loop).result(5)
        except Exception:  # noqa: BLE001
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _run(self):
        asyncio.set_event_loop(self.loop)
        app = web.Application()
        app.router.add_post("/v1/completions", self.handle)
        app.router.add_post("/v1/chat/completions", self.handle)
        app.router.add_get("/health", lambda r: web.Response(text="ok"))
        app.router.add_get("/v1/models", lambda r: web.json_response({"data": [{"id": "fake"}]}))
        runner = self._runner = web.AppRunner(app, shutdown_timeout=0.5)
        self.loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        self.port = site._server.sockets[0].getsockname()[1]
        self._started.set()
        self.loop.run_forever()

    # --- the handler -------------------------------------------------------------------
    async def handle(self, request: web.Request):
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)
        try:
            return await self._handle(request)
        finally:
            self.in_flight -= 1

    async def _handle(self, request: web.Request):
        body = await request.json()
        self.requests.append(body)
        self.headers.append(dict(request.headers))
        prompt = body.get("prompt") or body["messages"][-1]["content"]
        # behaviour from the prompt, or from the model name (engine.model=fake-ttft_ms:40) or a
        # "fake" request field (+engine.request_extra.fake=gap_ms:2): a harness run's prompts
        # come from a tokenizer, the others from its config
        p = _params(f"{body.get('model', '')} {body.get('fake', '')} {prompt}", self.ttft_ms)
        mode, k, n = p["mode"], p["k"], p["n"]
        knee = p.get("knee_rps", self.knee_rps)  # a config's own knee (engine.model=fake-knee_rps:20) wins
        if knee is not None:
            now = time.perf_counter()
            if self.arrivals and now - self.arrivals[-1] < 1 / knee:
                p["ttft_ms"] = 300.0
            self.arrivals.append(now)
        rid = "fake-" + uuid.uuid4().hex[:12]
        truth = self.truth[rid] = {"chunk_ns": [], "tokens": [], "mode": mode}
        if mode == "http500":
            return web.Response(status=500, text="internal error: out of memory")
        if mode == "http429":
            return web.Response(status=429, text="too many requests")
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        chat = "messages" in body

        def chunk(text, cum=None, finish=None, usage=None):
            choice = {"index": 0, "finish_reason": finish}
            if chat:
                choice["delta"] = {"content": text} if text is not None else {}
            else:
                choice["text"] = text or ""
            obj = {"id": rid, "object": "chunk", "choices": [choice]}
            if usage is not None:
                obj["usage"] = usage
            elif cum is not None and self.continuous_usage:
                obj["usage"] = {"prompt_tokens": 7, "completion_tokens": cum, "total_tokens": 7 + cum}
            return b"data: " + json.dumps(obj).encode() + b"\n\n"

        if mode == "role_only_first" and chat:
            role = {"id": rid, "choices": [{"index": 0, "delta": {"role": "assistant"}}]}
            await resp.write(b"data: " + json.dumps(role).encode() + b"\n\n")
        await asyncio.sleep(p["ttft_ms"] / 1e3)
        if mode == "stall_first":
            await asyncio.sleep(30)
        if mode == "badjson":
            await resp.write(b"data: {not json\n\n")
            return resp
        if mode == "error_event":
            await resp.write(b'data: {"error": {"message": "model crashed", "code": 500}}\n\n')
            return resp
        if mode == "no_output":
            await resp.write(chunk("", finish="stop", usage={"prompt_tokens": 7, "completion_tokens": 0}))
            await resp.write(b"data: [DONE]\n\n")
            return resp
        cum = 0
        pending = b""
        for i in range(n):
            cum += k
            data = chunk(f"{p['word']} " * k, cum=cum)
            if mode == "coalesced":
                pending += data  # written together with the next one: one network read
                if i % 2 == 0 and i != n - 1:
                    continue
                data, pending = pending, b""
            truth["chunk_ns"].append(time.perf_counter_ns())
            truth["tokens"].append(k)
            await resp.write(data)
            if mode == "stall_mid" and i == 1:
                await asyncio.sleep(30)
            if mode == "disconnect" and i == 1:
                request.transport.close()
                return resp
            if i != n - 1:
                await asyncio.sleep(p["gap_ms"] / 1e3)
        if mode == "truncated":
            return resp  # closes without finish_reason or [DONE]
        await resp.write(chunk(None if chat else "", finish="length",
                               usage={"prompt_tokens": 7, "completion_tokens": cum, "total_tokens": 7 + cum}))
        await resp.write(b"data: [DONE]\n\n")
        return resp
