"""The scheduler replica model's pieces without Dynamo: the trace the replay reads, the records
it writes read back in the trace's order, the engine's knobs from provenance, the model choice;
and a fake replay (a Python that answers with records) through the fleet simulation."""

import json
import sys

import numpy as np
import pytest

from conf.schema import Autoscale
from engines.autoscale_policy import ScalingPolicy
from metrics.slo import SLO
from protocols.plan import scheduler as sched
from protocols.plan.fleet import FleetSimulation
from protocols.plan.traffic import Traffic
from tests.protocols.plan import fake_replay
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


# a run on engine=dynamo as provenance.json records it (2026-12-02, 4 mocker workers, trimmed)
DYNAMO_RUN = {"engine": {
    "engine": "dynamo",
    "command": ["python", "-m", "dynamo.frontend", "--http-port", "49941", "--router-mode", "round-robin"],
    "deployment": {"kind": "replicas", "replicas": 4, "router": "dynamo-frontend", "router_policy": "round-robin",
                   "worker": "mocker"},
    "replicas": {f"r{i}": {"role": "replica", "worker": "mocker", "command": [
        "python", "-m", "dynamo.mocker", "--model-path", "/m", "--max-model-len", "2048", "--engine-type", "vllm",
        "--speedup-ratio", "1", "--num-gpu-blocks-override", "12000", "--block-size", "16",
        "--no-enable-prefix-caching", "--max-num-seqs", "128", "--planner-profile-data", "/h200.npz"]}
        for i in range(4)}}}


def test_a_dynamo_runs_knobs_and_workers_from_its_command_lines():
    # the plan replays one replica of this run as the run deployed it: four workers of 12,000 blocks
    # (it read one worker with the mocker's default KV size)
    assert sched.engine_knobs(DYNAMO_RUN) == {"num_gpu_blocks": 12000, "block_size": 16,
                                              "enable_prefix_caching": False, "max_num_seqs": 128}
    assert sched.replica_layout(DYNAMO_RUN) == (4, "round_robin")
    kv = {"engine": {**DYNAMO_RUN["engine"], "deployment": {**DYNAMO_RUN["engine"]["deployment"],
                                                            "router_policy": "kv"}}}
    assert sched.replica_layout(kv) == (4, "kv_router")
    assert sched.replica_layout({"engine": {"engine": "vllm", "deployment": {"replicas": 2}}}) == (1, "round_robin")
    assert sched.replica_layout({}) == (1, "round_robin")


def test_a_replica_of_several_workers_is_replayed_as_one_and_cached_apart(tmp_path, fake_python):
    one = sched.SchedulerModel(fake_python, tmp_path / "perf_data.npz", {"max_num_seqs": 8},
                               cache_dir=tmp_path / "cache", workers=1)
    four = sched.SchedulerModel(fake_python, tmp_path / "perf_data.npz", {"max_num_seqs": 8},
                                cache_dir=tmp_path / "cache", workers=1, replica_workers=4)
    stream = (np.arange(3, dtype=float), np.full(3, 20), np.full(3, 5))
    assert one.key(stream) != four.key(stream)
    assert four.describe()["replica_workers"] == 4 and four.describe()["router_mode"] == "round_robin"
    one.serve([stream])
    four.serve([stream])
    assert fake_replay.log(tmp_path)[1] == [3, 3]
    assert fake_replay.layouts(tmp_path) == [(1, "round_robin"), (4, "round_robin")]


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


def test_with_a_measured_prefill_increment_the_rest_of_the_ttft_is_serving_path():
    # the profile's mixed ladder: a prefill adds 10 + 0.02*L ms to the step it shares
    tables, serving = sched.replay_tables(TABLES, {"a_ms": 10.0, "b_ms_per_token": 0.02, "c_ms_per_token2": 0.0})
    assert tables["prefill_ttft_ms"] == pytest.approx([12.0, 32.0])
    # TTFT - increment - one step: 30 - 12 - 6 and 80 - 32 - 16
    assert serving == pytest.approx([12.0, 32.0])
    # an increment past the TTFT leaves no serving path (never negative)
    _, serving = sched.replay_tables(TABLES, {"a_ms": 40.0, "b_ms_per_token": 0.0, "c_ms_per_token2": 0.0})
    assert serving == pytest.approx([0.0, 24.0])
    # without one: the TTFT less one step, nothing added
    tables, serving = sched.replay_tables(TABLES)
    assert tables["prefill_ttft_ms"] == pytest.approx([24.0, 64.0]) and serving == pytest.approx([0.0, 0.0])


def test_the_model_reads_the_increment_beside_the_profile_and_adds_the_serving_path(tmp_path, fake_python):
    (tmp_path / "profile.json").write_text(json.dumps(
        {"prefill_in_step_fit": {"coefficients": {"a_ms": 10.0, "b_ms_per_token": 0.02, "c_ms_per_token2": 0.0}}}))
    model = sched.SchedulerModel(fake_python, tmp_path / "perf_data.npz", {"max_num_seqs": 8},
                                 cache_dir=tmp_path / "cache", workers=1)
    assert model.in_step["a_ms"] == 10.0 and "mixed ladder" in model.describe()["prefill_charged"]
    # the fake replays every request at 50 ms TTFT; prompts of 100 and 600 tokens (serving path
    # 12 ms, and 22 ms halfway along the table) on top, TPOT untouched
    (ttft, tpot), = model.serve([(np.array([0.0, 1.0]), np.array([100, 600]), np.array([5, 5]))])
    assert ttft == pytest.approx([0.062, 0.072]) and tpot == pytest.approx([0.01, 0.01])
    # without the record: nothing added, and another cache key
    (tmp_path / "profile.json").unlink()
    plain = sched.SchedulerModel(fake_python, tmp_path / "perf_data.npz", {"max_num_seqs": 8},
                                 cache_dir=tmp_path / "cache", workers=1)
    assert plain.in_step is None and plain.key((np.zeros(1), np.ones(1), np.ones(1))) != model.key(
        (np.zeros(1), np.ones(1), np.ones(1)))
    (ttft, _), = plain.serve([(np.array([0.0, 1.0]), np.array([100, 600]), np.array([5, 5]))])
    assert ttft == pytest.approx([0.05, 0.05])


@pytest.fixture
def fake_python(tmp_path):
    """A Python whose ``dynamo`` is a fake replay (``fake_replay``)."""
    np.savez(tmp_path / "perf_data.npz", **TABLES)
    yield fake_replay.python(tmp_path)
    sched.close_workers()


def test_fleet_served_by_a_fake_replay(tmp_path, fake_python):
    """The policy and router as ever; every request's TTFT and TPOT are the replay's."""
    rng = np.random.default_rng(0)
    arr = np.cumsum(rng.exponential(0.1, 300))
    tr = Traffic(arr, np.full(300, 100), np.full(300, 21), float(arr[-1]) + 1, "test")
    pol = ScalingPolicy(Autoscale(capacity_rps=4.0, min_replicas=1, max_replicas=4, cold_start_s=1.0, window_s=5.0))
    model = sched.SchedulerModel(fake_python, tmp_path / "perf_data.npz", {"max_num_seqs": 8},
                                 cache_dir=tmp_path / "c")
    sim = FleetSimulation(tr, capacity(), pol, SLO(), scheduler=model)
    res = sim.run()
    assert np.all(sim.ttft == pytest.approx(0.05)) and np.all(sim.tpot == pytest.approx(0.01))
    assert res["completed"] == 300 and res["p99_ttft_ms"] == pytest.approx(50.0)
    assert res["replicas_max"] >= 2          # the policy scaled as it does under processor sharing
    starts, replays = fake_replay.log(tmp_path)
    assert sum(replays) == 300 and len(replays) == len(sim.replicas)


def _stream(t0, n, prompt=20):
    return (t0 + np.arange(n, dtype=float), np.full(n, prompt), np.full(n, 5))


def test_same_streams_replayed_once(tmp_path, fake_python):
    """A stream already replayed (a resample routed some replicas as the full plan) is read back
    from the cache: each stream by its own hash, so a simulation sharing one of two streams
    with another replays only the other."""
    model = sched.SchedulerModel(fake_python, tmp_path / "perf_data.npz", {"max_num_seqs": 8},
                                 cache_dir=tmp_path / "cache", workers=1)
    a = model.serve([_stream(0.0, 2), _stream(0.0, 3)])
    b = model.serve([_stream(0.0, 2), _stream(0.0, 3)])
    c = model.serve([_stream(0.0, 3), _stream(5.0, 4), _stream(5.0, 4)])   # one new stream, twice
    assert fake_replay.log(tmp_path)[1] == [3, 2, 4]
    assert a[1][1] == pytest.approx([0.01] * 3) and b[0][0] == pytest.approx([0.05] * 2)
    assert c[0][0].size == 3 and c[1][0].size == 4 and c[2][1] == pytest.approx([0.01] * 4)


def test_one_worker_process_serves_many_streams(tmp_path, fake_python):
    """The Dynamo venv's Python starts once per worker, not once per simulation: three
    simulations' streams, one worker, one process; two workers serve two streams side by side."""
    model = sched.SchedulerModel(fake_python, tmp_path / "perf_data.npz", {"max_num_seqs": 8},
                                 cache_dir=tmp_path / "cache", workers=1)
    for k in range(3):
        model.serve([_stream(10.0 * k, 2 + k)])
    starts, replays = fake_replay.log(tmp_path)
    assert (starts, replays) == (1, [2, 3, 4])
    sched.close_workers()
    model.workers = 2
    got = model.serve([_stream(100.0, 6), _stream(100.0, 7)])
    starts, replays = fake_replay.log(tmp_path)
    assert starts == 3 and sorted(replays[3:]) == [6, 7]
    assert [g[0].size for g in got] == [6, 7]


def test_replay_failure_names_the_replay(tmp_path, fake_python):
    model = sched.SchedulerModel(fake_python, tmp_path / "perf_data.npz", {"max_num_seqs": 8},
                                 cache_dir=tmp_path / "cache", workers=1)
    with pytest.raises(RuntimeError, match=r"Dynamo's replay \(.*py.sh\) failed.*a replay that fails"):
        model.serve([_stream(0.0, 2, prompt=13)])
    assert model.serve([_stream(0.0, 2)])[0][0] == pytest.approx([0.05, 0.05])   # the worker serves on


def test_trace_bytes_are_json_dumps_lines(tmp_path):
    """The trace writer's lines are byte for byte ``json.dumps`` of each request (the writer
    before it), across chunks and ids of every width."""
    rng = np.random.default_rng(3)
    n = 700
    arr = np.cumsum(rng.exponential(0.37, n)) + 1e4 * rng.random()
    prompt, out = rng.integers(0, 3000, n), rng.integers(0, 600, n)
    prompt[:3] = (1, 16, 17)
    f = tmp_path / "t.jsonl"
    sched.write_trace(f, arr, prompt, out, block_size=3, chunk=64)   # ids past 100,000
    want, nxt = [], 0
    for t, p, o in zip(arr, prompt, out):
        p, o = max(int(p), 1), max(int(o), 1)
        nb = -(-p // 3)
        want.append(json.dumps({"timestamp": round(float(t) * 1e3, 3), "input_length": p, "output_length": o,
                                "hash_ids": list(range(nxt, nxt + nb))}) + "\n")
        nxt += nb
    assert nxt > 100_000
    assert f.read_bytes() == "".join(want).encode()


def test_records_matched_as_one_by_one(tmp_path):
    """``match_records`` (vectorised) gives what matching the records one by one gave, ties
    (same arrival, prompt and output) included: the n-th tied record to the n-th tied request."""
    rng = np.random.default_rng(5)
    n = 400
    arr = np.round(rng.integers(0, 50, n) * 0.25, 3)
    prompt, out = rng.integers(1, 4, n), rng.integers(1, 4, n)
    recs = [{"arrival_time_ms": a * 1e3, "input_length": int(p), "requested_output_length": int(o),
             "ttft_ms": float(rng.random() * 100), "e2e_latency_ms": float(100 + rng.random() * 900),
             "terminal_status": "completed" if rng.random() > 0.1 else "failed"}
            for a, p, o in zip(arr, prompt, out)]
    recs = [recs[i] for i in rng.permutation(n)]
    f = tmp_path / "r.jsonl"
    f.write_text("".join(json.dumps(r) + "\n" for r in recs))
    ttft, tpot = sched.read_records(f, arr, prompt, out)
    want_ttft, want_tpot = np.full(n, np.nan), np.full(n, np.nan)
    by_key = sorted(recs, key=lambda r: (r["arrival_time_ms"], r["input_length"], r["requested_output_length"]))
    for i, r in zip(np.lexsort((out, prompt, np.round(arr * 1e3, 3))), by_key):
        if r["terminal_status"] == "completed":
            want_ttft[i] = r["ttft_ms"] / 1e3
            if out[i] > 1:
                want_tpot[i] = (r["e2e_latency_ms"] - r["ttft_ms"]) / 1e3 / (int(out[i]) - 1)
    assert np.array_equal(ttft, want_ttft, equal_nan=True) and np.array_equal(tpot, want_tpot, equal_nan=True)
    assert np.isnan(ttft).sum() == sum(r["terminal_status"] == "failed" for r in recs)


@pytest.mark.slow
def test_worker_ends_with_its_parent(tmp_path, fake_python):
    """A plan process killed in the middle of a replay leaves no replay worker behind."""
    import os
    import signal
    import subprocess
    import time

    parent = subprocess.Popen([sys.executable, "-c", (
        "import sys, numpy as np; from pathlib import Path; from protocols.plan import scheduler as s\n"
        f"m = s.SchedulerModel(Path({str(fake_python)!r}), Path({str(tmp_path / 'perf_data.npz')!r}), "
        f"{{'max_num_seqs': 8}}, cache_dir=Path({str(tmp_path / 'c')!r}), workers=1)\n"
        "m.serve([(np.arange(3.0), np.full(3, 7), np.full(3, 5))])\n")],   # a prompt of 7: the fake sleeps
        env={**os.environ, "PYTHONPATH": os.getcwd()})
    deadline = time.time() + 30
    while not fake_replay.log(tmp_path)[0] and time.time() < deadline:
        time.sleep(0.1)
    worker = int((tmp_path / "log").read_text().split()[1])
    time.sleep(0.5)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    for _ in range(50):
        try:
            os.kill(worker, 0)
        except ProcessLookupError:
            break
        time.sleep(0.1)
    else:
        os.kill(worker, signal.SIGKILL)
        pytest.fail(f"replay worker {worker} still running 5 s after its parent was killed")


def test_streams_with_blocks_are_cached_apart(tmp_path, fake_python):
    """The same lengths with other block ids (another prefix sharing) are another replay."""
    model = sched.SchedulerModel(fake_python, tmp_path / "perf_data.npz", {"max_num_seqs": 8, "block_size": 16},
                                 cache_dir=tmp_path / "cache", workers=1)
    base = (np.array([0.0, 1.0]), np.array([10, 20]), np.array([5, 3]))
    model.serve([(*base, [[1], [1, 2]])])
    model.serve([(*base, [[1], [1, 2]])])
    model.serve([(*base, [[1], [3, 4]])])
    assert fake_replay.log(tmp_path)[1] == [2, 2]


def test_a_streams_key_is_the_profiles_bytes_not_its_path(tmp_path, fake_python):
    # the key seeds the approximation's sample: a profile copied elsewhere (another checkout, a
    # test's temp folder) must give the same key, or the same plan draws another sample
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "perf_data.npz").write_bytes((tmp_path / "perf_data.npz").read_bytes())
    a = sched.SchedulerModel(fake_python, tmp_path / "perf_data.npz", {"max_num_seqs": 8})
    b = sched.SchedulerModel(fake_python, other / "perf_data.npz", {"max_num_seqs": 8})
    s = _stream(0.0, 3)
    assert a.key(s) == b.key(s)
    assert a.key(s) != sched.SchedulerModel(fake_python, other / "perf_data.npz", {"max_num_seqs": 4}).key(s)
