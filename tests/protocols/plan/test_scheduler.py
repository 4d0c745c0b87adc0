"""The scheduler replica model's pieces without Dynamo: the trace the replay reads, the records
it writes read back in the trace's order, the engine's knobs from provenance, the model choice;
and a fake replay (a Python that answers with records) through the fleet simulation."""

import json
import sys
import textwrap

import numpy as np
import pytest

from engines.autoscale_policy import ScalingPolicy
from metrics.slo import SLO
from protocols.plan import scheduler as sched
from protocols.plan.fleet import FleetSimulation
from protocols.plan.traffic import Traffic
from tests.protocols.plan.capacity_fixtures import capacity


def test_trace_is_mooncake_with_own_blocks(tmp_path):
    f = tmp_path / "t.jsonl"
    sched.write_trace(f, [0.5, 1.25], [33, 16], [10, 1], block_size=16)
    rows = [json.loads(x) for x in f.read_text().splitlines()]
    assert rows == [{"timestamp": 500.0, "input_length": 33, "output_length": 10, "hash_ids": [0, 1, 2]},
                    {"timestamp": 1250.0, "input_length": 16, "output_length": 1, "hash_ids": [3]}]


def test_trace_with_given_blocks_shares_their_prefix(tmp_path):
    f = tmp_path / "t.jsonl"
    sched.write_trace(f, [0.0, 1.0], [33, 20], [4, 4], block_size=16, hash_ids=[[7, 8, 9], [7, 5]])
    assert [json.loads(x)["hash_ids"] for x in f.read_text().splitlines()] == [[7, 8, 9], [7, 5]]
    with pytest.raises(ValueError, match="request 1: 1 hash ids for 20 prompt tokens in blocks of 16"):
        sched.write_trace(f, [0.0, 1.0], [33, 20], [4, 4], block_size=16, hash_ids=[[7, 8, 9], [7]])


def _rec(arr, inp, out, ttft, e2e, status="completed"):
    return json.dumps({"arrival_time_ms": arr, "input_length": inp, "requested_output_length": out,
                       "ttft_ms": ttft, "e2e_latency_ms": e2e, "terminal_status": status})


def test_records_read_back_in_trace_order(tmp_path):
    f = tmp_path / "r.jsonl"
    # completion order, not arrival order; two requests arrive together with different prompts
    f.write_text("\n".join([_rec(1000.0, 50, 5, 30.0, 70.0), _rec(0.0, 200, 11, 100.0, 300.0),
                            _rec(0.0, 100, 3, 20.0, 40.0), _rec(2000.0, 10, 4, None, None, "failed")]) + "\n")
    ttft, tpot = sched.read_records(f, [0.0, 0.0, 1.0, 2.0], [200, 100, 50, 10], [11, 3, 5, 4])
    assert ttft[:3] == pytest.approx([0.1, 0.02, 0.03])
    assert tpot[:3] == pytest.approx([0.02, 0.01, 0.01])          # (e2e - ttft) / (out - 1)
    assert np.isnan(ttft[3]) and np.isnan(tpot[3])
    with pytest.raises(ValueError, match="3 records for 4 requests"):
        f.write_text("\n".join(f.read_text().splitlines()[:3]))
        sched.read_records(f, [0.0, 0.0, 1.0, 2.0], [200, 100, 50, 10], [11, 3, 5, 4])


def test_engine_knobs_from_provenance():
    vllm = {"engine": {"engine": "vllm", "engine_config": {"max_num_seqs": 128, "max_num_batched_tokens": 4096,
                                                           "enable_chunked_prefill": True, "block_size": 16,
                                                           "num_kv_blocks": 9000, "enable_prefix_caching": False}}}
    assert sched.engine_knobs(vllm) == {"max_num_seqs": 128, "max_num_batched_tokens": 4096,
                                        "enable_chunked_prefill": True, "block_size": 16, "num_gpu_blocks": 9000,
                                        "enable_prefix_caching": False}
    tr = {"engine": {"features": {"continuous_batching": True, "max_batch_tokens": 2048, "kv_cache_blocks": 256}}}
    assert sched.engine_knobs(tr) == {"max_num_batched_tokens": 2048, "num_gpu_blocks": 256}
    assert sched.engine_knobs({}) == {}


def test_model_choice(tmp_path):
    npz, py = tmp_path / "perf_data.npz", tmp_path / "python"
    npz.write_bytes(b"x")
    py.write_text("")
    assert sched.find_profile(tmp_path) == npz and sched.find_profile(tmp_path / "nope") is None
    assert sched.choose("auto", npz, py)[0] == "scheduler"
    model, why = sched.choose("auto", None, py)
    assert model == "processor_sharing" and "no profile" in why
    model, why = sched.choose("auto", npz, None)
    assert model == "processor_sharing" and "no Dynamo venv" in why
    assert sched.choose("processor_sharing", npz, py)[0] == "processor_sharing"
    with pytest.raises(ValueError, match="replica_model=scheduler: no profile"):
        sched.choose("scheduler", None, py)
    with pytest.raises(ValueError, match="expected one of"):
        sched.choose("queue", npz, py)


TABLES = {"prefill_isl": np.array([100.0, 1100.0]), "prefill_ttft_ms": np.array([30.0, 80.0]),
          "decode_active_kv_tokens": np.array([0.0, 2000.0]), "decode_context_length": np.array([1.0, 1001.0]),
          # step = 5 + KV/100 ms: 6 ms at KV 100, 16 ms at KV 1100 (context plays no part)
          "decode_itl": np.array([[5.0, 5.0], [25.0, 25.0]])}


def test_first_token_table_takes_one_step_off_the_prefill():
    got = sched.first_token_table(TABLES)
    assert got["prefill_ttft_ms"] == pytest.approx([30.0 - 6.0, 80.0 - 16.0])
    assert (got["decode_itl"] == TABLES["decode_itl"]).all() and TABLES["prefill_ttft_ms"][0] == 30.0


FAKE = textwrap.dedent('''
    import json, sys
    job = json.load(open(sys.argv[-1]))
    assert job["engine_args"]["max_num_seqs"] == 8 and job["engine_args"]["planner_profile_data"]
    for j in job["jobs"]:
        rows = [json.loads(x) for x in open(j["trace"])]
        t0 = rows[0]["timestamp"]
        with open(j["report"], "w") as f:
            for r in reversed(rows):   # a request: TTFT 50 ms, 10 ms a further token
                e2e = 50.0 + 10.0 * (r["output_length"] - 1)
                f.write(json.dumps({"arrival_time_ms": r["timestamp"] - t0, "input_length": r["input_length"],
                                    "requested_output_length": r["output_length"], "ttft_ms": 50.0,
                                    "e2e_latency_ms": e2e, "terminal_status": "completed"}) + "\\n")
    print(json.dumps({"wall_s": [0.0] * len(job["jobs"])}))
''')


def test_fleet_served_by_a_fake_replay(tmp_path):
    """The policy and router as ever; every request's TTFT and TPOT are the replay's."""
    worker = tmp_path / "worker.py"
    worker.write_text(FAKE)
    py = tmp_path / "py.sh"
    py.write_text(f"#!/bin/sh\nexec {sys.executable} {worker} \"$@\"\n")
    py.chmod(0o755)
    rng = np.random.default_rng(0)
    arr = np.cumsum(rng.exponential(0.1, 300))
    tr = Traffic(arr, np.full(300, 100), np.full(300, 21), float(arr[-1]) + 1, "test")
    pol = ScalingPolicy(capacity_rps=4.0, min_replicas=1, max_replicas=4, cold_start_s=1.0, window_s=5.0)
    np.savez(tmp_path / "perf_data.npz", **TABLES)
    model = sched.SchedulerModel(py, tmp_path / "perf_data.npz", {"max_num_seqs": 8}, cache_dir=tmp_path / "c")
    sim = FleetSimulation(tr, capacity(), pol, SLO(), scheduler=model)
    res = sim.run()
    assert np.all(sim.ttft == pytest.approx(0.05)) and np.all(sim.tpot == pytest.approx(0.01))
    assert res["completed"] == 300 and res["p99_ttft_ms"] == pytest.approx(50.0)
    assert res["replicas_max"] >= 2          # the policy scaled as it does under processor sharing


def test_same_streams_replayed_once(tmp_path):
    """A second serve of the same streams (a resample routed as the full plan) starts no replay."""
    np.savez(tmp_path / "perf_data.npz", **TABLES)
    count = tmp_path / "count"
    py = tmp_path / "py.sh"
    worker = tmp_path / "worker.py"
    worker.write_text(FAKE)
    py.write_text(f"#!/bin/sh\necho x >> {count}\nexec {sys.executable} {worker} \"$@\"\n")
    py.chmod(0o755)
    model = sched.SchedulerModel(py, tmp_path / "perf_data.npz", {"max_num_seqs": 8}, cache_dir=tmp_path / "cache")
    s = [(np.array([0.0, 1.0]), np.array([10, 20]), np.array([5, 3]))]
    a, b = model.serve(s), model.serve(s)
    other = model.serve([(np.array([0.0, 2.0]), np.array([10, 20]), np.array([5, 3]))])
    assert count.read_text().count("x") == 2
    assert a[0][1] == pytest.approx([0.01, 0.01]) and b[0][1] == pytest.approx([0.01, 0.01])
    assert other[0][0] == pytest.approx([0.05, 0.05])


def test_streams_with_blocks_are_cached_apart(tmp_path):
    """The same lengths with other block ids (another prefix sharing) are another replay."""
    np.savez(tmp_path / "perf_data.npz", **TABLES)
    count = tmp_path / "count"
    py = tmp_path / "py.sh"
    worker = tmp_path / "worker.py"
    worker.write_text(FAKE)
    py.write_text(f"#!/bin/sh\necho x >> {count}\nexec {sys.executable} {worker} \"$@\"\n")
    py.chmod(0o755)
    model = sched.SchedulerModel(py, tmp_path / "perf_data.npz", {"max_num_seqs": 8, "block_size": 16},
                                 cache_dir=tmp_path / "cache")
    base = (np.array([0.0, 1.0]), np.array([10, 20]), np.array([5, 3]))
    model.serve([(*base, [[1], [1, 2]])])
    model.serve([(*base, [[1], [1, 2]])])
    model.serve([(*base, [[1], [3, 4]])])
    assert count.read_text().count("x") == 2
