"""The harness at a real model's time scale (``pytest -m emulated``; issue 33, docs/measured/scale.md).

Dynamo's mocker workers timed as a Llama-3.1-8B on one H200 (``tests/engines/h200_timing.py``: a
``perf_data.npz`` from aiconfigurator's H200 estimates), 1,000-token outputs, a few hundred
concurrent streams, KV blocks few enough to be mostly full, reasoning spans on the chat
route.  Needs ``TOKENFACTORY_DYNAMO_PYTHON`` (.ci/dynamo_venv.sh).  About a minute on a 2-core host.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from harness import results_io
from tests.engines import h200_timing

pytestmark = pytest.mark.emulated

DYNAMO_PYTHON = os.environ.get("TOKENFACTORY_DYNAMO_PYTHON")
if not DYNAMO_PYTHON or not Path(DYNAMO_PYTHON).exists():
    pytest.skip("TOKENFACTORY_DYNAMO_PYTHON is unset or missing: build the Dynamo venv with .ci/dynamo_venv.sh "
                "and export its interpreter", allow_module_level=True)

OUTPUT = 1000       # output tokens per request (ignore_eos: exactly this many)
REQUESTS = 250
LAG_P99_MS = 100.0  # the client's send lag bound on a shared 2-core host (measured 15-40 ms there)


def run(overrides: list[str]):
    from hydra import compose, initialize_config_module

    from protocols.registry import protocol_experiment

    with initialize_config_module("conf", version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    return protocol_experiment(cfg).run()


def test_hundreds_of_1000_token_streams_on_h200_timed_workers(tmp_path):
    npz = h200_timing.write(tmp_path / "timing")
    out = tmp_path / "run"
    run(["engine=dynamo", f"engine.python={DYNAMO_PYTHON}", "engine.workers=2", "engine.api=chat",
         f"engine.mocker.planner_profile_data={npz}", "engine.mocker.block_size=16",
         "engine.mocker.num_gpu_blocks=4000",
         "+engine.mocker.reasoning.start_thinking_token_id=3", "+engine.mocker.reasoning.end_thinking_token_id=4",
         "+engine.mocker.reasoning.thinking_ratio=0.5",
         "workload=synthetic", "workload.input_tokens=128", f"workload.output_tokens={OUTPUT}",
         "load=poisson", "protocol.load_points=[10]", f"load.num_requests={REQUESTS}", "load.warmup_requests=0",
         # the over-saturation guard on (the default): the fill-up of 20 s requests is no backlog
         "mlflow.enabled=false", "report.enabled=false", "progress=false",
         "telemetry.idle_baseline_s=0",
         f"output_dir={out}"])
    d = next(p for p in out.iterdir() if (p / "summary.json").exists())
    s = results_io.read_json(d / "summary.json")
    print({k: s.get(k) for k in ("mean_in_flight", "output_throughput", "schedule_lag_p99_ms", "client_cpu_util",
                                 "engine_preemptions", "engine_kv_cache_usage_max", "p50_tpot_ms")})
    assert s["emulated"] is True and s["timing_source"] == f"mocker-profile:{npz}"
    assert not s["saturated"] and s["num_requests_unsent"] == 0
    assert s["completed"] == REQUESTS and s["error_rate"] == 0.0
    rows = pq.read_table(d / "requests.parquet", columns=["status", "output_tokens", "sent_ns", "end_ns"]).to_pylist()
    assert [r["status"] for r in rows] == ["ok"] * REQUESTS
    assert [r["output_tokens"] for r in rows] == [OUTPUT] * REQUESTS
    assert s["total_output_tokens"] == REQUESTS * OUTPUT
    # H200 timing: a decode step of 4.7 ms + 0.124 ms per running sequence, so a time per output
    # token of tens of ms at ~100 sequences a worker, never the polynomial's default
    assert 8.0 < s["p50_tpot_ms"] < 80.0
    # ~62 sequences a worker at 5 req/s each (B = 4.7 r / (1 - 0.124 r)): over 100 streams at once
    events = sorted([(r["sent_ns"], 1) for r in rows] + [(r["end_ns"], -1) for r in rows])
    streams = [0]
    for _, step in events:
        streams.append(streams[-1] + step)
    print({"peak_streams": max(streams)})
    assert max(streams) >= 100 and s["mean_in_flight"] >= 60
    # 4,000 blocks of 16 tokens (64k) a worker for ~60 sequences of 128-1,128 tokens: KV pressure
    assert s["engine_kv_cache_usage_max"] >= 0.5
    assert s["schedule_lag_p99_ms"] < LAG_P99_MS
