"""A fake engine as a process of its own, for engine-fault and scenario tests: what the harness
launches with ``engine=vllm engine.command=[python, -m, tests.fake_engine_process, --port, P]``
(``{port}`` for P: each replica of a deployment gets its own).

``--max-num-seqs N``: at most N requests generate at once (vLLM's batch limit), the rest queue.
It speaks enough of vLLM's server: ``/health``, ``/version``, ``/v1/models``, streamed and plain
``/v1/completions`` and ``/v1/chat/completions`` (one output token per chunk, usage at the
end), ``/metrics`` with vLLM's request and prefix-cache series, and ``/reset_prefix_cache``.
Its prefix cache is simulated on the prompt's text: blocks of ``--block-chars`` characters,
each hit when the same chain of blocks was seen before, counted in characters as vLLM counts
tokens (queries: every full block looked up; hits: those found).

Faults on purpose: ``--fail-after N --fail-mode oom|exit|hang|stop|kill`` makes the N-th
completion request (counting from 1, the warm-up included) run the engine out of memory (an
OOM message like PyTorch's, then exit 1), exit with code 3, hang the whole server (its event
loop blocked: ``/health`` goes unanswered too), or send the engine SIGSTOP or SIGKILL.  The
log line before says when (``at_ns``: ``perf_counter_ns``, the harness's clock).
``--error-rate P``: each completion request fails with HTTP 500 with probability P (drawn from
``--seed``), a build whose error rate rose (benchmarks/verdicts.py).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import random
import signal
import sys
import time
import uuid

from aiohttp import web


class Engine:
    def __init__(self, args):
        self.args = args
        self.cache: set[bytes] = set()
        self.queries = 0
        self.hits = 0
        self.requests = 0
        self.running = 0
        self.waiting = 0
        # --max-num-seqs: at most that many requests generate at once, the rest wait first come
        # first served (vLLM's batch limit, without its batching speed-up: each keeps its own pace)
        self.slots = asyncio.Semaphore(args.max_num_seqs) if args.max_num_seqs else None
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.rng = random.Random(args.seed)

    def look_up(self, text: str) -> None:
        n = self.args.block_chars
        h = b""
        for i in range(len(text) // n):
            h = hashlib.sha256(h + text[i * n:(i + 1) * n].encode()).digest()
            self.queries += n
            if h in self.cache:
                self.hits += n
            else:
                self.cache.add(h)

    def fault(self) -> None:
        a = self.args
        if a.fail_after is None or self.requests != a.fail_after:
            return
        if a.fail_marker:  # once per test: an engine restarted by the harness then keeps serving
            if os.path.exists(a.fail_marker):
                return
            open(a.fail_marker, "w").close()
        # perf_counter_ns is CLOCK_MONOTONIC: the test compares it with the harness's times
        print(f"fake engine: injecting {a.fail_mode} at request {self.requests} at_ns={time.perf_counter_ns()}",
              flush=True)
        if a.fail_mode == "oom":
            print("Traceback (most recent call last):\n  File \"model_runner.py\", line 1, in execute_model\n"
                  "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 79.10 GiB total "
                  "capacity; 78.52 GiB already allocated)", flush=True)
            os._exit(1)
        if a.fail_mode == "exit":
            os._exit(3)
        if a.fail_mode == "hang":
            time.sleep(3600)  # blocks the event loop: nothing is answered any more
        if a.fail_mode in ("stop", "kill"):
            os.kill(os.getpid(), signal.SIGSTOP if a.fail_mode == "stop" else signal.SIGKILL)

    async def completions(self, request: web.Request):
        body = await request.json()
        chat = "messages" in body
        prompt = body["messages"][-1]["content"] if chat else body.get("prompt", "")
        if isinstance(prompt, list):
            prompt = json.dumps(prompt)
        self.requests += 1
        self.fault()
        if self.args.error_rate and self.rng.random() < self.args.error_rate:
            return web.json_response({"error": {"message": "fake engine: injected error"}}, status=500)
        self.look_up(prompt)
        n_in = max(len(prompt) // 4, 1)
        n_out = int(body.get("max_tokens") or 16)
        self.prompt_tokens += n_in
        rid = "fake-" + uuid.uuid4().hex[:12]
        if self.slots is not None:
            self.waiting += 1
            await self.slots.acquire()
            self.waiting -= 1
        self.running += 1
        try:
            # each token at its own deadline from the slot's start: a late wake-up on a busy host
            # delays that token, not every one after it (a slot is held for the set time, not longer)
            loop = asyncio.get_running_loop()
            start = loop.time()

            async def until(offset_ms: float) -> None:
                await asyncio.sleep(max(0.0, start + offset_ms / 1e3 - loop.time()))
            await until(self.args.ttft_ms)
            if not body.get("stream"):
                await until(self.args.ttft_ms + self.args.gap_ms * (n_out - 1))
                self.generation_tokens += n_out
                text = "tok " * n_out
                choice = ({"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}
                          if chat else {"index": 0, "text": text, "finish_reason": "length"})
                return web.json_response({"id": rid, "choices": [choice], "usage": {
                    "prompt_tokens": n_in, "completion_tokens": n_out, "total_tokens": n_in + n_out}})
            headers = {"Content-Type": "text/event-stream"}
            if "replica_header" in request:
                headers[request["replica_header"][0]] = request["replica_header"][1]
            resp = web.StreamResponse(headers=headers)
            await resp.prepare(request)
            for i in range(n_out):
                choice = {"index": 0, "finish_reason": "length" if i == n_out - 1 else None}
                if chat:
                    choice["delta"] = {"content": "tok "}
                else:
                    choice["text"] = "tok "
                await resp.write(b"data: " + json.dumps({"id": rid, "choices": [choice]}).encode() + b"\n\n")
                self.generation_tokens += 1
                if i != n_out - 1:
                    await until(self.args.ttft_ms + self.args.gap_ms * (i + 1))
            usage = {"id": rid, "choices": [], "usage": {"prompt_tokens": n_in, "completion_tokens": n_out,
                                                         "total_tokens": n_in + n_out}}
            await resp.write(b"data: " + json.dumps(usage).encode() + b"\n\n")
            await resp.write(b"data: [DONE]\n\n")
            return resp
        finally:
            self.running -= 1
            if self.slots is not None:
                self.slots.release()

    async def metrics(self, _request):
        m = 'model_name="fake"'
        lines = []
        for name, kind, value in (("vllm:num_requests_running", "gauge", self.running),
                                  ("vllm:num_requests_waiting", "gauge", self.waiting),
                                  ("vllm:prefix_cache_queries_total", "counter", self.queries),
                                  ("vllm:prefix_cache_hits_total", "counter", self.hits),
                                  ("vllm:prompt_tokens_total", "counter", self.prompt_tokens),
                                  ("vllm:generation_tokens_total", "counter", self.generation_tokens)):
            lines += [f"# HELP {name} fake", f"# TYPE {name} {kind}", f"{name}{{{m}}} {float(value)}"]
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")

    async def reset(self, _request):
        self.cache.clear()
        return web.json_response({"success": True})


ADD_TTFT_ENV = "FAKE_ENGINE_ADD_TTFT_MS_"


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--ttft-ms", type=float, default=20.0)
    ap.add_argument("--gap-ms", type=float, default=5.0)
    ap.add_argument("--startup-s", type=float, default=0.0)
    ap.add_argument("--block-chars", type=int, default=64)
    ap.add_argument("--fail-after", type=int, default=None)
    ap.add_argument("--fail-marker", default=None, help="fail only if this file does not exist yet (creates it)")
    ap.add_argument("--fail-mode", choices=("oom", "exit", "hang", "stop", "kill"), default="exit")
    # as vLLM with tokenfactory's replica middleware: every response names $TOKENFACTORY_REPLICA
    ap.add_argument("--middleware", action="append", default=[])
    ap.add_argument("--enable-scale-out", action="store_true")  # what vllm-router's workers get (no-op here)
    ap.add_argument("--max-num-seqs", type=int, default=None)
    ap.add_argument("--error-rate", type=float, default=0.0)  # share of completion requests answered 500
    ap.add_argument("--seed", type=int, default=None)
    # launched as vLLM (engine=vllm engine.python=a shim: tests/fake_vllm.py): its other flags are ignored
    ap.add_argument("--as-vllm", action="store_true")
    args, rest = ap.parse_known_args(argv)
    if rest and not args.as_vllm:
        ap.error(f"unrecognized arguments: {' '.join(rest)}")
    # TTFT added by each $FAKE_ENGINE_ADD_TTFT_MS_<NAME> (engine.env): factors of an ablation that add
    args.ttft_ms += sum(float(v) for k, v in os.environ.items() if k.startswith(ADD_TTFT_ENV))
    print(f"fake engine {os.getpid()} loading (startup {args.startup_s:g} s)", flush=True)
    time.sleep(args.startup_s)
    eng = Engine(args)
    middlewares = []
    replica = os.environ.get("TOKENFACTORY_REPLICA")
    if any(m.startswith("tokenfactory_replica_header.") for m in args.middleware) and replica:
        header = os.environ.get("TOKENFACTORY_REPLICA_HEADER") or "x-tokenfactory-replica"

        @web.middleware
        async def name_replica(request, handler):
            resp = await handler(request)
            if not resp.prepared:
                resp.headers[header] = replica
            return resp

        @web.middleware
        async def name_replica_early(request, handler):  # a streamed answer's head is sent at prepare()
            request["replica_header"] = (header, replica)
            return await handler(request)

        middlewares = [name_replica_early, name_replica]
    app = web.Application(middlewares=middlewares)
    app.router.add_post("/v1/completions", eng.completions)
    app.router.add_post("/v1/chat/completions", eng.completions)
    app.router.add_post("/reset_prefix_cache", eng.reset)
    app.router.add_get("/health", lambda r: web.Response(text=""))
    app.router.add_get("/version", lambda r: web.json_response({"version": "fake-0"}))
    app.router.add_get("/v1/models", lambda r: web.json_response({"data": [{"id": "fake"}]}))
    app.router.add_get("/metrics", eng.metrics)
    print(f"fake engine serving on {args.host}:{args.port}", flush=True)
    web.run_app(app, host=args.host, port=args.port, print=None, access_log=None, shutdown_timeout=0.5)


if __name__ == "__main__":
    sys.exit(main())
