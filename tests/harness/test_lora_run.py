"""`tokenfactory run workload.lora.adapters=[...]` against the fake engine: the override reaches
the requests (model = the adapter), the rows (lora) and summary.json's per_adapter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from engines.tiny_model import ensure_tiny_model
from tests.fake_server import FakeServer

REPO = Path(__file__).resolve().parents[2]
FAST, SLOW = "fast-ttft_ms:5", "slow-ttft_ms:90"


@pytest.mark.slow
def test_run_with_a_lora_mix_measures_each_adapter(tmp_path):
    tok = str(ensure_tiny_model())
    with FakeServer() as srv:
        p = subprocess.run(
            [sys.executable, "-m", "harness.cli", "run", "engine=openai", f"engine.base_url={srv.base_url}",
             "engine.model=fake", f"engine.tokenizer={tok}", "engine.continuous_usage=true", "load=concurrency",
             "load.concurrency=4", "load.num_requests=30", "load.warmup_requests=0", "workload.input_tokens=20",
             "workload.output_tokens=5", f"workload.lora.adapters=['{FAST}','{SLOW}']", "workload.lora.shares=[2,1]",
             "slo.ttft_ms=50", "protocol.load_points=[]", "mlflow.enabled=false", "progress=false",
             f"output_dir={tmp_path}/out"],
            capture_output=True, text=True, timeout=300, cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(REPO)})
        assert p.returncode == 0, p.stdout + p.stderr
        sent = [b["model"] for b in srv.requests if b.get("max_tokens") == 5]
    (summary,) = (tmp_path / "out").rglob("summary.json")
    run = summary.parent
    rows = pq.read_table(run / "requests.parquet").column("lora").to_pylist()
    assert sorted(rows) == sorted(sent) and len(rows) == 30 and set(rows) == {FAST, SLOW}
    per = json.loads((run / "summary.json").read_text())["per_adapter"]
    assert per[FAST]["num_requests"] == rows.count(FAST) and per[SLOW]["num_requests"] == rows.count(SLOW)
    assert per[FAST]["slo_attainment"] == 1.0 and per[SLOW]["slo_attainment"] == 0.0
    assert per[FAST]["total_output_tokens"] == 5 * rows.count(FAST)
