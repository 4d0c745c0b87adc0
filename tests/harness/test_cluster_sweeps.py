"""Multirun sweeps through Hydra's cluster launchers: ``hydra/launcher=ray_cluster``
(hydra-ray-launcher) on a local Ray cluster of two nodes, and ``hydra/launcher=submitit_local``
(hydra-submitit-launcher, the SLURM launcher's local twin).  Each job (one engine config)
runs in a process of its own, in parallel with the others, against the fake engine; the
launching process gathers the jobs' folders (multirun.json, runs.parquet, the report)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from engines.tiny_model import ensure_tiny_model
from tests.fake_server import FakeServer

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tokenizer_dir():
    return str(ensure_tiny_model())


def _sweep(tmp_path, base_url, tokenizer_dir, *extra, env=None):
    """Two jobs (workload.output_tokens=4,8), each one load point of 12 requests."""
    t = time.monotonic()
    p = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", "-m", "engine=openai", f"engine.base_url={base_url}",
         "engine.model=fake", f"engine.tokenizer={tokenizer_dir}", "engine.continuous_usage=true",
         "load=constant", "load.rate=40", "load.num_requests=12", "load.warmup_requests=0",
         "protocol.load_points=[]", "workload.input_tokens=20", "workload.output_tokens=4,8", "progress=false",
         "telemetry.idle_baseline_s=0", f"output_dir={tmp_path}/out", *extra],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO), **(env or {})})
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-5000:]
    return p, time.monotonic() - t


def _gathered(tmp_path, launcher):
    out = tmp_path / "out"
    g = json.loads((out / "multirun.json").read_text())
    assert [j["folder"] for j in g["jobs"]] == ["job0-workload.output_tokens=4", "job1-workload.output_tokens=8"]
    assert g["complete"] and g["runs"] == 2 and g["launchers"] == [launcher]
    for j, n in zip(g["jobs"], (4, 8)):
        assert j["pid"] != os.getpid()
        t = pq.read_table(out / j["folder"] / "requests.parquet")
        assert t.column("max_tokens").to_pylist() == [n] * 12 and set(t.column("status").to_pylist()) == {"ok"}
    runs = pq.read_table(out / "runs.parquet").to_pydict()
    assert sorted(runs["run_dir"]) == [j["folder"] for j in g["jobs"]] and runs["completed"] == [12, 12]
    assert (out / "report.html").exists()
    return g


def test_ray_launcher_on_a_two_node_cluster(tmp_path, tokenizer_dir):
    ray = pytest.importorskip("ray", reason="hydra/launcher=ray needs the ray extra: pip install -e '.[ray]'")
    pytest.importorskip("hydra_plugins.hydra_ray_launcher")
    spec = __import__("importlib.util").util.spec_from_file_location(
        "loadgen_fidelity", REPO / "benchmarks" / "loadgen_fidelity.py")
    bench = __import__("importlib.util").util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    cluster = bench.local_ray_cluster(nodes=2, cpus_per_node=1)
    try:
        with FakeServer() as srv:
            p, took = _sweep(tmp_path, srv.base_url, tokenizer_dir, "hydra/launcher=ray_cluster",
                             f"hydra.launcher.ray.init.address={cluster.address}", "mlflow.enabled=false",
                             env={"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"})
        nodes = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    finally:
        ray.shutdown()
        cluster.shutdown()
    g = _gathered(tmp_path, "ray_cluster")
    assert {j["ray_node"] for j in g["jobs"]} <= nodes  # each ran as a Ray task on a node of the cluster
    print(f"\nray launcher: 2 jobs on {len({j['ray_node'] for j in g['jobs']})} node(s) in {took:.1f} s")


def test_submitit_local_launcher(tmp_path, tokenizer_dir):
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher",
                        reason="hydra/launcher=submitit_* needs the slurm extra: pip install -e '.[slurm]'")
    with FakeServer() as srv:
        p, took = _sweep(tmp_path, srv.base_url, tokenizer_dir, "hydra/launcher=submitit_local",
                         "hydra.launcher.timeout_min=10", "mlflow.enabled=false")
    g = _gathered(tmp_path, "submitit_local")
    assert len({j["pid"] for j in g["jobs"]}) == 2
    print(f"\nsubmitit_local: 2 jobs in {took:.1f} s")
