"""plan.json's costs computed twice: ``protocols.plan.run.costs`` and the plain second
implementation in tests/recompute.py (the replicas paid for x their hourly lines + the window x
the extra lines; inf per good token without any), on generated windows (hypothesis), and a
simulated window's replica-seconds recounted replica by replica."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conf.schema import Autoscale
from engines.autoscale_policy import ScalingPolicy
from metrics.slo import SLO
from protocols.plan.fleet import FleetSimulation
from protocols.plan.run import costs
from tests.metrics.test_recompute_summary import same
from tests.protocols.plan.capacity_fixtures import capacity
from tests.protocols.plan.test_fleet import traffic
from tests.recompute import plan_costs_by_hand

cost_st = st.fixed_dictionaries({"model": st.just("rental"), "num_gpus": st.integers(0, 8),
                                 "hourly_per_gpu": st.sampled_from([0.0, 1.5, 2.75]), "num_hosts": st.integers(1, 2),
                                 "hourly_per_host": st.sampled_from([0.0, 0.2]),
                                 "extra_hourly": st.sampled_from([{}, {"router": 0.05}, {"net": 0.1, "disk": 0.02}])})


@settings(max_examples=80, deadline=None)
@given(st.one_of(st.none(), cost_st), st.integers(0, 10**6), st.integers(1, 10**6),
       st.one_of(st.just(0), st.integers(1, 10**9)), st.integers(0, 10**5))
def test_plan_costs_agree_with_the_plain_implementation(cost, replica_s, window_s, good, over_s):
    res = {"paid_replica_seconds": float(replica_s), "window_s": float(window_s), "output_tokens_good": float(good),
           "overprovisioned_replica_seconds": float(over_s)}
    got = costs(SimpleNamespace(cost=cost), res, ScalingPolicy(Autoscale(capacity_rps=1.0)))
    want = plan_costs_by_hand(cost, replica_s, window_s, good, over_s)
    assert {k: same(got[k], v) for k, v in want.items()} == {k: True for k in want}, (got, want)


def test_no_good_tokens_cost_infinity_per_million():
    cost = {"model": "rental", "num_gpus": 2, "hourly_per_gpu": 1.5, "num_hosts": 1, "hourly_per_host": 0.0,
            "extra_hourly": {"router": 0.5}}
    res = {"paid_replica_seconds": 7200.0, "window_s": 3600.0, "output_tokens_good": 0.0,
           "overprovisioned_replica_seconds": 1800.0}
    got = costs(SimpleNamespace(cost=cost), res, ScalingPolicy(Autoscale(capacity_rps=1.0)))
    assert got["cost_total"] == pytest.approx(2 * 3.0 + 0.5)        # two replica-hours at 3.0, one router hour
    assert got["cost_per_mtok_good"] == math.inf
    assert got["headroom_cost"] == pytest.approx(1.5)                 # half a replica-hour, router excluded


def test_a_simulated_windows_replica_seconds_recount_replica_by_replica():
    cap = capacity(blocks=(0,), cold=20.0)
    times = np.concatenate([np.arange(0, 60, 1.0), np.arange(60, 120, 1 / 6), np.arange(120, 300, 1.0)])
    pol = ScalingPolicy(Autoscale(capacity_rps=4.0, target=1.0, window_s=10, interval_s=5, scale_down_delay_s=30,
                        max_replicas=3))
    sim = FleetSimulation(traffic(times, 300), cap, pol, SLO(ttft_ms=1000, tpot_ms=100))
    res = sim.run()
    paid = sum(min(r.stopped_at if r.stopped_at is not None else 300.0, 300.0) - r.paid_from for r in sim.replicas)
    assert len(sim.replicas) >= 2 and res["paid_replica_seconds"] == pytest.approx(paid, rel=1e-12)
    good = res["output_tokens_good"]
    cost = {"model": "rental", "num_gpus": 1, "hourly_per_gpu": 2.0, "num_hosts": 1, "hourly_per_host": 0.0}
    got = costs(SimpleNamespace(cost=cost), res, pol)
    assert got["cost_per_mtok_good"] == pytest.approx(1e6 * paid / 3600 * 2.0 / good)
