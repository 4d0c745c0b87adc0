"""LoRA on the engine side: engine.features.lora as vLLM's flags (others refuse it by name), and
the tiny model's random adapters in peft's format, shaped for the tiny model's own layers."""

from __future__ import annotations

import json

import numpy as np
import pytest
from safetensors.numpy import load_file

from engines.base import EngineError
from engines.registry import make_engine
from engines.tiny_model import LORA_TARGETS, build_tiny_lora, ensure_tiny_model
from tests.engine_cfg import engine_cfg

LORA = {"adapters": {"a": "/ad/a", "b": "/ad/b"}, "max_rank": 8}


def _engine(name, tmp_path, **over):
    return make_engine(engine_cfg(name, **{"python": "/venv/bin/python", "model": "/m/tiny", "port": 8123, **over}),
                       tmp_path)


def test_vllm_lora_flags(tmp_path):
    flags = _engine("vllm", tmp_path, **{"features.lora": LORA}).feature_flags()
    assert flags == ["--enable-lora", "--lora-modules", "a=/ad/a", "b=/ad/b", "--max-lora-rank", "8",
                     "--max-loras", "2"]
    default_rank = _engine("vllm", tmp_path, **{"features.lora": {"adapters": {"x": "/ad/x"}}}).feature_flags()
    assert default_rank[default_rank.index("--max-lora-rank") + 1] == "16"


def test_other_engines_refuse_lora_by_name(tmp_path):
    with pytest.raises(EngineError, match="engine=sglang does not support engine.features.lora"):
        _engine("sglang", tmp_path, **{"features.lora": LORA}).check_features()


@pytest.mark.parametrize("lora, says", [
    ({"max_rank": 8}, "engine.features.lora must be a mapping like"),
    ({"adapters": {"a": "/x"}, "rank": 8}, "engine.features.lora.rank: not a key"),
    ({"adapters": {"a=b": "/x"}}, r"engine.features.lora.adapters.a=b="),
    ({"adapters": {"a": "/x"}, "max_rank": 0}, "engine.features.lora.max_rank must be >= 1"),
])
def test_bad_lora_feature_named(tmp_path, lora, says):
    with pytest.raises(EngineError, match=says):
        _engine("vllm", tmp_path, **{"features.lora": lora}).feature_flags()


def test_tiny_lora_is_peft_format_shaped_for_the_tiny_model(tmp_path):
    from safetensors import safe_open

    model = ensure_tiny_model()
    cfg = json.loads((model / "config.json").read_text())
    out = build_tiny_lora(tmp_path / "a", model, rank=8, seed=1)
    conf = json.loads((out / "adapter_config.json").read_text())
    assert (conf["peft_type"], conf["r"], conf["lora_alpha"], conf["target_modules"]) == (
        "LORA", 8, 8, ["q_proj", "k_proj", "v_proj", "o_proj"])
    w = load_file(out / "adapter_model.safetensors")
    assert len(w) == cfg["num_hidden_layers"] * len(LORA_TARGETS) * 2  # 4 layers x 4 modules x (A, B) = 32
    with safe_open(str(next(model.glob("*.safetensors"))), "np") as base:
        for i in range(cfg["num_hidden_layers"]):
            for m in LORA_TARGETS:
                out_f, in_f = base.get_tensor(f"model.layers.{i}.self_attn.{m}.weight").shape
                pre = f"base_model.model.model.layers.{i}.self_attn.{m}"
                assert w[f"{pre}.lora_A.weight"].shape == (8, in_f)
                assert w[f"{pre}.lora_B.weight"].shape == (out_f, 8)
    other = load_file(build_tiny_lora(tmp_path / "b", model, rank=8, seed=2) / "adapter_model.safetensors")
    key = "base_model.model.model.layers.0.self_attn.q_proj.lora_B.weight"
    assert not np.allclose(w[key], other[key])  # another seed: another adapter
    assert np.abs(w[key]).max() > 0  # B is not peft's zeros: the adapter changes the output
