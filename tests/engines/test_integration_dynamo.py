"""Against real NVIDIA Dynamo (its frontend and mocker workers) on the embedded tiny model.

Needs ``TOKENFACTORY_DYNAMO_PYTHON`` (the interpreter of a venv with ai-dynamo; ``.ci/dynamo_venv.sh``
builds one and prints it).  Two launches of a frontend and two mocker workers (a few seconds
each, speeded up ten times): a sweep on both workers, then one whose worker r1 is killed
mid-load while r0 serves on.
"""

from __future__ import annotations

import os
from pathlib import Path

import psutil
import pyarrow.parquet as pq
import pytest

from harness import results_io

pytestmark = pytest.mark.integration

DYNAMO_PYTHON = os.environ.get("TOKENFACTORY_DYNAMO_PYTHON")
if not DYNAMO_PYTHON or not Path(DYNAMO_PYTHON).exists():
    pytest.skip("TOKENFACTORY_DYNAMO_PYTHON is unset or missing: build the Dynamo venv with .ci/dynamo_venv.sh "
                "and export its interpreter", allow_module_level=True)

OUTPUT = 8  # output tokens asked of every request (ignore_eos: exactly this many)
BASE = ["engine=dynamo", f"engine.python={DYNAMO_PYTHON}", "engine.workers=2", "engine.mocker.speedup_ratio=10",
        "workload.input_tokens=64", f"workload.output_tokens={OUTPUT}", "load.warmup_requests=0",
        "mlflow.enabled=false", "report.enabled=false", "progress=false", "telemetry.idle_baseline_s=0",
        "telemetry.interval_s=0.2"]


def run(overrides: list[str]):
    from hydra import compose, initialize_config_module

    from protocols.registry import protocol_experiment

    with initialize_config_module("conf", version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    return protocol_experiment(cfg).run()


def _point(out: Path) -> Path:
    return next(d for d in out.iterdir() if (d / "summary.json").exists())


def _version(v: str) -> tuple:
    return tuple(int(x) for x in v.split(".")[:3])


def _gone(prov: dict) -> list[str]:
    """Processes of the run still alive: any whose command line is one the harness launched."""
    commands = [prov["router"]["command"]] + [r["command"] for r in prov["replicas"].values()]
    left = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = p.info["cmdline"] or []
        if any(cmd == c for c in commands):
            left.append(" ".join(cmd))
    return left


def test_a_sweep_on_two_mocker_workers(tmp_path):
    out = tmp_path / "sweep"
    run([*BASE, "load=concurrency", "load.num_requests=12", "protocol.load_points=[2]", f"output_dir={out}"])
    d = _point(out)
    s = results_io.read_json(d / "summary.json")
    assert s["completed"] == 12 and s["num_requests"] == 12 and s["error_rate"] == 0.0
    assert s["emulated"] is True and s["timing_source"] == "mocker-polynomial"
    rows = pq.read_table(d / "requests.parquet").to_pylist()
    assert [r["status"] for r in rows] == ["ok"] * 12
    assert [r["output_tokens"] for r in rows] == [OUTPUT] * 12
    # round robin over two workers: each row named by the worker Dynamo says served it
    served = [r["replica"] for r in rows]
    assert set(served) == {"r0", "r1"} and abs(served.count("r0") - served.count("r1")) <= 1
    assert s["replicas_unknown_share"] == 0.0
    # per-worker metrics from each worker's own page (its requests as Dynamo counted them)
    assert set(s["replicas"]) == {"r0", "r1"}
    assert sum(s["replicas"][w]["requests"] for w in ("r0", "r1")) == 12
    assert all("kv_cache_usage_max" in s["replicas"][w] for w in ("r0", "r1"))
    prov = results_io.read_json(d / "provenance.json")["engine"]
    assert _version(prov["versions"]["ai-dynamo"]) >= (1, 4, 2) and prov["versions"]["ai-dynamo-runtime"]
    assert prov["engine_version"] == prov["versions"]["ai-dynamo"]
    assert prov["emulation"]["emulated"] is True and prov["emulation"]["speedup_ratio"] == 10.0
    front = prov["router"]["command"]
    assert front[1:3] == ["-m", "dynamo.frontend"] and front[front.index("--router-mode") + 1] == "round-robin"
    for w in ("r0", "r1"):
        cmd = prov["replicas"][w]["command"]
        assert cmd[1:3] == ["-m", "dynamo.mocker"] and cmd[cmd.index("--speedup-ratio") + 1] == "10"
        assert prov["replicas"][w]["instance_id"]
    assert _gone(prov) == []  # every process the harness started was stopped


def test_a_worker_killed_mid_run_is_named_and_counted(tmp_path):
    out = tmp_path / "kill"
    run([*BASE, "load=constant", "load.num_requests=24", "protocol.load_points=[6]", "scenario.kill_at_s=1.5",
         "scenario.kill_replica=r1", "engine.health_interval_s=0.5", f"output_dir={out}"])
    d = _point(out)
    s = results_io.read_json(d / "summary.json")
    assert s["point_failed"] is False and s["replicas_lost"] == ["r1"]
    fault = s["replica_faults"][0]
    assert fault["replica"] == "r1" and fault["kind"] == "killed" and fault["injected"] is True
    assert "dynamo worker r1" in fault["message"] and "serves on with r0" in fault["message"]
    rows = pq.read_table(d / "requests.parquet").to_pylist()
    ok = [r for r in rows if r["status"] == "ok"]
    failed = [r for r in rows if r["status"] != "ok"]
    assert len(ok) + len(failed) == 24 and s["completed"] == len(ok) >= 12
    assert s["requests_failed_by_fault"] == len(failed)  # each failed row names the fault
    last = max(r["sent_ns"] for r in ok)
    assert next(r for r in ok if r["sent_ns"] == last)["replica"] == "r0"  # the survivor served on
    prov = results_io.read_json(d / "provenance.json")["engine"]
    assert _gone(prov) == []
