"""A LoRA mix of two adapters on the real vLLM server (CPU build): the tiny model's random
adapters served with --enable-lora --lora-modules, requests sent to each by name
(workload.lora), measured per adapter in summary.json.  One server start (~60-90 s)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest

pytestmark = pytest.mark.integration

VLLM_PYTHON = os.environ.get("TOKENFACTORY_VLLM_PYTHON")
if not VLLM_PYTHON or not Path(VLLM_PYTHON).exists():
    pytest.skip("TOKENFACTORY_VLLM_PYTHON is unset or missing: build the vLLM venv with .ci/vllm_venv.sh "
                "and export its interpreter", allow_module_level=True)

N = 12


def test_two_adapters_measured_apart(tmp_path):
    from hydra import compose, initialize_config_module

    from engines.tiny_model import build_tiny_lora, ensure_tiny_model
    from protocols.registry import protocol_experiment

    model = ensure_tiny_model()
    a = build_tiny_lora(tmp_path / "ad-a", model, rank=8, seed=1)
    b = build_tiny_lora(tmp_path / "ad-b", model, rank=8, seed=2)
    out = tmp_path / "out"
    with initialize_config_module("conf", version_base="1.3"):
        cfg = compose("config", overrides=[
            "engine=vllm", f"engine.python={VLLM_PYTHON}",
            f"engine.features.lora={{adapters: {{ad-a: '{a}', ad-b: '{b}'}}, max_rank: 8}}",
            "workload.lora.adapters=[ad-a,ad-b]", "workload.input_tokens=64", "workload.output_tokens=8",
            "load=concurrency", "load.concurrency=2", f"load.num_requests={N}", "load.warmup_requests=0",
            "protocol.load_points=[]", "mlflow.enabled=false", "report.enabled=false", "progress=false",
            f"output_dir={out}"])
    protocol_experiment(cfg).run()
    (summary,) = out.rglob("summary.json")
    s = json.loads(summary.read_text())
    rows = pq.read_table(summary.parent / "requests.parquet").to_pydict()
    assert set(rows["status"]) == {"ok"} and sorted(set(rows["lora"])) == ["ad-a", "ad-b"]
    per = s["per_adapter"]
    for name in ("ad-a", "ad-b"):
        n = rows["lora"].count(name)
        assert per[name]["num_requests"] == per[name]["completed"] == n > 0
        assert per[name]["total_output_tokens"] == 8 * n  # ignore_eos: every output runs to max_tokens
        assert per[name]["mean_ttft_ms"] > 0 and per[name]["output_throughput"] > 0
    assert per["ad-a"]["request_throughput"] + per["ad-b"]["request_throughput"] == pytest.approx(
        s["request_throughput"])
    print(json.dumps({k: {m: v[m] for m in ("num_requests", "request_throughput", "output_throughput",
                                             "mean_ttft_ms", "p50_ttft_ms", "p99_ttft_ms", "mean_tpot_ms",
                                             "p99_tpot_ms", "goodput_rps")} for k, v in per.items()}, indent=1))
