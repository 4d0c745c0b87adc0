"""Builds the embedded default model: a tiny random-weight Llama with a byte-level BPE tokenizer.

Serving performance does not depend on weight values, so a random model lets anyone try the
harness on a laptop CPU without downloading weights.  The build is deterministic (fixed seeds)
and cached under a folder named after its parameters, so every run of the same version serves
the same model.

The model cannot generate a token whose text is empty or incomplete on its own: special
tokens (a streaming server skips them), lone bytes of multi-byte UTF-8 characters (a streaming
detokenizer holds them back until the character completes, which a random model seldom does)
and control characters.  Left reachable, a random model that settles into repeating one of
them streams no text at all while generating ``max_tokens`` tokens (builder version 1 did so
for about 1 request in 300).  End-of-text is among them, so every output runs to
``max_tokens``.  ``forbid_tokens`` explains how.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

# The parameters that define the model; the cache folder's name is a hash of them, so a
# change here builds a new model instead of serving a stale one.
TINY_SPEC = {
    "vocab_size": 2048,
    "hidden_size": 256,
    "intermediate_size": 688,
    "num_hidden_layers": 4,
    "num_attention_heads": 8,
    "num_key_value_heads": 4,
    "max_position_embeddings": 4096,
    "seed": 1234,
    "corpus_lines": 4000,
    "forbid_residual": 0.1,
    "forbid_logit_scale": 100.0,
    "builder_version": 2,
}

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}<|end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)

SPECIAL_TOKENS = ["<|endoftext|>", "<|pad|>", "<|end|>", "<|user|>", "<|assistant|>", "<|system|>"]


def cache_root() -> Path:
    """tokenfactory's cache (built models, prepared requests): ``$TOKENFACTORY_CACHE``, else
    ``$XDG_CACHE_HOME/tokenfactory`` or ``~/.cache/tokenfactory``."""
    root = os.environ.get("TOKENFACTORY_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "tokenfactory"
    )
    return Path(root)


def default_cache_dir() -> Path:
    return cache_root() / "models"


def spec_digest(spec: dict | None = None) -> str:
    spec = spec or TINY_SPEC
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:12]


def _corpus(n_lines: int, seed: int) -> list[str]:
    """Pseudo-English lines: syllable words with a Zipf-like frequency, so BPE learns whole words."""
    rng = random.Random(seed)
    onsets = ["b", "c", "d", "f", "g", "h", "j", "k", "l", "m", "n", "p", "r", "s", "t", "v", "w",
              "st", "tr", "pl", "gr", "ch", "sh", "th", "br", "cl"]
    vowels = ["a", "e", "i", "o", "u", "ai", "ea", "ou", "io"]
    codas = ["", "", "n", "r", "s", "t", "l", "m", "nd", "st", "ck"]
    words = sorted({
        "".join(rng.choice(onsets) + rng.choice(vowels) + rng.choice(codas) for _ in range(rng.randint(1, 3)))
        for _ in range(3000)
    })
    weights = [1.0 / (i + 1) ** 0.8 for i in range(len(words))]
    lines = []
    for _ in range(n_lines):
        n = rng.randint(6, 24)
        sent = rng.choices(words, weights=weights, k=n)
        lines.append(" ".join(sent).capitalize() + rng.choice([".", ".", "?", "!", ","]))
    return lines


def unstreamable_ids(tokenizer) -> list[int]:
    """Token ids whose text on its own is empty, has an incomplete UTF-8 character (U+FFFD)
    or a control character other than newline and tab."""
    ids = list(range(len(tokenizer)))
    texts = tokenizer.batch_decode([[i] for i in ids], skip_special_tokens=True)
    special = set(tokenizer.all_special_ids)
    return [i for i, t in zip(ids, texts)
            if i in special or not t or "\ufffd" in t or not all(c.isprintable() or c in "\n\t" for c in t)]


def forbid_tokens(model, ids: list[int], residual: float, scale: float) -> None:
    """Make ``ids`` unreachable for greedy decoding and sampling alike, whatever the context.

    Llama's output layer has no bias, so the model gets one: the last hidden dimension of every
    token embedding holds the constant ``residual`` and no layer writes to it (its rows of
    o_proj and down_proj are zero), so after the final RMSNorm it is positive at every
    position.  The forbidden tokens' output rows read only that dimension, with weight
    ``-scale``; every other row ignores it.  Their logits stay far below every other token's.
    """
    import torch

    k = model.config.hidden_size - 1
    with torch.no_grad():
        model.model.embed_tokens.weight[:, k] = residual
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight[k, :] = 0.0
            layer.mlp.down_proj.weight[k, :] = 0.0
        head = model.lm_head.weight
        head[:, k] = 0.0
        head[ids, :] = 0.0
        head[ids, k] = -scale


@contextmanager
def staged_dir(out_dir: Path):
    """A temporary folder beside ``out_dir`` to write into: on success it replaces ``out_dir`` by
    a rename (no reader sees a half-written folder), on any failure it is removed."""
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out_dir.name + ".", dir=out_dir.parent))
    try:
        yield tmp
        if out_dir.exists():
            shutil.rmtree(out_dir)
        os.replace(tmp, out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def build_tiny_model(out_dir: str | os.PathLike, spec: dict | None = None) -> Path:
    """Build the model and tokenizer into ``out_dir`` (written to a temp folder, then renamed)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    spec = dict(spec or TINY_SPEC)
    out_dir = Path(out_dir)
    with staged_dir(out_dir) as tmp:
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=spec["vocab_size"],
            special_tokens=SPECIAL_TOKENS,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
        tok.train_from_iterator(_corpus(spec["corpus_lines"], spec["seed"]), trainer=trainer)
        fast = PreTrainedTokenizerFast(
            tokenizer_object=tok,
            bos_token="<|endoftext|>",
            eos_token="<|endoftext|>",
            pad_token="<|pad|>",
            model_max_length=spec["max_position_embeddings"],
        )
        fast.chat_template = CHAT_TEMPLATE
        fast.save_pretrained(tmp)

        torch.manual_seed(spec["seed"])
        cfg = LlamaConfig(
            vocab_size=len(fast),
            hidden_size=spec["hidden_size"],
            intermediate_size=spec["intermediate_size"],
            num_hidden_layers=spec["num_hidden_layers"],
            num_attention_heads=spec["num_attention_heads"],
            num_key_value_heads=spec["num_key_value_heads"],
            max_position_embeddings=spec["max_position_embeddings"],
            bos_token_id=fast.bos_token_id,
            eos_token_id=fast.eos_token_id,
            pad_token_id=fast.pad_token_id,
            tie_word_embeddings=False,
            torch_dtype="float32",
        )
        model = LlamaForCausalLM(cfg)
        forbidden = unstreamable_ids(fast)
        forbid_tokens(model, forbidden, spec["forbid_residual"], spec["forbid_logit_scale"])
        model.generation_config = GenerationConfig(
            bos_token_id=fast.bos_token_id, eos_token_id=fast.eos_token_id, pad_token_id=fast.pad_token_id,
            do_sample=False,
        )
        model.save_pretrained(tmp)
        (tmp / "tokenfactory_tiny.json").write_text(json.dumps(
            {"spec": spec, "digest": spec_digest(spec), "forbidden_ids": forbidden}, indent=2))
    return out_dir


def ensure_tiny_model(cache_dir: str | os.PathLike | None = None) -> Path:
    """Return the cached tiny model's folder, building it on first use."""
    base = Path(cache_dir) if cache_dir else default_cache_dir()
    target = base / f"tiny-llama-{spec_digest()}"
    if (target / "tokenfactory_tiny.json").exists():
        return target
    return build_tiny_model(target)


LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")


def build_tiny_lora(out_dir: str | os.PathLike, model_dir: str | os.PathLike, rank: int = 8, seed: int = 0,
                    alpha: float | None = None, scale: float = 0.05) -> Path:
    """A random-weight LoRA adapter for the Llama in ``model_dir`` (the tiny model), in peft's
    format as vLLM's ``--lora-modules NAME=PATH`` loads it: ``adapter_config.json`` and
    ``adapter_model.safetensors`` with ``base_model.model.model.layers.{i}.self_attn.{q,k,v,o}_proj
    .lora_{A,B}.weight`` (A: rank x in, B: out x rank).  B is random, not peft's zeros, so each
    adapter (another ``seed``) changes the model's output.  Written by hand (numpy, safetensors):
    no peft dependency."""
    import numpy as np
    from safetensors.numpy import save_file

    cfg = json.loads((Path(model_dir) / "config.json").read_text())
    hidden, layers = int(cfg["hidden_size"]), int(cfg["num_hidden_layers"])
    head = int(cfg.get("head_dim") or hidden // int(cfg["num_attention_heads"]))
    kv = int(cfg.get("num_key_value_heads") or cfg["num_attention_heads"]) * head
    q = int(cfg["num_attention_heads"]) * head
    shapes = {"q_proj": (hidden, q), "k_proj": (hidden, kv), "v_proj": (hidden, kv), "o_proj": (q, hidden)}
    rng = np.random.default_rng(seed)
    tensors = {}
    for i in range(layers):
        for m in LORA_TARGETS:
            fan_in, fan_out = shapes[m]
            pre = f"base_model.model.model.layers.{i}.self_attn.{m}"
            tensors[f"{pre}.lora_A.weight"] = (rng.standard_normal((rank, fan_in)) * scale).astype(np.float32)
            tensors[f"{pre}.lora_B.weight"] = (rng.standard_normal((fan_out, rank)) * scale).astype(np.float32)
    config = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": str(model_dir),
              "r": rank, "lora_alpha": alpha if alpha is not None else rank, "lora_dropout": 0.0,
              "target_modules": list(LORA_TARGETS), "bias": "none", "fan_in_fan_out": False,
              "inference_mode": True, "modules_to_save": None, "use_rslora": False, "use_dora": False,
              "init_lora_weights": True, "revision": None}
    out_dir = Path(out_dir)
    with staged_dir(out_dir) as tmp:
        save_file(tensors, str(tmp / "adapter_model.safetensors"), metadata={"format": "pt"})
        (tmp / "adapter_config.json").write_text(json.dumps(config, indent=2))
    return out_dir


if __name__ == "__main__":  # python -m engines.tiny_model [DIR]
    import sys

    print(build_tiny_model(sys.argv[1]) if len(sys.argv) > 1 else ensure_tiny_model())
