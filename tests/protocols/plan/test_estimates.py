"""Estimated capacity (protocols/plan/estimates.py): the real estimator script run by an
interpreter that finds a stand-in aiconfigurator (fake_aiconfigurator/, its README says its
formulas), a recorded output of the real aiconfigurator 0.12.0, the roofline beside each point,
the estimate's error against measured runs, and the bad inputs' messages.  The real
aiconfigurator runs in the integration test at the end."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import numpy as np
import pytest

from conf.schema import PlanEstimate
from harness.errors import UserError
from metrics import roofline as rl
from protocols.plan import estimates
from protocols.plan.capacity import ConfigCapacity, OperatingPoint

HERE = Path(__file__).parent
FAKE = HERE / "fake_aiconfigurator"
RECORDED = HERE.parents[1] / "fixtures" / "aiconfigurator_llama31_8b_h200_vllm.json"
LLAMA_8B = {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
            "intermediate_size": 14336, "vocab_size": 128256, "torch_dtype": "bfloat16"}


@pytest.fixture(scope="module")
def fake_python(tmp_path_factory) -> str:
    """An executable that runs this interpreter with the stand-in aiconfigurator importable."""
    path = tmp_path_factory.mktemp("fake-venv") / "python"
    path.write_text(f'#!/bin/sh\nPYTHONPATH="{FAKE}" exec "{sys.executable}" "$@"\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def spec(**kw) -> PlanEstimate:
    base = dict(name="llama8b_h200", model="meta-llama/Meta-Llama-3.1-8B", system="h200_sxm", backend="vllm",
                isl=1024, osl=256, concurrencies=[1, 8, 32], requests=50, cold_start_s=60.0)
    return PlanEstimate(**{**base, **kw})


def h200() -> dict:
    hw, _ = estimates.estimate_profiles(spec())
    return hw


# ------------------------------------------------------------------------------------ end to end
def test_estimated_capacity_end_to_end_with_the_stand_in(fake_python):
    cap = estimates.estimated_capacity(spec(concurrencies=[32, 1, 8, 2000], cost="example_h100_rental"),
                                       python=fake_python)
    assert cap.source == "estimated" and cap.name == "llama8b_h200"
    assert cap.origin.startswith("estimated by aiconfigurator 0.0.0.dev0: meta-llama/Meta-Llama-3.1-8B on h200_sxm, "
                                 "vllm 0.24.0, aggregated tp1 pp1, isl 1024, osl 256")
    assert cap.sizes == [1] and cap.cold_start_s == [60.0]
    assert cap.cost["hourly_per_gpu"] == 2.5 and cap.cost["num_gpus"] == 1
    assert cap.workload == {"name": "synthetic", "input_tokens": 1024, "output_tokens": 256}
    pts = cap.points[1]
    assert [p.in_flight for p in pts] == [1, 8, 32]            # 2000: the stand-in's OOM, left out
    assert any("concurrency 2000: no estimate (OOM" in n for n in cap.notes)
    assert any("percentiles are the model's means" in n for n in cap.notes)
    assert any("cold start 60 s is an assumption" in n for n in cap.notes)
    for p in pts:
        c = p.in_flight
        ttft, tpot = (20 + 0.5 * c) / 1e3, (4 + 0.05 * c) / 1e3    # the stand-in's formulas
        assert p.estimated and p.block == 0
        assert p.rate_rps == pytest.approx(c / (ttft + tpot * 255))  # Little's law
        assert p.ttft_s.shape == (50,) and np.all(p.ttft_s == pytest.approx(ttft))
        assert np.all(p.tpot_s == pytest.approx(tpot))
        assert np.all(p.prompt_tokens == 1024) and np.all(p.output_tokens == 256)
        assert p.roofline["hardware"] == "h200" and p.roofline["faster_than_roofline"] is False


def test_the_roofline_beside_each_point_is_metrics_roofline_s_bound(fake_python):
    cap = estimates.estimated_capacity(spec(concurrencies=[8]), python=fake_python)
    p = cap.points[1][0]
    shape = rl.shape_from_config(LLAMA_8B)
    r = rl.rates({**h200(), "num_accelerators": 1}, "bf16")
    # decoding share of the 8 in flight: 8 x TPOT x 255 / (TTFT + TPOT x 255), rounded down
    ttft, tpot = 0.024, 0.0044
    batch = int(8 * tpot * 255 / (ttft + tpot * 255))
    assert p.roofline["decode_batch"] == batch == 7
    assert p.roofline["prefill_s"] == pytest.approx(rl.prefill_bound(shape, 1, 1024, r, "bf16", "bf16").seconds)
    assert p.roofline["decode_step_s"] == pytest.approx(
        rl.decode_bound(shape, batch, 1024 + 128, r, "bf16", "bf16").seconds)
    assert p.roofline["tpot_over_bound"] == pytest.approx(tpot / p.roofline["decode_step_s"])
    assert p.roofline["decode_limit"] == "memory bandwidth" and p.roofline["kv_fits"] is True


def test_an_estimate_faster_than_the_roofline_is_flagged(fake_python):
    cap = estimates.estimated_capacity(spec(model="fake/Impossible-8B", concurrencies=[1, 4]), python=fake_python)
    assert all(p.roofline["faster_than_roofline"] for p in cap.points[1])
    assert all(p.roofline["ttft_over_bound"] < 1 for p in cap.points[1])
    assert sum("faster than the roofline bound" in n and "impossible" in n for n in cap.notes) == 2


def test_disaggregated_set_is_one_replica_and_its_decode_batch_is_per_worker(fake_python):
    s = spec(disaggregated=True, prefill_workers=1, decode_workers=2, tp=2, concurrencies=[8, 16])
    cap = estimates.estimated_capacity(s, python=fake_python)
    assert [p.in_flight for p in cap.points[1]] == [8, 16]
    assert [p.roofline["decode_batch"] for p in cap.points[1]] == [4, 8]
    assert cap.points[1][0].roofline["prefill_devices"] == 2
    assert any("one prefill/decode set: 1 prefill worker(s) of tp2 pp1 + 2 decode worker(s) of tp2 pp1 (6 GPU(s)"
               in n for n in cap.notes)
    assert cap.points[1][0].rate_rps == pytest.approx(8 / (0.020 + (4 + 0.05 * 4) / 1e3 * 255))


def test_a_system_without_a_hardware_profile_has_no_bound_and_says_so(fake_python):
    cap = estimates.estimated_capacity(spec(system="l40s", concurrencies=[1]), python=fake_python)
    assert cap.points[1][0].roofline is None
    assert any("no conf/hardware profile for system l40s (set protocol.estimates[0].hardware=NAME)" in n
               for n in cap.notes)


def test_the_recorded_real_output_gives_the_same_rates_as_aiconfigurator_s_own():
    out = json.loads(RECORDED.read_text())
    cap = estimates.capacity_from_output(spec(), out, hardware=h200())
    assert cap.origin.startswith("estimated by aiconfigurator 0.12.0: meta-llama/Meta-Llama-3.1-8B on h200_sxm, "
                                 "vllm 0.24.0")
    for p, row in zip(cap.points[1], out["rows"]):
        assert p.in_flight == row["concurrency"] and p.ttft_s[0] == pytest.approx(row["ttft"] / 1e3)
        # Little's law from TTFT/TPOT agrees with aiconfigurator's own sequence rate
        assert p.rate_rps == pytest.approx(row["seq/s"], rel=0.01)
        assert p.roofline["faster_than_roofline"] is False
        assert 1 < p.roofline["tpot_over_bound"] < 10


# ------------------------------------------------------------------------------------ estimate_error
def measured_point(rate, in_flight, ttft_s, tpot_s, prompt=1024, output=256, failed=0, block=0):
    n = len(ttft_s)
    return OperatingPoint(rate_rps=rate, in_flight=in_flight, prompt_tokens=np.full(n, prompt),
                          ttft_s=np.asarray(ttft_s), tpot_s=np.asarray(tpot_s), output_tokens=np.full(n, output),
                          failed=failed, block=block, run_dir=f"runs/{rate}")


def estimated_fixture() -> ConfigCapacity:
    out = {"tool": "aiconfigurator", "tool_version": "0.12.0", "backend_version": "0.24.0", "rows": [
        {"concurrency": 1, "ttft": 40.0, "tpot": 5.0}, {"concurrency": 9, "ttft": 80.0, "tpot": 9.0}]}
    return estimates.capacity_from_output(spec(isl=1000, osl=201, concurrencies=[1, 9]), out)


def test_estimate_error_interpolates_the_estimate_at_each_measured_load():
    est = estimated_fixture()
    measured = ConfigCapacity(name="llama8b_h200", source="measured", origin="results/exp", points={
        1: [measured_point(1.0, 5.0, [0.05, 0.06, 0.07], [0.006, 0.008, 0.010], prompt=1000, output=201, failed=1),
            measured_point(9.0, 20.0, [0.2], [0.02], prompt=1000, output=201)],
        2: [measured_point(2.0, 3.0, [0.05], [0.007], prompt=500, output=201, block=1)]})
    rows = estimates.estimate_error(est, measured)
    assert [(r["replicas"], r["load"]) for r in rows] == [(1, 5.0), (1, 20.0), (2, 3.0)]
    r = rows[0]
    # in_flight 5: halfway between the estimated 1 and 9: TTFT 60 ms, TPOT 7 ms
    assert r["within_estimates"] and r["ttft_s_estimated"] == pytest.approx(0.060)
    assert r["ttft_s_measured"] == pytest.approx(0.06) and r["ttft_s_rel_error"] == pytest.approx(0.0)
    assert r["tpot_s_estimated"] == pytest.approx(0.007)
    assert r["tpot_s_rel_error"] == pytest.approx((0.007 - 0.008) / 0.008)
    rate1, rate9 = 1 / (0.040 + 0.005 * 200), 9 / (0.080 + 0.009 * 200)
    assert r["throughput_rps_estimated"] == pytest.approx((rate1 + rate9) / 2)
    assert r["throughput_rps_measured"] == pytest.approx(1.0 * 3 / 4)          # 3 completed, 1 failed
    assert r["workload_differs"] is False
    assert rows[1]["within_estimates"] is False and rows[1]["ttft_s_rel_error"] is None   # never extrapolated
    assert rows[2]["workload_differs"] is True                                  # 500-token prompts vs isl 1000
    assert rows[2]["ttft_s_estimated"] == pytest.approx(0.040 + 0.040 * 2 / 8)


def test_measured_counterparts_by_name_or_compare_with():
    est = estimated_fixture()
    a = ConfigCapacity(name="llama8b_h200", source="measured", origin="o", points={})
    b = ConfigCapacity(name="exp_b:llama8b_h200", source="measured", origin="o", points={})
    c = ConfigCapacity(name="vllm_cpu", source="measured", origin="o", points={})
    assert estimates.measured_counterparts(spec(), [a, b, c, est]) == [a, b]
    assert estimates.measured_counterparts(spec(compare_with="vllm_cpu"), [a, b, c]) == [c]


def test_estimate_error_by_rate():
    est = estimated_fixture()
    rates = sorted(p.rate_rps for p in est.points[1])
    mid = sum(rates) / 2
    measured = ConfigCapacity(name="x", source="measured", origin="o",
                              points={1: [measured_point(mid, 4.0, [0.07], [0.008], prompt=1000, output=201)]})
    (row,) = estimates.estimate_error(est, measured, by="rate")
    assert row["by"] == "rate" and row["in_flight_estimated"] == pytest.approx(5.0)
    assert row["in_flight_rel_error"] == pytest.approx(0.25)
    with pytest.raises(ValueError, match="by='tokens'"):
        estimates.estimate_error(est, measured, by="tokens")


def test_estimate_error_by_rate_stops_at_the_estimated_rate_s_peak():
    out = {"rows": [{"concurrency": 1, "ttft": 40.0, "tpot": 5.0}, {"concurrency": 9, "ttft": 80.0, "tpot": 9.0},
                    {"concurrency": 30, "ttft": 3000.0, "tpot": 30.0}]}   # past saturation: a lower rate
    est = estimates.capacity_from_output(spec(isl=1000, osl=201, concurrencies=[1, 9, 30]), out)
    r9 = est.points[1][1].rate_rps
    assert est.points[1][2].rate_rps < r9
    measured = ConfigCapacity(name="x", source="measured", origin="o",
                              points={1: [measured_point(r9 * 0.99, 8.0, [0.08], [0.009], prompt=1000, output=201)]})
    (row,) = estimates.estimate_error(est, measured, by="rate")
    assert row["within_estimates"] and row["in_flight_estimated"] < 9


def test_the_plan_reads_an_estimated_capacity_like_a_measured_one(fake_python):
    from metrics.slo import SLO

    cap = estimates.estimated_capacity(spec(concurrencies=[1, 8, 32]), python=fake_python)
    rates = [p.rate_rps for p in cap.points[1]]
    # TPOT at 8 in flight: 4.4 ms, at 32: 5.6 ms; a 5 ms p90 TPOT limit keeps 8, not 32
    got = cap.max_load(SLO(tpot_ms=5.0, percentile=90))
    assert got["mean"] == pytest.approx(rates[1]) and got["first_fail"] == [pytest.approx(rates[2])]
    assert cap.cold_start() == 60.0


@pytest.mark.slow  # a whole plan, the stand-in estimator in its own process
def test_tokenfactory_plan_with_an_estimated_candidate_beside_a_measured_one(fake_python, tmp_path):
    """protocol.estimates end to end: the estimated candidate is planned, marked estimated,
    its points sit beside their roofline bounds in plan.json and the page."""
    from conf.compose import compose_config
    from protocols.registry import Invocation, run_protocol
    from tests.synthetic_experiment import write_experiment

    exp = write_experiment(tmp_path / "exp", requests=40, rates=(5.0, 10.0), configs={
        "fast": {"ttft_ms": 40.0, "tpot_ms": 8.0, "capacity": 40.0, "power_w": 450.0}})
    rows = [json.dumps({"timestamp": int(t * 1000), "input_length": 1024, "output_length": 256, "hash_ids": [1, 2]})
            for t in np.arange(0, 120, 0.2)]
    (tmp_path / "trace.jsonl").write_text("\n".join(rows) + "\n")
    cfg = compose_config([
        "protocol=plan", f"protocol.experiments=[{exp}]", "workload=mooncake", f"workload.path={tmp_path}/trace.jsonl",
        "engine.max_model_len=4096", "deployment.autoscale.cold_start_s=5", "protocol.resamples=0",
        "protocol.workers=1", "slo.ttft_ms=2000", "slo.tpot_ms=200", f"protocol.estimator_python={fake_python}",
        "protocol.estimates=[{name: h200, model: meta-llama/Meta-Llama-3.1-8B, system: h200_sxm, "
        "cold_start_s: 60, concurrencies: [1, 8, 32]}]", f"output_dir={tmp_path / 'plan'}"])
    out = run_protocol(cfg, Invocation(explicit=frozenset({"slo.ttft_ms", "slo.tpot_ms"})))
    doc = json.loads((out / "plan.json").read_text())
    base = doc["plans"][0]
    assert base["configs"]["h200"]["source"] == "estimated"
    assert doc["candidates"]["h200"]["source"] == "estimated"
    est = doc["estimates"]["h200"]
    assert len(est["points"]) == 3 and all(p["roofline"]["prefill_s"] > 0 for p in est["points"])
    assert est["faster_than_roofline"] == []
    assert "(estimated)" in (out / "plan.html").read_text()


# ------------------------------------------------------------------------------------ bad input
def test_an_unknown_model_names_the_key_and_the_closest_known(fake_python):
    with pytest.raises(UserError) as e:
        estimates.estimated_capacity(spec(model="meta-llama/Llama-3-8B"), python=fake_python,
                                     key="protocol.estimates[1]")
    msg = str(e.value)
    assert msg.startswith("protocol.estimates[1].model: 'meta-llama/Llama-3-8B' is not a model aiconfigurator")
    assert "closest: meta-llama/Meta-Llama-3.1-8B" in msg


def test_an_unknown_system_or_backend_version_names_the_key(fake_python):
    with pytest.raises(UserError, match=r"protocol.estimates\[0\].system: 'h999': no aiconfigurator .*h100_sxm"):
        estimates.estimated_capacity(spec(system="h999", hardware="h200"), python=fake_python)
    with pytest.raises(UserError, match=r"protocol.estimates\[0\].version: vllm '0.1.0' on h200_sxm.*0.24.0, 0.27.0"):
        estimates.estimated_capacity(spec(version="0.1.0"), python=fake_python)
    with pytest.raises(UserError, match=r"protocol.estimates\[0\].backend: 'trtllm': no data for system h200_sxm"):
        estimates.estimated_capacity(spec(backend="trtllm"), python=fake_python)


def test_a_missing_estimator_venv_says_how_to_build_it(tmp_path, monkeypatch):
    monkeypatch.setenv("TOKENFACTORY_CACHE", str(tmp_path))
    with pytest.raises(UserError) as e:
        estimates.estimated_capacity(spec())
    msg = str(e.value)
    assert msg.startswith("protocol.estimator_python=null (the default venv): no Python at "
                          f"{tmp_path}/aiconfigurator-venv/bin/python")
    assert "bash .ci/aiconfigurator_venv.sh" in msg
    with pytest.raises(UserError, match=r"^protocol.estimator_python: no Python at /nowhere/python"):
        estimates.estimated_capacity(spec(), python="/nowhere/python")


def test_an_interpreter_without_aiconfigurator_says_how_to_build_the_venv():
    with pytest.raises(UserError, match=rf"^protocol.estimator_python: {sys.executable} has no aiconfigurator to "
                                        r"import: build aiconfigurator's venv with `bash .ci/aiconfigurator_venv.sh`"):
        estimates.estimated_capacity(spec(), python=sys.executable)


def test_bad_concurrencies_and_profiles_name_the_key(fake_python):
    with pytest.raises(UserError, match=r"estimates\[0\].concurrencies: \[3\] not multiples of decode_workers=2"):
        estimates.estimated_capacity(spec(disaggregated=True, decode_workers=2, concurrencies=[2, 3]),
                                     python=fake_python)
    with pytest.raises(UserError, match=r"protocol.estimates\[0\].hardware=h999: "):
        estimates.estimated_capacity(spec(hardware="h999"), python=fake_python)
    with pytest.raises(UserError, match=r"protocol.estimates\[0\].cost=nope: "):
        estimates.estimated_capacity(spec(cost="nope"), python=fake_python)
    with pytest.raises(UserError, match=r"protocol.estimates\[0\]: aiconfigurator gave no usable point"):
        estimates.estimated_capacity(spec(concurrencies=[5000]), python=fake_python)


# ------------------------------------------------------------------------------------ the real tool
REAL = os.environ.get("TOKENFACTORY_ESTIMATOR_PYTHON") or str(estimates.default_estimator_python())


@pytest.mark.integration
@pytest.mark.skipif(not os.access(REAL, os.X_OK),
                    reason="no aiconfigurator venv: build it with .ci/aiconfigurator_venv.sh "
                           "(or set TOKENFACTORY_ESTIMATOR_PYTHON)")
def test_real_aiconfigurator_llama_8b_on_h200_with_vllm():
    cap = estimates.estimated_capacity(spec(concurrencies=[1, 16]), python=REAL)
    assert cap.origin.startswith("estimated by aiconfigurator 0.12.0: meta-llama/Meta-Llama-3.1-8B on h200_sxm, vllm")
    one, sixteen = cap.points[1]
    # batching: more requests per second, each slower; never faster than the H200's roofline
    assert sixteen.rate_rps > 4 * one.rate_rps and sixteen.tpot_s[0] > one.tpot_s[0]
    for p in (one, sixteen):
        assert p.roofline["faster_than_roofline"] is False and p.roofline["tpot_over_bound"] > 1
