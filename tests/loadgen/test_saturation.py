"""The over-saturation rule on simulated clocks, at a real model's time scales (no sleeping).

Each stream is a list of requests (send time, end time) from a simulated server; the monitor is
fed what the dispatcher would see every ``window_s`` while it is sending."""

from __future__ import annotations

import heapq

import numpy as np
import pytest

from loadgen.saturation import SaturationMonitor, SaturationRule


def poisson(rate: float, n: int, seed: int = 0) -> np.ndarray:
    return np.cumsum(np.random.default_rng(seed).exponential(1 / rate, n))


def constant(rate: float, n: int) -> np.ndarray:
    return np.arange(n) / rate


def unlimited(sends: np.ndarray, latency) -> np.ndarray:
    """No capacity limit: each request ends its own latency after it was sent."""
    return sends + np.broadcast_to(latency, sends.shape)


def slotted(sends: np.ndarray, slots: int, service_s: float) -> np.ndarray:
    """``slots`` requests served at a time, ``service_s`` each, the rest queued first come first served."""
    free = [0.0] * slots
    ends = np.empty_like(sends)
    for i, s in enumerate(sends):
        start = max(s, heapq.heappop(free))
        ends[i] = start + service_s
        heapq.heappush(free, ends[i])
    return ends


def feed(sends: np.ndarray, ends: np.ndarray, rule: SaturationRule | None = None) -> tuple[str | None, float]:
    """What the dispatcher does: check every window while it is sending; (reason, when it tripped)."""
    rule = rule or SaturationRule()
    mon = SaturationMonitor(rule)
    t, told = rule.window_s, 0
    while t <= sends[-1] + rule.window_s:
        sent = sends <= t
        for s in sends[told:int(sent.sum())]:
            mon.sent(float(s))
        told = int(sent.sum())
        done = sent & (ends <= t)
        flying = sent & ~done
        latency = max(float(np.max(ends[done] - sends[done], initial=0.0)),
                      float(np.max(t - sends[flying], initial=0.0)))
        if mon.check(t, int(done.sum()), int(flying.sum()), latency):
            return mon.reason, t
        t += rule.window_s
    return None, t


def test_a_ten_second_server_without_a_limit_is_not_saturated():
    # 200 ms to the first token, then 500 tokens at 20 ms: 10.2 s a request; Poisson 2 req/s,
    # 60 requests: 20 in flight by Little's law and nothing queues (the old rule stopped it at 8 s)
    sends = poisson(2.0, 60)
    reason, _ = feed(sends, unlimited(sends, 0.2 + 500 * 0.020))
    assert reason is None


@pytest.mark.parametrize("seed", range(20))
def test_a_continuous_batcher_with_room_is_not_saturated(seed):
    # 1,000-token outputs at 10 ms a step, 8 req/s, 400 requests: 80 in flight, all served at once
    # (the old rule stopped it after 60 of the 400)
    sends = poisson(8.0, 400, seed)
    ttft = np.random.default_rng(seed + 100).uniform(0.05, 0.3, 400)
    reason, _ = feed(sends, unlimited(sends, ttft + 1000 * 0.010))
    assert reason is None


@pytest.mark.parametrize("seed", range(20))
def test_outputs_of_500_to_2000_tokens_are_not_saturated(seed):
    # a GPU's spread of output lengths at 20 ms a token (10 to 40 s), Poisson 4 req/s
    rng = np.random.default_rng(seed)
    sends = poisson(4.0, 400, seed)
    reason, _ = feed(sends, unlimited(sends, 0.2 + rng.integers(500, 2001, 400) * 0.020))
    assert reason is None


def test_a_server_with_four_slots_past_its_capacity_is_stopped():
    # 4 slots of 1 s serve 4 req/s; 8 req/s arrive: the queue grows by 4 every second
    sends = constant(8.0, 400)
    reason, at = feed(sends, slotted(sends, 4, 1.0))
    assert reason is not None and reason.startswith("over-saturated")
    assert at == pytest.approx(30.0) and (sends <= at).sum() == 241  # of the 400 (the old rule: 8 s, 65)


def test_a_slot_limited_server_far_past_its_capacity_is_stopped_as_soon():
    # 20x the capacity (2 slots of 1 s, 40 req/s): the latencies grow almost as fast as the clock
    sends = poisson(40.0, 2000)
    reason, at = feed(sends, slotted(sends, 2, 1.0))
    assert reason is not None
    assert at == pytest.approx(10.0)


def test_a_slow_serial_engine_is_stopped_once_completions_show_it():
    # one request at a time, 30 s each (an embedded engine on a busy host), 1 req/s: nothing
    # completes for 30 s, which is no evidence; it takes 8 requests due (sent before t - L,
    # the oldest in flight's age) with next to none completed since L
    sends = constant(1.0, 400)
    reason, at = feed(sends, slotted(sends, 1, 30.0))
    assert reason is not None
    assert at == pytest.approx(246.0)


def test_a_server_with_slots_to_spare_is_not_saturated():
    sends = poisson(8.0, 400, 3)
    reason, _ = feed(sends, slotted(sends, 16, 1.0))  # 16 req/s of capacity for 8
    assert reason is None


def test_an_idle_point_is_not_saturated():
    mon = SaturationMonitor(SaturationRule())
    assert all(mon.check(t, 0, 0, 0.0) is None for t in np.arange(2.0, 60.0, 2.0))
    mon = SaturationMonitor(SaturationRule())  # one request sent at the start, then nothing
    mon.sent(0.0)
    assert all(mon.check(t, 1, 0, 0.5) is None for t in np.arange(2.0, 60.0, 2.0))


def test_a_server_near_its_capacity_whose_queue_stays_bounded_is_not_saturated():
    sends = poisson(3.6, 600, 5)
    reason, _ = feed(sends, slotted(sends, 4, 1.0))  # 90% of its 4 req/s: a queue that comes and goes
    assert reason is None
