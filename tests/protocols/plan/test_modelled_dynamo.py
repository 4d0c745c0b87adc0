"""Modelled knobs on Dynamo's real replay (skips without TOKENFACTORY_DYNAMO_PYTHON): a knob
changed in the scheduler model moves its prediction by a number checked by hand, and a plan
ranks a config never run beside the measured one, marked modelled everywhere."""

import json
import os

import numpy as np
import pytest

from metrics.profile import mocker_tables
from protocols.plan import scheduler as sched
from protocols.plan.capacity import ConfigCapacity, OperatingPoint
from protocols.plan.modelled import ladder_capacity, modelled_capacity

pytestmark = pytest.mark.integration

PREFILL = {"a_ms": 20.0, "b_ms_per_token": 0.02, "c_ms_per_token2": 0.0}       # 512 tokens: 30.24 ms
DECODE = {"alpha_ms": 8.0, "beta_ms_per_seq": 0.05, "gamma_ms_per_kv_token": 0.0}  # 8 ms + 0.05 ms a sequence
KNOBS = {"max_num_seqs": 8, "max_num_batched_tokens": 8192, "block_size": 16, "enable_chunked_prefill": True}


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    py = os.environ.get("TOKENFACTORY_DYNAMO_PYTHON")
    if not py:
        pytest.skip("TOKENFACTORY_DYNAMO_PYTHON not set (.ci/dynamo_venv.sh builds the venv)")
    folder = tmp_path_factory.mktemp("profile")
    np.savez(folder / "perf_data.npz", **mocker_tables(PREFILL, DECODE, isl_range=(64, 4096), kv_max=200_000,
                                                       ctx_max=8192, batch_max=256))
    return sched.SchedulerModel(sched.dynamo_python(py), folder / "perf_data.npz", dict(KNOBS),
                                cache_dir=folder / "cache")


def _decoding_at_once(arrival, ttft, tpot, output) -> int:
    """The most requests between their first and last token at any moment."""
    first = arrival + ttft
    last = first + tpot * (output - 1)
    events = sorted([(t, 1) for t in first] + [(t, -1) for t in last], key=lambda e: (e[0], e[1]))
    now = peak = 0
    for _, d in events:
        now += d
        peak = max(peak, now)
    return peak


def test_halving_max_num_seqs_halves_the_batch_and_the_throughput_at_saturation(model):
    """400 requests at once (512 prompt tokens, 201 output tokens): the batch is the knob, and
    decode throughput at saturation is seqs / step, the step 8 + 0.05 seqs ms."""
    import dataclasses

    n, out = 400, 201
    arr, pr, ou = np.zeros(n), np.full(n, 512), np.full(n, out)
    got = {}
    for seqs in (8, 4):
        m = dataclasses.replace(model, knobs={**KNOBS, "max_num_seqs": seqs})
        ttft, tpot = m.serve([(arr, pr, ou)])[0]
        assert np.isfinite(ttft).all()
        end = ttft + tpot * (out - 1)
        got[seqs] = {"batch": _decoding_at_once(arr, ttft, tpot, ou), "makespan": float(end.max()),
                     "tpot": float(np.median(tpot))}
    assert got[8]["batch"] == 8 and got[4]["batch"] == 4
    # the same work at a throughput of seqs / step: by hand 8 / 8.40 ms vs 4 / 8.20 ms a step, so the
    # makespans' ratio is (8.40 / 8) / (8.20 / 4) = 0.512 (prefills add a little to both)
    ratio = got[8]["makespan"] / got[4]["makespan"]
    assert ratio == pytest.approx((8.0 + 0.05 * 8) / 8 / ((8.0 + 0.05 * 4) / 4), rel=0.05)
    assert got[4]["tpot"] < got[8]["tpot"]         # a smaller batch steps faster


RATES = (2.0, 4.0, 8.0, 16.0)


def _base(n=300) -> ConfigCapacity:
    """A 'measured' config at 2, 4, 8 and 16 req/s (hand-built points: no run folders)."""
    pts = [OperatingPoint(rate_rps=r, in_flight=1.0, prompt_tokens=np.full(n, 512), ttft_s=np.full(n, 0.03),
                          tpot_s=np.full(n, 0.008), output_tokens=np.full(n, 65)) for r in RATES]
    return ConfigCapacity(name="base", source="measured", origin="test", points={1: pts}, cold_start_s=[5.0])


def test_modelled_capacity_falls_with_the_batch(model):
    """Per replica, a request is a 30 ms prefill (alone) and 64 decode steps shared by the batch:
    max_num_seqs=2 serves at most 1 / (30 + 64 x 8.1 / 2 ms) = 3.5 req/s, so 2 req/s holds a 1 s
    TTFT p90 and 4 does not; max_num_seqs=8, 1 / (30 + 64 x 8.4 / 8 ms) = 10.3 req/s: 8 holds, 16 not."""
    import dataclasses

    from metrics.slo import SLO

    base = _base()
    small = modelled_capacity("small", base, dataclasses.replace(model, knobs={**KNOBS, "max_num_seqs": 2}),
                              {"max_num_seqs": 2})
    big = modelled_capacity("big", base, model, {"max_num_seqs": 8})
    assert small.source == big.source == "modelled" and "never run" in small.notes[0]
    assert [p.rate_rps for p in small.points[1]] == list(RATES)
    slo = SLO(ttft_ms=1000.0, tpot_ms=None, percentile=90.0)
    assert small.max_load(slo)["mean"] == 2.0 and big.max_load(slo)["mean"] == 8.0
    # Little's law in flight: at 2 req/s both serve each request in ~0.55 s -> ~1.1
    assert small.points[1][0].in_flight == pytest.approx(2.0 * (0.030 + 64 * 0.0081), rel=0.15)
    ladder = ladder_capacity("l", base, model, [4.0, 8.0, 16.0], 200, constant=True)
    assert [p.rate_rps for p in ladder.points[1]] == [4.0, 8.0, 16.0] and ladder.max_load(slo)["mean"] == 8.0
    assert ladder.points[1][0].ttft_s.size == 200


def test_plan_ranks_a_modelled_knob_beside_the_measured_config(tmp_path, model, capsys):
    """``tokenfactory plan`` with protocol.modelled: the config never run has its own capacity,
    policy and cost from the model; plan.json, the console and the page say "modelled"."""
    from conf.compose import compose_config
    from protocols.registry import Invocation, run_protocol
    from tests.protocols.plan.test_plan_run import _trace
    from tests.synthetic_experiment import write_experiment

    exp = write_experiment(tmp_path / "exp", configs={"fast": {"ttft_ms": 40.0, "tpot_ms": 8.0, "capacity": 40.0,
                                                              "power_w": 400.0}},
                           requests=60, rates=(2.0, 5.0, 10.0, 20.0), blocks=2)
    cfg = compose_config(["protocol=plan", f"protocol.experiments=[{exp}]", "workload=mooncake",
                          f"workload.path={_trace(tmp_path / 'trace.jsonl', duration=60.0, peak=8.0)}",
                          "deployment=replicas", "router=vllm", "deployment.autoscale.cold_start_s=5",
                          "deployment.autoscale.max_replicas=8", "protocol.workers=1", "protocol.resamples=2",
                          "protocol.replica_model=scheduler", f"protocol.profile={model.profile}",
                          f"protocol.dynamo_python={model.python}", "slo.ttft_ms=1000", "slo.tpot_ms=null",
                          "slo.percentile=90",
                          "protocol.modelled=[{name: fast_seqs2, base: fast, knobs: "
                          "{engine.features.max_num_seqs: 2}}]",
                          f"output_dir={tmp_path / 'plan'}"])
    out = run_protocol(cfg, Invocation(explicit=frozenset({"slo.ttft_ms", "slo.tpot_ms", "slo.percentile"})))
    doc = json.loads((out / "plan.json").read_text())
    cand = doc["candidates"]["fast_seqs2"]
    assert cand["source"] == "modelled" and cand["replica_model"]["engine_args"]["max_num_seqs"] == 2
    entry = doc["plans"][0]["configs"]["fast_seqs2"]
    assert entry["modelled"] == {"base": "fast", "knobs": {"max_num_seqs": 2}, "base_knobs": {"max_num_seqs": 40},
                                 "validated_error": None, "validated": "not validated"}
    # the measured config's capacity is the synthetic runs' (40 req/s knee: every rate passes); the
    # modelled one with two sequences: 256-token prompts (25 ms) and ~32 output tokens, at most
    # 1 / (25 + 31 x 8.1 / 2 ms) = 6.7 req/s per replica: 5 holds, 10 does not, in both blocks
    assert doc["plans"][0]["configs"]["fast"]["capacity"]["mean"] == 20.0
    assert entry["capacity"]["per_block"] == [5.0, 5.0]
    assert entry["metrics"]["replicas_max"]["value"] > doc["plans"][0]["configs"]["fast"]["metrics"][
        "replicas_max"]["value"]
    printed = capsys.readouterr().out
    line = next(x for x in printed.splitlines() if x.strip().startswith("fast_seqs2:"))
    assert "[modelled, never run: fast with max_num_seqs=2; not validated]" in line
    assert "modelled, never run: fast with max_num_seqs=2; not validated" in (out / "plan.html").read_text()
