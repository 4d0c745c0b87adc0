"""Bad input ends with one clear message, a non-zero exit, and no run folder that looks complete."""

from __future__ import annotations

import signal
import socket
import sys

import pytest

from harness.cli import main


@pytest.fixture
def run_cli(tmp_path, monkeypatch, capfd):
    """``tokenfactory run ARGS`` in this process (the command's own code, not a fork of it):
    its exit code and everything it printed."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    monkeypatch.setattr(sys, "argv", list(sys.argv))  # the command sets it for Hydra
    sigterm = signal.getsignal(signal.SIGTERM)  # and installs its SIGTERM handler

    def run(*args):
        capfd.readouterr()
        try:
            rc = main(["run", f"output_dir={tmp_path}/out", "progress=false", *args])
        except SystemExit as e:
            rc = e.code
        finally:
            signal.signal(signal.SIGTERM, sigterm)
        cap = capfd.readouterr()
        return rc, cap.out + cap.err

    return run


def assert_no_complete_run(tmp_path):
    assert not list((tmp_path / "out").rglob("summary.json")) if (tmp_path / "out").exists() else True
    assert not list((tmp_path / "out").rglob("requests.parquet")) if (tmp_path / "out").exists() else True


def test_unknown_override(tmp_path, run_cli):
    rc, out = run_cli("load.no_such_field=3")
    assert rc != 0
    assert "no_such_field" in out
    assert_no_complete_run(tmp_path)


def test_unknown_group_option(tmp_path, run_cli):
    rc, out = run_cli("load=sometimes")
    assert rc != 0
    assert "sometimes" in out and "load" in out


@pytest.mark.parametrize("args,needle", [
    (["load.rate=-1", "protocol.load_points=[]"], "load.rate"),
    (["load=concurrency", "load.concurrency=0", "protocol.load_points=[]"], "load.concurrency"),
    (["protocol.load_points=[{rat: 2}]"], "protocol.load_points[0]"),
    (["load.num_requests=null"], "load.num_requests"),
])
def test_malformed_field(tmp_path, run_cli, args, needle):
    rc, out = run_cli("mlflow.enabled=false", *args)
    assert rc == 2, out
    assert "error:" in out and needle in out
    assert "Traceback" not in out
    assert_no_complete_run(tmp_path)


@pytest.mark.slow  # starts an engine process
def test_engine_that_fails_to_start_shows_its_log(tmp_path, run_cli):
    cmd = f"[{sys.executable},-c,'import sys; print(\"boom: CUDA not found\"); sys.exit(3)']"
    rc, out = run_cli("mlflow.enabled=false", f"engine.command={cmd}", "engine.model=/nonexistent")
    assert rc == 2, out
    assert "exited with code 3" in out
    assert "boom: CUDA not found" in out  # the tail of the engine's log
    assert_no_complete_run(tmp_path)


def test_port_already_taken(tmp_path, run_cli):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    port = s.getsockname()[1]
    try:
        rc, out = run_cli("mlflow.enabled=false", f"engine.port={port}", "engine.model=/nonexistent")
    finally:
        s.close()
    assert rc == 2, out
    assert f"engine.port={port} is already in use" in out
    assert_no_complete_run(tmp_path)


@pytest.mark.slow  # waits out engine.startup_timeout_s=2
def test_unreachable_base_url(tmp_path, run_cli):
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    rc, out = run_cli("mlflow.enabled=false", "engine=openai", f"engine.base_url=http://127.0.0.1:{port}",
                      "engine.model=m", "engine.startup_timeout_s=2")
    assert rc == 2, out
    assert f"http://127.0.0.1:{port}" in out and "unreachable" in out
    assert_no_complete_run(tmp_path)


def test_openai_engine_requires_base_url(tmp_path, run_cli):
    rc, out = run_cli("mlflow.enabled=false", "engine=openai", "engine.model=m")
    assert rc == 2
    assert "engine.base_url" in out


def test_a_workload_longer_than_the_model_is_one_error_before_any_engine(tmp_path, run_cli):
    # the requests are built before the engine starts (harness.point.prebuild): a request past
    # engine.max_model_len is the user's to fix, said once, with no traceback and no engine started
    from engines.tiny_model import ensure_tiny_model

    rc, out = run_cli("mlflow.enabled=false", "engine=openai", "engine.base_url=http://127.0.0.1:9",
                      "engine.model=fake", f"engine.tokenizer={ensure_tiny_model()}", "engine.max_model_len=64",
                      "workload.input_tokens=100", "workload.output_tokens=8", "load=constant", "load.rate=5",
                      "load.num_requests=4", "protocol.load_points=[]")
    assert rc == 2, out
    assert "error: workload: a request of 100 input + 8 output tokens exceeds the model's max length 64" in out
    assert "Traceback" not in out and "starting engine" not in out
    assert_no_complete_run(tmp_path)
