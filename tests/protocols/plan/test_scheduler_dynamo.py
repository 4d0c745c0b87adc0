"""The scheduler replica model on Dynamo's real replay (skips without
TOKENFACTORY_DYNAMO_PYTHON): a profile of known times, then numbers that must hold."""

import os

import numpy as np
import pytest

from conf.schema import Autoscale
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
    pol = ScalingPolicy(Autoscale(capacity_rps=1e6, min_replicas=1, max_replicas=1, cold_start_s=1.0))
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
    pages = {}
    for mode in ("scheduler", "processor_sharing", "approximate"):
        extra = (["protocol.replay_sample=0.3", "protocol.replay_stretch_s=5", "protocol.replay_lead_s=2"]
                 if mode == "approximate" else [])
        cfg = compose_config(extra + ["protocol=plan", f"protocol.experiments=[{exp}]", "workload=mooncake",
                              f"workload.path={_trace(tmp_path / 'trace.jsonl', duration=60.0)}",
                              "deployment=replicas", "router=vllm", "deployment.autoscale.cold_start_s=5",
                              "deployment.autoscale.max_replicas=4", "protocol.workers=1", "protocol.resamples=2",
                              f"protocol.replica_model={'scheduler' if mode == 'approximate' else mode}",
                              f"protocol.profile={model.profile}",
                              f"protocol.dynamo_python={model.python}", f"output_dir={tmp_path / mode}"])
        out = run_protocol(cfg, Invocation(explicit=frozenset()))
        docs[mode] = json.loads((out / "plan.json").read_text())
        pages[mode] = (out / "plan.html").read_text()
    sch, ps = docs["scheduler"], docs["processor_sharing"]
    # the approximation (protocol.replay_sample) is said so, per candidate and per config; exact is not
    ap = docs["approximate"]
    assert {c["replica_model"]["approximate"]["fraction"] for c in ap["candidates"].values()} == {0.3}
    for e in ap["plans"][0]["configs"].values():
        assert e["replay_sample"]["text"].startswith("approximate: ") and e["replay_sample"]["replayed_stretches"] >= 8
    assert "approximate: " in pages["approximate"] and "approximate" not in pages["scheduler"]
    assert all(e["replay_sample"] is None for e in sch["plans"][0]["configs"].values())
    assert {c["replica_model"]["model"] for c in sch["candidates"].values()} == {"scheduler"}
    assert {c["replica_model"]["model"] for c in ps["candidates"].values()} == {"processor_sharing"}
    assert ("processor sharing (fitted slowdown curve): protocol.replica_model=processor_sharing"
            in pages["processor_sharing"])
    # the same requests, the same policy: the scheduler's TTFT is the profile's (~30 ms at 256 tokens)
    for name, e in sch["plans"][0]["configs"].items():
        assert e["replica_model"]["model"] == "scheduler"
        peak = ps["plans"][0]["configs"][name]["metrics"]["replicas_max"]["value"]
        assert e["metrics"]["replicas_max"]["value"] == peak
        assert 20.0 < e["metrics"]["p50_ttft_ms"]["value"] < 40.0


OLD_WORKER = """
import json, sys
from dynamo.replay import run_trace_replay
from dynamo.replay.main import _load_engine_args
job = json.load(open(sys.argv[1]))
args = _load_engine_args(json.dumps(job["engine_args"]))
for j in job["jobs"]:
    run_trace_replay(j["trace"], extra_engine_args=args, num_workers=1, router_mode="round_robin",
                     report_jsonl_path=j["report"])
"""


def test_fast_path_gives_the_old_latencies(model, tmp_path):
    """The long-lived workers, the numpy trace writer and the records read as arrays give the
    per-request TTFT and TPOT of the path before them (a trace written by ``json.dumps``, a
    process per simulation parsing the args as the replay's CLI does, records read by
    ``json.loads`` one by one) bit for bit: 1,200 requests over two replicas, busy enough to
    batch, chunk and queue."""
    import json
    import subprocess

    rng = np.random.default_rng(7)
    n = 1200
    arr = np.cumsum(rng.exponential(1 / 12.0, n))
    prompt, out = rng.integers(16, 3000, n), rng.integers(1, 300, n)
    streams = [(arr[i::2], prompt[i::2], out[i::2]) for i in range(2)]
    fast = sched.SchedulerModel(model.python, model.profile, model.knobs, cache_dir=tmp_path / "cache", workers=2)
    got = fast.serve(streams)
    table = tmp_path / "table.npz"
    with np.load(model.profile) as z:
        np.savez(table, **sched.first_token_table({k: z[k] for k in z.files}))
    jobs = []
    for k, (a, p, o) in enumerate(streams):
        tr, nxt = tmp_path / f"old{k}.jsonl", 0
        with open(tr, "w") as f:
            for t, pp, oo in zip(a, p, o):
                pp, oo = max(int(pp), 1), max(int(oo), 1)
                nb = -(-pp // 16)
                f.write(json.dumps({"timestamp": round(float(t) * 1e3, 3), "input_length": pp, "output_length": oo,
                                    "hash_ids": list(range(nxt, nxt + nb))}) + "\n")
                nxt += nb
        jobs.append({"trace": str(tr), "report": str(tmp_path / f"old{k}.report.jsonl")})
    spec = tmp_path / "job.json"
    spec.write_text(json.dumps({"engine_args": {**model.knobs, "planner_profile_data": str(table)}, "jobs": jobs}))
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    subprocess.run([str(model.python), "-c", OLD_WORKER, str(spec)], check=True, capture_output=True, env=env)
    for (a, p, o), j, (ttft, tpot) in zip(streams, jobs, got):
        want_ttft, want_tpot = np.full(a.size, np.nan), np.full(a.size, np.nan)
        recs = sorted((json.loads(x) for x in open(j["report"])),
                      key=lambda r: (r["arrival_time_ms"], r["input_length"], r["requested_output_length"]))
        for i, r in zip(np.lexsort((o, p, np.round(a * 1e3, 3))), recs):
            if r["terminal_status"] == "completed" and r["ttft_ms"] is not None:
                want_ttft[i] = r["ttft_ms"] / 1e3
                if o[i] > 1:
                    want_tpot[i] = (r["e2e_latency_ms"] - r["ttft_ms"]) / 1e3 / (int(o[i]) - 1)
        assert np.isfinite(want_ttft).sum() == a.size
        assert np.array_equal(ttft, want_ttft, equal_nan=True) and np.array_equal(tpot, want_tpot, equal_nan=True)
    # batched: a median step above one sequence's 8.05 ms (8.05 + 0.05 a further sequence)
    assert np.nanmedian(np.concatenate([g[1] for g in got])) > 8.1e-3


def test_a_replica_of_four_workers_serves_what_one_queues(model):
    # an engine=dynamo replica is its frontend's workers (replica_layout): at 40 req/s one worker
    # queues its prefills, four behind a round-robin router serve 10 req/s each
    import dataclasses

    one, _ = _run(model, rate=40.0)
    four, res = _run(dataclasses.replace(model, replica_workers=4), rate=40.0)
    assert res["completed"] == 400
    assert np.percentile(four.ttft, 90) < np.percentile(one.ttft, 90) / 3


def test_a_step_carrying_a_prefill_costs_the_measured_increment(model, tmp_path):
    """A prefill of 512 tokens joins a request decoding alone: with the profile's increment
    (10.24 ms: 0.02 ms a token) the decoding request is held up that long, not the prefill's
    TTFT less a step (22 ms); the joining request, alone, still gets the profile's TTFT back."""
    inc = {"a_ms": 0.0, "b_ms_per_token": 0.02, "c_ms_per_token2": 0.0}
    with_inc = sched.SchedulerModel(model.python, model.profile, model.knobs, in_step=inc, cache_dir=tmp_path)
    plain = sched.SchedulerModel(model.python, model.profile, model.knobs, in_step={}, cache_dir=tmp_path)
    alone = (np.array([0.0]), np.array([64]), np.array([101]))
    joined = (np.array([0.0, 0.3]), np.array([64, 512]), np.array([101, 2]))
    held = {}
    for name, m in (("increment", with_inc), ("ttft", plain)):
        (t1, p1), (t2, p2) = m.serve([alone, joined])
        held[name] = ((t2[0] + 100 * p2[0]) - (t1[0] + 100 * p1[0])) * 1e3    # ms added to its end-to-end
        if name == "increment":
            lone, _ = m.serve([(np.array([0.0]), np.array([512]), np.array([2]))])[0]
            assert lone[0] == pytest.approx(30.24e-3, rel=0.10)
    assert held["increment"] == pytest.approx(10.24, abs=2.0)
    assert held["ttft"] == pytest.approx(30.24 - 8.05, abs=2.5)


def test_a_shared_prefix_saves_its_own_tokens_only(model, tmp_path):
    """Two 1,024-token prompts a second apart, the second sharing the first's leading 32 blocks
    of 16 (512 tokens): with prefix caching on, the second prefills its other 512 tokens (the
    profile: 30.24 ms), not none of them. The trace's ids stand for ``block_size`` tokens each;
    read as Dynamo's default 512 a shared id (the replay said 20 ms to the first token where
    vLLM took 612 on the Mooncake rows with 26 % of their tokens cached) covers the whole prompt."""
    cached = sched.SchedulerModel(model.python, model.profile, {**model.knobs, "enable_prefix_caching": True},
                                  cache_dir=tmp_path)
    first = list(range(64))
    second = first[:32] + list(range(1000, 1032))
    ttft, _ = cached.serve([(np.array([0.0, 1.0]), np.array([1024, 1024]), np.array([2, 2]), [first, second])])[0]
    full = 20.0 + 0.02 * 1024                      # 40.48 ms: nothing cached
    half = 20.0 + 0.02 * 512                       # 30.24 ms: its own 512 tokens
    assert ttft[0] * 1e3 == pytest.approx(full, rel=0.10)
    assert ttft[1] * 1e3 == pytest.approx(half, rel=0.10)
