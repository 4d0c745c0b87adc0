"""Failure recovery against the real embedded engine: ``transformers serve`` SIGKILLed mid-run
by ``scenario.kill_at_s``, noticed by the watchdog, restarted on the same port while the load
goes on; the figures printed (restart time, requests lost, time until the SLO is back)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from tests.recompute import recovery_by_hand

pytestmark = pytest.mark.integration
REPO = Path(__file__).resolve().parents[2]
KEYS = ("kill_at_s", "engine_fault_detected_s", "engine_restart_s", "engine_down_s", "requests_in_flight_at_kill",
        "requests_lost", "requests_sent_during_outage", "requests_failed_during_outage", "requests_failed_after_kill",
        "slo_met_before_kill", "slo_recovered", "slo_recovery_s", "slo_recovery_after_ready_s",
        "outage_share_of_window",
        "outage_cost", "cost_total", "window_s", "completed", "num_requests")


def test_transformers_serve_killed_mid_run_recovers(tmp_path):
    out = tmp_path / "out"
    # A low rate and short outputs: the tiny engine on a shared 2-core host stays below saturation.
    argv = [sys.executable, "-m", "harness.cli", "run", "load=constant", "load.rate=0.5", "load.duration_s=60",
            "load.num_requests=null", "load.warmup_requests=0", "workload.input_tokens=32",
            "workload.output_tokens=4", "scenario.kill_at_s=12", "scenario.recovery_window=5", "slo.ttft_ms=10000",
            "slo.tpot_ms=5000", f"output_dir={out}", "mlflow.enabled=false", "progress=false", "report.enabled=false"]
    p = subprocess.run(argv, capture_output=True, text=True, cwd=REPO, timeout=900)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    m = json.loads((out / "summary.json").read_text())
    print(json.dumps({k: m.get(k) for k in KEYS}, indent=1))
    assert m["point_failed"] is False and m["engine_restarted"] is True and m["engine_faults"] == 1
    assert m["kill_at_s"] == pytest.approx(12, abs=0.1)
    assert 0 <= m["engine_fault_detected_s"] <= 2.0 + 0.5  # engine.health_interval_s=2 (default)
    assert -1e-6 <= m["engine_down_s"] - m["engine_fault_detected_s"] - m["engine_restart_s"] < 0.5  # ns-rounded
    rows = pq.read_table(out / "requests.parquet").to_pylist()
    failed = [r for r in rows if r["status"] != "ok"]
    assert len(failed) == m["requests_failed_after_kill"] >= 1
    assert all(r["error"].startswith("engine failure (killed)") for r in failed)
    back = m["kill_ns"] + m["engine_down_s"] * 1e9
    assert sum(r["status"] == "ok" for r in rows if r["sent_ns"] > back) >= 5  # the load went on, served
    assert m["slo_recovered"] is True
    assert m["slo_recovery_s"] == pytest.approx(recovery_by_hand(out), abs=1e-9)
    assert m["outage_in_window"] is True
    log = (out / "engine.log").read_text()
    assert log.count("=== tokenfactory: engine restarted (killed:") == 1
