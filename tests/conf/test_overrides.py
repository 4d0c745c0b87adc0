"""What the user typed is what runs: explicit overrides honoured, or an error saying what
overrules them (conf/overrides.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module

from conf.overrides import apply_explicit, explicit_keys
from conf.schema import ConfigError
from protocols.sweep.load_points import plan_runs

REPO = Path(__file__).resolve().parents[2]


def _apply(overrides: list[str]):
    with initialize_config_module("conf", version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    notes = apply_explicit(cfg, explicit_keys(overrides))
    return cfg, notes


def test_explicit_rate_with_the_default_sweep_runs_that_one_point():
    cfg, notes = _apply(["load=poisson", "load.rate=20"])
    plan = plan_runs(cfg)
    assert len(plan) == 1 and plan[0].load["rate"] == 20.0
    assert "running that one load point" in notes[0] and "protocol.load_points" in notes[0]
    cfg, notes = _apply(["load=concurrency", "load.concurrency=8"])
    assert [p.load["concurrency"] for p in plan_runs(cfg)] == [8] and notes


def test_defaults_alone_still_sweep():
    cfg, notes = _apply([])
    assert len(plan_runs(cfg)) == 5 and notes == []
    # points that do not set the rate keep the explicit one: nothing is overruled
    cfg, notes = _apply(["load.rate=7", "protocol.load_points=[{num_requests: 3}, {num_requests: 4}]"])
    assert [p.load["rate"] for p in plan_runs(cfg)] == [7.0, 7.0] and notes == []


@pytest.mark.parametrize("overrides, needle", [
    (["load.rate=3", "protocol.load_points=[1,2]"], "load.rate=3.0 is replaced by every point"),
    (["load=concurrency", "load.rate=3"], "no effect with load=concurrency; use load.concurrency"),
    (["load=trace", "workload=jsonl", "load.rate=3"], "use workload.time_scale or workload.target_rate"),
    (["load.concurrency=3"], "load.max_concurrency to cap"),
    (["load.burstiness=0.3"], "load.burstiness shapes gamma arrivals only"),
    (["load=concurrency", "load.max_concurrency=3"], "a closed loop has load.concurrency users"),
    (["load.drain_timeout_s=5"], "load.duration_s, which is not set"),
    (["workload=azure", "workload.time_scale=2", "workload.target_rate=3"], "overruled by workload.target_rate"),
    (["engine=vllm", "engine.command=[my-server]", "engine.features.max_num_seqs=4"], "engine.command replaces it"),
    (["engine=openai", "engine.extra_args=[--x]"], "launch=false is an endpoint tokenfactory does not start"),
])
def test_overruled_overrides_are_errors(overrides, needle):
    with pytest.raises(ConfigError, match=needle.replace(".", r"\.").replace("(", r"\(")):
        _apply(overrides)


@pytest.mark.parametrize("overrides, expect", [
    (["load=gamma", "load.burstiness=0.3"], {"load.kind": "gamma", "load.burstiness": 0.3}),
    (["load.duration_s=5", "load.drain_timeout_s=1"], {"load.duration_s": 5.0, "load.drain_timeout_s": 1.0}),
    (["load=poisson", "load.max_concurrency=4"], {"load.kind": "poisson", "load.max_concurrency": 4}),
    (["workload=azure", "workload.time_scale=2"], {"workload.time_scale": 2.0}),
])
def test_fine_combinations_pass(overrides, expect):
    """No error, no note, and every value typed is the value that runs."""
    from omegaconf import OmegaConf

    cfg, notes = _apply(overrides)
    assert notes == []
    assert {k: OmegaConf.select(cfg, k) for k in expect} == expect


@pytest.mark.slow
def test_the_command_line_says_so_and_runs_one_point(tmp_path):
    from engines.tiny_model import ensure_tiny_model
    from tests.fake_server import FakeServer

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with FakeServer() as srv:
        p = subprocess.run([sys.executable, "-m", "harness.cli", "run", "engine=openai",
                            f"engine.base_url={srv.base_url}", "engine.model=fake",
                            f"engine.tokenizer={ensure_tiny_model()}", "load.rate=20",
                            "load.num_requests=5", "load.warmup_requests=0", f"output_dir={tmp_path / 'out'}",
                            "mlflow.enabled=false", "report.enabled=false", "progress=false"],
                           capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "note: load.rate=20.0 given: running that one load point" in p.stdout
    assert (tmp_path / "out" / "summary.json").exists()  # one run: the folder itself, no sweep subfolders
