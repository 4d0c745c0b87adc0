"""Simulated servers' streams for the over-saturation rule (``loadgen.saturation``), on simulated
clocks at a real model's time scales, and ``feed``: what the dispatcher tells the monitor.

Each stream is (send times, first tokens, ends) in seconds; a request that ended with no token (the
client's timeout, an error) has its first token NaN.  The unit tests, ``benchmarks/saturation_rule.py``
and ``benchmarks/guards.py`` (false stops and stop times over many seeds) share them."""

from __future__ import annotations

import heapq
import math

import numpy as np

from loadgen.saturation import SaturationMonitor, SaturationRule


def poisson(rate: float, n: int, seed: int = 0) -> np.ndarray:
    return np.cumsum(np.random.default_rng(seed).exponential(1 / rate, n))


def constant(rate: float, n: int) -> np.ndarray:
    return np.arange(n) / rate


def gamma(rate: float, n: int, cv: float, seed: int = 0) -> np.ndarray:
    """Gamma gaps of mean 1/rate and coefficient of variation ``cv`` (2: bursty, a trace's; 1: Poisson)."""
    shape = 1 / cv ** 2
    return np.cumsum(np.random.default_rng(seed).gamma(shape, 1 / (rate * shape), n))


class Stream(tuple):
    """(sends, first tokens, ends) of a simulated server."""


def unlimited(sends: np.ndarray, ttft, decode=0.0) -> Stream:
    """No capacity limit: each request's first token ``ttft`` after it was sent, its end ``decode`` later."""
    firsts = sends + np.broadcast_to(ttft, sends.shape)
    return Stream((sends, firsts, firsts + np.broadcast_to(decode, sends.shape)))


def slotted(sends: np.ndarray, slots: int, service_s: float, ttft_s: float = 0.05) -> Stream:
    """``slots`` requests served at a time, ``service_s`` each (its first token ``ttft_s`` into it),
    the rest queued first come first served."""
    free = [0.0] * slots
    firsts, ends = np.empty_like(sends), np.empty_like(sends)
    for i, s in enumerate(sends):
        start = max(s, heapq.heappop(free))
        firsts[i], ends[i] = start + min(ttft_s, service_s), start + service_s
        heapq.heappush(free, ends[i])
    return Stream((sends, firsts, ends))


def batcher(sends: np.ndarray, outputs, step_s: float, per_seq_s: float, max_seqs: int = 256,
            prefill_s: float = 0.0) -> Stream:
    """A continuous batcher stepped as vLLM's scheduler does: each step admits waiting requests
    (first come first served, up to ``max_seqs`` running) and gives every running request one token
    (an admitted one its first); a step takes ``step_s + per_seq_s`` x the running requests
    (+ ``prefill_s`` per request admitted).  Its latency grows as the batch fills, to a bound
    within its capacity (``max_seqs / (step_s + per_seq_s x max_seqs) / tokens`` req/s)."""
    n = len(sends)
    left = np.broadcast_to(np.asarray(outputs), (n,)).astype(np.int64).copy()
    firsts, ends = np.full(n, np.nan), np.full(n, np.nan)
    running = np.zeros(0, dtype=np.int64)
    t, nxt = 0.0, 0
    while nxt < n or len(running):
        if not len(running) and nxt < n and sends[nxt] > t:
            t = float(sends[nxt])  # idle until the next arrival
        arrived = int(np.searchsorted(sends, t, side="right"))
        admit = np.arange(nxt, min(arrived, nxt + max_seqs - len(running)))
        nxt += len(admit)
        running = np.concatenate([running, admit])
        t += step_s + per_seq_s * len(running) + prefill_s * len(admit)
        firsts[admit] = t
        left[running] -= 1
        over = left[running] <= 0
        ends[running[over]] = t
        running = running[~over]
        if len(running):  # the steps until the next admission or end change nothing else: take them at once
            dt = step_s + per_seq_s * len(running)
            k = int(left[running].min()) - 1
            if len(running) < max_seqs and nxt < n:
                k = min(k, max(math.ceil((sends[nxt] - t) / dt), 0))
            t += k * dt
            left[running] -= k
    return Stream((sends, firsts, ends))


def whole(stream: Stream) -> Stream:
    """The same server sending nothing before the end (not streaming): its first token is its end."""
    sends, firsts, ends = stream
    return Stream((sends, np.where(np.isnan(firsts), np.nan, ends), ends))


def silent_from(stream: Stream, at_s: float, timeout_s: float) -> Stream:
    """The server stops answering at ``at_s``: what had no first token by then never gets one, and
    ends with none at the client's timeout (``timeout_s`` after its send, or at ``at_s`` if later);
    what was streaming stalls and ends at the timeout too, with its tokens."""
    sends, firsts, ends = stream
    cut = np.maximum(sends + timeout_s, at_s)
    late = ~(firsts <= at_s)
    firsts = np.where(late, np.nan, firsts)
    ends = np.where(late | (ends > at_s), cut, ends)
    return Stream((sends, firsts, ends))


def feed(stream: Stream, rule: SaturationRule | None = None, late=None) -> tuple[str | None, float]:
    """What the dispatcher does: check every window while it is sending; (reason, when it tripped).
    ``late``: each send's lag behind its schedule (the client's; none by default)."""
    sends, firsts, ends = stream
    late = np.zeros_like(sends) if late is None else np.asarray(late, dtype=np.float64)
    rule = rule or SaturationRule()
    mon = SaturationMonitor(rule)
    t, told = rule.window_s, 0
    while t <= sends[-1] + rule.window_s:
        sent = sends <= t
        for i in range(told, int(sent.sum())):
            mon.sent(float(sends[i]), float(late[i]))
        told = int(sent.sum())
        served = sent & (firsts <= t)
        failed = sent & np.isnan(firsts) & (ends <= t)   # ended with no token: the client's timeout, an error
        waiting = sent & ~served & ~failed
        wait = max(float(np.max(firsts[served] - sends[served], initial=0.0)),
                   float(np.max(ends[failed] - sends[failed], initial=0.0)),
                   float(np.max(t - sends[waiting], initial=0.0)))
        # a request with a chunk a tenth of a second after its first (tokens from its first to its end) by
        # now: the server streams (loadgen.saturation.streams)
        streaming = bool((sent & (firsts + 0.1 <= t) & (ends >= firsts + 0.1)).any())
        if mon.check(t, int(served.sum()), int(waiting.sum()), wait, failed=int(failed.sum()), streaming=streaming):
            return mon.reason, t
        t += rule.window_s
    return None, t


# Dynamo's mocker at an H200's pace (docs/measured/scale.md): a decode step of 4.71 ms + 0.124 ms
# per running sequence, 128-token prompts at 0.0457 ms a token, 1,000-token outputs, 256 sequences
# at most: a worker's ceiling is 256 / 36.5 ms / 1,000 = 7.0 req/s.
H200_STEP = dict(step_s=4.71e-3, per_seq_s=0.124e-3, max_seqs=256, prefill_s=128 * 0.0457e-3)


def workers(sends: np.ndarray, n: int, **server) -> Stream:
    """``n`` batchers behind a round-robin router."""
    firsts, ends = np.empty_like(sends), np.empty_like(sends)
    for w in range(n):
        _, firsts[w::n], ends[w::n] = batcher(sends[w::n], 1000, **server)
    return Stream((sends, firsts, ends))
