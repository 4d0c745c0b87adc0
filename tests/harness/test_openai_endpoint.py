"""A whole `tokenfactory run` against an already-running endpoint (the fake server):
the pipeline end to end without a real engine, API-key handling, and multirun folders."""

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
SECRET = "sk-test-DO-NOT-LEAK-1234567890"


@pytest.fixture(scope="module")
def tokenizer_dir():
    return str(ensure_tiny_model())


def _run(tmp_path, mlflow_uri, base_url, tokenizer_dir, *extra):
    env = {**os.environ, "PYTHONPATH": str(REPO), "MLFLOW_TRACKING_URI": mlflow_uri,
           "MY_KEY": SECRET}
    return subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", *[a for a in extra if a == "-m"], "engine=openai",
         f"engine.base_url={base_url}",
         "engine.model=fake", f"engine.tokenizer={tokenizer_dir}", "engine.api_key_env=MY_KEY",
         "engine.continuous_usage=true", "load=constant", "load.num_requests=6", "load.warmup_requests=1",
         "workload.input_tokens=20", "progress=false", *[a for a in extra if a != "-m"]],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)


@pytest.mark.slow
def test_run_against_endpoint_and_key_never_leaks(tmp_path, mlflow_uri, tokenizer_dir):
    with FakeServer() as srv:
        p = _run(tmp_path, mlflow_uri, srv.base_url, tokenizer_dir, f"output_dir={tmp_path}/out",
                 "protocol.load_points=[20, 40]")
        assert p.returncode == 0, p.stdout + p.stderr
        # the key was sent to the server, as a bearer token
        assert all(h.get("Authorization") == f"Bearer {SECRET}" for h in srv.headers)
        assert len(srv.requests) == 2 * 7 + 1  # two points of 6 + 1 warm-up, plus the engine warm-up probe
    out = tmp_path / "out"
    for d in (out / "00-constant-rate=20", out / "01-constant-rate=40"):
        t = pq.read_table(d / "requests.parquet")
        assert t.num_rows == 7 and set(t.column("status").to_pylist()) == {"ok"}
        assert all(r.startswith("fake-") for r in t.column("response_id").to_pylist())
        assert t.column("tokens_source").to_pylist() == ["usage_continuous"] * 7
        # constant arrivals: scheduled exactly 1/rate apart
        sched = sorted(t.column("scheduled_ns").to_pylist())
        rate = 20 if "rate=20" in d.name else 40
        gaps = [(b - a) / 1e9 for a, b in zip(sched, sched[1:])]
        assert gaps == pytest.approx([1 / rate] * 6, abs=1e-6)
        s = json.loads((d / "summary.json").read_text())
        assert s["completed"] == 6 and s["total_output_tokens"] == 30
    # nothing on disk carries the key: run files, MLflow store and artifacts, the report
    for f in list(tmp_path.rglob("*")):
        if f.is_file():
            assert SECRET.encode() not in f.read_bytes(), f


@pytest.mark.slow
def test_multirun_gives_each_job_its_own_folder(tmp_path, mlflow_uri, tokenizer_dir):
    with FakeServer() as srv:
        p = _run(tmp_path, mlflow_uri, srv.base_url, tokenizer_dir, f"output_dir={tmp_path}/out",
                 "mlflow.enabled=false", "protocol.load_points=[]", "load.rate=50", "-m", "workload.output_tokens=4,8")
        assert p.returncode == 0, p.stdout + p.stderr
    jobs = sorted(d.name for d in (tmp_path / "out").iterdir() if d.is_dir() and d.name.startswith("job"))
    assert jobs == ["job0-workload.output_tokens=4", "job1-workload.output_tokens=8"]
    # gathered at the root when the multirun ended: each job, where it ran, and every run
    g = json.loads((tmp_path / "out" / "multirun.json").read_text())
    assert [j["folder"] for j in g["jobs"]] == jobs and g["runs"] == 2 and g["complete"]
    assert {j["launcher"] for j in g["jobs"]} == {"basic"} and all(j["host"] for j in g["jobs"])
    assert pq.read_table(tmp_path / "out" / "runs.parquet").num_rows == 2
    for j, n in zip(jobs, (4, 8)):
        t = pq.read_table(tmp_path / "out" / j / "requests.parquet")
        assert t.column("max_tokens").to_pylist() == [n] * 7
