"""One vocabulary of optimisation knobs (``engine.features.*``) that ablations toggle.

Each adapter translates the knobs it supports into its own flags; a knob it does not
support is an error naming the engine and the knob (``EngineAdapter.check_features``).
The shared names, with what they mean:

- ``prefix_caching`` (bool): reuse the KV cache of a common prompt prefix across requests.
- ``chunked_prefill`` (bool) with ``max_num_batched_tokens`` (int): split long prefills into
  chunks scheduled beside decodes; the token budget of one scheduler step.
- ``max_num_seqs`` (int): the most requests running at once.
- ``kv_cache_dtype`` (str): the KV cache's element type (``auto``, ``fp8`` ...).
- ``quantization`` (str): the weight quantisation method.
- ``speculative`` (mapping): ``method`` (``ngram``, ``eagle``, ``draft_model`` ...),
  ``draft_model`` (path or name), ``num_tokens`` (draft tokens per step), plus any of the
  engine's own keys.
- ``tensor_parallel_size`` (int): ranks one model is sharded over.
- ``enforce_eager`` (bool): no CUDA graphs / compiled graphs.
- ``attention_backend`` (str): the attention kernel family.
- ``dtype`` (str): weights and activations' type.

Beside them, ``lora`` (mapping, vLLM only): ``adapters`` ({name: local adapter folder}) served
beside the model under those names, ``max_rank`` (the largest adapter rank, default 16);
``workload.lora`` sends requests to them by name.
"""

from __future__ import annotations

SHARED_KNOBS = frozenset({
    "prefix_caching", "chunked_prefill", "max_num_batched_tokens", "max_num_seqs", "kv_cache_dtype",
    "quantization", "speculative", "tensor_parallel_size", "enforce_eager", "attention_backend", "dtype",
})
SPECULATIVE_KEYS = ("method", "draft_model", "num_tokens")
LORA_KNOB = "lora"
LORA_DEFAULT_RANK = 16  # vLLM's own --max-lora-rank default

_BOOL = ("prefix_caching", "chunked_prefill", "enforce_eager")
_INT = ("max_num_batched_tokens", "max_num_seqs", "tensor_parallel_size")


class FeatureError(ValueError):
    """A knob with a value of the wrong kind; the message names the knob."""


def as_bool(name: str, v) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, str) and v.lower() in ("true", "false"):
        return v.lower() == "true"
    raise FeatureError(f"engine.features.{name} must be true or false, got {v!r}")


def as_int(name: str, v) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise FeatureError(f"engine.features.{name} must be a whole number, got {v!r}")
    try:
        n = int(v)
    except ValueError:
        raise FeatureError(f"engine.features.{name} must be a whole number, got {v!r}") from None
    if n < 1:
        raise FeatureError(f"engine.features.{name} must be >= 1, got {n}")
    return n


def normalize(feats: dict) -> dict:
    """Check the types of the shared knobs; return a copy with bools and ints resolved."""
    out = dict(feats)
    for k in _BOOL:
        if k in out:
            out[k] = as_bool(k, out[k])
    for k in _INT:
        if k in out:
            out[k] = as_int(k, out[k])
    if "speculative" in out:
        spec = out["speculative"]
        if not isinstance(spec, dict):
            raise FeatureError("engine.features.speculative must be a mapping like "
                               "{method: ngram, num_tokens: 4} or "
                               "{method: draft_model, draft_model: PATH, num_tokens: 4}")
        spec = {k: v for k, v in spec.items() if v is not None}
        if not spec.get("method"):
            raise FeatureError("engine.features.speculative.method is required (e.g. ngram, eagle, draft_model)")
        if "num_tokens" in spec:
            spec["num_tokens"] = as_int("speculative.num_tokens", spec["num_tokens"])
        out["speculative"] = spec
    if LORA_KNOB in out:
        out[LORA_KNOB] = _lora(out[LORA_KNOB])
    return out


def _lora(lora) -> dict:
    """``engine.features.lora`` checked: ``{adapters: {name: path}, max_rank: int}``."""
    adapters = lora.get("adapters") if isinstance(lora, dict) else None
    if not isinstance(adapters, dict) or not adapters:
        raise FeatureError("engine.features.lora must be a mapping like {adapters: {a: /path/to/a, b: /path/to/b}, "
                           "max_rank: 8}")
    unknown = sorted(set(lora) - {"adapters", "max_rank"})
    if unknown:
        raise FeatureError(f"engine.features.lora.{unknown[0]}: not a key (known: adapters, max_rank)")
    for name, path in adapters.items():
        if not str(name).strip() or "=" in str(name) or not path:
            raise FeatureError(f"engine.features.lora.adapters.{name}={path!r}: a name (without '=') and a path")
    rank = as_int("lora.max_rank", lora["max_rank"]) if lora.get("max_rank") is not None else LORA_DEFAULT_RANK
    return {"adapters": {str(k): str(v) for k, v in adapters.items()}, "max_rank": rank}
