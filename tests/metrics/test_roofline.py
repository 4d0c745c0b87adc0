"""Roofline bounds (metrics/roofline.py) against numbers worked out by hand, the hardware
profiles in conf/hardware/, and the `tokenfactory roofline` command (harness/commands/roofline.py,
harness/roofline_table.py)."""

import importlib.util
import json
import math
from pathlib import Path

import pytest

from harness.commands.roofline import main as roofline_command
from harness.commands.roofline import split_options
from harness.roofline_table import Options, precisions
from metrics import roofline as rl

ROOT = Path(__file__).resolve().parents[2]

# The embedded tiny model's config.json (engines/tiny_model.py, TINY_SPEC).
TINY = {"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 256, "intermediate_size": 688,
        "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 32, "vocab_size": 2048,
        "tie_word_embeddings": False, "dtype": "float32"}

# Meta-Llama-3-8B's shape (its published config.json, the keys read here).
LLAMA3_8B = {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, "intermediate_size": 14336,
             "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
             "tie_word_embeddings": False, "torch_dtype": "bfloat16"}

# A toy mixture of experts small enough to count by hand.
TOY_MOE = {"model_type": "mixtral", "num_hidden_layers": 2, "hidden_size": 8, "intermediate_size": 16,
           "num_attention_heads": 2, "num_key_value_heads": 1, "vocab_size": 10, "num_local_experts": 4,
           "num_experts_per_tok": 2, "torch_dtype": "bfloat16"}

H100 = {"name": "h100", "num_accelerators": 1, "peak_tflops": {"bf16": 989.5, "fp32": 67},
        "memory_bandwidth_gbs": 3350, "memory_gb": 80}


def write_config(tmp_path: Path, cfg: dict, name: str = "model") -> Path:
    d = tmp_path / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(cfg))
    return d


# ------------------------------------------------------------------------------------ parameters
def test_tiny_model_parameters_by_hand():
    s = rl.shape_from_config(TINY)
    p = rl.param_counts(s)
    attn = 256 * 256 + 2 * 256 * (4 * 32) + 256 * 256        # q, k, v, o = 196,608
    mlp = 3 * 256 * 688                                       # 528,384
    assert p.body_active == 4 * (attn + mlp) == 2_899_968
    assert p.lm_head == p.embedding == 2048 * 256 == 524_288
    assert p.total == 2 * 524_288 + 2_899_968 + (2 * 4 + 1) * 256 == 3_950_848
    assert rl.weight_bytes(s, "fp32") == 4 * 3_950_848
    assert rl.kv_bytes_per_token(s, "fp32") == 2 * 4 * 4 * 32 * 4 == 4096


def test_llama3_8b_parameter_count_is_the_published_one():
    s = rl.shape_from_config(LLAMA3_8B)
    p = rl.param_counts(s)
    assert s.head_dim == 128 and s.dtype == "bf16"
    assert p.total == 8_030_261_248                           # Meta's figure for Llama-3-8B
    assert p.body_active == 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336)
    assert rl.kv_bytes_per_token(s, "bf16") == 2 * 32 * 8 * 128 * 2 == 131_072


def test_counts_match_transformers_on_the_meta_device():
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    for cfg in (transformers.LlamaConfig(**{k: v for k, v in TINY.items() if k != "model_type"}),
                transformers.MixtralConfig(vocab_size=100, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                           num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
                                           num_experts_per_tok=2)):
        with torch.device("meta"):
            model = transformers.AutoModelForCausalLM.from_config(cfg)
        assert rl.param_counts(rl.shape_from_config(cfg.to_dict())).total == model.num_parameters()


def test_moe_counts_all_for_bytes_and_active_for_flops():
    s = rl.shape_from_config(TOY_MOE)
    p = rl.param_counts(s)
    # head_dim 4; attention 8x8 + 2 x 8x4 + 8x8 = 192 per layer; expert 3 x 8 x 16 = 384; router 8 x 4 = 32
    assert (s.head_dim, s.experts, s.experts_per_token, s.moe_layers, s.expert_intermediate) == (4, 4, 2, 2, 16)
    assert p.expert == 384 and p.routed == 2 * 4 * 384
    assert p.total == 80 + 80 + 2 * (192 + 4 * 384 + 32) + 5 * 8 == 3720
    assert p.body_active == 2 * (192 + 2 * 384 + 32) == 1984
    assert p.active == 1984 + 80
    assert rl.decode_flops(s, 1, 1) == 2 * 2064 + 4 * 1 * 2 * 4 * 2  # attention: 4 x layers x L x heads x head_dim
    # uniform routing: E (1 - (1 - k/E)^T) experts per layer: 2 for one token, 3 for two, -> 4
    assert rl.experts_read(s, 1) == 2 and rl.experts_read(s, 2) == 3
    assert rl.experts_read(s, 1000) == pytest.approx(4)
    assert rl.experts_read(s, 64, "min") == 2 and rl.experts_read(s, 1, "all") == 4
    # one token reads: everything but routed experts and the embedding table, + 2 experts x 2 layers + 1 row
    assert rl.weights_read_bytes(s, 1, "bf16") == 2 * (3720 - 3072 + 2 * 2 * 384 - 80 + 8)


def test_qwen2_moe_shared_expert_and_sparse_step():
    cfg = {"model_type": "qwen2_moe", "num_hidden_layers": 4, "hidden_size": 8, "intermediate_size": 12,
           "moe_intermediate_size": 4, "shared_expert_intermediate_size": 6, "num_attention_heads": 2,
           "num_key_value_heads": 2, "vocab_size": 10, "num_experts": 3, "num_experts_per_tok": 1,
           "decoder_sparse_step": 2, "mlp_only_layers": [3], "torch_dtype": "bfloat16"}
    s = rl.shape_from_config(cfg)
    p = rl.param_counts(s)
    assert s.moe_layers == 1                                  # layers 1 and 3 sparse by step, 3 made dense
    attn = 4 * 8 * 8
    moe = 3 * (3 * 8 * 4) + 8 * 3 + (3 * 8 * 6 + 8)          # experts + router + shared expert and its gate
    assert p.total == 80 + 80 + 4 * attn + 3 * (3 * 8 * 12) + moe + 9 * 8
    assert p.body_active == 4 * attn + 3 * (3 * 8 * 12) + moe - 2 * (3 * 8 * 4)


def test_dtypes_and_bytes():
    assert [rl.bytes_per_element(d) for d in ("float32", "bfloat16", "fp16", "float8_e4m3fn", "int8", "int4",
                                               "fp4")] == [4, 2, 2, 1, 1, 0.5, 0.5]
    with pytest.raises(ValueError, match="unknown dtype 'fp7'"):
        rl.canonical_dtype("fp7")


def test_quantization_config_sets_the_weights_precision():
    awq = rl.shape_from_config({**LLAMA3_8B, "quantization_config": {"quant_method": "awq", "bits": 4}})
    fp8 = rl.shape_from_config({**LLAMA3_8B, "quantization_config": {"quant_method": "fp8"}})
    assert (awq.weight_dtype, awq.dtype, fp8.weight_dtype) == ("int4", "bf16", "fp8")
    # weight-only int4: matmuls and KV at the activations' bf16; fp8: fp8 matmuls, KV at bf16 (vLLM's auto)
    assert precisions(awq, Options()) .__dict__ == {"weights": "int4", "compute": "bf16", "kv": "bf16"}
    assert precisions(fp8, Options()).__dict__ == {"weights": "fp8", "compute": "fp8", "kv": "bf16"}
    tiny = rl.shape_from_config(TINY)
    assert precisions(tiny, Options(dtype="bf16")).__dict__ == {"weights": "bf16", "compute": "bf16", "kv": "bf16"}
    assert precisions(tiny, Options(), {"kv_cache_dtype": "fp8", "dtype": "auto"}).kv == "fp8"


# ------------------------------------------------------------------------------------ bounds
def test_llama3_8b_decode_on_h100_by_hand():
    s = rl.shape_from_config(LLAMA3_8B)
    r = rl.rates(H100, "bf16")
    b = rl.decode_bound(s, 1, 2048, r, "bf16", "bf16")
    flops = 2 * (8_030_261_248 - 2 * 525_336_576 - 266_240 + 525_336_576) + 4 * 32 * 2048 * 32 * 128
    nbytes = 2 * (8_030_261_248 - 525_336_576 + 4096) + 2048 * 131_072
    assert b.flops == flops == 16_083_058_688
    assert b.bytes == nbytes == 15_278_292_992
    assert b.ms == pytest.approx(nbytes / 3350e9 * 1e3) == pytest.approx(4.5607, abs=1e-4)
    assert b.compute_s == pytest.approx(flops / 989.5e12)
    assert b.limit == "memory bandwidth"
    # 64 sequences: weights read once, KV 64 times
    b64 = rl.decode_bound(s, 64, 2048, r, "bf16", "bf16")
    assert b64.bytes == 2 * (8_030_261_248 - 525_336_576 + 64 * 4096) + 64 * 2048 * 131_072
    assert b64.ms == pytest.approx(b64.bytes / 3350e9 * 1e3)


def test_llama3_8b_prefill_on_h100_by_hand():
    s = rl.shape_from_config(LLAMA3_8B)
    b = rl.prefill_bound(s, 1, 2048, rl.rates(H100, "bf16"), "bf16", "bf16")
    body = 32 * (2 * 4096 * 4096 + 2 * 4096 * 1024 + 3 * 4096 * 14336)
    # every token through the layers, logits for the last position, causal attention 2048 x 2049 / 2 pairs
    flops = 2 * body * 2048 + 2 * 525_336_576 + 4 * 32 * 32 * 128 * (2048 * 2049 // 2)
    assert b.flops == flops == 29_688_401_494_016
    assert b.bytes == 2 * (8_030_261_248 - 525_336_576 + 2048 * 4096) + 2048 * 131_072
    assert b.limit == "compute"
    assert b.ms == pytest.approx(flops / 989.5e12 * 1e3) == pytest.approx(30.003, abs=1e-3)


def test_sliding_window_layers_read_only_the_window():
    cfg = {**TINY, "sliding_window": 16, "layer_types": ["sliding_attention", "full_attention"] * 2}
    s = rl.shape_from_config(cfg)
    assert (s.sliding_window, s.window_layers) == (16, 2)
    assert rl.attended(s, 100) == 2 * 100 + 2 * 16
    assert rl.causal_pairs(5) == 15 and rl.causal_pairs(5, 2) == 1 + 2 + 2 + 2 + 2
    assert rl.decode_bytes(s, 1, 100, "fp32", "fp32") == 4 * (3_950_848 - 524_288 + 256) + (2 * 100 + 2 * 16) * 1024
    # Qwen2 writes a window but switches it off; Mistral v0.1 windows every layer
    assert rl.shape_from_config({**TINY, "sliding_window": 16, "use_sliding_window": False}).window_layers == 0
    assert rl.shape_from_config({**TINY, "sliding_window": 16}).window_layers == 4


def test_kv_capacity_and_its_limit():
    s = rl.shape_from_config(LLAMA3_8B)
    r = rl.rates(H100, "bf16")
    cap = rl.kv_capacity(s, r, "bf16", "bf16", 64, 2048)
    # (80 GB x 0.9 - 16,060,522,496 B of weights) / 131,072 B per token
    assert cap.tokens == (72_000_000_000 - 16_060_522_496) // 131_072 == 426_784
    assert cap.fits and cap.needed == 131_072
    big = rl.kv_capacity(s, r, "bf16", "bf16", 256, 2048)
    assert not big.fits
    assert rl.phase_limit(rl.decode_bound(s, 256, 2048, r, "bf16", "bf16"), big) == "KV capacity"
    tiny_memory = {**H100, "memory_gb": 10}
    assert rl.kv_capacity(s, rl.rates(tiny_memory, "bf16"), "bf16", "bf16", 1, 1).tokens == 0  # weights do not fit
    assert rl.kv_capacity(s, rl.rates({**H100, "memory_gb": None}, "bf16"), "bf16", "bf16", 1, 1) is None


def test_rates_efficiency_and_devices():
    r = rl.rates({**H100, "num_accelerators": 8}, "bfloat16", efficiency=0.5)
    assert r.flops == pytest.approx(989.5e12 * 8 * 0.5) and r.bandwidth == pytest.approx(3350e9 * 8 * 0.5)
    assert rl.rates({**H100, "num_accelerators": 0}, "bf16").devices == 1   # a host is one device
    with pytest.raises(ValueError, match=r"hardware\.peak_tflops\.fp8 \(has: bf16, fp32\)"):
        rl.rates(H100, "fp8")
    with pytest.raises(ValueError, match="efficiency"):
        rl.rates(H100, "bf16", efficiency=0)


# ------------------------------------------------------------------------------------ measured points
def test_limiting_resource_rules_in_order():
    ev = rl.EngineEvidence
    assert rl.limiting_resource("compute") == "compute"
    assert rl.limiting_resource("memory bandwidth", ev(max_waiting=0, kv_usage_max=0.5, preemptions=0)) \
        == "memory bandwidth"
    assert rl.limiting_resource("compute", ev(max_waiting=3, kv_usage_max=0.5)) == "queueing"
    assert rl.limiting_resource("compute", ev(max_waiting=3, kv_usage_max=0.97)) == "KV capacity"
    assert rl.limiting_resource("compute", ev(preemptions=1)) == "KV capacity"
    assert rl.limiting_resource("compute", ev(max_waiting=3, preemptions=2, client_limited=True)) == "the client"
    assert rl.limiting_resource("compute", ev(kv_usage_max=0.9), kv_full=0.85) == "KV capacity"


def test_evidence_from_a_summary_and_classify():
    e = rl.EngineEvidence.from_summary({"engine_waiting_max": 2.0, "engine_kv_cache_usage_max": float("nan"),
                                        "engine_preemptions": 0, "client_limited": False})
    assert (e.max_waiting, e.kv_usage_max, e.preemptions, e.client_limited) == (2.0, None, 0.0, False)
    c = rl.classify(9.0, 4.5, "memory bandwidth", e)
    assert (c.ratio, c.limit) == (2.0, "queueing")
    assert rl.classify(3.0, 4.5).ratio == pytest.approx(2 / 3)   # below 1: the bound (or the data) is wrong
    assert math.isnan(rl.classify(1.0, 0.0).ratio)


# ------------------------------------------------------------------------------------ bad configs
@pytest.mark.parametrize("drop, key", [("hidden_size", "hidden_size"), ("num_hidden_layers", "num_hidden_layers"),
                                       ("vocab_size", "vocab_size"), ("intermediate_size", "intermediate_size")])
def test_missing_key_names_the_file_and_key(tmp_path, drop, key):
    d = write_config(tmp_path, {k: v for k, v in TINY.items() if k != drop})
    with pytest.raises(ValueError, match=rf"{d / 'config.json'}: missing key '{key}'"):
        rl.read_model_config(d)


def test_bad_configs(tmp_path):
    with pytest.raises(ValueError, match="no such file"):
        rl.read_model_config(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="not a readable JSON file"):
        rl.read_model_config(tmp_path / "config.json")
    with pytest.raises(ValueError, match="latent attention"):
        rl.shape_from_config({**TINY, "kv_lora_rank": 512}, "ds.json")
    with pytest.raises(ValueError, match="not a multiple of num_key_value_heads=3"):
        rl.shape_from_config({**TINY, "num_key_value_heads": 3})
    with pytest.raises(ValueError, match="hidden_size=-1: expected a positive integer"):
        rl.shape_from_config({**TINY, "hidden_size": -1})
    with pytest.raises(ValueError, match="missing key 'moe_intermediate_size'"):
        rl.shape_from_config({k: v for k, v in TOY_MOE.items() if k != "intermediate_size"})
    with pytest.raises(ValueError, match="missing key 'num_experts_per_tok'"):
        rl.shape_from_config({k: v for k, v in TOY_MOE.items() if k != "num_experts_per_tok"})
    with pytest.raises(ValueError, match="quantization_config"):
        rl.shape_from_config({**TINY, "quantization_config": {"quant_method": "mystery"}})


def test_text_config_of_a_multimodal_model():
    s = rl.shape_from_config({"model_type": "gemma3", "text_config": {**TINY, "tie_word_embeddings": True}})
    assert s.layers == 4 and s.tie_embeddings
    assert rl.param_counts(s).total == 3_950_848 - 524_288


# ------------------------------------------------------------------------------------ profiles
@pytest.mark.parametrize("name", ["h100", "h200", "b200", "mi300x", "cpu_host"])
def test_hardware_profiles_compose_with_sources(name):
    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf

    with initialize_config_module(config_module="conf", version_base="1.3"):
        hw = OmegaConf.to_container(compose("config", overrides=[f"hardware={name}"]).hardware)
    assert hw["name"] == name and hw["source"]
    assert hw["memory_gb"] > 0 and hw["memory_bandwidth_gbs"] > 0
    r = rl.rates(hw, "bf16")
    assert r.flops > 0 and r.bandwidth > 0


def test_dense_figures_are_half_the_sparse_ones():
    import yaml

    def peak(name):
        return yaml.safe_load((ROOT / "conf" / "hardware" / f"{name}.yaml").read_text())["peak_tflops"]

    assert peak("h100")["bf16"] == peak("h200")["bf16"] == 1979 / 2
    assert peak("h100")["fp8"] == 3958 / 2
    assert peak("b200")["bf16"] == 4500 / 2 and peak("b200")["fp4"] == 18000 / 2
    assert peak("mi300x")["bf16"] == pytest.approx(2614.9 / 2, abs=0.06)


def test_cpu_host_profile_script_reads_meminfo(tmp_path):
    spec = importlib.util.spec_from_file_location("cpu_host_profile", ROOT / "benchmarks" / "cpu_host_profile.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    f = tmp_path / "meminfo"
    f.write_text("MemTotal:       24684092 kB\nMemFree: 1 kB\n")
    assert mod.mem_total_gb(str(f)) == pytest.approx(24684092 * 1024 / 1e9)
    assert mod.best_seconds(lambda: None, 0.01) >= 0


# ------------------------------------------------------------------------------------ the command
def _table(out: str) -> dict[int, list[str]]:
    """Rows of the command's table by batch size (columns split on two spaces)."""
    rows = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip().split("  ") if c.strip()]
        if cells and cells[0].isdigit() and len(cells) == 12:
            rows[int(cells[0])] = cells
    return rows


def test_command_llama3_8b_on_h100(tmp_path, capsys):
    d = write_config(tmp_path, LLAMA3_8B)
    rc = roofline_command([f"engine.model={d}", "hardware=h100", "roofline.batch=[1,64,256]",
                           "roofline.context=2048"])
    out = capsys.readouterr().out
    assert rc == 0
    assert "total 8,030,261,248" in out
    assert "= 131,072 B" in out and "hardware.peak_tflops.bf16 989.5" in out
    assert "-> 426,784 KV tokens fit" in out
    rows = _table(out)
    assert rows[1][3] == "30.00" and rows[1][4] == "compute"             # prefill ms, limit
    assert rows[1][7] == "4.561" and rows[1][8] == "memory bandwidth"    # decode ms/token, limit
    assert rows[64][8] == "memory bandwidth" and rows[256][8] == "KV capacity"
    assert rows[256][10] == "524,288" and rows[256][11] == "426,784"


def test_command_tiny_model_by_default(tmp_path, capsys, monkeypatch):
    from engines import tiny_model

    d = write_config(tmp_path, TINY)
    monkeypatch.setattr(tiny_model, "ensure_tiny_model", lambda: d)
    assert roofline_command(["hardware=cpu_host", "roofline.batch=1", "roofline.context=2048"]) == 0
    out = capsys.readouterr().out
    assert "total 3,950,848" in out and "hardware.peak_tflops.fp32 0.22" in out
    row = _table(out)[1]
    # decode: (4 x 3,426,816 weight bytes + 2048 x 4096 KV bytes) / 47 GB/s
    assert float(row[7]) == pytest.approx((4 * 3_426_816 + 2048 * 4096) / 47e9 * 1e3, rel=1e-3)


def test_command_errors_are_one_line(tmp_path, capsys):
    d = write_config(tmp_path, TINY)
    cases = [
        ([f"engine.model={tmp_path / 'nope'}"], "nope: no such file"),
        ([f"engine.model={d}", "hardware=h100", "roofline.dtype=bf16", "~hardware.peak_tflops.bf16"],
         "hardware.peak_tflops.bf16"),
        ([f"engine.model={d}", "roofline.batchsize=4"], "roofline.batchsize=4: unknown roofline option"),
        ([f"engine.model={d}", "roofline.context=0"], "roofline.context=0: expected a positive integer"),
        ([f"engine.model={d}", "roofline.kv_dtype=fp7"], "roofline.kv_dtype=fp7: unknown dtype"),
        ([f"engine.model={d}", "hardware=nosuch"], "Could not find 'hardware/nosuch'"),
    ]
    for argv, msg in cases:
        assert roofline_command(argv) == 2, argv
        err = capsys.readouterr().err
        assert msg in err and err.count("\n") == 1, err


def test_split_options_leaves_hydra_overrides():
    opts, rest = split_options(["hardware=h100", "roofline.batch=[1,8]", "+roofline.prompt=512",
                                "roofline.dtype=bfloat16", "engine.model=/m"])
    assert rest == ["hardware=h100", "engine.model=/m"]
    assert (opts.batch, opts.prompt, opts.dtype, opts.context) == ([1, 8], 512, "bf16", 2048)
