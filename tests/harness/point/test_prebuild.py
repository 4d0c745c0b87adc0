"""Before the engine starts (harness.point.prebuild): each point's workload built, described and its
requests prepared, pinned on a multi-point sweep of a trace workload and of a synthetic one."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

# sha256 of what a sweep's points were described and prepared as before the two loops over the points
# (prebuild, describe_ahead) became one pass (issue 42): a change to either is a change of the requests.
PINNED = {
    "trace": "445064801ddcafe9b2aad89d61e97203253d65ee3f9f1f77d0aa90efa57f9294",
    "synthetic": "153885e3779fdd8371f99dd864692cabb3f11dc2708ee5c773e9243bfbe4162b",
}


def _trace(path) -> str:
    rng = np.random.default_rng(5)
    rows = [json.dumps({"timestamp": 40 * i, "input_length": int(rng.integers(20, 200)),
                        "output_length": int(rng.integers(4, 40)), "hash_ids": [i % 3, 10 + i]})
            for i in range(30)]
    path.write_text("\n".join(rows) + "\n")
    return str(path)


def _built_ahead(tmp_path, monkeypatch, overrides: list[str]) -> dict:
    """What ``EngineSession.build_ahead`` made of a sweep's points: each described table and its
    description, and each point's prepared requests with the prompt builder's state after them."""
    from hydra import compose, initialize_config_module

    from engines.tiny_model import ensure_tiny_model
    from harness import workload_describe
    from harness.engine_session import EngineSession
    from loadgen import prepare
    from protocols.sweep.load_points import plan_runs

    described, prepared = [], []
    characterise = workload_describe.characterise

    def pinned_characterise(table, lengths):
        described.append({"arrival_s": np.asarray(table.arrival_s).tolist(),
                          "input_tokens": np.asarray(table.input_tokens).tolist(),
                          "output_tokens": np.asarray(table.output_tokens).tolist(),
                          "lengths": [np.asarray(x).tolist() for x in lengths]})
        return characterise(table, lengths=lengths)

    store = prepare.PrepareCache.store

    def pinned_store(cache, entries):
        prepared.append({"entries": [(e.index, e.item.request_id, e.item.prompt_tokens, e.item.max_tokens,
                                      e.item.arrival_s, e.offset_ns, e.payload.hex()) for e in entries],
                         "end_state": cache.end_state()})
        return store(cache, entries)

    monkeypatch.setattr(workload_describe, "characterise", pinned_characterise)
    monkeypatch.setattr(prepare.PrepareCache, "store", pinned_store)
    monkeypatch.setenv("TOKENFACTORY_CACHE", str(tmp_path / "cache"))
    with initialize_config_module("conf", version_base="1.3"):
        cfg = compose("config", overrides=[
            "engine=openai", "engine.base_url=http://127.0.0.1:9", "engine.model=fake",
            f"engine.tokenizer={ensure_tiny_model()}", f"output_dir={tmp_path / 'out'}", "mlflow.enabled=false",
            "report.enabled=false", "progress=false", *overrides])
    session = EngineSession(cfg, tmp_path / "out", total_points=2)
    points = plan_runs(cfg)
    assert session.build_ahead(points) is None
    descriptions = {str(k): (d.stats, d.figures) for k, d in session.workload_descriptions.items()}
    return {"described": described, "descriptions": descriptions, "prepared": prepared,
            "builder_state": session.builder.rng.bit_generator.state}


@pytest.mark.slow  # 10 s a case: a tokenizer, two workloads built, described (the figures too) and prepared
@pytest.mark.parametrize("kind,overrides", [
    ("trace", ["workload=mooncake", "load=trace", "protocol.load_points=[{num_requests: 8}, {num_requests: 12}]"]),
    ("synthetic", ["load=constant", "load.num_requests=6", "protocol.load_points=[20,40]", "workload.seed=3",
                   "workload.input_dist.kind=lognormal", "workload.input_dist.sigma=0.5"]),
])
def test_each_points_description_and_requests_are_as_pinned(tmp_path, monkeypatch, kind, overrides):
    if kind == "trace":
        overrides = [*overrides, f"workload.path={_trace(tmp_path / 'trace.jsonl')}"]
    made = _built_ahead(tmp_path, monkeypatch, overrides)
    assert len(made["descriptions"]) == 2 and len(made["prepared"]) == 2
    assert [figures for _stats, figures in made["descriptions"].values()] == [True, False]  # drawn once
    text = json.dumps(made, sort_keys=True, default=str).replace(str(tmp_path), "<tmp>")
    assert hashlib.sha256(text.encode()).hexdigest() == PINNED[kind], text[:2000]
