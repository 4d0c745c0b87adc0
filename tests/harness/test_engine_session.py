"""The engine session's console (harness.engine_session): an emulated engine said once an experiment."""

from __future__ import annotations

import pytest

from harness.engine_session import emulated_line


def test_an_emulated_engine_is_said_once_not_at_every_launch():
    """A comparison launches its engines once a repeat: the EMULATED line came under each launch (issue 44:
    no warning printed twice); now the first launch of an engine with a timing source says it."""
    emu = {"emulated": True, "timing_source": "h200-test-profile"}
    first = emulated_line("dynamo-test-once", emu)
    assert first.startswith("EMULATED: engine=dynamo-test-once's timings come from h200-test-profile, not from")
    assert emulated_line("dynamo-test-once", emu) == ""
    assert emulated_line("dynamo-test-once", {**emu, "timing_source": "other"}).startswith("EMULATED")
    assert emulated_line("vllm", {"emulated": False}) == ""


@pytest.mark.slow
def test_no_observation_window_holds_the_workload_description(tmp_path, monkeypatch):
    """Issue 43: a point's workload description (its numbers, and the figures once) took up to 1.8 s
    of a 4.75 s cost window, varying with host load, so identical engines differed in cost by it.
    Now every point's description is computed before the engine starts (where prebuild builds the
    requests): no characterisation or figure is computed after the first window opened."""
    import json
    import time

    from harness import workload_describe

    calls: list[tuple[str, int]] = []

    def timed(name, fn):
        def wrapped(*a, **k):
            calls.append((name, time.perf_counter_ns()))
            return fn(*a, **k)
        return wrapped

    monkeypatch.setattr(workload_describe, "characterise", timed("characterise", workload_describe.characterise))
    monkeypatch.setattr(workload_describe, "figures", timed("figures", workload_describe.figures))
    monkeypatch.setenv("TOKENFACTORY_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "out"
    run_against_a_fake(out, "load.rate=50", "load.num_requests=6", "protocol.load_points=[20,40]")
    metas = [json.loads(f.read_text()) for f in sorted(out.glob("*/run.json"))]
    assert len(metas) == 2
    first_open = min(m["window_start_ns"] for m in metas)
    assert sorted(name for name, _ in calls) == ["characterise", "characterise", "figures"]
    assert [name for name, t in calls if t >= first_open] == []
    assert (out / workload_describe.HTML_NAME).exists()
    for f in sorted(out.glob("*/run.json")):
        stats = json.loads(f.with_name(workload_describe.JSON_NAME).read_text())
        assert stats["requests"] == 6 + 2 and stats["workload"] == "synthetic"  # and the 2 warm-up requests


@pytest.mark.slow
@pytest.mark.parametrize("mode, periodic", [("auto", False), ("periodic", True)])
def test_a_local_engine_without_a_gpu_is_sampled_at_the_window_edges_only(tmp_path, monkeypatch, mode, periodic):
    """Issue 41, item 7: any process waking every 0.5 s beside vLLM's CPU engine (the telemetry's sampler)
    halved the closed loop's throughput on a 2-core host.  With ``telemetry.sampling=auto`` an engine on
    this host with no GPU is sampled at each window's edges only, and the summary says so; ``periodic``
    samples every ``interval_s`` as before."""
    import json

    import pyarrow.parquet as pq

    from harness import engine_session, results_io

    monkeypatch.setattr(engine_session, "host_has_gpu", lambda: False)
    monkeypatch.setenv("TOKENFACTORY_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "out"
    run_against_a_fake(out, "load.rate=10", "load.num_requests=15", "protocol.load_points=[]",
                       "telemetry.nvml.enabled=false", "telemetry.interval_s=0.1", f"telemetry.sampling={mode}")
    summary = json.loads((out / results_io.SUMMARY).read_text())
    assert summary["telemetry_sampling"] == ("periodic" if periodic else "edges")
    assert summary["telemetry_sampling_reason"] == (
        "telemetry.sampling=periodic" if periodic else
        "auto: the engine runs on this host's CPUs (no GPU here), where sampling in its window slows it; "
        "telemetry.sampling=periodic samples every interval_s")
    rows = pq.read_table(out / results_io.TELEMETRY).to_pylist()
    inside = {r["time_ns"] for r in rows if r["source"] == "host"
              and summary["window_start_ns"] < r["time_ns"] < summary["window_end_ns"]}
    # 1.5 s of load at 0.1 s: some fifteen samples inside the window; at its edges only, none inside it
    assert (len(inside) >= 8) if periodic else (len(inside) == 0), sorted(inside)


def run_against_a_fake(out, *overrides: str) -> None:
    """One experiment against the in-process fake server (constant load, no MLflow, report or idle baseline)."""
    from hydra import compose, initialize_config_module

    from engines.tiny_model import ensure_tiny_model
    from protocols.registry import protocol_experiment
    from tests.fake_server import FakeServer

    with FakeServer() as srv:
        with initialize_config_module("conf", version_base="1.3"):
            cfg = compose("config", overrides=[
                "engine=openai", f"engine.base_url={srv.base_url}", "engine.model=fake",
                f"engine.tokenizer={ensure_tiny_model()}", "load=constant", f"output_dir={out}",
                "mlflow.enabled=false", "report.enabled=false", "progress=false", "telemetry.idle_baseline_s=0",
                *overrides])
        protocol_experiment(cfg).run()
