"""Ctrl-C in the middle of a sweep: finished points stay complete, the interrupted one does not
look complete, and the same command resumes where it stopped."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from engines.tiny_model import ensure_tiny_model
from tests.fake_server import FakeServer

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_ctrl_c_then_resume(tmp_path):
    tok = str(ensure_tiny_model())
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with FakeServer() as srv:
        argv = [sys.executable, "-m", "harness.cli", "run", "engine=openai", f"engine.base_url={srv.base_url}",
                "engine.model=fake", f"engine.tokenizer={tok}", "load=constant", "load.num_requests=40",
                "load.warmup_requests=0", "protocol.load_points=[20,20,20]", f"output_dir={out}",
                "mlflow.enabled=false", "progress=false", "report.enabled=false"]
        # As from a terminal: a runner that started us in the background (SIGINT ignored,
        # which exec keeps) must not make the harness deaf to Ctrl-C.
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path, env=env,
                             preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        first = out / "00-constant-rate=20" / "summary.json"
        deadline = time.monotonic() + 120
        while not first.exists() and time.monotonic() < deadline and p.poll() is None:
            time.sleep(0.05)
        assert first.exists(), p.communicate()[0]
        time.sleep(0.5)  # into the second point
        p.send_signal(signal.SIGINT)
        text = p.communicate(timeout=60)[0]
        assert p.returncode == 130, text
        assert "interrupted" in text and f"output_dir={out}" in text
        assert pq.read_table(out / "00-constant-rate=20" / "requests.parquet").num_rows == 40
        second = out / "01-constant-rate=20"
        assert not (second / "summary.json").exists()
        assert not (second / "requests.parquet").exists()  # only a .partial, never the final name
        partial = second / "requests.parquet.partial"
        if partial.exists():  # what was finished (or cut off) before Ctrl-C is kept for inspection
            t = pq.read_table(partial)
            assert t.num_rows <= 40 and set(t.column("status").to_pylist()) <= {"ok", "cancelled"}

        before = (out / "00-constant-rate=20" / "requests.parquet").stat().st_mtime_ns
        p2 = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
        assert p2.returncode == 0, p2.stdout + p2.stderr
        assert "1 of 3 runs already complete" in p2.stdout
    assert (out / "00-constant-rate=20" / "requests.parquet").stat().st_mtime_ns == before
    for d in ("01-constant-rate=20", "02-constant-rate=20"):
        assert pq.read_table(out / d / "requests.parquet").num_rows == 40
