"""The quality gate: greedy outputs on a fixed prompt set against the baseline's, and an
external evaluation command; a failing config has no good tokens."""

from __future__ import annotations

import json
import math
import sys

import pyarrow.parquet as pq
import pytest
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

from harness.quality_gate import judge, prompt_set
from metrics.output_agreement import first_divergence, set_agreement, token_agreement


def test_agreement_by_hand():
    assert token_agreement([1, 2, 3, 4], [1, 2, 3, 4]).to_dict() == {
        "agreement": 1.0, "first_divergence": None, "matched": 4, "length_a": 4, "length_b": 4}
    a = token_agreement([1, 2, 3, 4], [1, 2, 9, 4])
    assert (a.agreement, a.first_divergence) == (0.75, 2)
    short = token_agreement([1, 2, 3, 4], [1, 2])  # stopping early is not agreement
    assert (short.agreement, short.first_divergence) == (0.5, 2)
    assert first_divergence([], []) is None and token_agreement([], []).agreement == 1.0
    s = set_agreement([([1, 2], [1, 2]), ([1, 2, 3, 4], [1, 9, 3, 4]), ([5], [6])])
    assert s["mean_agreement"] == pytest.approx((1 + 0.75 + 0) / 3)
    assert s["identical_share"] == pytest.approx(1 / 3)
    assert (s["median_first_divergence"], s["min_first_divergence"]) == (0.5, 0)


def test_a_bad_prompt_file_is_named_with_its_line(tmp_path):
    f = tmp_path / "prompts.jsonl"
    f.write_text('{"prompt": "hello"}\n{"prompt": 3}\n')
    q = OmegaConf.create({"prompts_path": str(f), "num_prompts": 16})
    with pytest.raises(ValueError, match=r"prompts.jsonl:2: needs a \"prompt\" field"):
        prompt_set(q, None)
    f.write_text('{"prompt": "hello"}\nnot json\n')
    with pytest.raises(ValueError, match=r"prompts.jsonl:2: not JSON"):
        prompt_set(q, None)
    f.write_text('{"prompt": "hello"}\n\n{"prompt": [{"role": "user", "content": "hi"}]}\n')
    assert prompt_set(q, None) == ["hello", [{"role": "user", "content": "hi"}]]


def _quality(folder, config, block, outputs, score=None, digest="d"):
    folder.mkdir(parents=True, exist_ok=True)
    rec = {"config": config, "block": block, "prompts_sha256": digest, "failed": 0,
           "outputs": [{"status": "ok", "tokens": t} for t in outputs]}
    if score is not None:
        rec["eval"] = {"score": score}
    (folder / "quality.json").write_text(json.dumps(rec))


def test_judge_pairs_by_block_and_says_why(tmp_path):
    q = OmegaConf.create({"min_agreement": 0.9, "eval_max_drop": 0.05, "eval_command": ["x"]})
    _quality(tmp_path / "base0", "base", 0, [[1, 2, 3, 4], [5, 6]], score=0.80)
    _quality(tmp_path / "base1", "base", 1, [[1, 2, 3, 4], [5, 7]], score=0.78)   # the noise floor
    _quality(tmp_path / "kv0", "kv", 0, [[1, 2, 3, 4], [5, 6]], score=0.77)
    _quality(tmp_path / "kv1", "kv", 1, [[1, 2, 3, 4], [5, 7]], score=0.77)     # same as base's block 1
    _quality(tmp_path / "spec0", "spec", 0, [[1, 9, 9, 9], [5, 6]], score=0.79)
    _quality(tmp_path / "spec1", "spec", 1, [[1, 9, 9, 9], [5, 7]], score=0.60)
    sessions = [("base", 0, tmp_path / "base0"), ("base", 1, tmp_path / "base1"), ("kv", 0, tmp_path / "kv0"),
                ("kv", 1, tmp_path / "kv1"), ("spec", 0, tmp_path / "spec0"), ("spec", 1, tmp_path / "spec1")]
    v = judge(sessions, "base", q)["configs"]
    assert v["base"]["passed"] and v["base"]["mean_agreement"] == pytest.approx(0.75)  # (1 + 0.5) / 2
    assert v["kv"]["passed"] and v["kv"]["mean_agreement"] == 1.0  # block 1 against base's block 1
    assert not v["spec"]["passed"]
    why = v["spec"]["reason"]
    assert "agreement with base 0.625 < quality.min_agreement 0.900 (first divergence at token 1)" in why
    assert "evaluation score 0.695 < baseline's 0.79" in v["spec"]["reason"]
    _quality(tmp_path / "kv1", "kv", 1, [[1, 2, 3, 4], [5, 7]], score=0.77, digest="other")
    v = judge(sessions, "base", q)["configs"]
    assert not v["kv"]["passed"] and "different prompt set" in v["kv"]["reason"]
    # the baseline's requests failed (its engine was gone): nothing to judge against, and said so
    rec = json.loads((tmp_path / "base0" / "quality.json").read_text())
    for o in rec["outputs"]:
        o.update(status="connection_error", tokens=[])
    (tmp_path / "base0" / "quality.json").write_text(json.dumps(rec))
    v = judge(sessions[:1] + sessions[4:5], "base", q)["configs"]
    assert not v["spec"]["passed"] and "not judged: the baseline's prompt-set requests failed" in v["spec"]["reason"]


@pytest.mark.slow
def test_a_config_that_changes_outputs_fails_the_gate_and_has_no_good_tokens(tmp_path):
    from engines.tiny_model import ensure_tiny_model
    from protocols.registry import protocol_experiment
    from tests.fake_server import FakeServer

    out = tmp_path / "out"
    # the score an evaluation would give: lower for the model whose outputs changed
    script = tmp_path / "evaluate.py"
    script.write_text("import sys\nprint('acc=' + ('0.40' if 'cat' in sys.argv[1] else '0.80'))\n")
    with FakeServer() as srv:
        overrides = [
            "protocol=compare", "engine=openai", f"engine.base_url={srv.base_url}",
            f"engine.tokenizer={ensure_tiny_model()}", "load=constant", "load.num_requests=6",
            "load.warmup_requests=0", "protocol.load_points=[20]", "protocol.repeats=2",
            # each verdict at 95 %: the family's Bonferroni (the default) over two repeats read 300 ms against 5
            # as no difference on a loaded host (the slow suite beside other workers); the gate is what is tested
            "protocol.adjust=none",
            # base 300 ms to the first token against 5: two repeats (a t with one degree of freedom)
            # judge it faster on a loaded host too (30 against 5 read as no difference beside other tests)
            'protocol.configs={base: ["engine.model=fake-ttft_ms:300"], '
            'fast: ["engine.model=fake-ttft_ms:5"], wrong: ["engine.model=fake-ttft_ms:5-word:cat"]}',
            "quality.num_prompts=4", "quality.max_tokens=8",
            f"quality.eval_command=[{sys.executable},{script},'{{model}}']",
            "quality.eval_score_regex='acc=([0-9.]+)'", "quality.eval_max_drop=0.1",
            f"output_dir={out}", "mlflow.enabled=false", "report.enabled=false", "progress=false",
            "telemetry.idle_baseline_s=0"]
        with initialize_config_module("conf", version_base="1.3"):
            cfg = compose("config", overrides=overrides)
            exp = protocol_experiment(cfg, overrides=overrides)
        exp.run()
        greedy = [r for r in srv.requests if r.get("temperature") == 0.0]
    assert len(greedy) == 3 * 2 * 4 and all(r["max_tokens"] == 8 for r in greedy)
    q = json.loads((out / "wrong" / "block0" / "quality.json").read_text())
    assert q["prompts"] == 4 and q["failed"] == 0 and q["eval"]["score"] == 0.40
    record = json.loads((out / "experiment.json").read_text())
    gate = record["quality_gate"]["configs"]
    assert gate["fast"]["passed"] and gate["fast"]["mean_agreement"] == 1.0
    assert not gate["wrong"]["passed"] and gate["wrong"]["mean_agreement"] == 0.0
    assert "evaluation score 0.4 < baseline's 0.8" in gate["wrong"]["reason"]
    runs = {(r["config"], r["block"]): r for r in pq.read_table(out / "runs.parquet").to_pylist()}
    wrong, fast = runs[("wrong", 0)], runs[("fast", 0)]
    assert wrong["quality_gate_passed"] is False and wrong["goodput_rps"] == 0.0
    assert wrong["goodput_rps_ungated"] > 0 and math.isinf(wrong["cost_per_mtok_good"])
    assert fast["quality_gate_passed"] is True and fast["goodput_rps"] > 0
    cmp = json.loads((out / "comparison.json").read_text())
    assert set(cmp["quality_gate_failed"]) == {"wrong"}
    verdicts = cmp["points"][0]["metrics"]["goodput_rps"]["vs_baseline"]
    assert verdicts["wrong"]["verdict"] == "a_better" and "fails the quality gate" in verdicts["wrong"]["text"]
    ttft = cmp["points"][0]["metrics"]["p50_ttft_ms"]["vs_baseline"]["wrong"]
    assert ttft["verdict"] == "b_better"  # it is faster; speed is still reported, only good tokens are gated


@pytest.mark.parametrize("overrides, enabled", [
    (["engine=dynamo"], False),                          # mocker workers: random tokens, nothing to agree on
    (["engine=dynamo", "quality.enabled=true"], True),   # asked for by name
    (["engine=dynamo", "engine.worker=vllm"], True),     # real workers: measured outputs
    (["engine=vllm"], True),
])
def test_the_gate_is_off_by_default_on_an_emulated_engine(overrides, enabled):
    from harness.experiment_record import seven_steps
    from harness.quality_gate import gate_enabled
    from protocols.designs import design_of

    with initialize_config_module("conf", version_base="1.3"):
        cfg = compose("config", overrides=["protocol=ablation", *overrides])
    assert gate_enabled(cfg, design_of(cfg)) is enabled
    step1 = seven_steps(cfg, design_of(cfg), True, points=1, configs=2)[0]
    assert ("emulated engine" in step1["how"]) is (not enabled)
