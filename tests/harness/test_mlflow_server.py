"""A shared tracking server: `mlflow server` on PostgreSQL with an artifact root (.ci/mlflow_pg.sh),
and a sweep whose jobs run in parallel (hydra/launcher=submitit_local) logging to it at once
through MLFLOW_TRACKING_URI=http://...: every parent and child run is there, with its metrics
and artifacts, nothing lost.

``.ci/run`` starts the server and passes it in ``TOKENFACTORY_MLFLOW_SERVER``; without it the
test starts its own through the same script (PostgreSQL from Debian's package)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from engines.tiny_model import ensure_tiny_model
from tests.fake_server import FakeServer

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    uri = os.environ.get("TOKENFACTORY_MLFLOW_SERVER")
    if uri:
        yield uri
        return
    pytest.importorskip("psycopg2", reason="the PostgreSQL backend store needs the tracking extra")
    if not shutil.which("runuser") and os.getuid() == 0:
        pytest.skip("runuser not found: PostgreSQL cannot be started as root")
    d = tmp_path_factory.mktemp("mlflow-pg")
    env = {**os.environ, "PYTHON": sys.executable}
    p = subprocess.run(["bash", str(REPO / ".ci" / "mlflow_pg.sh"), "start", str(d)], capture_output=True,
                       text=True, env=env, timeout=600)
    try:
        assert p.returncode == 0, p.stderr[-3000:]
        yield p.stdout.strip()
    finally:
        subprocess.run(["bash", str(REPO / ".ci" / "mlflow_pg.sh"), "stop", str(d)], env=env, timeout=120)


def test_parallel_sweep_jobs_all_reach_the_tracking_server(server, tmp_path):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher", reason="needs the slurm extra (submitit_local)")
    from mlflow.tracking import MlflowClient

    tok = str(ensure_tiny_model())
    experiment = f"shared-{uuid.uuid4().hex[:8]}"
    t = time.monotonic()
    with FakeServer() as srv:
        p = subprocess.run(
            [sys.executable, "-m", "harness.cli", "run", "-m", "hydra/launcher=submitit_local",
             "hydra.launcher.timeout_min=10", "engine=openai", f"engine.base_url={srv.base_url}",
             "engine.model=fake", f"engine.tokenizer={tok}", "engine.continuous_usage=true", "load=constant",
             "load.num_requests=8", "load.warmup_requests=0", "protocol.load_points=[20,40]",
             "workload.input_tokens=20", "workload.output_tokens=4,8,12", "progress=false",
             "telemetry.idle_baseline_s=0", f"experiment={experiment}", f"output_dir={tmp_path}/out"],
            capture_output=True, text=True, timeout=900, cwd=tmp_path,
            env={**os.environ, "PYTHONPATH": str(REPO), "MLFLOW_TRACKING_URI": server})
    took = time.monotonic() - t
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-5000:]
    g = json.loads((tmp_path / "out" / "multirun.json").read_text())
    assert len(g["jobs"]) == 3 and g["complete"]

    c = MlflowClient(server)
    exp = c.get_experiment_by_name(experiment)
    runs = c.search_runs([exp.experiment_id], max_results=1000)
    parents = [r for r in runs if r.data.tags.get("tokenfactory.kind") == "sweep"]
    children = [r for r in runs if r.data.tags.get("tokenfactory.kind") == "load_point"]
    assert len(parents) == 3 and len(children) == 6 and len(runs) == 9
    assert all(r.info.status == "FINISHED" for r in runs)
    by_parent: dict[str, list] = {}
    for ch in children:
        by_parent.setdefault(ch.data.tags["mlflow.parentRunId"], []).append(ch)
    assert sorted(by_parent) == sorted(r.info.run_id for r in parents)
    assert all(len(v) == 2 for v in by_parent.values())
    assert sorted(ch.data.params["workload.output_tokens"] for ch in children) == ["12", "12", "4", "4", "8", "8"]
    for i, ch in enumerate(children):  # the summary's numbers as metrics, the run folder as artifacts
        assert ch.data.metrics["completed"] == 8 and ch.data.metrics["total_output_tokens"] == 8 * 5  # (5 a reply)
        arts = {a.path for a in c.list_artifacts(ch.info.run_id)}
        assert {"requests.parquet", "summary.json", "config.yaml", "run.json"} <= arts, arts
        dst = tmp_path / f"dl{i}"
        dst.mkdir()
        summary = json.loads(Path(c.download_artifacts(ch.info.run_id, "summary.json", str(dst))).read_text())
        assert summary["completed"] == 8 and summary["total_output_tokens"] == ch.data.metrics["total_output_tokens"]
    for par in parents:
        assert par.data.params["experiment"] == experiment
        assert "report.html" in {a.path for a in c.list_artifacts(par.info.run_id)}
    print(f"\nPostgreSQL-backed tracking server: 3 parallel jobs, 3 parents and 6 children logged in {took:.1f} s")
