"""Replays the first minutes of the public traces (time-scaled, a few requests) against the
real embedded engine (``transformers serve`` with the tiny model).

The traces are read from ``$TOKENFACTORY_TRACES`` or ``../shared/traces`` next to the
repository; the test is skipped, saying so, where they are absent.  One engine serves both
replays (it starts in about 45 s on a 2-core CPU).  Prompts are clipped to 640 tokens and
outputs to 8: the tiny model on a CPU is slow.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
TRACES = Path(os.environ.get("TOKENFACTORY_TRACES") or REPO.parent / "shared" / "traces")
FILES = {"azure": TRACES / "azure_llm_2023" / "AzureLLMInferenceTrace_code.csv",
         "mooncake": TRACES / "mooncake_fast25" / "conversation_trace.jsonl"}


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    if not TRACES.is_dir():
        pytest.skip(f"public traces not found at {TRACES} (set TOKENFACTORY_TRACES to their folder)")
    from hydra import compose, initialize_config_module

    from engines.registry import make_engine

    with initialize_config_module(config_module="conf", version_base="1.3"):
        cfg = compose("config", overrides=["engine=transformers"])
    eng = make_engine(cfg.engine, tmp_path_factory.mktemp("engine"))
    eng.start()
    try:
        yield eng
    finally:
        eng.stop()


@pytest.mark.parametrize("fmt", ["azure", "mooncake"])
def test_replay_first_minutes(engine, fmt, tmp_path):
    from hydra import compose, initialize_config_module

    from loadgen.workloads.traces.replay import load_table
    from protocols.registry import protocol_experiment

    path = FILES[fmt]
    if not path.exists():
        pytest.skip(f"{path} is absent")
    n = 6
    overrides = ["engine=openai", f"engine.base_url={engine.base_url}", f"engine.model={engine.served_model}",
                 f"engine.tokenizer={engine.tokenizer}", "engine.max_model_len=640",
                 "load=trace", "load.max_concurrency=3", "protocol.load_points=[]",
                 f"workload={fmt}", f"workload.path={path}", "workload.window=[0,120]", "workload.time_scale=20",
                 f"workload.max_requests={n}", "workload.on_too_long=clip", "workload.max_output_tokens=8",
                 f"output_dir={tmp_path / 'run'}", f"mlflow.tracking_uri=sqlite:///{tmp_path / 'mlflow.db'}",
                 "progress=false"]
    with initialize_config_module(config_module="conf", version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    out = protocol_experiment(cfg).run()

    import json

    summary = json.loads((out / "summary.json").read_text())
    assert summary["num_requests"] == n and summary["completed"] == n, summary
    assert summary["prompt_tokens_mismatch"] == 0  # the server counted exactly the prompt lengths we built
    reqs = pq.read_table(out / "requests.parquet").to_pandas().sort_values("request_id")
    # The schedule is the trace's own: offsets of the first n requests, window-shifted and / 20.
    table = load_table(cfg.workload)
    expect = (np.sort(table.arrival_s) * 1e9).astype(np.int64)
    got = np.sort(reqs["scheduled_ns"].to_numpy() - reqs["scheduled_ns"].min())
    assert np.abs(got - (expect - expect[0])).max() <= 1  # int(off * 1e9) rounding
    assert (reqs["output_tokens"] <= 8).all() and (reqs["prompt_tokens"] + reqs["output_tokens"] <= 640).all()
    wl = json.loads((out / "workload.json").read_text())
    assert wl["requests"] == n and summary["workload_requests"] == n
    if fmt == "mooncake":
        assert wl["prefix_info"] == "hash_ids" and wl["prefix_reuse_share"] > 0
    assert "<h2>Workload</h2>" in (out / "report.html").read_text()
