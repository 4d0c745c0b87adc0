"""protocol=tune protocol.screen=model end to end (skips without TOKENFACTORY_DYNAMO_PYTHON): a
launched test engine whose batch limit is engine.features.max_num_seqs (tests/fake_engine_process.py
as vLLM: 20 ms to the first token, 20 ms a further token, 16 tokens: 320 ms a request, so a
limit of N serves N / 0.32 req/s), a base sweep of it, the space screened on Dynamo's replay
timed by the same 20 ms steps, the finalists measured, the winner confirmed."""

import json
import os

import numpy as np
import pytest

from metrics.profile import mocker_tables

pytestmark = pytest.mark.integration


def test_tune_screens_on_the_model_and_stands_on_measurements(tmp_path, monkeypatch, capsys):
    py = os.environ.get("TOKENFACTORY_DYNAMO_PYTHON")
    if not py:
        pytest.skip("TOKENFACTORY_DYNAMO_PYTHON not set (.ci/dynamo_venv.sh builds the venv)")
    from engines.tiny_model import ensure_tiny_model
    from harness.cli import main
    from tests.fake_vllm import write_shim

    monkeypatch.chdir(tmp_path)
    shim = write_shim(tmp_path / "vllm-python", "--ttft-ms", "20", "--gap-ms", "20")
    common = ["engine=vllm", f"engine.python={shim}", "engine.model=fake", f"engine.tokenizer={ensure_tiny_model()}",
              "engine.continuous_usage=false", "workload.input_tokens=32", "workload.output_tokens=16",
              "load=constant", "load.num_requests=null", "load.duration_s=4", "load.warmup_requests=0",
              "slo.ttft_ms=200", "slo.tpot_ms=null", "slo.percentile=90", "mlflow.enabled=false", "progress=false",
              "report.enabled=false", "telemetry.idle_baseline_s=0", "quality.enabled=false"]
    base = tmp_path / "base"
    assert main(["run", *common, "protocol=sweep", "protocol.load_points=[2, 4]",
                 f"output_dir={base}"]) == 0
    np.savez(base / "perf_data.npz", **mocker_tables({"a_ms": 20.0, "b_ms_per_token": 0.0, "c_ms_per_token2": 0.0},
                                                     {"alpha_ms": 20.0, "beta_ms_per_seq": 0.0,
                                                      "gamma_ms_per_kv_token": 0.0},
                                                     isl_range=(16, 4096), kv_max=100_000, ctx_max=4096))
    out = tmp_path / "tune"
    assert main(["run", *common, "protocol=tune", "protocol.screen=model", "protocol.finalists=2",
                 f"protocol.base_experiment={base}", f"protocol.dynamo_python={py}", "load.rate=2",
                 "protocol.search_low=1", "protocol.search_high=16", "protocol.search_tolerance=0.42",
                 "protocol.search_max_probes=4", "protocol.screen_requests=60",
                 "protocol.space={engine.features.max_num_seqs: [1, 2, 4]}", f"output_dir={out}"]) == 0
    record = json.loads((out / "tune.json").read_text())
    s = record["screen"]
    by = {c["params"]["engine.features.max_num_seqs"]: c for c in s["configs"]}
    # on the model: N / 0.32 s is 3.1, 6.25 and 12.5 req/s; the ladder's rates below them (2^(i/2))
    assert {k: c["max_load_under_slo"] for k, c in by.items()} == pytest.approx({1: 2.83, 2: 5.66, 4: 11.31},
                                                                                abs=0.01)
    assert s["finalists"][0]["params"] == {"engine.features.max_num_seqs": 4}
    assert [f["params"]["engine.features.max_num_seqs"] for f in s["finalists"]] == [4, 2]
    # max_num_seqs=1 was never launched: no trial, no run folder of it
    assert sorted(t["params"]["engine.features.max_num_seqs"] for t in record["trials"]) == [2, 4]
    # measured: each finalist's max load under the SLO below its batch limit's capacity
    measured = {f["params"]["engine.features.max_num_seqs"]: f["measured"] for f in s["finalists"]}
    assert measured[4]["feasible"] and measured[2]["feasible"]
    assert 2.0 < measured[2]["max_load_under_slo"] <= 6.25 * 1.1
    assert measured[2]["max_load_under_slo"] < measured[4]["max_load_under_slo"] <= 12.5 * 1.1
    assert s["validated"] == "not validated" and all(f["disagrees"] is None for f in s["finalists"])
    best = record["best"]
    assert best["params"] == {"engine.features.max_num_seqs": 4} and record["best_stands_on"] == "measurement"
    assert best["confirmation"]["feasible"] and (out / "confirm" / "search.json").exists()
    printed = capsys.readouterr().out
    assert "MODELLED figures, not measurements" in printed and "modelled only, not measured" in printed
