"""The fleet simulation: service from the operating points, queueing past the slots, the
policy's scale-up after its cold start and drain-then-stop on the way down, replica-seconds
that add up, and extrapolation flagged."""

import numpy as np
import pytest

from conf.schema import Autoscale
from engines.autoscale_policy import ScalingPolicy
from metrics.slo import SLO
from protocols.plan.capacity import ConfigCapacity
from protocols.plan.fleet import FleetSimulation, ReplicaModel
from protocols.plan.traffic import Traffic
from tests.protocols.plan.capacity_fixtures import capacity, point

SLO_1S = SLO(ttft_ms=1000, tpot_ms=100)


def policy(**settings) -> ScalingPolicy:
    return ScalingPolicy(Autoscale(**settings))


def traffic(times, duration=None, prompt=100, out=11) -> Traffic:
    t = np.asarray(times, dtype=float)
    return Traffic(t, np.full(t.size, prompt), np.full(t.size, out), float(duration or t.max() + 1), "test")


def test_a_lone_request_is_served_as_the_lightest_point_says():
    cap = capacity(blocks=(0,))
    res = FleetSimulation(traffic([1.0], 10), cap, policy(capacity_rps=4.0, max_replicas=1), SLO_1S).run()
    assert res["p50_ttft_ms"] == pytest.approx(100.0)
    assert res["slo_attainment"] == 1.0 and res["outside_measurements_share"] == 0.0
    # one replica paid for the whole window, idle but for the request's 0.1 + 10 x 0.01 s
    assert res["paid_replica_seconds"] == pytest.approx(10.0)
    assert res["idle_replica_seconds"] == pytest.approx(10.0 - 0.2)


def test_past_the_measured_batch_the_replica_is_saturated():
    # one measured point: 0.5 in flight on average, TTFT 1 s, nothing to decode
    cap = ConfigCapacity("c", "measured", "test", {1: [point(1.0, 0.5, 1.0, 0.0)]}, cold_start_s=[5.0])
    model = ReplicaModel(cap.points[1])
    assert model.slowdown(1) == (1.0, 1.0)
    assert model.slowdown(3) == pytest.approx((2.0, 2.0))       # 3 in flight past 1.5 measured: 3 / 1.5
    # three at once share the replica: each at half speed, all first tokens at 2 s (1.5 req/s, the
    # measured point's throughput 1.5 in flight / 1 s)
    res = FleetSimulation(traffic([0.0, 0.0, 0.0], 10), cap, policy(capacity_rps=1.0, max_replicas=1),
                          SLO(ttft_ms=1500)).run()
    assert res["p50_ttft_ms"] == pytest.approx(2000.0)
    assert res["slo_attainment"] == 0.0
    assert res["outside_measurements_share"] == pytest.approx(2 / 3)   # 2 and 3 in flight: never measured


def test_a_measured_point_is_reproduced_on_average():
    """Poisson arrivals at a point's rate give about its mean latencies (the model's construction)."""
    cap = capacity(blocks=(0,))
    rng = np.random.default_rng(5)
    times = np.cumsum(rng.exponential(1 / 4.0, 4000))        # the 4 req/s point: 1.6 in flight, TTFT 0.2 s
    res = FleetSimulation(traffic(times, float(times[-1])), cap, policy(capacity_rps=8.0, max_replicas=1),
                          SLO_1S).run()
    assert res["p50_ttft_ms"] == pytest.approx(200.0, rel=0.3)


def test_scale_up_serves_after_the_cold_start_and_scale_down_drains():
    cap = capacity(blocks=(0,), cold=20.0)
    # 1 req/s for 60 s, then 6 req/s for 60 s, then 1 req/s for 180 s
    times = np.concatenate([np.arange(0, 60, 1.0), np.arange(60, 120, 1 / 6), np.arange(120, 300, 1.0)])
    pol = policy(capacity_rps=4.0, target=1.0, window_s=10, interval_s=5, scale_down_delay_s=30,
                        max_replicas=3)
    sim = FleetSimulation(traffic(times, 300), cap, pol, SLO_1S)
    res = sim.run()
    ups = [d for d in res["decisions"] if d["to"] > d["from"]]
    downs = [d for d in res["decisions"] if d["to"] < d["from"]]
    assert ups and ups[0]["t_s"] >= 60 and ups[0]["to"] == 2
    assert downs and downs[0]["t_s"] >= 120 + 30
    second = sim.replicas[1]
    assert second.ready_at == pytest.approx(second.paid_from + 20.0)
    assert not (sim.served_by[times < second.ready_at] == 1).any()      # nothing before it serves
    assert (sim.served_by == 1).any()
    # paid: 1 replica all along plus the second from its decision to its stop
    assert res["paid_replica_seconds"] == pytest.approx(300 + second.stopped_at - second.paid_from)
    assert res["starting_replica_seconds"] == pytest.approx(20.0)
    assert res["replicas_max"] == 2


def test_a_replica_taken_out_while_busy_is_billed_as_draining_not_starting():
    cap = capacity(blocks=(0,), cold=20.0)
    # two replicas; a long request on each (at 1 s and 2 s); at 5 s the policy wants one: the
    # second leaves the router with its request in flight and drains until it is done
    pol = policy(capacity_rps=4.0, target=1.0, window_s=10, interval_s=5, scale_down_delay_s=0,
                        min_replicas=1, max_replicas=2)
    sim = FleetSimulation(traffic([1.0, 2.0], 30, out=1001), cap, pol, SLO_1S, initial=2)
    res = sim.run()
    done = sim.arrived[1] + sim.ttft[1] + sim.tpot[1] * 1000       # the second request's end
    assert sim.served_by[1] == 1 and sim.replicas[1].stopped_at == pytest.approx(done) and done > 5.0
    assert res["starting_replica_seconds"] == 0.0                  # nothing was started
    assert res["serving_replica_seconds"] == pytest.approx(2 * 5 + 1 * 25)
    assert res["draining_replica_seconds"] == pytest.approx(done - 5.0)
    assert res["paid_replica_seconds"] == pytest.approx(35 + done - 5.0)
    assert res["replicas_max"] == 2


def test_more_replicas_than_measured_are_outside_the_measurements():
    cap = capacity(blocks=(0,), cold=0.0)
    times = np.arange(0, 120, 1 / 12)                    # 12 req/s: three replicas at capacity 4
    pol = policy(capacity_rps=4.0, target=1.0, window_s=10, interval_s=5, max_replicas=3)
    res = FleetSimulation(traffic(times, 120), cap, pol, SLO_1S).run()
    assert res["replicas_max"] == 3
    assert res["outside_measurements_share"] > 0.5


def test_a_longer_prompt_than_measured_is_flagged():
    cap = capacity(blocks=(0,))
    res = FleetSimulation(traffic([1.0, 5.0], 10, prompt=5000), cap, policy(capacity_rps=4.0), SLO_1S).run()
    assert res["outside_measurements_share"] == 1.0


class _CountingSimulation(FleetSimulation):
    """Integrates the number of requests in service over time, stretch by stretch, from the
    batch itself (``advance`` runs before every change of a replica's batch)."""

    area = 0.0

    def advance(self, r):
        self.area += (self.env.now - r.last) * len(r.active)
        super().advance(r)


def test_littles_law_holds_in_the_simulation():
    """L = lambda x W: the time-average number in service (integrated from the batches) equals
    the arrival rate times the mean time in service (from each request's TTFT and TPOT); a check
    of the event bookkeeping, not of the model.  Every request leaves before the window ends, so
    the sample-path identity holds to rounding: tolerance 1e-9 relative."""
    cap = capacity(blocks=(0,))
    rng = np.random.default_rng(3)
    times = np.cumsum(rng.exponential(1 / 3.0, 3000))
    window = float(times[-1]) + 30
    sim = _CountingSimulation(traffic(times, window), cap, policy(capacity_rps=4.0, max_replicas=1), SLO_1S)
    res = sim.run()
    assert res["completed"] == 3000
    in_system = sim.ttft + sim.tpot * 10            # out=11: TTFT + 10 inter-token times
    L = sim.area / window
    lam, W = 3000 / window, float(in_system.mean())
    assert L > 0.1                                  # a loaded replica, not an empty identity
    assert L == pytest.approx(lam * W, rel=1e-9)


def test_routing_least_loaded_spreads_by_queue():
    cap = capacity(sizes=(2,), blocks=(0,))
    times = np.arange(0, 20, 0.25)
    pol = policy(capacity_rps=4.0, min_replicas=2, max_replicas=2)
    sim = FleetSimulation(traffic(times, 20), cap, pol, SLO_1S, routing="least_loaded", initial=2)
    sim.run()
    counts = np.bincount(sim.served_by)
    assert counts.size == 2 and abs(counts[0] - counts[1]) <= len(times) * 0.2
    with pytest.raises(ValueError, match="protocol.routing"):
        FleetSimulation(traffic(times, 20), cap, pol, SLO_1S, routing="random")


def test_calibration_brings_the_simulated_runs_to_their_measured_means():
    """The 8 req/s point, a 40-request probe past saturation (16 in flight on average, TTFT
    1.5 s): simulated probes like it come closer to its mean TTFT once calibrated."""
    from protocols.plan.fleet import calibrate

    cap = capacity(blocks=(0,))
    corr = calibrate(cap, iterations=4, seeds=2)
    n, f_ttft, f_tpot = corr[1]
    assert n.shape == f_ttft.shape == f_tpot.shape == (3,)
    pol = policy(capacity_rps=8.0, max_replicas=1)

    def mean_ttft(c):
        got = []
        for seed in range(10):
            rng = np.random.default_rng(100 + seed)
            times = np.cumsum(rng.exponential(1 / 8.0, 40))
            sim = FleetSimulation(traffic(times - times[0], float(times[-1])), c, pol, SLO_1S, seed=seed)
            sim.run()
            got.append(np.mean(sim.ttft))
        return float(np.mean(got))

    raw = mean_ttft(cap)
    cap.corrections = corr
    assert abs(mean_ttft(cap) - 1.5) < abs(raw - 1.5)
