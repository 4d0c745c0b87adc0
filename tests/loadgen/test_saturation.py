"""The over-saturation rule on simulated clocks, at a real model's time scales (no sleeping).

Each stream is a list of requests (send time, first token, end time) from a simulated server;
the monitor is fed what the dispatcher would see every ``window_s`` while it is sending."""

from __future__ import annotations

import numpy as np
import pytest

from loadgen.saturation import SaturationMonitor, SaturationRule, streams, waiting_stage
from tests.loadgen.saturation_streams import (
    H200_STEP,
    Stream,
    batcher,
    constant,
    feed,
    gamma,
    poisson,
    silent_from,
    slotted,
    unlimited,
    whole,
    workers,
)


def test_a_ten_second_server_without_a_limit_is_not_saturated():
    # 200 ms to the first token, then 500 tokens at 20 ms: 10.2 s a request; Poisson 2 req/s,
    # 60 requests: 20 in flight by Little's law and nothing queues (the old rule stopped it at 8 s)
    sends = poisson(2.0, 60)
    reason, _ = feed(unlimited(sends, 0.2, 500 * 0.020))
    assert reason is None


@pytest.mark.parametrize("seed", range(20))
def test_a_continuous_batcher_with_room_is_not_saturated(seed):
    # 1,000-token outputs at 10 ms a step, 8 req/s, 400 requests: 80 in flight, all served at once
    # (the old rule stopped it after 60 of the 400)
    sends = poisson(8.0, 400, seed)
    ttft = np.random.default_rng(seed + 100).uniform(0.05, 0.3, 400)
    reason, _ = feed(unlimited(sends, ttft, 1000 * 0.010))
    assert reason is None


@pytest.mark.parametrize("seed", range(20))
def test_outputs_of_500_to_2000_tokens_are_not_saturated(seed):
    # a GPU's spread of output lengths at 20 ms a token (10 to 40 s), Poisson 4 req/s
    rng = np.random.default_rng(seed)
    sends = poisson(4.0, 400, seed)
    reason, _ = feed(unlimited(sends, 0.2, rng.integers(500, 2001, 400) * 0.020))
    assert reason is None


def test_a_server_with_four_slots_past_its_capacity_is_stopped():
    # 4 slots of 1 s serve 4 req/s; 8 req/s arrive: the queue grows by 4 every second
    sends = constant(8.0, 400)
    reason, at = feed(slotted(sends, 4, 1.0))
    assert reason is not None and reason.startswith("over-saturated")
    assert at == pytest.approx(14.0) and (sends <= at).sum() == 113  # of 400 (the rule on whole requests: 30 s, 241)


def test_a_slot_limited_server_far_past_its_capacity_is_stopped_as_soon():
    # 20x the capacity (2 slots of 1 s, 40 req/s): the latencies grow almost as fast as the clock
    sends = poisson(40.0, 2000)
    reason, at = feed(slotted(sends, 2, 1.0))
    assert reason is not None
    assert at == pytest.approx(8.0)


def test_a_slow_serial_engine_is_stopped_once_completions_show_it():
    # one request at a time, 30 s each (an embedded engine on a busy host), 1 req/s: nothing is
    # served for 30 s, which is no evidence; it takes 8 requests due (sent before t - W, the
    # oldest waiting's age) with next to none served since W
    sends = constant(1.0, 400)
    reason, at = feed(slotted(sends, 1, 30.0))
    assert reason is not None
    assert at == pytest.approx(22.0)  # streaming, by the waiting requests' drift (216 s on the counts alone)


def test_a_server_with_slots_to_spare_is_not_saturated():
    sends = poisson(8.0, 400, 3)
    reason, _ = feed(slotted(sends, 16, 1.0))  # 16 req/s of capacity for 8
    assert reason is None


def _starved(sends: np.ndarray, from_s: float, rate: float) -> np.ndarray:
    """When a client whose loop loses ``rate`` s a second from ``from_s`` (a busy host) does what it
    meant to do at ``sends``: every send, and every read, that much late."""
    return sends + np.maximum(sends - from_s, 0.0) * rate


def test_a_client_that_falls_behind_sends_and_reads_alike_and_is_not_read_as_saturated():
    # A starved client's loop sends late and reads late alike: the rule counts what was due from the
    # times requests actually went (not their schedule) and what was served from the times it read
    # them, so both counts slide together and the wait W absorbs the rest.  A server with room
    # (10.2 s requests, no limit, 2 req/s) and a client losing 0.5 s a second from 20 s: not stopped.
    # (On the loaded host of docs/measured/scale.md the point that was stopped had its engine, the
    # mocker on the same host, behind as well: 174 requests waiting for a first token.)
    # The client knows it is behind (each send's lag behind its schedule), and the drift test, which
    # its late reads would pass (waiting +10.9 in 12 s, stopped at 46 s), is not applied while it is.
    sends = _starved(poisson(2.0, 200), 20.0, 0.5)
    _, firsts, ends = unlimited(sends, 0.2, 500 * 0.020)
    late = sends - poisson(2.0, 200)
    assert feed(Stream((sends, _starved(firsts, 20.0, 0.5), _starved(ends, 20.0, 0.5))), late=late)[0] is None
    # judged on the schedule instead (what was meant to go), the same client reads as a backlog
    meant = poisson(2.0, 200)
    assert feed(Stream((meant, _starved(firsts, 20.0, 0.5), _starved(ends, 20.0, 0.5))))[0] is not None


def test_a_client_that_falls_behind_still_stops_a_server_past_its_capacity():
    # 4 slots of 1 s at 8 req/s, the client losing 0.25 s a second from 5 s: it still sends 6.4 req/s
    # on average, past the 4 the server serves, and the point is stopped
    sends = _starved(constant(8.0, 400), 5.0, 0.25)
    _, firsts, ends = slotted(sends, 4, 1.0)
    reason, _ = feed(Stream((sends, _starved(firsts, 5.0, 0.25), _starved(ends, 5.0, 0.25))))
    assert reason is not None and reason.startswith("over-saturated")


def test_an_idle_point_is_not_saturated():
    mon = SaturationMonitor(SaturationRule())
    assert all(mon.check(t, 0, 0, 0.0) is None for t in np.arange(2.0, 60.0, 2.0))
    mon = SaturationMonitor(SaturationRule())  # one request sent at the start, then nothing
    mon.sent(0.0)
    assert all(mon.check(t, 1, 0, 0.5) is None for t in np.arange(2.0, 60.0, 2.0))


def test_a_server_near_its_capacity_whose_queue_stays_bounded_is_not_saturated():
    sends = poisson(3.6, 600, 5)
    reason, _ = feed(slotted(sends, 4, 1.0))  # 90% of its 4 req/s: a queue that comes and goes
    assert reason is None


def test_a_continuous_batcher_filling_up_within_its_capacity_is_not_saturated():
    # 4 workers at 26 req/s (6.5 each, 93 % of the ceiling), 1,300 requests: each request's latency
    # grows from 7 s to 20-23 s while the batch fills to ~160, a bound.  The rule judged on whole
    # requests stopped this on the real mocker at 355 of 479 sent (docs/measured/scale.md, p3).
    ended = 0
    for seed in range(10):
        sends = poisson(26.0, 1300, seed)
        stream = workers(sends, 4, **H200_STEP)
        latency = stream[2] - sends
        assert latency[0] < 9.0 and latency.max() > 19.0  # the fill-up it must not read as a backlog
        assert feed(stream)[0] is None
        # judged on whole requests (first token = end): the early requests end faster than the late ones,
        # and the count falls short with nothing queued; the rule stopped every seed, 7 once it asked
        # that the ends not be rising (a batch filling up serves more each window), and 1 now that a
        # shortfall with nothing streaming must last the longest wait seen
        ended += feed(Stream((sends, stream[2], stream[2])))[0] is not None
    assert ended == 1


def test_a_continuous_batcher_past_its_ceiling_is_stopped_once_its_batch_is_full():
    # 4 workers at 40 req/s: 10 each against a ceiling of 7.0.  Up to 256 sequences the batch takes
    # every request (their latency grows with it: the point's latencies show that); then requests
    # queue (from 34 s), and the rule stops the point 8 s later (by the waiting requests' drift, as soon as
    # the counts).
    sends = poisson(40.0, 6000, 1)
    stream = workers(sends, 4, **H200_STEP)
    reason, at = feed(stream)
    assert reason is not None and reason.startswith("over-saturated")
    assert at == pytest.approx(42.0) and (sends <= at).sum() == 1670
    queued = stream[1] - sends > 1.0
    assert sends[queued][0] == pytest.approx(34.0, abs=1.0)  # the first that waited a second for its first token
    # the first tokens alone decide the counts; ending at their first token, nothing streams, no drift test
    assert feed(Stream(stream[:2] + (stream[1],)))[1] == pytest.approx(42.0)


def test_a_continuous_batcher_held_to_few_sequences_is_stopped():
    # 16 sequences at most (a small KV cache): 16 / 6.7 ms / 1,000 = 2.4 req/s a worker, offered 4
    sends = poisson(4.0, 800, 2)
    reason, at = feed(batcher(sends, 1000, 4.71e-3, 0.124e-3, max_seqs=16))
    assert reason is not None
    assert at == pytest.approx(22.0)  # by the waiting requests' drift (42 s on the counts alone)


def test_the_monitor_is_fed_the_wait_for_a_first_token_not_the_whole_request():
    # three in flight: two streaming (first tokens 0.2 s and 0.5 s after their sends), one waiting
    # since 3 s ago; 10 ended, the longest of their waits 1.5 s.  Long outputs do not count.
    s = 1_000_000_000
    flying = [(int(100.2 * s), 100 * s), (int(90.5 * s), 90 * s), (None, 97 * s)]
    assert waiting_stage(flying, 10, int(1.5 * s), 100 * s) == (12, 1, pytest.approx(3.0))
    assert waiting_stage([], 0, 0, 100 * s) == (0, 0, 0.0)
    assert waiting_stage(flying[:2], 4, 0, 100 * s) == (6, 0, pytest.approx(0.5))


def test_a_latency_that_rises_then_levels_judged_on_whole_requests_is_not_stopped():
    # a server that answers nothing before the end, whose latency ramps from 5 s to 24 s over its first
    # 10 s of sends (Poisson 2 req/s) and then levels: a fill-up, not a queue.  Judged on whole requests
    # it reads as a queue until it levels, and was stopped in 15 of seeds 0 .. 19 (at 20-36 s); nothing
    # streaming, the shortfall must now last the longest wait seen (24 s): stopped in none
    stopped = 0
    for seed in range(20):
        sends = poisson(2.0, 400, seed)
        latency = 5 + 19 * np.minimum(sends / 10, 1)
        stopped += feed(Stream((sends, sends + latency, sends + latency)))[0] is not None
    assert stopped == 0
    # streamed (its first tokens ramping so, a chunk after each), its first tokens' wait grows for real:
    # stopped at 20 s, as it was whole before
    sends = poisson(2.0, 400)
    latency = 5 + 19 * np.minimum(sends / 10, 1)
    assert feed(Stream((sends, sends + latency, sends + latency + 0.1)))[1] == 20.0


@pytest.mark.parametrize("seed", range(5))
def test_a_server_that_never_answers_is_stopped_once_the_clients_timeouts_end_its_requests(seed):
    # 10-s requests at Poisson 2 req/s to a server that answers nothing; the client gives up after 30 s.
    # A request ended with no token is not served: from 30 s the timeouts are what was due, and the
    # point is stopped at 38-40 s (counted as served, the timeouts kept pace and the point ran to its end)
    sends = poisson(2.0, 400, seed)
    stream = silent_from(unlimited(sends, 0.2, 9.8), 0.0, 30.0)
    for judged in (stream, whole(stream)):
        reason, at = feed(judged)
        assert reason is not None and "ended with none" in reason
        assert 38.0 <= at <= 40.0


def test_a_server_that_stops_answering_is_stopped_within_its_timeout_and_a_few_checks():
    # the same server falls silent halfway (at 113.3 s, seed 0), the client's timeout 5 s: streaming,
    # stopped 8.7 s after (the first tokens stop); not streaming, 16.7 s after (the ends of those in
    # service stop too, and their timeouts count against it).  The rule before stopped neither.
    sends = poisson(2.0, 400)
    silent = float(sends[200])
    stream = silent_from(unlimited(sends, 0.2, 9.8), silent, 5.0)
    assert feed(stream)[1] - silent == pytest.approx(8.73, abs=0.01)
    assert feed(whole(stream))[1] - silent == pytest.approx(16.73, abs=0.01)


def test_the_monitor_counts_an_end_with_no_token_as_not_served():
    # 4 req/s from 0 s, nothing answered: each request ends at its 5-s timeout with no token
    rule = SaturationRule()
    mon = SaturationMonitor(rule)
    for i in range(400):
        mon.sent(i / 4)
    stops = [t for t in np.arange(2.0, 40.0, 2.0)
             if mon.check(t, 0, min(20, int(t * 4)), min(t, 5.0), failed=max(int((t - 5) * 4), 0))]
    assert stops[0] == 12.0  # W = 5 s from 6 s: 4 due at 6 s, 8 at 8 s, three checks running
    # fed as served (the rule before), the same timeouts keep pace
    mon = SaturationMonitor(rule)
    for i in range(400):
        mon.sent(i / 4)
    assert not any(mon.check(t, max(int((t - 5) * 4), 0), min(20, int(t * 4)), min(t, 5.0))
                   for t in np.arange(2.0, 40.0, 2.0))


def test_the_sends_dispersion_is_measured_from_the_sends():
    # the variance over the mean of the sends' counts in 6-s windows: 1 for Poisson (at least), about
    # 4.5 for gamma gaps of CV 2 at 2 req/s (their counts vary 4 times Poisson's over long windows)
    for sends, lo, hi in ((poisson(2.0, 600, 3), 1.0, 1.3), (gamma(2.0, 600, 2.0, 3), 2.0, 6.0),
                          (constant(2.0, 600), 1.0, 1.0)):
        mon = SaturationMonitor(SaturationRule())
        for s in sends:
            mon.sent(float(s))
        assert lo <= mon.dispersion(290.0) <= hi
    mon = SaturationMonitor(SaturationRule())
    mon.sent(0.0)
    assert mon.dispersion(29.0) == 1.0  # fewer than 5 windows: Poisson's


@pytest.mark.slow
def test_bursty_arrivals_within_capacity_are_judged_against_their_own_burstiness():
    # 25 slots x 10 s at 2 req/s (80 %), gamma gaps of CV 2 (a trace's burstiness), 600 requests, seeds
    # 0 .. 59: the sends the rule compares vary about four times more than Poisson's; the rule before
    # stopped 4 (streaming) and 3 (whole); with the margin scaled by the sends' dispersion, 2 and 0
    # (the 2 are bursts that queue for real, more than 25 requests at once, and read as a backlog)
    stops = {True: 0, False: 0}
    for seed in range(60):
        stream = slotted(gamma(2.0, 600, 2.0, seed), 25, 10.0)
        stops[True] += feed(stream)[0] is not None
        stops[False] += feed(whole(stream))[0] is not None
    assert stops == {True: 2, False: 0}


def test_a_streaming_queue_that_doubles_the_capacity_is_stopped_by_its_drift_within_a_service_time():
    # 16 slots x 10 s at Poisson 3.2 req/s (+100 %), seed 0: the queue forms at 6.8 s and its waiting
    # count grows 1.6 a second, but the slots' ends come in lumps of 16 every 10 s and the count test
    # (served against due) kept losing its streak: stopped at 42 s, 35 s after the queue formed.  The
    # waiting requests' drift over the last 18 s (a least-squares slope x 18 s, 21.3 against a margin
    # of 3 x sqrt(50) = 21.2 at 18 s) stops it at 22 s, 15 s after
    sends = poisson(3.2, 400)
    stream = slotted(sends, 16, 10.0)
    reason, at = feed(stream)
    assert at == 22.0 and "waiting for a first token rose" in reason
    assert "at 18 s: +21.3 over the last 18 s (margin 21.2 of 50 sent), 18 waiting" in reason
    # the same server judged on whole requests shows no first token before the end: no drift test
    assert feed(whole(stream))[0] is not None and "waiting for a first token rose" not in feed(whole(stream))[0]


def test_a_server_streams_when_a_request_in_flight_had_a_chunk_a_tenth_of_a_second_after_its_first():
    s = 1_000_000_000
    assert streams([(None, None), (97 * s, 98 * s)])       # first token at 97 s, a chunk since
    assert not streams([(None, None), (97 * s, 97 * s)])   # (a whole response comes at once,
    assert not streams([(97 * s, 97 * s + 5_000_000)])     # its pieces read milliseconds apart)
    assert streams([(97 * s, int(97.1 * s))])
    assert not streams([])


@pytest.mark.xfail(strict=True, reason="outside its bound (docs/measured/guards.md): a burst past the slots is a real "
                   "queue for a while; the margins tried (the checks' dispersion, no window cut under the span) "
                   "cost the bursty overloads' stops in three service times (+100 %: 68 % -> 28-43 %)")
def test_a_burst_past_the_slots_of_a_server_with_room_is_not_stopped():
    # 25 slots x 10 s at 2 req/s (80 %), gamma gaps of CV 2 (a trace's bursts), 400 requests, streaming
    # (benchmarks/guards.py): seed 25 sent 25 in 3.6 s at the start, none served for 3.6 s while the slots
    # were full, judged on windows cut to 3.6 s before any dispersion was measured; seed 51's burst at 22 s,
    # with the span's dispersion five spans away: both stopped, at 10 s and 26 s
    from tests.loadgen.saturation_streams import gamma, slotted
    for seed in (25, 51):
        reason, _ = feed(slotted(gamma(2.0, 400, 2.0, seed), 25, 10.0, 0.05), SaturationRule())
        assert reason is None, (seed, reason)
