"""Against real NVIDIA Dynamo (its frontend and mocker workers) on the embedded tiny model.

Needs ``TOKENFACTORY_DYNAMO_PYTHON`` (the interpreter of a venv with ai-dynamo; ``.ci/dynamo_venv.sh``
builds one and prints it).  Launches of a frontend and two mocker workers (a few seconds
each, speeded up ten times): a sweep on both workers (with the frontend's own page sampled),
one whose worker r1 is killed mid-load while r0 serves on, and SIGTERM to a program that
launched them and to a harness run on them: no frontend or worker outlives either.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pyarrow.parquet as pq
import pytest

from harness import results_io

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]

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
    # the frontend's own page, sampled beside the workers' (source = router): its counts are the run's
    assert s["router_metrics_complete"] is True
    assert s["router_requests"] == 12 and s["router_requests_ok"] == 12 and s["router_output_tokens"] == 12 * OUTPUT
    assert 0 < s["router_mean_ttft_ms"] <= s["mean_ttft_ms"]  # the frontend's clock starts after the client's
    tel = pq.read_table(d / "telemetry.parquet").to_pylist()
    inflight = [r["value"] for r in tel if r["source"] == "router" and r["name"] == "inflight"
                and r["detail"] == "dynamo_frontend_inflight_requests"]
    assert inflight and max(inflight) <= 2  # load.concurrency=2
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


# A program that launches engine=dynamo and has no SIGTERM handler of its own (as pytest has none):
# it says when the frontend and both workers serve, then waits to be stopped.
LAUNCHER = """
import sys, time
from pathlib import Path
from hydra import compose, initialize_config_module
from engines.registry import make_engine
with initialize_config_module("conf", version_base="1.3"):
    cfg = compose("config", overrides=sys.argv[2:])
e = make_engine(cfg.engine, Path(sys.argv[1]))
e.configure(None, "none")
e.start(warm_up=False)
print("ready", flush=True)
time.sleep(300)
"""


def _dynamo_children(pid: int) -> dict[int, str]:
    """The frontend and worker processes under ``pid``: pid -> its module (dynamo.frontend, dynamo.mocker)."""
    out = {}
    for c in psutil.Process(pid).children(recursive=True):
        try:
            cmd = c.cmdline()
        except psutil.Error:
            continue
        if "-m" in cmd and cmd[cmd.index("-m") + 1].startswith("dynamo."):
            out[c.pid] = cmd[cmd.index("-m") + 1]
    return out


def _survivors(pids) -> list[int]:
    deadline = time.monotonic() + 10
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        time.sleep(0.1)
    return alive


def _sigterm_then_survivors(argv, ready: str, tmp_path, then_s: float = 0.0) -> tuple[int, dict[int, str], list[int]]:
    """Start ``argv``, wait for a line starting with ``ready`` and ``then_s`` more, note its Dynamo
    processes by pid, send it SIGTERM; its exit code, those processes, and those still running
    10 s after it ended."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path, env=env)
    procs: dict[int, str] = {}
    try:
        for line in p.stdout:
            if line.startswith(ready):
                break
        time.sleep(then_s)
        procs = _dynamo_children(p.pid)
        p.send_signal(signal.SIGTERM)
        rc = p.wait(60)
        return rc, procs, _survivors(procs)
    finally:
        if p.poll() is None:
            p.kill()
        for pid in _survivors(procs) if procs else []:
            os.kill(pid, signal.SIGKILL)


def test_sigterm_to_a_program_that_launched_dynamo_stops_frontend_and_workers(tmp_path):
    argv = [sys.executable, "-c", LAUNCHER, str(tmp_path / "run"), *BASE[:4]]
    rc, procs, left = _sigterm_then_survivors(argv, "ready", tmp_path)
    assert sorted(procs.values()) == ["dynamo.frontend", "dynamo.mocker", "dynamo.mocker"]
    assert rc == -signal.SIGTERM
    assert left == []  # no frontend or mocker outlives the program that started it


def test_sigterm_to_a_harness_run_on_dynamo_stops_frontend_and_workers(tmp_path):
    argv = [sys.executable, "-m", "harness.cli", "run", *BASE, "load=constant", "load.num_requests=400",
            "protocol.load_points=[4]", f"output_dir={tmp_path / 'out'}"]
    # a second into the load (100 s of it at 4 requests/s)
    rc, procs, left = _sigterm_then_survivors(argv, "engine ready at", tmp_path, then_s=1.0)
    assert sorted(procs.values()) == ["dynamo.frontend", "dynamo.mocker", "dynamo.mocker"]
    assert rc == 143  # the command's own SIGTERM exit (harness.commands.interrupts)
    assert left == []
