"""Roofline lower bounds of a serving phase, from a model's ``config.json`` and a hardware
profile (``conf/hardware/``); and, for a measured point, which resource limits it.

A phase's bound is ``max(F / C, M / B)``: F floating-point operations, C the effective
FLOP/s at the compute precision, M bytes moved to or from memory, B the effective memory
bandwidth (DESIGN.md, "Metric definitions").  C and B are the profile's dense peaks times
``efficiency`` (default 1.0), summed over its accelerators (perfect tensor parallelism,
communication not counted): at 1.0 the bound is a true lower bound; below 1.0 it is an
estimate.  Everything here is pure: numbers in, numbers out.

Models supported: decoder-only transformers with a gated MLP (three matrices: gate, up,
down) and multi-head / grouped-query attention, read from a Hugging Face ``config.json``:
Llama, Mistral, Mixtral, Qwen2, Qwen2-MoE, Qwen3, Qwen3-MoE, Gemma 1-3 and the like.
Keys read (``text_config`` is used where the top level has no ``num_hidden_layers``):

- required: ``num_hidden_layers``, ``hidden_size``, ``num_attention_heads``,
  ``vocab_size``, and ``intermediate_size`` unless every layer is a mixture of experts;
- optional: ``num_key_value_heads`` (default: heads), ``head_dim`` (default:
  hidden / heads), ``tie_word_embeddings`` (default false), ``torch_dtype`` or ``dtype``,
  ``sliding_window`` with ``layer_types`` or ``use_sliding_window``, ``quantization_config``;
- mixture of experts: ``num_local_experts`` or ``num_experts``, ``num_experts_per_tok``,
  ``moe_intermediate_size`` (default ``intermediate_size``),
  ``shared_expert_intermediate_size``, ``decoder_sparse_step``, ``mlp_only_layers``.

Multi-head latent attention (DeepSeek's ``kv_lora_rank``) is refused: its KV cache is not
``2 x kv_heads x head_dim`` per layer.

Parameters counted: the linear layers, the embedding table (and the output layer unless
tied), the RMSNorm weights (two per layer and a final one).  Biases, per-head norms
(Qwen3's q/k norms) and Gemma 2/3's two extra norms per layer are left out: under 0.01% of
any model above, and leaving them out keeps the bound a lower bound.  For the same reason
every weight is counted at the quantised precision, though engines keep the embeddings
and the output layer at 16 bits.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Bytes per stored element, by canonical precision name.
BYTES_PER_ELEMENT = {"fp32": 4.0, "tf32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0,
                     "int4": 0.5, "fp4": 0.5}
_ALIASES = {"float32": "fp32", "float": "fp32", "bfloat16": "bf16", "float16": "fp16", "half": "fp16",
            "float8": "fp8", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8", "float8_e4m3fn": "fp8",
            "float8_e5m2": "fp8", "nvfp4": "fp4", "mxfp4": "fp4"}

PHASE_LIMITS = ("compute", "memory bandwidth", "KV capacity")
RESOURCES = PHASE_LIMITS + ("queueing", "the client")


# ------------------------------------------------------------------------------------ dtypes
def canonical_dtype(name: str) -> str:
    """``bfloat16`` -> ``bf16``, ``float8_e4m3fn`` -> ``fp8``, ... (keys of ``BYTES_PER_ELEMENT``)."""
    key = str(name).strip().lower().removeprefix("torch.")
    key = _ALIASES.get(key, key)
    if key not in BYTES_PER_ELEMENT:
        raise ValueError(f"unknown dtype {name!r} (known: {', '.join(BYTES_PER_ELEMENT)})")
    return key


def bytes_per_element(dtype: str) -> float:
    """fp32/tf32 4, bf16/fp16 2, fp8/int8 1, int4/fp4 0.5."""
    return BYTES_PER_ELEMENT[canonical_dtype(dtype)]


# ------------------------------------------------------------------------------------ the model
@dataclass(frozen=True)
class ModelShape:
    """What the bounds need of a model (module doc: where each field comes from).

    ``experts`` = 0 for a dense model; ``moe_layers`` of the ``layers`` have routed experts
    (each an MLP of ``expert_intermediate``), the others a dense MLP of ``intermediate``.
    ``window_layers`` of the layers attend to the last ``sliding_window`` tokens only.
    ``dtype`` is the stored (activation) precision, ``weight_dtype`` that of the quantised
    linear weights where ``quantization_config`` says so (else ``dtype``).
    """
    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tie_embeddings: bool = False
    dtype: str | None = None
    weight_dtype: str | None = None
    experts: int = 0
    experts_per_token: int = 0
    expert_intermediate: int = 0
    shared_expert_intermediate: int = 0
    moe_layers: int = 0
    sliding_window: int | None = None
    window_layers: int = 0
    model_type: str = ""
    source: str = "config.json"


def _need(cfg: Mapping, key: str, source: str):
    if cfg.get(key) is None:
        raise ValueError(f"{source}: missing key {key!r} (needed for the roofline; module doc of "
                         f"metrics/roofline.py lists the keys read)")
    return cfg[key]


_REQUIRED = object()


def _positive_int(cfg: Mapping, key: str, source: str, default=_REQUIRED) -> int:
    """``cfg[key]`` (``default`` when absent or null; required when no default) as a positive int."""
    v = cfg.get(key)
    if v is None:
        v = _need(cfg, key, source) if default is _REQUIRED else default
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"{source}: {key}={v!r}: expected a positive integer")
    return v


def _moe_layer_count(cfg: Mapping, layers: int, experts: int) -> int:
    """Layers with routed experts: all, except where Qwen-MoE's ``decoder_sparse_step``
    (layer i is sparse when (i + 1) % step == 0) or ``mlp_only_layers`` say otherwise."""
    if not experts:
        return 0
    step = cfg.get("decoder_sparse_step") or 1
    dense = set(cfg.get("mlp_only_layers") or [])
    return sum(1 for i in range(layers) if i not in dense and (i + 1) % step == 0)


def _windows(cfg: Mapping, layers: int) -> tuple[int | None, int]:
    """(window, layers using it): from ``layer_types`` ('sliding_attention') where given,
    else every layer when ``sliding_window`` is set and ``use_sliding_window`` is not false
    (Mistral v0.1).  Counting a full-attention layer as windowed only lowers the bound."""
    w = cfg.get("sliding_window")
    if not w:
        return None, 0
    types = cfg.get("layer_types")
    if types:
        return int(w), sum(1 for t in types if t == "sliding_attention")
    if cfg.get("use_sliding_window") is False:
        return None, 0
    return int(w), layers


def _weight_dtype(cfg: Mapping, dtype: str | None, source: str) -> str | None:
    """The linear weights' precision from ``quantization_config``: ``fp8`` methods -> fp8,
    ``bits`` 4 / 8 (AWQ, GPTQ, ...) -> int4 / int8; none -> ``dtype``."""
    q = cfg.get("quantization_config")
    if not q:
        return dtype
    method = str(q.get("quant_method", "")).lower()
    if "fp8" in method:
        return "fp8"
    bits = q.get("bits") or q.get("w_bit")
    if bits in (4, 8):
        return f"int{bits}"
    raise ValueError(f"{source}: quantization_config (quant_method={method!r}) not understood: "
                     f"give the weights' precision with roofline.dtype=")


def shape_from_config(cfg: Mapping[str, Any], source: str = "config.json") -> ModelShape:
    """A ``ModelShape`` from a parsed ``config.json`` (see module doc); ``ValueError`` naming
    ``source`` and the key for a missing or bad value or an unsupported architecture."""
    if cfg.get("num_hidden_layers") is None and isinstance(cfg.get("text_config"), Mapping):
        cfg = {**cfg["text_config"], **{k: v for k, v in cfg.items() if k == "quantization_config"}}
    if cfg.get("kv_lora_rank") or cfg.get("q_lora_rank"):
        raise ValueError(f"{source}: multi-head latent attention (kv_lora_rank) is not supported")
    layers = _positive_int(cfg, "num_hidden_layers", source)
    hidden = _positive_int(cfg, "hidden_size", source)
    heads = _positive_int(cfg, "num_attention_heads", source)
    kv_heads = _positive_int(cfg, "num_key_value_heads", source, default=heads)
    if heads % kv_heads:
        raise ValueError(f"{source}: num_attention_heads={heads} is not a multiple of num_key_value_heads={kv_heads}")
    if cfg.get("head_dim") is None and hidden % heads:
        raise ValueError(f"{source}: missing key 'head_dim' and hidden_size={hidden} is not a multiple of "
                         f"num_attention_heads={heads}")
    head_dim = _positive_int(cfg, "head_dim", source, default=hidden // heads)
    vocab = _positive_int(cfg, "vocab_size", source)
    key = "num_local_experts" if cfg.get("num_local_experts") else "num_experts"
    experts = _positive_int(cfg, key, source) if cfg.get(key) else 0
    moe_layers = _moe_layer_count(cfg, layers, experts)
    if moe_layers < layers:
        intermediate = _positive_int(cfg, "intermediate_size", source)
    else:
        intermediate = int(cfg.get("intermediate_size") or 0)
    per_tok = _positive_int(cfg, "num_experts_per_tok", source) if experts else 0
    expert_inter = (_positive_int(cfg, "moe_intermediate_size", source, default=intermediate or _REQUIRED)
                    if experts else 0)
    raw = cfg.get("torch_dtype") or cfg.get("dtype")
    dtype = canonical_dtype(raw) if raw else None
    window, window_layers = _windows(cfg, layers)
    return ModelShape(
        layers=layers, hidden=hidden, intermediate=intermediate, heads=heads, kv_heads=kv_heads,
        head_dim=head_dim, vocab=vocab, tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        dtype=dtype, weight_dtype=_weight_dtype(cfg, dtype, source), experts=int(experts),
        experts_per_token=per_tok, expert_intermediate=expert_inter,
        shared_expert_intermediate=int(cfg.get("shared_expert_intermediate_size") or 0) if experts else 0,
        moe_layers=moe_layers, sliding_window=window, window_layers=window_layers,
        model_type=str(cfg.get("model_type", "")), source=source)


def config_path(model: str | Path) -> Path:
    """``model`` is a folder holding ``config.json`` or the file itself."""
    p = Path(model)
    return p / "config.json" if p.is_dir() else p


def read_model_config(model: str | Path) -> ModelShape:
    """``shape_from_config`` of the ``config.json`` at ``model`` (folder or file);
    ``ValueError`` naming the file when it is missing or not JSON."""
    path = config_path(model)
    try:
        cfg = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file (engine.model must be a folder with config.json "
                         f"or a config.json path)") from None
    except (OSError, json.JSONDecodeError) as e:
        raise ValueError(f"{path}: not a readable JSON file ({e})") from None
    if not isinstance(cfg, dict):
        raise ValueError(f"{path}: expected a JSON object")
    return shape_from_config(cfg, str(path))


# ------------------------------------------------------------------------------------ parameters
@dataclass(frozen=True)
class ParamCount:
    """``total``: every parameter counted (module doc).  ``body_active``: weights of the
    layers' matrix multiplies one token goes through (attention, dense MLPs, its
    ``experts_per_token`` routed experts, shared experts, routers).  ``lm_head``: the output
    layer, vocab x hidden (multiplied also when tied to the embeddings).  ``active`` =
    body_active + lm_head.  ``expert``: one routed expert of one layer; ``routed``: all of them."""
    total: int
    body_active: int
    lm_head: int
    embedding: int
    expert: int
    routed: int

    @property
    def active(self) -> int:
        return self.body_active + self.lm_head


def attention_params(s: ModelShape) -> int:
    """Per layer: q (hidden x heads*head_dim) + k, v (hidden x kv_heads*head_dim each) + o."""
    q = s.heads * s.head_dim
    return 2 * s.hidden * q + 2 * s.hidden * s.kv_heads * s.head_dim


def mlp_params(hidden: int, intermediate: int) -> int:
    """A gated MLP: gate and up (hidden x intermediate) and down (intermediate x hidden)."""
    return 3 * hidden * intermediate


def param_counts(s: ModelShape) -> ParamCount:
    """Per MoE layer: experts x mlp(expert_intermediate) + router (hidden x experts)
    + shared expert mlp(shared_intermediate) and its gate (hidden x 1); active: the same
    with experts_per_token experts.  total = embedding (vocab x hidden) + lm_head unless
    tied + layers x attention + dense MLPs + MoE layers + (2 layers + 1) x hidden norms."""
    dense_layers = s.layers - s.moe_layers
    expert = mlp_params(s.hidden, s.expert_intermediate) if s.experts else 0
    shared = (mlp_params(s.hidden, s.shared_expert_intermediate) + s.hidden) if s.shared_expert_intermediate else 0
    router = s.hidden * s.experts
    moe_all = s.moe_layers * (s.experts * expert + router + shared)
    moe_active = s.moe_layers * (s.experts_per_token * expert + router + shared)
    layer_common = s.layers * attention_params(s) + dense_layers * mlp_params(s.hidden, s.intermediate)
    embedding = s.vocab * s.hidden
    lm_head = s.vocab * s.hidden
    norms = (2 * s.layers + 1) * s.hidden
    total = embedding + (0 if s.tie_embeddings else lm_head) + layer_common + moe_all + norms
    return ParamCount(total=total, body_active=layer_common + moe_active, lm_head=lm_head,
                      embedding=embedding, expert=expert, routed=s.moe_layers * s.experts * expert)


def weight_bytes(s: ModelShape, dtype: str) -> float:
    """All weights at rest: total parameters x bytes per element of ``dtype``."""
    return param_counts(s).total * bytes_per_element(dtype)


def experts_read(s: ModelShape, tokens: float, mode: str = "uniform") -> float:
    """Distinct routed experts a step of ``tokens`` tokens reads per MoE layer (E experts,
    k per token): ``uniform``: E (1 - (1 - k/E)^tokens), the expectation when routing is
    balanced (what routers are trained for); ``min``: k (all tokens pick the same experts:
    the strict lower bound); ``all``: E."""
    if not s.experts:
        return 0.0
    e, k = s.experts, s.experts_per_token
    if mode == "all":
        return float(e)
    if mode == "min":
        return float(min(k, e)) if tokens > 0 else 0.0
    if mode == "uniform":
        return e * (1.0 - (1.0 - k / e) ** tokens)
    raise ValueError(f"expert_reads={mode!r}: expected uniform, min or all")


def weights_read_bytes(s: ModelShape, tokens: float, dtype: str, expert_reads: str = "uniform") -> float:
    """Weight bytes a step over ``tokens`` tokens reads from memory:
    bpe x (total - routed + moe_layers x experts_read(tokens) x expert
    - embedding + min(tokens, vocab) x hidden when untied): an untied embedding table is
    only looked up (one row per token), a tied one is read whole as the output layer."""
    p = param_counts(s)
    n = p.total - p.routed + s.moe_layers * experts_read(s, tokens, expert_reads) * p.expert
    if not s.tie_embeddings:
        n -= p.embedding - min(tokens, s.vocab) * s.hidden
    return n * bytes_per_element(dtype)


def kv_bytes_per_token(s: ModelShape, kv_dtype: str) -> float:
    """2 (K and V) x layers x kv_heads x head_dim x bytes per element of ``kv_dtype``."""
    return 2 * s.layers * s.kv_heads * s.head_dim * bytes_per_element(kv_dtype)


def attended(s: ModelShape, context: int) -> int:
    """Key positions one query at context ``context`` reads, summed over layers:
    full layers ``context``, windowed layers ``min(context, sliding_window)``."""
    full = s.layers - s.window_layers
    return full * context + s.window_layers * min(context, s.sliding_window or context)


def causal_pairs(length: int, window: int | None = None) -> int:
    """(query, key) pairs of a causal prompt of ``length``: sum over i < length of
    min(i + 1, window) = length (length + 1) / 2 without a window."""
    w = length if window is None else min(window, length)
    return w * (w + 1) // 2 + (length - w) * w


# ------------------------------------------------------------------------------------ rates
@dataclass(frozen=True)
class Rates:
    """Effective rates: ``flops`` (FLOP/s) = peak_tflops[precision] x 1e12 x devices x
    efficiency, ``bandwidth`` (B/s) = memory_bandwidth_gbs x 1e9 x devices x efficiency,
    ``memory_bytes`` = memory_gb x 1e9 x devices.  devices = num_accelerators, or 1 for a
    host without accelerators (its profile describes the host)."""
    flops: float
    bandwidth: float
    memory_bytes: float | None
    devices: int
    precision: str
    efficiency: float = 1.0


def rates(profile: Mapping[str, Any], precision: str, efficiency: float = 1.0) -> Rates:
    """``Rates`` of a hardware profile (the keys of ``conf/schema/hardware.py``'s ``Hardware``);
    ``ValueError`` naming ``hardware.peak_tflops.<precision>`` or
    ``hardware.memory_bandwidth_gbs`` when the profile lacks it."""
    if not 0 < efficiency <= 1:
        raise ValueError(f"efficiency={efficiency}: must be in (0, 1]")
    precision = canonical_dtype(precision)
    name = profile.get("name", "?")
    peak = (profile.get("peak_tflops") or {}).get(precision)
    if not peak:
        have = ", ".join(sorted(profile.get("peak_tflops") or {})) or "none"
        raise ValueError(f"hardware={name}: no hardware.peak_tflops.{precision} (has: {have}); "
                         f"pick another roofline.dtype / roofline.compute_dtype or add it to the profile")
    bw = profile.get("memory_bandwidth_gbs")
    if not bw:
        raise ValueError(f"hardware={name}: no hardware.memory_bandwidth_gbs")
    devices = max(1, int(profile.get("num_accelerators") or 0))
    mem = profile.get("memory_gb")
    return Rates(flops=peak * 1e12 * devices * efficiency, bandwidth=bw * 1e9 * devices * efficiency,
                 memory_bytes=mem * 1e9 * devices if mem else None, devices=devices,
                 precision=precision, efficiency=efficiency)


# ------------------------------------------------------------------------------------ bounds
@dataclass(frozen=True)
class Bound:
    """One phase: ``flops`` (F), ``bytes`` (M), ``compute_s`` = F / C, ``memory_s`` = M / B,
    ``seconds`` = max of the two, ``limit`` the larger one's resource."""
    flops: float
    bytes: float
    compute_s: float
    memory_s: float

    @property
    def seconds(self) -> float:
        return max(self.compute_s, self.memory_s)

    @property
    def ms(self) -> float:
        return self.seconds * 1e3

    @property
    def limit(self) -> str:
        """``compute`` when F / C >= M / B, else ``memory bandwidth``."""
        return "compute" if self.compute_s >= self.memory_s else "memory bandwidth"


def bound(flops: float, nbytes: float, r: Rates) -> Bound:
    """max(F / C, M / B) with C, B from ``r``."""
    return Bound(flops=flops, bytes=nbytes, compute_s=flops / r.flops, memory_s=nbytes / r.bandwidth)


def prefill_flops(s: ModelShape, batch: int, prompt: int) -> float:
    """2 x body_active x batch x prompt (each token through every layer) + 2 x lm_head x batch
    (logits of the last position only, as serving engines compute them) + attention
    batch x 4 x heads x head_dim x sum over layers of causal_pairs(prompt, window):
    QK^T and AV, 2 x head_dim FLOPs each per (query, key) pair; causal, so about half of
    4 x layers x prompt^2 x heads x head_dim (masked blocks are skipped by flash kernels)."""
    p = param_counts(s)
    full = s.layers - s.window_layers
    pairs = full * causal_pairs(prompt) + s.window_layers * causal_pairs(prompt, s.sliding_window)
    return 2.0 * p.body_active * batch * prompt + 2.0 * p.lm_head * batch + 4.0 * batch * s.heads * s.head_dim * pairs


def prefill_bytes(s: ModelShape, batch: int, prompt: int, dtype: str, kv_dtype: str,
                  expert_reads: str = "uniform") -> float:
    """weights_read_bytes(batch x prompt tokens) + batch x prompt x kv_bytes_per_token
    (the prompt's KV written once)."""
    tokens = batch * prompt
    return weights_read_bytes(s, tokens, dtype, expert_reads) + tokens * kv_bytes_per_token(s, kv_dtype)


def decode_flops(s: ModelShape, batch: int, context: int) -> float:
    """One step (one new token per sequence): 2 x active x batch + attention
    4 x batch x heads x head_dim x attended(context) (= 4 x layers x batch x context x heads
    x head_dim without windows)."""
    p = param_counts(s)
    return 2.0 * p.active * batch + 4.0 * batch * s.heads * s.head_dim * attended(s, context)


def decode_bytes(s: ModelShape, batch: int, context: int, dtype: str, kv_dtype: str,
                 expert_reads: str = "uniform") -> float:
    """weights_read_bytes(batch tokens) + batch x attended(context) / layers x
    kv_bytes_per_token (= batch x context x KV bytes per token without windows): every
    sequence's cached K and V read once.  The new token's K/V write (1/context of the read)
    and activations are left out."""
    kv_layer = kv_bytes_per_token(s, kv_dtype) / s.layers
    return weights_read_bytes(s, batch, dtype, expert_reads) + batch * attended(s, context) * kv_layer


def prefill_bound(s: ModelShape, batch: int, prompt: int, r: Rates, dtype: str, kv_dtype: str,
                  expert_reads: str = "uniform") -> Bound:
    """Prefill of ``batch`` prompts of ``prompt`` tokens in one pass: max(F / C, M / B) with
    ``prefill_flops`` and ``prefill_bytes``; a lower bound on the batch's time to first token."""
    return bound(prefill_flops(s, batch, prompt), prefill_bytes(s, batch, prompt, dtype, kv_dtype, expert_reads), r)


def decode_bound(s: ModelShape, batch: int, context: int, r: Rates, dtype: str, kv_dtype: str,
                 expert_reads: str = "uniform") -> Bound:
    """One decode step of ``batch`` sequences at ``context`` tokens: max(F / C, M / B) with
    ``decode_flops`` and ``decode_bytes``.  Each sequence gets one token per step, so the
    step time is also the bound on its time per output token (TPOT / ITL); the batch's
    output rate is at most batch / step time."""
    return bound(decode_flops(s, batch, context), decode_bytes(s, batch, context, dtype, kv_dtype, expert_reads), r)


# ------------------------------------------------------------------------------------ KV capacity
@dataclass(frozen=True)
class KvCapacity:
    """``tokens``: KV tokens that fit = floor((memory x utilization - weight bytes) / KV bytes
    per token), 0 when the weights alone do not fit; ``needed`` = batch x context;
    ``fits`` = needed <= tokens."""
    tokens: int
    needed: int
    free_bytes: float

    @property
    def fits(self) -> bool:
        return self.needed <= self.tokens


def kv_capacity(s: ModelShape, r: Rates, dtype: str, kv_dtype: str, batch: int, context: int,
                utilization: float = 0.9) -> KvCapacity | None:
    """``KvCapacity`` in ``r.memory_bytes`` (all devices) x ``utilization`` (the share an
    engine may take: vLLM's gpu_memory_utilization defaults to 0.9) after the weights;
    None when the profile gives no memory size.  Windowed layers are counted in full
    (engines that keep only the window fit more)."""
    if not 0 < utilization <= 1:
        raise ValueError(f"utilization={utilization}: must be in (0, 1]")
    if r.memory_bytes is None:
        return None
    free = r.memory_bytes * utilization - weight_bytes(s, dtype)
    tokens = max(0, math.floor(free / kv_bytes_per_token(s, kv_dtype)))
    return KvCapacity(tokens=tokens, needed=batch * context, free_bytes=free)


def phase_limit(b: Bound, capacity: KvCapacity | None = None) -> str:
    """The roofline's limit of a phase: ``KV capacity`` when the batch's KV does not fit
    (the bound is then not reachable at that batch), else ``b.limit``."""
    if capacity is not None and not capacity.fits:
        return "KV capacity"
    return b.limit


# ------------------------------------------------------------------------------------ measured points
@dataclass(frozen=True)
class EngineEvidence:
    """What a run measured beyond latency (``summary.json`` keys in ``from_summary``):
    the engine's most requests waiting, highest KV-cache usage (0..1), preemptions, and
    whether the load generator flagged itself as the bottleneck."""
    max_waiting: float | None = None
    kv_usage_max: float | None = None
    preemptions: float | None = None
    client_limited: bool = False

    @classmethod
    def from_summary(cls, summary: Mapping[str, Any]) -> EngineEvidence:
        """From ``engine_waiting_max``, ``engine_kv_cache_usage_max``, ``engine_preemptions``
        and ``client_limited`` (absent or NaN: unknown)."""
        def num(key):
            v = summary.get(key)
            return None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)

        return cls(max_waiting=num("engine_waiting_max"), kv_usage_max=num("engine_kv_cache_usage_max"),
                   preemptions=num("engine_preemptions"), client_limited=bool(summary.get("client_limited")))


def limiting_resource(roofline_limit: str, evidence: EngineEvidence | None = None, kv_full: float = 0.95) -> str:
    """The resource that limits a measured point, first rule that holds:

    1. ``the client``: the load generator was the bottleneck (``client_limited``), so the
       engine's figures describe the offered load, not the engine;
    2. ``KV capacity``: preemptions > 0 or KV usage >= ``kv_full``; checked before queueing
       because a full KV cache is what makes requests wait;
    3. ``queueing``: the engine held requests waiting (max waiting > 0) with KV to spare;
    4. else ``roofline_limit`` (compute, memory bandwidth, or KV capacity from the roofline).
    """
    e = evidence or EngineEvidence()
    if e.client_limited:
        return "the client"
    if (e.preemptions or 0) > 0 or (e.kv_usage_max is not None and e.kv_usage_max >= kv_full):
        return "KV capacity"
    if (e.max_waiting or 0) > 0:
        return "queueing"
    return roofline_limit


@dataclass(frozen=True)
class Classification:
    """A measured point against its bound: ``ratio`` = measured / roofline (>= 1 when the
    bound holds; 1 is the hardware's limit) and the ``limit`` from ``limiting_resource``."""
    measured_ms: float
    bound_ms: float
    ratio: float
    limit: str


def classify(measured_ms: float, bound_ms: float, roofline_limit: str = "memory bandwidth",
             evidence: EngineEvidence | None = None, kv_full: float = 0.95) -> Classification:
    """ratio = measured_ms / bound_ms (NaN when the bound is not positive) and
    limiting_resource(roofline_limit, evidence, kv_full)."""
    ratio = measured_ms / bound_ms if bound_ms > 0 else math.nan
    return Classification(measured_ms=measured_ms, bound_ms=bound_ms, ratio=ratio,
                          limit=limiting_resource(roofline_limit, evidence, kv_full))


# ------------------------------------------------------------------------------------ a measured run
def run_roofline(summary: Mapping[str, Any], shape: ModelShape, profile: Mapping[str, Any],
                 dtype: str, kv_dtype: str | None = None) -> dict:
    """A run against its roofline: the decode step's bound at the batch the engine held
    (``engine_running_mean``, else ``mean_in_flight``) and a context of the mean prompt plus
    half the mean output, the prefill bound of one mean prompt, the run's median TPOT and TTFT
    over them, and the resource that limits the run (``limiting_resource`` with the engine's
    evidence).  Keys ``roofline_*``, ``tpot_over_roofline``, ``ttft_over_roofline``,
    ``bottleneck``; ``roofline_unavailable_reason`` instead when the inputs are missing."""
    kv_dtype = kv_dtype or dtype
    n = summary.get("completed") or 0
    if not n:
        return {"roofline_unavailable_reason": "no completed request"}
    batch = summary.get("engine_running_mean")
    if batch is None or (isinstance(batch, float) and math.isnan(batch)):
        batch = summary.get("mean_in_flight")
    if batch is None or not batch > 0:
        return {"roofline_unavailable_reason": "no batch size known (engine_running_mean, mean_in_flight)"}
    prompt = (summary.get("total_input_tokens") or 0) / n
    output = (summary.get("total_output_tokens") or 0) / n
    r = rates(profile, dtype)
    b = max(1, int(round(batch)))
    dec = decode_bound(shape, b, max(1, int(prompt + output / 2)), r, dtype, kv_dtype)
    pre = prefill_bound(shape, 1, max(1, int(prompt)), r, dtype, kv_dtype)
    ev = EngineEvidence.from_summary(summary)
    tpot, ttft = summary.get("median_tpot_ms"), summary.get("median_ttft_ms")
    cls = classify(tpot if tpot is not None else math.nan, dec.ms, dec.limit, ev)
    out = {"roofline_batch": b, "roofline_context": int(prompt + output / 2), "roofline_dtype": canonical_dtype(dtype),
           "roofline_decode_ms": dec.ms, "roofline_decode_limit": dec.limit, "roofline_prefill_ms": pre.ms,
           "roofline_prefill_limit": pre.limit, "tpot_over_roofline": cls.ratio,
           "ttft_over_roofline": (ttft / pre.ms) if ttft is not None and pre.ms > 0 else math.nan,
           "bottleneck": cls.limit}
    return out
