"""Whether a run was still filling up (metrics.filling): the mean in flight over its arrivals'
second and last quarters, and the margin the rise must pass, on the in-flight shapes of two real
emulated-H200 runs (issue 33), on issue 31's server without a capacity limit, and on the edge cases
(no window, requests with no end)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from metrics.filling import (
    backlog_growing,
    backlog_note,
    filling_note,
    quarter_in_flight,
    still_filling,
    wait_rise,
)
from metrics.slo import SLO
from metrics.summary import summarize
from tests.loadgen.saturation_streams import batcher, feed, poisson, slotted, whole
from tests.telemetry_fixtures import S, request_table

LONG_AFTER = 1000.0     # an end after every window here: the request is in flight to its end


def summary(rows, fixed_rate: bool = True) -> dict:
    return summarize(request_table(rows), SLO(), 0, 2000 * S, fixed_rate=fixed_rate)


def stepped(instants: list[float], counts: list[int]) -> list[dict]:
    """Requests whose number in flight is ``counts[k]`` from ``instants[k]`` to the next instant:
    a rise sends the difference then, a fall ends that many of those in flight then (the earliest
    sent first); one more request is sent at the last instant (its end balanced by one more ended),
    so the arrivals span every instant."""
    rows, open_ = [], []
    prev = 0
    for k, (t, c) in enumerate(zip(instants, counts)):
        last = k == len(instants) - 1
        ends = max(prev - c, 0) + (1 if last and c <= prev else 0)
        for _ in range(ends):
            rows[open_.pop(0)]["done"] = t
        for _ in range(max(c - prev + ends, 0)):
            open_.append(len(rows))
            rows.append({"sent": t, "done": LONG_AFTER})
        prev = c
    return rows


def in_flight_at(rows: list[dict], t: float) -> int:
    return sum(r["sent"] <= t < r["done"] for r in rows)


# In flight at 9 evenly spaced instants from the first send to the last (results/v33s/sweep_slo):
# 400 requests, Poisson 16 req/s on 2 emulated H200 workers (capacity about 13.6 req/s at the SLO),
# arrivals over 28 s; and the same at 4 req/s over 112 s.
RISING_16 = [1, 50, 96, 141, 173, 200, 217, 261, 274]
FLAT_4 = [1, 26, 16, 24, 25, 17, 24, 31, 18]


def test_the_shape_of_a_fill_up_at_16_req_s_is_still_filling():
    instants = [3.5 * k for k in range(9)]           # 0 .. 28 s
    rows = stepped(instants, RISING_16)
    assert [in_flight_at(rows, t) for t in instants] == RISING_16
    s = summary(rows)
    # window [0, 28] s: second quarter [7, 14]: 96 for 3.5 s, 141 for 3.5 s, mean 118.5;
    # last [21, 28]: 217 then 261, mean 239 (the 13 sent at 28 s add nothing)
    assert s["in_flight_second_quarter"] == 118.5 and s["in_flight_last_quarter"] == 239.0
    # rise 120.5 > max(3 x sqrt(357.5) = 56.7, 11.85)
    assert s["still_filling"] is True
    # the same rise in a trace's replay (not a fixed rate): the trace's own, not judged
    s = summary(rows, fixed_rate=False)
    assert s["in_flight_last_quarter"] == 239.0 and s["still_filling"] is False


def test_the_shape_of_a_steady_run_at_4_req_s_is_not():
    instants = [14.0 * k for k in range(9)]          # 0 .. 112 s
    rows = stepped(instants, FLAT_4)
    assert [in_flight_at(rows, t) for t in instants] == FLAT_4
    s = summary(rows)
    # second quarter [28, 56]: 16 then 24, mean 20; last [84, 112]: 24 then 31, mean 27.5
    assert s["in_flight_second_quarter"] == 20.0 and s["in_flight_last_quarter"] == 27.5
    # rise 7.5 < max(3 x sqrt(47.5) = 20.7, 2.0)
    assert s["still_filling"] is False


def test_a_server_without_a_capacity_limit_is_not_filling_after_its_first_requests_end():
    # Issue 31's server: every request 10.2 s, no limit; 60 requests at 2 req/s, evenly spaced
    # (0, 0.5, .. 29.5 s).  Window 29.5 s, quarters of 7.375 s.
    rows = [{"sent": 0.5 * i, "done": 0.5 * i + 10.2} for i in range(60)]
    s = summary(rows)
    # second quarter [7.375, 14.75]: sent at 0 .. 4.5 s in flight s + 10.2 - 7.375 each (sum
    # 22.5 + 28.25 = 50.75), at 5 .. 7 s the whole 7.375 (x 5 = 36.875), at 7.5 .. 14.5 s
    # 14.75 - s each (15 x 14.75 - 165 = 56.25): 143.875 / 7.375
    assert s["in_flight_second_quarter"] == pytest.approx(143.875 / 7.375, rel=1e-12)   # 19.51
    # last [22.125, 29.5]: sent at 12 .. 19 s s - 11.925 each (232.5 - 178.875 = 53.625), at
    # 19.5 .. 22 s the whole (x 6 = 44.25), at 22.5 .. 29.5 s 29.5 - s (442.5 - 390 = 52.5)
    assert s["in_flight_last_quarter"] == pytest.approx(150.375 / 7.375, rel=1e-12)     # 20.39
    # rise 0.88 < 3 x sqrt(39.9) = 18.9
    assert s["still_filling"] is False


def test_issue_31s_server_under_poisson_arrivals_is_not_flagged():
    # the same server at Poisson 2 req/s (60 requests, seeds 0 .. 199): the rise's noise is about
    # the square root of the two quarters' counts, and three of it flag 4 of seeds 0 .. 2,999
    # (308, 1,587, 2,747 and 2,797; a margin of 3 x sqrt(second) alone would flag 94)
    flagged = []
    for seed in range(200):
        sent = np.cumsum(np.random.default_rng(seed).exponential(0.5, 60)) * S
        if still_filling(*quarter_in_flight(sent, sent + 10.2 * S)):
            flagged.append(seed)
    assert flagged == []


def test_the_margin_is_three_noises_of_the_two_counts_or_a_tenth_of_a_large_one():
    # 35 + 65 = 100 in flight: margin 3 x 10 = 30; a rise of 30 is not above it, 32 is
    assert still_filling(35.0, 65.0) is False
    assert still_filling(34.0, 66.0) is True
    # 10,000 then 11,000: 3 x sqrt(21,000) = 435 < 1,000 = a tenth of 10,000, the margin
    assert still_filling(10_000.0, 11_000.0) is False
    assert still_filling(10_000.0, 11_001.0) is True
    # below 9 in flight the margin exceeds any rise: from 0 to 9 is within 3 x 3, to 10 is not
    assert still_filling(0.0, 9.0) is False
    assert still_filling(0.0, 10.0) is True
    assert still_filling(math.nan, 50.0) is False and still_filling(0.0, math.nan) is False


def test_no_window_no_means_and_not_filling():
    for rows in ([], [{"sent": 1.0}], [{"sent": 1.0}, {"sent": 1.0}]):
        s = summary(rows)
        assert math.isnan(s["in_flight_second_quarter"]) and math.isnan(s["in_flight_last_quarter"])
        assert s["still_filling"] is False
    assert quarter_in_flight([], []) == pytest.approx((math.nan, math.nan), nan_ok=True)


def test_a_request_with_no_end_counts_nowhere_but_its_send_bounds_the_window():
    # sent at 0 and 4 s (ended at 10 s), and at 2 s with no end; never sent: no send, no end
    rows = [{"sent": 0.0, "done": 10.0}, {"sent": 4.0, "done": 10.0},
            {"sent": 2.0, "status": "timeout", "done_ns": None},
            {"sent": 9.0, "status": "cancelled", "sent_ns": None, "done_ns": None}]
    s = summary(rows)
    # window [0, 4]: second quarter [1, 2] and last [3, 4] hold only the one sent at 0
    assert s["in_flight_second_quarter"] == 1.0 and s["in_flight_last_quarter"] == 1.0
    # the failed request with an end counts like any other: ended at 3.5 s, half of the last quarter
    rows[2]["done"] = 3.5
    del rows[2]["done_ns"]
    s = summary(rows)
    # second [1, 2]: 1 + the one sent at 2 s for 0 s; last [3, 4]: 1 + 0.5
    assert s["in_flight_second_quarter"] == 1.0 and s["in_flight_last_quarter"] == 1.5


def test_the_note_says_the_rise_and_what_to_do():
    assert filling_note(118.5, 239.0) == (
        "still filling: in flight rose from 118 to 239 over the arrivals' second and last quarters; its "
        "latencies are a fill-up's or a growing backlog's (a lower bound either way): give it more requests "
        "or a longer duration to tell which")


def test_a_backlog_missed_by_the_rule_and_by_still_filling_is_flagged_growing():
    # the issue's 25 % overload: 16 slots x 10 s at Poisson 2 req/s, 400 requests, seed 3: neither stopped
    # by the saturation rule nor still filling (in flight near its 16 slots' worth plus a queue that grows
    # slowly), its p99 latency a queue's.  Its first tokens' wait rises 18.7 s over the arrivals' second
    # half (10 spans' mean waits fitted), past max(3 standard errors, the p10 latency 13.1 s): growing
    sends = poisson(2.0, 400, 3)
    sent, firsts, ends = slotted(sends, 16, 10.0)
    assert feed((sent, firsts, ends))[0] is None
    assert not still_filling(*quarter_in_flight(sent * S, ends * S))
    rise, bound = wait_rise(sent * S, firsts - sent, ends * S)
    assert rise == pytest.approx(18.70, abs=0.01) and bound == pytest.approx(13.10, abs=0.01)
    assert backlog_growing(rise, bound)
    assert backlog_note(rise, bound).startswith("backlog growing: the wait for a first token rose by 18.7 s")


@pytest.mark.parametrize("seed", range(5))
def test_a_server_with_room_and_a_fill_up_are_not_a_backlog(seed):
    # 25 slots x 10 s at 2 req/s (80 %) and the batcher whose latency rises from 5 s to 24 s and levels,
    # judged whole (its end its first token): flat waits over the second half
    sends = poisson(2.0, 400, seed)
    for stream in (slotted(sends, 25, 10.0), whole(batcher(sends, 1000, 5e-3, 0.4e-3, max_seqs=100_000))):
        sent, firsts, ends = stream
        assert not backlog_growing(*wait_rise(sent * S, firsts - sent, ends * S))


def test_the_backlog_is_in_the_summary_beside_still_filling():
    # 100 requests sent 1 s apart whose first token waits 0.5 s + 0.2 s per second sent (a queue growing),
    # then 10 s of output: second half 49.5 .. 99 s, the wait rises 0.2 x 49.5 = 9.9 s, past the p10 latency
    rows = [{"sent": float(i), "ttft": 0.5 + 0.2 * i, "done": i + 0.5 + 0.2 * i + 10.0} for i in range(100)]
    s = summary(rows)
    assert s["backlog_wait_rise_s"] == pytest.approx(9.9, abs=0.05)
    assert s["backlog_wait_bound_s"] == pytest.approx(12.48, abs=0.05)   # p10 of 10.5 .. 30.3 s
    assert s["backlog_growing"] is False
    rows = [{"sent": float(i), "ttft": 0.5 + 0.4 * i, "done": i + 0.5 + 0.4 * i + 10.0} for i in range(100)]
    s = summary(rows)
    assert s["backlog_wait_rise_s"] == pytest.approx(19.8, abs=0.05) and s["backlog_growing"] is True
    assert summary(rows, fixed_rate=False)["backlog_growing"] is False   # a trace's replay: its own rate
    flat = summary([{"sent": float(i), "ttft": 0.5, "done": i + 10.5} for i in range(100)])
    assert flat["backlog_wait_rise_s"] == pytest.approx(0.0, abs=1e-9) and flat["backlog_growing"] is False


def test_a_batchers_wandering_latency_within_capacity_is_no_backlog():
    # benchmarks/guards.py's batcher (5 s rising to 24 s, 2 req/s, 80 % of its ceiling), judged whole: at 80 %
    # its latency wanders over minutes, and the block means of the second half are correlated: with 8 degrees
    # of freedom three standard errors flagged these seeds as a backlog (gamma CV 2, 2,000 requests: seed 16
    # rose 32.2 s against 28.5 s; Poisson 2,000: seed 10, 20.3 against 19.1; gamma 400: seed 27, 20.6 against 17.1)
    from benchmarks.guards import arrivals, cases
    server = next(c for c in cases() if c.name.startswith("batcher,"))
    for arrival, n, seed in (("gamma", 2000, 16), ("gamma", 2000, 24), ("gamma", 2000, 36), ("poisson", 2000, 10),
                             ("gamma", 400, 27)):
        sent, _, end = whole(server.server(arrivals(arrival, 2.0, n, seed)))
        rise, bound = wait_rise(sent * 1e9, end - sent, end * 1e9)
        assert not backlog_growing(rise, bound), (arrival, n, seed, rise, bound)
