"""Engine faults (killed, stopped, hung, out of memory) and the scenarios beside steady state
(failure recovery, cold start, cache miss), against a fake engine launched as a real process
(tests/fake_engine_process.py) that injects each fault on purpose and logs when (``at_ns``)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from engines.http import http_post
from engines.process import free_port
from engines.tiny_model import ensure_tiny_model
from engines.vllm import VLLM
from engines.watchdog import EngineWatchdog
from tests.engine_cfg import engine_cfg
from tests.recompute import recovery_by_hand

pytestmark = pytest.mark.faults
REPO = Path(__file__).resolve().parents[2]
PY = sys.executable
INTERVAL = 0.5


def _at_ns(log: str) -> int:
    """When the fake injected its fault (perf_counter_ns, the harness's clock)."""
    return int(re.search(r"at_ns=(\d+)", log).group(1))


# ------------------------------------------------------------------------------ the watchdog
@pytest.fixture
def fake_engine(tmp_path):
    started = []

    def start(*args):
        port = free_port()
        cfg = engine_cfg("vllm", command=[PY, "-m", "tests.fake_engine_process", "--port", str(port), *args],
                         port=port, model="fake", continuous_usage=False)
        eng = VLLM(cfg, tmp_path / f"e{len(started)}")
        eng.start()
        started.append(eng)
        return eng

    yield start
    for eng in started:
        eng.kill()


@pytest.mark.parametrize("mode,kind", [("kill", "killed"), ("stop", "stopped"), ("oom", "oom"),
                                       ("exit", "exited"), ("hang", "hung")])
def test_watchdog_names_the_fault_within_its_interval(fake_engine, mode, kind):
    hang_timeout = 1.5
    eng = fake_engine("--fail-after", "2", "--fail-mode", mode)  # the warm-up was request 1
    seen, got = [], threading.Event()

    def on_fault(f):
        seen.append(f)
        got.set()
        return False

    wd = EngineWatchdog(eng, INTERVAL, hang_timeout, on_fault).start()
    try:
        def trip():
            try:
                http_post(eng.base_url + "/v1/completions", {"model": "fake", "prompt": "x", "max_tokens": 2},
                          timeout=15)
            except OSError:
                pass

        threading.Thread(target=trip, daemon=True).start()
        assert got.wait(15), f"no fault seen; log:\n{eng.process.tail()}"
    finally:
        wd.stop()
    f = seen[0]
    assert f.kind == kind, f.message
    lag = (f.detected_ns - _at_ns(f.log_tail)) / 1e9
    # a death or a stop within one interval (plus the look itself); a hang after hang_timeout_s
    bound = INTERVAL + 0.25 if kind != "hung" else hang_timeout + INTERVAL + 0.25
    assert 0 <= lag <= bound, (kind, lag)
    assert f"injecting {mode}" in f.log_tail and f.message.startswith("engine=vllm")
    if kind == "oom":
        assert f.exit_code == 1 and "OutOfMemoryError" in f.message
    if kind == "killed":
        assert f.exit_code == -9 and "SIGKILL" in f.message
    if kind == "exited":
        assert f.exit_code == 3


# ------------------------------------------------------------------------------ through the harness
def _cli(tmp_path, port, fake_args, *overrides, timeout=240):
    tok = str(ensure_tiny_model())
    cmd = ",".join([PY, "-m", "tests.fake_engine_process", "--port", str(port), *fake_args])
    argv = [PY, "-m", "harness.cli", "run", "engine=vllm", f"engine.port={port}", f"engine.command=[{cmd}]",
            "engine.model=fake", f"engine.tokenizer={tok}", "engine.continuous_usage=false",
            f"engine.health_interval_s={INTERVAL}", "workload.input_tokens=32", "workload.output_tokens=8",
            "load.warmup_requests=0", "mlflow.enabled=false", "progress=false", "report.enabled=false",
            "telemetry.idle_baseline_s=0", *overrides]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=timeout)


def _rows(run_dir: Path) -> list[dict]:
    return pq.read_table(run_dir / "requests.parquet").to_pylist()


def test_kill_mid_point_fails_it_and_the_sweep_stops_resumably(tmp_path):
    out, port = tmp_path / "out", free_port()
    sweep = ["load=constant", "load.num_requests=30", "protocol.load_points=[10,10]", f"output_dir={out}"]
    p = _cli(tmp_path, port, ["--fail-after", "12", "--fail-mode", "kill"], *sweep)
    text = p.stdout + p.stderr
    assert p.returncode == 2, text
    first = out / "00-constant-rate=10"
    assert "constant rate=10 failed: engine=vllm was killed by SIGKILL" in text
    assert "last lines of the engine's log" in text and "injecting kill" in text  # the log's tail
    assert f"to resume, rerun the same command with output_dir={out}" in text
    m = json.loads((first / "summary.json").read_text())
    run = json.loads((first / "run.json").read_text())
    assert m["point_failed"] is True and m["engine_fault_kind"] == "killed" and m["engine_fault_exit_code"] == -9
    assert run["status"] == "failed" and "injecting kill" in run["error"]
    fault = run["engine_faults"][0]
    assert 0 <= (fault["detected_ns"] - _at_ns(fault["log_tail"])) / 1e9 <= INTERVAL + 0.5
    rows = _rows(first)
    assert len(rows) + m["requests_not_sent"] == 30  # every request sent is recorded; the rest are counted
    bad = [r for r in rows if r["status"] != "ok"]
    assert bad and all(r["error"].startswith("engine failure (killed): engine=vllm was killed") for r in bad)
    assert sum(r["status"] == "ok" for r in rows) == m["completed"] == 10  # requests 2..11 of the engine
    assert not (out / "01-constant-rate=10").exists()
    exp = json.loads((out / "experiment.json").read_text())
    assert exp["status"] == "failed"

    # The same command without the fault: the failed point runs again, its attempt kept aside.
    p2 = _cli(tmp_path, free_port(), [], *sweep)
    assert p2.returncode == 0, p2.stdout + p2.stderr
    for d in ("00-constant-rate=10", "01-constant-rate=10"):
        m2 = json.loads((out / d / "summary.json").read_text())
        assert m2["point_failed"] is False and m2["completed"] == 30
    kept = first / "failed_attempts" / "1"
    assert json.loads((kept / "summary.failed.json").read_text())["point_failed"] is True
    assert pq.read_table(kept / "requests.parquet").num_rows == len(rows)
    assert json.loads((out / "experiment.json").read_text())["status"] == "complete"


@pytest.mark.parametrize("mode,kind", [("stop", "stopped"), ("hang", "hung")])
def test_stopped_or_hung_engine_is_restarted_for_the_next_point(tmp_path, mode, kind):
    out, port = tmp_path / "out", free_port()
    p = _cli(tmp_path, port, ["--fail-after", "8", "--fail-mode", mode, "--fail-marker", str(tmp_path / "once"),
                              "--gap-ms", "50"],
             "load=constant", "load.num_requests=20", "protocol.load_points=[10,10]", f"output_dir={out}",
             "engine.on_failure=restart", "engine.hang_timeout_s=1.5")
    text = p.stdout + p.stderr
    assert p.returncode == 0, text
    assert "engine.on_failure=restart: starting the engine again for the next point" in text
    first, second = out / "00-constant-rate=10", out / "01-constant-rate=10"
    m1 = json.loads((first / "summary.json").read_text())
    run = json.loads((first / "run.json").read_text())
    assert m1["point_failed"] is True and m1["engine_fault_kind"] == kind and run["status"] == "failed"
    lag = (run["engine_faults"][0]["detected_ns"] - _at_ns(run["engine_faults"][0]["log_tail"])) / 1e9
    assert 0 <= lag <= (INTERVAL if kind == "stopped" else 1.5 + INTERVAL) + 0.5, lag
    rows = _rows(first)
    assert len(rows) + m1["requests_not_sent"] == 20
    # In flight when the watchdog saw it: cancelled by the harness, the fault as their error
    # (the stream of 8 tokens, 50 ms apart, outlasts the 100 ms between sends: several at once).
    cancelled = [r for r in rows if r["status"] == "cancelled"]
    assert len(cancelled) >= 2 and all(r["error"].startswith(f"engine failure ({kind})") for r in cancelled)
    assert all(r["status"] == "ok" or r["error"].startswith("engine failure") for r in rows)
    m2 = json.loads((second / "summary.json").read_text())
    assert m2["point_failed"] is False and m2["completed"] == 20 and m2["engine_restart_before_s"] > 0
    assert m2["window_start_ns"] == m1["window_end_ns"]  # the restart lies in the next point's window
    assert "=== tokenfactory: engine restarted" in (out / "engine.log").read_text()


# ------------------------------------------------------------------------------ scenarios
def test_failure_recovery_scenario_restarts_in_place_and_measures_the_outage(tmp_path):
    out, port = tmp_path / "out", free_port()
    p = _cli(tmp_path, port, ["--startup-s", "1"], "load=constant", "load.rate=10", "load.num_requests=80",
             f"output_dir={out}", "scenario.kill_at_s=2", "scenario.recovery_window=10")
    text = p.stdout + p.stderr
    assert p.returncode == 0, text
    assert "scenario: engine sent SIGKILL 2 s into the load" in text
    m = json.loads((out / "summary.json").read_text())
    run = json.loads((out / "run.json").read_text())
    assert m["point_failed"] is False and run["status"] == "ok" and m["engine_restarted"] is True
    # (bounds with room for a busy 2-core host: threads wake late there)
    assert m["kill_at_s"] == pytest.approx(2.0, abs=0.25)
    assert 0 <= m["engine_fault_detected_s"] <= INTERVAL + 0.5, m["engine_fault_detected_s"]
    assert m["engine_restart_s"] >= 1.0  # the fake takes 1 s to load
    # down = kill -> noticed, + the harness's own steps before the restart, + restart -> healthy
    assert -1e-6 <= m["engine_down_s"] - m["engine_fault_detected_s"] - m["engine_restart_s"] < 0.5  # ns-rounded
    rows = _rows(out)
    kill = m["kill_ns"]
    ends = [r["done_ns"] for r in rows]
    failed_after = [r for r, e in zip(rows, ends) if e >= kill and r["status"] != "ok"]
    assert m["requests_failed_after_kill"] == len(failed_after) > 0
    assert all(r["error"].startswith("engine failure (killed)") and "scenario.kill_at_s=2" in r["error"]
               for r in failed_after)
    assert m["requests_lost"] == sum(1 for r in failed_after if r["sent_ns"] < kill)
    assert m["completed"] == 80 - len(failed_after)  # the load went on: everything after the restart ok
    assert m["slo_met_before_kill"] is True and m["slo_recovered"] is True
    assert m["slo_recovery_s"] == pytest.approx(recovery_by_hand(out), abs=1e-9)
    assert m["slo_recovery_s"] > m["engine_down_s"]
    assert m["outage_in_window"] is True and m["window_start_ns"] < kill < m["window_end_ns"]
    assert m["outage_cost"] == pytest.approx(m["cost_total"] * m["engine_down_s"] / m["window_s"])
    assert m["engine_metrics_complete"] is False  # the counters started again from zero
    assert not any(k.startswith("engine_prefix_cache") for k in m)


def test_cold_start_scenario_times_start_ready_and_first_token(tmp_path):
    out, port = tmp_path / "out", free_port()
    p = _cli(tmp_path, port, ["--startup-s", "1"], "load=constant", "load.rate=10", "load.num_requests=30",
             f"output_dir={out}", "scenario.cold_start=true", "scenario.first_window_s=1")
    assert p.returncode == 0, p.stdout + p.stderr
    m = json.loads((out / "summary.json").read_text())
    rows = _rows(out)
    assert m["scenario_cold_start"] is True
    assert 1.0 <= m["engine_ready_s"] <= m["engine_start_s"] < m["first_token_after_start_s"]
    first = min(rows, key=lambda r: r["sent_ns"])
    assert m["first_request_ttft_ms"] == pytest.approx(first["ttft_s"] * 1e3)
    t0 = m["window_start_ns"] + m["engine_start_s"] * 1e9  # the window opens at the launch
    early = [r for r in rows if r["status"] == "ok" and r["sent_ns"] < t0 + 1e9]
    assert m["first_window_n"] == len(early) and m["first_window_n"] + m["rest_n"] == m["completed"] == 30
    assert m["first_window_p50_ttft_ms"] == pytest.approx(np.percentile([r["ttft_s"] for r in early], 50) * 1e3,
                                                          rel=1e-6)


def test_cache_miss_scenario_compares_cold_with_primed_prefixes(tmp_path):
    out = tmp_path / "out"
    configs = 'protocol.configs={cold: ["engine.cache_state=cold"], warm: ["engine.cache_state=primed"]}'
    port = free_port()
    p = _cli(tmp_path, port, [], "protocol=compare", configs, "protocol.repeats=2", "load=constant",
             "load.rate=20", "load.num_requests=24", "protocol.load_points=[]", "workload.input_tokens=200",
             "workload.prefix_groups.count=6", "workload.prefix_groups.prefix_tokens=160",
             "protocol.metrics=[engine_prefix_cache_hit_rate,output_throughput]", f"output_dir={out}")
    assert p.returncode == 0, p.stdout + p.stderr
    rates: dict[str, list[float]] = {"cold": [], "warm": []}
    queries = set()
    for f in sorted(out.glob("*/block*/summary.json")):
        m = json.loads(f.read_text())
        assert m["engine_metrics_complete"] is True and m["completed"] == 24
        rates[f.parent.parent.name].append(m["engine_prefix_cache_hit_rate"])
        queries.add(m["engine_prefix_cache_queries"])  # counted from the load's start: priming is not in it
    assert len(rates["cold"]) == len(rates["warm"]) == 2
    assert len(queries) == 1  # the same prompts in both arms: priming left the prompt builder's state alone
    # cold: each group's first request misses its prefix; primed: every prefix is cached before the load
    assert min(rates["warm"]) > max(rates["cold"]) > 0
    comp = json.loads((out / "comparison.json").read_text())
    entry = comp["points"][0]["metrics"]["engine_prefix_cache_hit_rate"]
    assert entry is not None
