"""A plan's capacity: read from a finished experiment, capacity at any SLO, block resamples."""

import math

import numpy as np
import pyarrow.parquet as pq
import pytest

from harness.errors import UserError
from metrics.filling import still_filling
from metrics.slo import SLO
from protocols.plan.capacity import read_experiment, resamples
from tests.protocols.plan.capacity_fixtures import capacity, point
from tests.synthetic_experiment import write_experiment


def test_max_load_per_block_at_any_slo():
    cap = capacity()
    loose = cap.max_load(SLO(ttft_ms=1000))
    assert loose["per_block"] == [4.0, 4.0, 4.0] and loose["first_fail"] == [8.0, 8.0, 8.0]
    tight = cap.max_load(SLO(ttft_ms=150))
    # block 2's light point has TTFT 0.1 x 1.1 = 110 ms, its 4 req/s point 220 ms
    assert tight["per_block"] == [1.0, 1.0, 1.0]
    assert cap.max_load(SLO(ttft_ms=50))["mean"] == 0.0


def test_resamples_are_the_exact_bootstrap_for_few_blocks():
    r = resamples([0, 1, 2], 200)
    assert len(r) == math.comb(5, 3)
    assert sum(w for _, w in r) == pytest.approx(1.0)
    assert dict(r)[(0, 0, 0)] == pytest.approx(1 / 27) and dict(r)[(0, 1, 2)] == pytest.approx(6 / 27)
    drawn = resamples(list(range(8)), 50, seed=1)
    assert len(drawn) == 50 and all(len(b) == 8 for b, _ in drawn)


def test_with_blocks_keeps_a_block_drawn_twice_twice():
    cap = capacity()
    sub = cap.with_blocks([2, 2, 0])
    assert len(sub.points[1]) == 9
    assert sorted({p.ttft_s[0] for p in sub.points[1] if p.rate_rps == 1.0}) == pytest.approx([0.1, 0.11])


def test_read_a_synthetic_experiment(tmp_path):
    exp = write_experiment(tmp_path / "exp", requests=40, rates=(5.0, 10.0))
    caps = {c.name: c for c in read_experiment(exp)}
    assert set(caps) == {"fast", "slow"}
    fast = caps["fast"]
    assert fast.sizes == [1] and fast.blocks == [0, 1, 2] and len(fast.points[1]) == 6
    p = fast.points[1][0]
    rows = pq.read_table(p.run_dir + "/requests.parquet", columns=["warmup"]).column("warmup").to_pylist()
    assert p.ttft_s.size + p.failed == rows.count(False)       # warm-up rows left out
    assert np.all(np.diff(p.prompt_tokens) >= 0)
    assert fast.max_load(SLO(ttft_ms=400, tpot_ms=40))["mean"] > 0


def test_a_folder_without_runs_is_named(tmp_path):
    with pytest.raises(UserError, match="not a finished experiment"):
        read_experiment(tmp_path)


# ------------------------------------------------------------------ the run-level check (issue 31)
def test_a_probe_with_half_its_requests_failed_does_not_meet_the_slo():
    # 60 requests: the 30 that completed are fast, the 30 others failed (a failed request misses
    # every limit, so the p99 over the run's requests is beyond any limit)
    half = point(8.0, 1.6, 0.2, 0.02, n=30, failed=30)
    assert not half.meets(SLO(ttft_ms=1000))
    assert not half.meets(SLO(ttft_ms=1000), min_attainment=0.4)
    # one failed of 200 is within the 1 % a p99 leaves
    assert point(8.0, 1.6, 0.2, 0.02, n=199, failed=1).meets(SLO(ttft_ms=1000))
    assert not point(8.0, 1.6, 0.2, 0.02, n=197, failed=3).meets(SLO(ttft_ms=1000))


def test_a_point_stopped_as_over_saturated_does_not_meet_the_slo():
    p = point(8.0, 1.6, 0.2, 0.02)
    assert p.meets(SLO(ttft_ms=1000))
    p.saturated = True
    assert not p.meets(SLO(ttft_ms=1000))


def test_a_point_still_filling_does_not_meet_the_slo():
    p = point(8.0, 1.6, 0.2, 0.02)
    p.in_flight_quarters = (22.98, 26.99)      # a rise of 4.0 within 3 x sqrt(50) = 21.2
    assert p.meets(SLO(ttft_ms=1000))
    p.in_flight_quarters = (140.33, 253.16)    # a rise of 112.8 above 3 x sqrt(393.5) = 59.5
    assert not p.meets(SLO(ttft_ms=1000))


def _fast_knee(failed=0, saturated=False):
    """The fixture's capacity, but its 8 req/s points as fast as its 4 req/s ones (TTFT 0.2 s):
    only their 60 failed requests of 120 (or the over-saturation stop) say they are past the knee."""
    cap = capacity(blocks=(0,), cold=0.0)
    pts = cap.points[1]
    fast = point(8.0, 3.2, 0.2, 0.02, n=120 - failed, failed=failed)
    fast.saturated = saturated
    cap.points[1] = [p for p in pts if p.rate_rps != 8.0] + [fast]
    return cap


@pytest.mark.parametrize("failed, saturated", [(60, False), (0, True)])
def test_the_plan_does_not_double_its_capacity_on_a_failed_probe(failed, saturated):
    """The regression: on main the 8 req/s probe counted as meeting the SLO, the measured
    capacity doubled (4 -> 8 req/s per replica) and the plan paid for half the replicas."""
    from conf.schema import Autoscale
    from protocols.plan.fleet import FleetSimulation
    from protocols.plan.run import costs, policy_for
    from protocols.plan.traffic import Traffic

    slo_cfg = {"ttft_ms": 1000.0, "percentile": 99.0}
    cap = _fast_knee(failed, saturated)
    why, policy, measured = policy_for(cap, Autoscale(target=1.0, max_replicas=8, window_s=10.0, interval_s=5.0),
                                       SLO.from_config(slo_cfg), slo_cfg)
    assert why == ""
    assert measured["mean"] == 4.0 and measured["first_fail"] == [8.0]
    assert policy.capacity_rps == 4.0
    # 16 req/s for 300 s: 16 / 4 = 4 replicas (8 req/s per replica would have made it 2)
    times = np.arange(0, 300, 1 / 16)
    traffic = Traffic(times, np.full(times.size, 100), np.full(times.size, 11), 300.0, "test")
    res = FleetSimulation(traffic, cap, policy, SLO.from_config(slo_cfg), initial=1).run()
    assert res["replicas_max"] == 4
    res.update(costs(cap, res, policy))
    # one replica from 0 s, three more from the first decision at 5 s (cold start 0): 300 + 3 x 295
    assert res["paid_replica_seconds"] == pytest.approx(300 + 3 * 295)
    assert res["cost_total"] == pytest.approx((300 + 3 * 295) * 0.001)    # the fixture's 0.001 per replica-second


def test_a_run_recorded_saturated_is_read_as_past_the_knee(tmp_path):
    import json

    exp = write_experiment(tmp_path / "exp", configs={"c": {"ttft_ms": 40.0, "tpot_ms": 8.0, "capacity": 40.0,
                                                            "power_w": 450}}, rates=(5.0, 10.0), blocks=1,
                           requests=40, seed=3)
    slo = SLO(ttft_ms=400, tpot_ms=40, percentile=50.0)   # p50: a stray failed request does not decide it
    assert read_experiment(exp)[0].max_load(slo)["per_block"] == [10.0]
    path = exp / "c" / "block0" / "01-rate10" / "summary.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "saturated": True}))
    cap = read_experiment(exp)[0]
    assert [p.saturated for p in sorted(cap.points[1], key=lambda p: p.rate_rps)] == [False, True]
    assert cap.max_load(slo)["per_block"] == [5.0] and cap.max_load(slo)["first_fail"] == [10.0]


def test_a_run_recorded_still_filling_is_read_as_past_the_knee(tmp_path):
    import json

    exp = write_experiment(tmp_path / "exp", configs={"c": {"ttft_ms": 40.0, "tpot_ms": 8.0, "capacity": 40.0,
                                                            "power_w": 450}}, rates=(5.0, 10.0), blocks=1,
                           requests=40, seed=3)
    slo = SLO(ttft_ms=400, tpot_ms=40, percentile=50.0)
    path = exp / "c" / "block0" / "01-rate10" / "summary.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "in_flight_second_quarter": 140.33,
                                "in_flight_last_quarter": 253.16}))
    cap = read_experiment(exp)[0]
    points = sorted(cap.points[1], key=lambda p: p.rate_rps)
    assert points[1].in_flight_quarters == (140.33, 253.16)
    assert not still_filling(*points[0].in_flight_quarters)    # the 5 req/s run as summarize wrote it
    assert cap.max_load(slo)["per_block"] == [5.0] and cap.max_load(slo)["first_fail"] == [10.0]


def test_a_corrupt_run_file_is_one_error_naming_it(tmp_path):
    # through results_io, as every reader of a run folder: a corrupt config.yaml was a bare YAMLError
    exp = write_experiment(tmp_path / "exp", configs={"c": {"ttft_ms": 40.0, "tpot_ms": 8.0, "capacity": 40.0,
                                                            "power_w": 450}}, rates=(5.0,), blocks=1, requests=20)
    path = exp / "c" / "block0" / "00-rate5" / "config.yaml"
    path.write_text("deployment: [replicas: 2\n")
    with pytest.raises(UserError, match=rf"^{path}: not valid YAML \("):
        read_experiment(exp)
