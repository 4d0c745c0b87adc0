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
