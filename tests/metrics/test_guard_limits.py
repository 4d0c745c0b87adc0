"""Where the guards cannot hold their bounds (metrics/guard_limits.py), on the numbers of the guards'
matrix (benchmarks/guards.py, docs/measured/guards.md)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from benchmarks.guards import arrivals, cases
from loadgen import saturation
from metrics.guard_limits import (
    DRIFT_SPAN_S,
    DRIFT_Z,
    SPAN_S,
    guard_limit,
    latency_rise_s,
    run_guard_limit,
    send_dispersion,
    smallest_caught_by_the_end,
    smallest_stopped_in_three_service_times,
)
from tests.loadgen.saturation_streams import constant, whole

CASES = {c.name: c for c in cases()}


def _stream(name, arrival, n, seed, streaming=True):
    c = CASES[name]
    s = c.server(arrivals(arrival, c.rate, n, seed))
    return s if streaming else whole(s)


def test_the_formula_reads_the_rules_own_constants():
    rule = saturation.SaturationRule()
    assert SPAN_S == rule.windows * rule.window_s
    assert DRIFT_SPAN_S == saturation.DRIFT_SPANS * SPAN_S
    assert DRIFT_Z == saturation.DRIFT_Z


def test_the_smallest_overload_caught_by_the_end():
    # 16 slots x 10 s at +25 %, 2 req/s: 400 requests send for 199.5 s, the wait rises r x 99.75 s
    # against 2 service times: r = 0.2005, +25.1 % (the table: 54-58 of 60 caught, the bound's edge)
    assert smallest_caught_by_the_end(400, 2.0, 10.0, 1.0) == pytest.approx(0.2005 / 0.7995, rel=1e-3)
    # 2,000 requests: r = 20 / 499.75, +4.2 %; bursty sends (D = 4) double the rise it needs
    assert smallest_caught_by_the_end(2000, 2.0, 10.0, 1.0) == pytest.approx(0.04170, rel=1e-3)
    assert smallest_caught_by_the_end(2000, 2.0, 10.0, 4.0) == pytest.approx(0.08700, rel=1e-3)
    # 60 requests send for 29.5 s: no overload's wait rises 2 service times over 14.75 s
    assert math.isinf(smallest_caught_by_the_end(60, 2.0, 10.0, 1.0))


def test_the_smallest_overload_stopped_in_three_service_times():
    # at 2 req/s the drift's margin over 18 s is 3 x sqrt(36) = 18 requests: r = 1/2, +100 %
    assert smallest_stopped_in_three_service_times(2.0, 10.0, 1.0, True) == pytest.approx(1.0)
    # at 3.2 req/s (+100 % of 16 slots x 10 s): r = 3 / sqrt(57.6) = 0.395, +65 % (the table: 98 % stopped)
    assert smallest_stopped_in_three_service_times(3.2, 10.0, 1.0, True) == pytest.approx(0.6537, rel=1e-3)
    # judged whole, or three service times shorter than the drift's span: none
    assert math.isinf(smallest_stopped_in_three_service_times(3.2, 10.0, 1.0, False))
    assert math.isinf(smallest_stopped_in_three_service_times(3.2, 5.0, 1.0, True))


def test_send_dispersion_poisson_reads_one_and_bursty_sends_theirs():
    assert send_dispersion(arrivals("poisson", 2.0, 2000, 0)) == 1.0
    assert send_dispersion(arrivals("gamma", 2.0, 2000, 0)) == pytest.approx(3.871, rel=1e-3)
    assert send_dispersion(constant(2.0, 2000)) == 1.0  # under Poisson's: as the rule reads it
    assert math.isnan(send_dispersion(constant(2.0, 50)))  # 25 s: under five spans


def test_a_long_run_within_its_bounds_has_no_limit():
    assert guard_limit(2000, 2.0, 10.0, 1.0, True) is None
    assert run_guard_limit(*_stream("no limit, 10 s requests, 2 req/s", "poisson", 2000, 0)) is None
    assert run_guard_limit(*_stream("4 H200 batchers, 26 req/s (93 %)", "poisson", 2000, 2)) is None


def test_a_25_percent_overload_at_400_requests_is_at_the_edge():
    # seed 3 of the issue: 1.84 req/s sent, service (p10) 13.1 s: +32 % needed by the end, +109 % in 3 service times
    line = run_guard_limit(*_stream("16 slots x 10 s, +25%", "poisson", 400, 3))
    assert line.startswith("an overload under +32% may go uncaught (400 requests at 1.84 req/s, service 13.1 s")
    assert "none under +109% is stopped within 3 service times" in line
    assert guard_limit(60, 2.0, 10.0, 1.0, True).startswith("any overload may go uncaught (60 requests")


def test_bursty_sends_at_a_slot_limited_server():
    line = run_guard_limit(*_stream("25 slots x 10 s, 2 req/s (80 %)", "gamma", 2000, 0))
    assert line.startswith("the sends are bursty (dispersion 3.9 in 6-s spans")
    assert "1-3 of 60 runs stopped or flagged" in line


def test_a_fill_up_longer_than_its_first_latency_judged_whole():
    # the 4 H200 batchers at 93 %, whole, 2,000 requests, seed 2 (stopped at 24 s by the rule): the latency
    # rose from 10.1 s (the first hundred's median) over 17.5 s of sends
    s = _stream("4 H200 batchers, 26 req/s (93 %)", "poisson", 2000, 2, streaming=False)
    rise, first = latency_rise_s(s[0], s[2] - s[0])
    assert (rise, first) == pytest.approx((17.49, 10.06), abs=0.01)
    assert "nothing streams and the latency rose from 10.1 s over 17.5 s of sends" in run_guard_limit(*s)
    # a server with no limit: flat, no rise
    flat = _stream("no limit, 10 s requests, 2 req/s", "poisson", 2000, 0, streaming=False)
    assert latency_rise_s(flat[0], flat[2] - flat[0]) == (0.0, pytest.approx(10.0))
    assert run_guard_limit(*flat) is None


def test_nothing_to_judge():
    assert run_guard_limit(np.array([1.0]), np.array([1.1]), np.array([2.0])) is None
    assert run_guard_limit(np.array([1.0, 2.0]), np.array([np.nan] * 2), np.array([np.nan] * 2)) is None
    assert guard_limit(400, 0.0, 10.0, 1.0, True) is None
