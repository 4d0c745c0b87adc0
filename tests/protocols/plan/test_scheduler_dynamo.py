"""The scheduler replica model on Dynamo's real replay (skips without
TOKENFACTORY_DYNAMO_PYTHON): a profile of known times, then numbers that must hold."""

import os

import numpy as np
import pytest

from engines.autoscaling import ScalingPolicy
from metrics.profile import mocker_tables
from metrics.slo import SLO
from protocols.plan import scheduler as sched
from protocols.plan.fleet import FleetSimulation
from protocols.plan.traffic import Traffic
from tests.protocols.plan.capacity_fixtures import capacity

pytestmark = pytest.mark.integration

PREFILL = {"a_ms": 20.0, "b_ms_per_token": 0.02, "c_ms_per_token2": 0.0}       # 512 tokens: 30.24 ms
DECODE = {"alpha_ms": 8.0, "beta_ms_per_seq": 0.05, "gamma_ms_per_kv_token": 0.0}  # one sequence: 8.05 ms


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    py = os.environ.get("TOKENFACTORY_DYNAMO_PYTHON")
    if not py:
        pytest.skip("TOKENFACTORY_DYNAMO_PYTHON not set (.ci/dynamo_venv.sh builds the venv)")
    npz = tmp_path_factory.mktemp("profile") / "perf_data.npz"
    np.savez(npz, **mocker_tables(PREFILL, DECODE, isl_range=(64, 4096), kv_max=200_000, ctx_max=8192,
                                  batch_max=256))
    return sched.SchedulerModel(sched.dynamo_python(py), npz, {"max_num_seqs": 64, "max_num_batched_tokens": 8192,
                                                               "block_size": 16, "enable_chunked_prefill": True})


def _run(model, rate, n=400, seed=0):
    rng = np.random.default_rng(seed)
    arr = np.cumsum(rng.exponential(1 / rate, n))
    tr = Traffic(arr, np.full(n, 512), np.full(n, 65), float(arr[-1]) + 1, "test")
    pol = ScalingPolicy(capacity_rps=1e6, min_replicas=1, max_replicas=1, cold_start_s=1.0)
    sim = FleetSimulation(tr, capacity(), pol, SLO(), scheduler=model)
    return sim, sim.run()


def test_low_load_is_the_profile(model):
    sim, res = _run(model, rate=0.5)       # a request every 2 s: each alone (65 tokens in ~0.55 s)
    assert res["completed"] == 400
    assert np.median(sim.ttft) == pytest.approx(30.24e-3, rel=0.10)
    assert np.median(sim.tpot) == pytest.approx(8.05e-3, rel=0.10)


def test_heavy_load_queues(model):
    light, _ = _run(model, rate=0.5)
    # prefill 30 ms a request and a 64-sequence batch: at 40 req/s prefills alone take 1.2 s a second
    heavy, res = _run(model, rate=40.0)
    assert res["completed"] == 400
    assert np.percentile(heavy.ttft, 90) > 3 * np.percentile(light.ttft, 90)
    assert np.median(heavy.tpot) > 1.5 * np.median(light.tpot)   # prefills run between its decode steps
