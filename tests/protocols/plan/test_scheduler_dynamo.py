"""The scheduler replica model on Dynamo's real replay (skips without
TOKENFACTORY_DYNAMO_PYTHON): a profile of known times, then numbers that must hold."""

import os

import numpy as np
import pytest

from engines.autoscale_policy import ScalingPolicy
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


def test_plan_names_the_model_per_candidate(tmp_path, model):
    """``tokenfactory plan`` with a profile: each candidate on the scheduler, said in plan.json
    and on the page; processor sharing asked for: said too."""
    import json

    from conf.compose import compose_config
    from protocols.registry import Invocation, run_protocol
    from tests.protocols.plan.test_plan_run import _trace
    from tests.synthetic_experiment import write_experiment

    exp = write_experiment(tmp_path / "exp", requests=40, rates=(5.0, 10.0, 20.0))
    docs = {}
    for mode in ("scheduler", "processor_sharing"):
        cfg = compose_config(["protocol=plan", f"protocol.experiments=[{exp}]", "workload=mooncake",
                              f"workload.path={_trace(tmp_path / 'trace.jsonl', duration=60.0)}",
                              "deployment=replicas", "router=vllm", "deployment.autoscale.cold_start_s=5",
                              "deployment.autoscale.max_replicas=4", "protocol.workers=1", "protocol.resamples=2",
                              f"protocol.replica_model={mode}", f"protocol.profile={model.profile}",
                              f"protocol.dynamo_python={model.python}", f"output_dir={tmp_path / mode}"])
        out = run_protocol(cfg, Invocation(explicit=frozenset()))
        docs[mode] = json.loads((out / "plan.json").read_text())
        page = (out / "plan.html").read_text()
    sch, ps = docs["scheduler"], docs["processor_sharing"]
    assert {c["replica_model"]["model"] for c in sch["candidates"].values()} == {"scheduler"}
    assert {c["replica_model"]["model"] for c in ps["candidates"].values()} == {"processor_sharing"}
    assert "processor sharing (fitted slowdown curve): protocol.replica_model=processor_sharing" in page
    # the same requests, the same policy: the scheduler's TTFT is the profile's (~30 ms at 256 tokens)
    for name, e in sch["plans"][0]["configs"].items():
        assert e["replica_model"]["model"] == "scheduler"
        peak = ps["plans"][0]["configs"][name]["metrics"]["replicas_max"]["value"]
        assert e["metrics"]["replicas_max"]["value"] == peak
        assert 20.0 < e["metrics"]["p50_ttft_ms"]["value"] < 40.0
