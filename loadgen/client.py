"""The streaming client: one request in, one ``RequestRecord`` out, timed at the socket.

One shared aiohttp session with keep-alive serves every request of a run.  Each network
read is timestamped with ``time.perf_counter_ns()`` before anything is parsed; the SSE
events it completes are decoded afterwards.  Output tokens come from the server's
``usage`` (requested with ``stream_options.include_usage``, per chunk where the engine
offers ``continuous_usage_stats``); the tokenizer is the fallback, and the row says which.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import aiohttp
import orjson

from loadgen.records import RequestRecord
from loadgen.sse import SSEDecoder

perf_ns = time.perf_counter_ns


@dataclass
class Timeouts:
    connect_s: float = 10.0   # TCP connect
    ttft_s: float = 600.0     # request sent -> first output chunk
    idle_s: float = 120.0     # between consecutive chunks once output started
    total_s: float = 1800.0   # whole request

    @classmethod
    def from_config(cls, cfg) -> "Timeouts":
        cfg = cfg or {}
        return cls(**{k: float(cfg[k]) for k in ("connect_s", "ttft_s", "idle_s", "total_s") if cfg.get(k) is not None})


@dataclass
class ClientConfig:
    base_url: str
    model: str
    api: str = "completions"          # completions | chat
    api_key: str | None = None
    timeouts: Timeouts = field(default_factory=Timeouts)
    extra_body: dict = field(default_factory=dict)  # the engine's dialect: ignore_eos, min_tokens, ...
    continuous_usage: bool = False
    exact_output: bool = True         # ask for exactly max_tokens (min_tokens where the dialect allows)

    @property
    def url(self) -> str:
        path = "/v1/chat/completions" if self.api == "chat" else "/v1/completions"
        return self.base_url.rstrip("/") + path


class _Timeout(Exception):
    pass


class StreamingClient:
    """Sends requests over one keep-alive session; use as ``async with``."""

    def __init__(self, cfg: ClientConfig, count_tokens=None):
        self.cfg = cfg
        self.count_tokens = count_tokens  # str -> int, the served model's tokenizer (fallback only)
        self.session: aiohttp.ClientSession | None = None
        headers = {"Content-Type": "application/json"}
        if cfg.api_key:
            headers["Authorization"] = f"Bearer {cfg.api_key}"
        self._headers = headers
        stream_options = {"include_usage": True}
        if cfg.continuous_usage:
            stream_options["continuous_usage_stats"] = True
        self._base_body = {"model": cfg.model, "stream": True, "stream_options": stream_options,
                           **cfg.extra_body}

    async def __aenter__(self):
        t = self.cfg.timeouts
        connector = aiohttp.TCPConnector(limit=0, keepalive_timeout=300, force_close=False)
        self.session = aiohttp.ClientSession(
            connector=connector, headers=self._headers, auto_decompress=False,
            timeout=aiohttp.ClientTimeout(total=None, connect=t.connect_s, sock_connect=t.connect_s),
            read_bufsize=2 ** 18,
        )
        return self

    async def __aexit__(self, *exc):
        if self.session is not None:
            await self.session.close()

    def body(self, prompt, max_tokens: int) -> bytes:
        b = dict(self._base_body)
        if self.cfg.api == "chat":
            b["messages"] = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
        else:
            b["prompt"] = prompt
        b["max_tokens"] = int(max_tokens)
        if self.cfg.exact_output and "min_tokens" in self.cfg.extra_body:
            b["min_tokens"] = int(max_tokens)
        return orjson.dumps(b)

    async def send(self, rec: RequestRecord, payload: bytes) -> RequestRecord:
        """Send one request, fill ``rec`` in place (timestamps, tokens, status) and return it."""
        t = self.cfg.timeouts
        loop = asyncio.get_running_loop()
        phase = "ttft"
        pieces: list[str] = []
        usage_prompt = usage_completion = None
        last_cum = 0
        saw_done = False
        start = loop.time()
        total_deadline = start + t.total_s
        try:
            rec.sent_ns = perf_ns()
            async with asyncio.timeout_at(min(total_deadline, start + t.ttft_s)) as cm:
                async with self.session.post(self.cfg.url, data=payload) as resp:
                    rec.http_status = resp.status
                    if resp.status != 200:
                        text = (await resp.read())[:2000].decode("utf-8", "replace")
                        rec.done_ns = perf_ns()
                        rec.status, rec.error = "http_error", f"HTTP {resp.status}: {text}"
                        return rec
                    dec = SSEDecoder()
                    content = resp.content
                    while True:
                        data = await content.readany()
                        now = perf_ns()
                        if not data:
                            break
                        for ev in dec.feed(data):
                            if ev == b"[DONE]":
                                saw_done = True
                                continue
                            obj = orjson.loads(ev)
                            if rec.response_id is None:
                                rec.response_id = obj.get("id")
                            if "error" in obj and not obj.get("choices"):
                                raise ValueError(f"error event in stream: {str(obj['error'])[:500]}")
                            usage = obj.get("usage")
                            if usage:
                                usage_prompt = usage.get("prompt_tokens", usage_prompt)
                                usage_completion = usage.get("completion_tokens", usage_completion)
                            choices = obj.get("choices")
                            if not choices:
                                continue
                            c0 = choices[0]
                            delta = c0.get("delta")
                            if delta is not None:
                                text = delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning")
                            else:
                                text = c0.get("text")
                            if text:
                                rec.chunk_ns.append(now)
                                pieces.append(text)
                                if usage and usage.get("completion_tokens") is not None:
                                    cum = usage["completion_tokens"]
                                    rec.chunk_tokens.append(max(cum - last_cum, 1))
                                    last_cum = cum
                                else:
                                    rec.chunk_tokens.append(0)  # resolved once the total is known
                                if phase == "ttft":
                                    rec.first_token_ns = now
                                    phase = "idle"
                            fr = c0.get("finish_reason")
                            if fr:
                                rec.finish_reason = fr
                        if phase == "idle":
                            cm.reschedule(min(total_deadline, loop.time() + t.idle_s))
                    rec.done_ns = perf_ns()
                    tail = dec.tail().strip()
                    if tail and not saw_done:
                        raise ValueError(f"stream ended inside an event: {tail[:200]!r}")
        except aiohttp.ServerTimeoutError as e:  # aiohttp's own connect timeout (a TimeoutError too)
            rec.done_ns = perf_ns()
            rec.status, rec.error = "timeout", f"connect timeout after {t.connect_s:g} s: {e}"
            return rec
        except TimeoutError:
            rec.done_ns = perf_ns()
            which = "total" if loop.time() >= total_deadline - 1e-3 else phase
            limit = {"total": t.total_s, "ttft": t.ttft_s, "idle": t.idle_s}[which]
            rec.status, rec.error = "timeout", f"{which} timeout after {limit:g} s"
            self._finish_tokens(rec, pieces, usage_prompt, usage_completion)
            return rec
        except asyncio.CancelledError:
            rec.done_ns = perf_ns()
            rec.status, rec.error = "cancelled", "cancelled by the load generator"
            self._finish_tokens(rec, pieces, usage_prompt, usage_completion)
            raise
        except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, ConnectionError, OSError) as e:
            rec.done_ns = perf_ns()
            rec.status, rec.error = "connection_error", f"{type(e).__name__}: {e}"
            self._finish_tokens(rec, pieces, usage_prompt, usage_completion)
            return rec
        except (ValueError, orjson.JSONDecodeError, AttributeError, TypeError) as e:
            rec.done_ns = perf_ns()
            rec.status, rec.error = "invalid_response", f"{type(e).__name__}: {e}"[:2000]
            self._finish_tokens(rec, pieces, usage_prompt, usage_completion)
            return rec

        self._finish_tokens(rec, pieces, usage_prompt, usage_completion)
        if not rec.chunk_ns:
            rec.status, rec.error = "invalid_response", "the stream carried no output token"
        elif not (saw_done or rec.finish_reason):
            rec.status, rec.error = "truncated", "stream closed before a finish_reason or [DONE]"
        else:
            rec.status = "ok"
        return rec

    def _finish_tokens(self, rec: RequestRecord, pieces, usage_prompt, usage_completion) -> None:
        """Settle output/prompt token counts and per-chunk tokens once the stream is over."""
        rec.text = "".join(pieces)
        if rec.chunk_ns:
            rec.end_ns = rec.chunk_ns[-1]
        rec.prompt_tokens = usage_prompt if usage_prompt is not None else rec.expected_prompt_tokens
        n_chunks = len(rec.chunk_ns)
        if usage_completion is not None:
            rec.output_tokens = int(usage_completion)
            if n_chunks and all(k > 0 for k in rec.chunk_tokens):
                rec.tokens_source = "usage_continuous"
                return
            rec.tokens_source = "usage"
            if rec.output_tokens == n_chunks:
                rec.chunk_tokens = [1] * n_chunks
                return
            rec.tokens_source = "usage+tokenizer_split"
            weights = [max(self.count_tokens(p), 1) for p in pieces] if self.count_tokens else [1] * n_chunks
            rec.chunk_tokens = split_total(rec.output_tokens, weights)
        elif n_chunks:
            rec.tokens_source = "tokenizer" if self.count_tokens else "chunks"
            counts = [max(self.count_tokens(p), 1) for p in pieces] if self.count_tokens else [1] * n_chunks
            rec.chunk_tokens = counts
            rec.output_tokens = sum(counts)
        else:
            rec.output_tokens = 0


def split_total(total: int, weights: list[int]) -> list[int]:
    """Split ``total`` tokens over chunks in proportion to ``weights`` (largest remainder),
    at least one token a chunk while there are tokens to go round."""
    n = len(weights)
    if n == 0:
        return []
    if total <= n:
        return [1] * total + [0] * (n - total)
    w = [max(x, 1) for x in weights]
    sw = sum(w)
    shares = [total * x / sw for x in w]
    out = [max(1, int(s)) for s in shares]
    left = total - sum(out)
    order = sorted(range(n), key=lambda i: shares[i] - int(shares[i]), reverse=True)
    j = 0
    while left > 0:
        out[order[j % n]] += 1
        left -= 1
        j += 1
    big = sorted(range(n), key=lambda i: out[i], reverse=True)
    j = 0
    while left < 0:  # the minimum of one a chunk overshot: take back from the largest
        i = big[j % n]
        if out[i] > 1:
            out[i] -= 1
            left += 1
        j += 1
    return out
