"""A whole `tokenfactory run` against the fake server streaming reasoning deltas in vLLM's format,
one chunk per engine step of 1, 2, 3 tokens: the rows' reasoning columns and the summary's TTFA,
answer-token cost and tokens-per-step keys, through the pipeline users run."""

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


@pytest.mark.slow
def test_reasoning_run_end_to_end(tmp_path):
    tok = str(ensure_tiny_model())
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with FakeServer() as srv:
        # 5 chunks of 1, 2, 3, 3, 3 tokens, the first 3 reasoning, 20 ms apart
        p = subprocess.run(
            [sys.executable, "-m", "harness.cli", "run", "engine=openai", f"engine.base_url={srv.base_url}",
             "engine.model=fake-mode:reasoning-ks:1.2.3-gap_ms:20", f"engine.tokenizer={tok}", "engine.api=chat",
             "engine.continuous_usage=true", "load=constant", "load.rate=20", "load.num_requests=6",
             "load.warmup_requests=0", "workload.input_tokens=20", "progress=false", "mlflow.enabled=false",
             "protocol.load_points=[]", "slo.ttft_ms=1000", "slo.ttfa_ms=5000", "slo.percentile=50",
             "cost=example_cpu_rental", f"output_dir={tmp_path}/out"],
            capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
        assert p.returncode == 0, p.stdout + p.stderr
    run = next(d for d in (tmp_path / "out").rglob("summary.json")).parent
    t = pq.read_table(run / "requests.parquet").to_pydict()
    assert t["status"] == ["ok"] * 6 and t["output_tokens"] == [12] * 6
    assert t["reasoning_tokens"] == [6] * 6 and t["tool_call_tokens"] == [0] * 6
    assert all(c[3] == f for c, f in zip(t["chunk_ns"], t["first_answer_ns"]))
    # TTFA - TTFT is the time from the first chunk to the first answer chunk, exactly, as received
    assert [a - b for a, b in zip(t["ttfa_s"], t["ttft_s"])] == pytest.approx(
        [(c[3] - c[0]) / 1e9 for c in t["chunk_ns"]], abs=1e-6)
    # three 20 ms gaps in between as sent; a busy client may read two chunks at once, so the median
    gaps = sorted(a - b for a, b in zip(t["ttfa_s"], t["ttft_s"]))
    assert (gaps[2] + gaps[3]) / 2 >= 0.050, gaps
    s = json.loads((run / "summary.json").read_text())
    assert s["good_requests"] == 6 and s["total_reasoning_tokens"] == 36
    assert s["good_output_tokens"] == 72 and s["good_answer_tokens"] == 36
    assert s["cost_per_mtok_good_answer"] == pytest.approx(2 * s["cost_per_mtok_good"])
    assert s["mean_ttfa_ms"] - s["mean_ttft_ms"] == pytest.approx(1e3 * sum(gaps) / 6)
    assert s["slo_ttfa_met"] is True
    assert s["spec_decode_steps"] == 24 and s["spec_tokens_per_step_mean"] == pytest.approx(11 / 4)
