"""Fleet metrics: step integrals, the per-request part recomputed by hand, over-provisioning."""

import math

import numpy as np
import pytest

from metrics.fleet import needed_replicas, replica_metrics, request_metrics, slo_met, step_integral
from metrics.slo import SLO


def test_step_integral():
    # 1 replica on [0, 10), 3 on [10, 15), 2 on [15, 20]
    assert step_integral(np.array([0, 10, 15]), np.array([1, 3, 2]), 20) == pytest.approx(10 + 15 + 10)
    assert step_integral(np.array([0, 10, 15]), np.array([1, 3, 2]), 12) == pytest.approx(10 + 6)
    assert step_integral(np.array([]), np.array([]), 5) == 0.0


def test_request_metrics_by_hand():
    slo = SLO(ttft_ms=100, tpot_ms=20)
    ttft = np.array([0.05, 0.2, 0.08, 0.09])
    tpot = np.array([0.01, 0.01, 0.03, np.nan])   # the last: one output token, passes TPOT
    out = np.array([10, 10, 10, 1])
    done = np.array([True, True, True, False])     # the last did not complete: never good
    m = request_metrics(slo, done, ttft, tpot, out, window_s=2.0)
    assert m["good"] == 1 and m["slo_attainment"] == pytest.approx(1 / 4)
    assert m["goodput_rps"] == pytest.approx(0.5) and m["good_output_throughput"] == pytest.approx(5.0)
    assert m["p50_ttft_ms"] == pytest.approx(80.0)  # over the completed ones: 50, 80, 200
    # TPOT over the completed ones with one: 10, 10, 30 ms; p90 interpolates 10 + 0.8 * 20
    assert m["p50_tpot_ms"] == pytest.approx(10.0) and m["p90_tpot_ms"] == pytest.approx(26.0)
    # end to end over the completed ones, TTFT + 9 x TPOT: 140, 290, 350 ms; p90 = 290 + 0.8 * 60
    assert m["p50_e2el_ms"] == pytest.approx(290.0) and m["p90_e2el_ms"] == pytest.approx(338.0)
    assert m["slo_met"] is False


def test_slo_met_is_the_percentile_check():
    slo = SLO(ttft_ms=100, percentile=50)
    assert slo_met(slo, np.array([0.05, 0.06, 0.5]), np.array([]), np.array([]))
    assert not slo_met(SLO(ttft_ms=100, percentile=99), np.array([0.05, 0.06, 0.5]), np.array([]), np.array([]))


def test_overprovisioned_and_mean_replicas():
    # paid 2 replicas all along; the load needed 1 for [0, 10) and 2 for [10, 20]
    m = replica_metrics(np.array([0.0]), np.array([0]), np.array([2]), np.array([0]), 20.0,
                        needed_t=np.array([0.0, 10.0]), needed_n=np.array([1, 2]))
    assert m["paid_replica_seconds"] == pytest.approx(40) and m["replicas_mean"] == pytest.approx(2)
    assert m["overprovisioned_replica_seconds"] == pytest.approx(10)
    assert list(needed_replicas(np.array([0.0, 2.0, 2.1, 9.0]), 2.0)) == [1, 1, 2, 5]
    assert math.isnan(request_metrics(SLO(), np.array([], bool), [], [], [], 0.0)["goodput_rps"])


def test_the_bill_names_starting_serving_and_draining():
    # 1 serving all along (0 .. 300 s); two more starting 40 s each (10 .. 50, 20 .. 60), serving
    # 100 s each (50 .. 150, 60 .. 160), draining 5 s each (150 .. 155, 160 .. 165)
    t = np.array([0.0, 10, 20, 50, 60, 150, 155, 160, 165])
    starting = np.array([0, 1, 2, 1, 0, 0, 0, 0, 0])
    serving = np.array([1, 1, 1, 2, 3, 2, 2, 1, 1])
    draining = np.array([0, 0, 0, 0, 0, 1, 0, 1, 0])
    m = replica_metrics(t, starting, serving, draining, 300.0)
    assert m["starting_replica_seconds"] == pytest.approx(80.0)
    assert m["serving_replica_seconds"] == pytest.approx(500.0)
    assert m["draining_replica_seconds"] == pytest.approx(10.0)
    assert m["paid_replica_seconds"] == pytest.approx(590.0)
    assert m["replicas_max"] == 3 and m["replicas_mean"] == pytest.approx(590 / 300)


# ------------------------------------------------------------------- mutants of metrics/fleet.py
# (benchmarks/mutation.py, docs/measured/mutation.md): each test below kills mutants that survived
# the tests above and changed a number of the plan's or the validation's fleet metrics.
def test_every_percentile_is_its_own():
    # 101 completed requests, TTFT 0, 1, ..., 100 ms and TPOT 0, 0.1, ..., 10 ms: linear interpolation
    # puts the q-th percentile on the q-th value, so p49 or p51 in place of p50 (p89/p91, p98/p100) shows
    k = np.arange(101)
    m = request_metrics(SLO(), np.ones(101, bool), k / 1e3, k / 1e4, np.full(101, 10), window_s=10.0)
    assert (m["p50_ttft_ms"], m["p90_ttft_ms"], m["p99_ttft_ms"]) == pytest.approx((50.0, 90.0, 99.0))
    assert (m["p50_tpot_ms"], m["p99_tpot_ms"]) == pytest.approx((5.0, 9.9))
    assert (m["requests"], m["completed"], m["good"]) == (101, 101, 101)


def test_end_to_end_latency_is_ttft_plus_tpot_per_later_token():
    # e2el = ttft + tpot x max(out - 1, 0), a NaN TPOT (every token in one chunk) adding nothing:
    # A 0.1 + 0.01 x 10 = 0.2 s; B (3 tokens at once) 0.1; C (one token) 0.1; D (no token) 0.1
    ttft = np.full(4, 0.1)
    tpot = np.array([0.01, np.nan, 0.01, 0.01])
    out = np.array([11, 3, 1, 0])
    done = np.ones(4, bool)
    good = {lim: request_metrics(SLO(e2el_ms=lim), done, ttft, tpot, out, 10.0)["good"]
            for lim in (200.5, 199.5, 100.5, 99.5)}
    assert good == {200.5: 4, 199.5: 3, 100.5: 3, 99.5: 0}
    # the run-level percentile check sees the same e2el: its p50 is 0.1 s, its p100 0.2 s
    assert request_metrics(SLO(e2el_ms=100.5, percentile=50), done, ttft, tpot, out, 10.0)["slo_met"] is True
    assert request_metrics(SLO(e2el_ms=199.5, percentile=100), done, ttft, tpot, out, 10.0)["slo_met"] is False


def test_rates_over_a_short_and_an_empty_window():
    # one good request of 10 tokens: over half a second 2 req/s and 20 tok/s; over no window, no rate
    half = request_metrics(SLO(), np.array([True]), [0.1], [0.01], [10], window_s=0.5)
    assert half["goodput_rps"] == pytest.approx(2.0) and half["good_output_throughput"] == pytest.approx(20.0)
    empty = request_metrics(SLO(), np.array([True]), [0.1], [0.01], [10], window_s=0.0)
    assert math.isnan(empty["goodput_rps"]) and math.isnan(empty["good_output_throughput"])
    r = replica_metrics(np.array([0.0]), np.array([0]), np.array([1]), np.array([0]), 0.5)
    assert r["replicas_mean"] == pytest.approx(1.0) and r["paid_replica_seconds"] == pytest.approx(0.5)
    none = replica_metrics(np.array([0.0]), np.array([0]), np.array([1]), np.array([0]), 0.0)
    assert math.isnan(none["replicas_mean"])


def test_the_most_replicas_paid_at_once_counts_the_draining_ones():
    # 1 starting + 1 serving on [0, 10); 1 serving + 2 draining on [10, 20) (the peak: 3); 1 serving after
    m = replica_metrics(np.array([0.0, 10.0, 20.0]), np.array([1, 0, 0]), np.array([1, 1, 1]),
                        np.array([0, 2, 0]), 30.0)
    assert m["replicas_max"] == 3
    assert (m["starting_replica_seconds"], m["serving_replica_seconds"], m["draining_replica_seconds"]) == \
        pytest.approx((10.0, 30.0, 20.0))
    assert m["paid_replica_seconds"] == pytest.approx(60.0) and m["replicas_mean"] == pytest.approx(2.0)
    none = replica_metrics(np.array([]), np.array([], int), np.array([], int), np.array([], int), 10.0)
    assert none["replicas_max"] == 0 and none["paid_replica_seconds"] == 0.0 and none["replicas_mean"] == 0.0


def test_overprovisioning_counts_no_shortfall_and_nothing_before_the_first_replica():
    # paid: none before 5 s, 2 from 5 s; needed 1 on [0, 10), 3 on [10, 20]: over by 1 on [5, 10)
    # only (before 5 s nothing was paid, after 10 s the fleet was short: 0, not -1)
    m = replica_metrics(np.array([5.0]), np.array([0]), np.array([2]), np.array([0]), 20.0,
                        needed_t=np.array([0.0, 10.0]), needed_n=np.array([1, 3]))
    assert m["overprovisioned_replica_seconds"] == pytest.approx(5.0)
    assert m["paid_replica_seconds"] == pytest.approx(30.0)


def test_step_integral_counts_from_the_window_start():
    # [start_s, end_s] = [5, 20] over 1 on [0, 10), 3 on [10, 15), 2 after: 5 x 1 + 5 x 3 + 5 x 2 = 30
    assert step_integral(np.array([0.0, 10.0, 15.0]), np.array([1, 3, 2]), 20.0, start_s=5.0) == pytest.approx(30.0)
    # by default the window starts at 0: a step begun at -5 s counts from 0 (10 x 2 + 10 x 3 = 50, not 52)
    assert step_integral(np.array([-5.0, 10.0]), np.array([2, 3]), 20.0) == pytest.approx(50.0)


def test_overprovisioning_reads_a_step_function_as_0_before_its_first_change():
    # paid 2 from 0 s; the needed step starts at 10 s with 1, so it is 0 before (as step_integral
    # reads a step): over by 2 on [0, 10) and by 1 on [10, 20] = 20 + 10
    m = replica_metrics(np.array([0.0]), np.array([0]), np.array([2]), np.array([0]), 20.0,
                        needed_t=np.array([10.0]), needed_n=np.array([1]))
    assert m["overprovisioned_replica_seconds"] == pytest.approx(30.0)
