"""A real run on this host (the embedded transformers-serve engine): the summary carries the
cost block, an energy block that is either filled or says why not, and its cost figures
recompute from the run's own files."""

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.recompute import recompute

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.integration
def test_run_reports_cost_and_energy_blocks(tmp_path):
    out = tmp_path / "run"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, "-m", "harness.cli", "run", "load.num_requests=6", "protocol.load_points=[2]",
           # lenient SLOs: on a busy 2-core host the tiny model's TTFT alone can pass 2 s
           "slo.ttft_ms=60000", "slo.tpot_ms=10000", f"output_dir={out}", "progress=false", "report.enabled=false",
           f"mlflow.tracking_uri=sqlite:///{tmp_path / 'mlflow.db'}"]
    p = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=480)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    (run_dir,) = [d for d in out.iterdir() if (d / "summary.json").exists()]
    s = json.loads((run_dir / "summary.json").read_text(),
                   object_hook=lambda d: {k: math.inf if v == "inf" else v for k, v in d.items()})
    r = recompute(run_dir)
    for k in ("window_s", "cost_total", "good_output_tokens", "all_output_tokens", "window_output_tokens",
              "cost_per_mtok_good",
              "cost_per_mtok_all", "completion_rate"):
        assert s[k] == pytest.approx(r[k], rel=1e-9), k
    assert s["cost_total"] > 0 and s["cost_complete"] is True
    assert s["good_output_tokens"] > 0 and math.isfinite(s["cost_per_mtok_good"])
    # the window opened at engine start: it holds the engine's start-up time
    assert s["window_s"] > s["engine_startup_s"]
    tel = pq.read_table(run_dir / "telemetry.parquet").to_pylist()
    sources = {t["source"] for t in tel}
    assert {"host", "loadgen"} <= sources
    if s["energy_available"]:
        assert s["energy_j"] > 0 and s["energy_source"] in ("nvml", "dcgm", "rapl")
    else:
        assert s["energy_j"] is None and "no power or energy source" in s["energy_unavailable_reason"]
        reasons = {t["source"]: t["detail"] for t in tel if t["name"] == "unavailable"}
        assert {"nvml", "dcgm", "rapl"} <= set(reasons)
        assert not any(t["source"] in ("nvml", "dcgm", "rapl") and t["name"] != "unavailable"
                       and t["value"] is not None and not math.isnan(t["value"]) for t in tel)
    assert "per M good tok" in p.stdout
