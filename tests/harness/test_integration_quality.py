"""The quality gate's external evaluation for real: lm-eval (its own venv, .ci/lm_eval_venv.sh)
against `transformers serve` with the tiny model, on the offline task in conf/quality/lm_eval/."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration
LM_EVAL = os.environ.get("TOKENFACTORY_LM_EVAL")


@pytest.mark.skipif(not LM_EVAL, reason="set TOKENFACTORY_LM_EVAL to an lm_eval executable (.ci/lm_eval_venv.sh)")
def test_lm_eval_scores_the_running_engine(tmp_path):
    model_args = ("model={model},base_url={base_url}/v1/completions,tokenizer={tokenizer},"
                  "tokenizer_backend=huggingface,tokenized_requests=False,num_concurrent=1,max_retries=2")
    command = [LM_EVAL, "--model", "local-completions", "--model_args", model_args, "--tasks",
               "tokenfactory_arith", "--include_path", "{conf}/quality/lm_eval", "--output_path", "{out}",
               "--limit", "4"]
    args = [sys.executable, "-m", "harness.cli", "run", f"output_dir={tmp_path}/out", "mlflow.enabled=false",
            "report.enabled=false", "progress=false", "workload.input_tokens=16", "workload.output_tokens=8",
            "load.num_requests=4", "load.warmup_requests=0", "protocol.load_points=[2]", "quality.enabled=true",
            "quality.num_prompts=3", "quality.max_tokens=8", "quality.eval_cwd='{conf}/quality/lm_eval'",
            "quality.eval_command=[" + ",".join(f"'{a}'" for a in command) + "]",
            "quality.eval_score_path='{out}/*/results_*.json'",
            "quality.eval_score_key='results.tokenfactory_arith.exact_match,none'"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    p = subprocess.run(args, capture_output=True, text=True, timeout=900, cwd=tmp_path, env=env)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    q = json.loads((tmp_path / "out" / "quality.json").read_text())
    assert q["prompts"] == 3 and q["failed"] == 0 and all(o["tokens"] for o in q["outputs"])
    ev = q["eval"]
    assert ev["returncode"] == 0 and ev["error"] is None, ev
    assert 0.0 <= ev["score"] <= 1.0  # a random-weight model: the plumbing is under test, not the score
    record = json.loads((tmp_path / "out" / "experiment.json").read_text())
    assert record["quality_gate"]["configs"][""]["eval_score"] == ev["score"]
    assert "evaluation command" in record["steps"][0]["how"]
