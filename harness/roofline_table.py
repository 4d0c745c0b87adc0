"""The roofline table of ``tokenfactory roofline``: the lower bound of prefill and of a decode
step per batch size, from the model's ``config.json`` alone (no weights) and a hardware profile
(``conf/hardware/``), with the inputs it used (parameters, weight bytes, KV bytes per token, C,
B) so every number can be checked by hand; the formulas are in ``metrics/roofline.py``, the
options (``Options``) in ``harness/commands/roofline.py``."""


from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from metrics import roofline as rl


@dataclass
class Options:
    """``roofline.*`` options (``harness/commands/roofline.py``); None: the default described there."""
    batch: list[int] = field(default_factory=lambda: [1, 64])
    context: int = 2048
    prompt: int | None = None
    dtype: str | None = None
    compute_dtype: str | None = None
    kv_dtype: str | None = None
    efficiency: float = 1.0
    memory_utilization: float = 0.9
    expert_reads: str = "uniform"


# ------------------------------------------------------------------------------------ inputs
def _engine_dtype(features, key: str) -> str | None:
    """An ``engine.features`` precision, or None when unset or ``auto``."""
    v = (features or {}).get(key) if hasattr(features, "get") else None
    return None if v in (None, "", "auto") else str(v)


def resolve_model_dir(model: str | None) -> Path:
    """``engine.model``: a folder or ``config.json`` path; a Hugging Face name found in the
    local cache; null: the embedded tiny model (built on first use)."""
    if model is None:
        from engines import tiny_model

        return tiny_model.ensure_tiny_model()
    p = Path(model).expanduser()
    if p.exists() or "/" not in model or model.startswith((".", "/", "~")):
        return p
    try:  # offline: a hub name the cache already holds
        from huggingface_hub import try_to_load_from_cache

        hit = try_to_load_from_cache(model, "config.json")
    except Exception:  # noqa: BLE001 - an invalid repo name or no hub library: treat as a path
        hit = None
    return Path(hit) if isinstance(hit, str) else p


@dataclass(frozen=True)
class Precisions:
    weights: str
    compute: str
    kv: str


_WIDE_FLOATS = ("fp32", "tf32", "bf16", "fp16")   # formats activations are kept in
_INT_WEIGHTS = ("int4", "int8")                   # weight-only formats: the matmuls run at the activations'


def precisions(shape: rl.ModelShape, opts: Options, features=None) -> Precisions:
    """The weights', matmuls' and KV cache's precisions:

    - weights: roofline.dtype, else engine.features.dtype, else the config's quantisation,
      else its torch_dtype / dtype;
    - activations: the dtype given when it is a 16- or 32-bit float, else the config's;
    - compute: roofline.compute_dtype, else the weights' (int4 / int8 weights: the
      activations', as weight-only kernels do);
    - KV: roofline.kv_dtype, else engine.features.kv_cache_dtype, else the activations'
      (what vLLM's kv_cache_dtype=auto does)."""
    given = opts.dtype or _engine_dtype(features, "dtype")
    given = rl.canonical_dtype(given) if given else None
    weights = given or shape.weight_dtype or shape.dtype
    if weights is None:
        raise ValueError(f"{shape.source}: no torch_dtype or dtype: give roofline.dtype=")
    act = given if given in _WIDE_FLOATS else shape.dtype
    compute = opts.compute_dtype or (act if weights in _INT_WEIGHTS else weights)
    if compute is None:
        raise ValueError(f"roofline.dtype={weights}: give the matmuls' precision with roofline.compute_dtype=")
    kv = opts.kv_dtype or _engine_dtype(features, "kv_cache_dtype") or act or compute
    return Precisions(weights, rl.canonical_dtype(compute), rl.canonical_dtype(kv))


# ------------------------------------------------------------------------------------ the table
def _g(x: float) -> str:
    """Four significant digits (trailing zeros kept, so 30.00 reads as 4 digits); whole
    numbers with thousands separators from 1,000 up."""
    return f"{x:,.0f}" if abs(x) >= 1000 else f"{x:#.4g}"


def _bytes(x: float) -> str:
    return f"{x / 1e9:.4g} GB ({x:,.0f} B)"


def input_lines(shape, p: rl.ParamCount, prec: Precisions, r: rl.Rates, hw: dict, opts: Options,
                prompt: int, cap: rl.KvCapacity | None) -> list[str]:
    """The numbers every bound is made of, with where each comes from."""
    n = r.devices
    kvb = rl.kv_bytes_per_token(shape, prec.kv)
    moe = (f"; MoE {shape.experts} experts, {shape.experts_per_token} per token, in {shape.moe_layers} of "
           f"{shape.layers} layers; expert reads: {opts.expert_reads}") if shape.experts else ""
    window = (f"; {shape.window_layers} layers attend to the last {shape.sliding_window} tokens"
              if shape.window_layers else "")
    lines = [
        f"model        {shape.source} ({shape.model_type or '?'}): {shape.layers} layers, hidden {shape.hidden}, "
        f"{shape.heads} heads, {shape.kv_heads} KV heads, head_dim {shape.head_dim}, vocab {shape.vocab}, "
        f"intermediate {shape.intermediate}{moe}{window}",
        f"params       total {p.total:,}; active per token {p.body_active:,} in the layers + output layer "
        f"{p.lm_head:,} ({'tied' if shape.tie_embeddings else 'untied'})",
        f"weights      {prec.weights}, {rl.bytes_per_element(prec.weights):g} B/param: "
        f"{_bytes(rl.weight_bytes(shape, prec.weights))}",
        f"read/step    {_read_line(shape, p, prec.weights)}",
        f"KV/token     2 x {shape.layers} layers x {shape.kv_heads} KV heads x {shape.head_dim} x "
        f"{rl.bytes_per_element(prec.kv):g} B ({prec.kv}) = {kvb:,.0f} B",
        f"C            {r.flops / 1e12:.6g} TFLOP/s = hardware.peak_tflops.{prec.compute} "
        f"{hw['peak_tflops'][prec.compute]:g} x {n} device(s) x efficiency {r.efficiency:g}",
        f"B            {r.bandwidth / 1e9:.6g} GB/s = hardware.memory_bandwidth_gbs "
        f"{hw['memory_bandwidth_gbs']:g} x {n} device(s) x efficiency {r.efficiency:g}",
    ]
    if cap is not None:
        lines.append(f"KV memory    {hw['memory_gb']:g} GB x {n} x {opts.memory_utilization:g} - weights = "
                     f"{cap.free_bytes / 1e9:.4g} GB -> {cap.tokens:,} KV tokens fit")
    else:
        lines.append("KV memory    unknown: the profile has no memory_gb")
    lines.append(f"lengths      prefill: prompt {prompt} tokens per sequence; decode: context {opts.context} "
                 f"tokens per sequence")
    return lines


def _read_line(shape, p: rl.ParamCount, dtype: str) -> str:
    """How the weight bytes a step reads follow from the weights (``weights_read_bytes``)."""
    bpe = rl.bytes_per_element(dtype)
    parts = [f"{rl.weights_read_bytes(shape, 0, dtype):,.0f} B"]
    why = []
    if not shape.tie_embeddings:
        parts.append(f"{shape.hidden * bpe:,.0f} B per token looked up")
        why.append("the untied embedding table is only looked up")
    if shape.experts:
        parts.append(f"{p.expert * bpe:,.0f} B x {shape.moe_layers} MoE layers x experts read")
        why.append("routed experts are read when a token picks them")
    return " + ".join(parts) + (f" ({'; '.join(why)})" if why else " (every weight, every step)")


HEADER = ("batch", "prefill TFLOP", "prefill GB", "prefill ms", "prefill limit", "decode GFLOP", "decode GB",
          "decode ms/token", "decode limit", "tokens/s", "KV tokens needed", "KV tokens fit")


def rows(shape, prec: Precisions, r: rl.Rates, opts: Options, prompt: int) -> list[tuple[str, ...]]:
    """One row per batch size: prefill and decode-step bounds, their limits, KV fit."""
    out = []
    for b in opts.batch:
        pre = rl.prefill_bound(shape, b, prompt, r, prec.weights, prec.kv, opts.expert_reads)
        dec = rl.decode_bound(shape, b, opts.context, r, prec.weights, prec.kv, opts.expert_reads)
        cap_p = rl.kv_capacity(shape, r, prec.weights, prec.kv, b, prompt, opts.memory_utilization)
        cap_d = rl.kv_capacity(shape, r, prec.weights, prec.kv, b, opts.context, opts.memory_utilization)
        out.append((str(b), _g(pre.flops / 1e12), _g(pre.bytes / 1e9), _g(pre.ms), rl.phase_limit(pre, cap_p),
                    _g(dec.flops / 1e9), _g(dec.bytes / 1e9), _g(dec.ms), rl.phase_limit(dec, cap_d),
                    _g(b / dec.seconds), f"{b * opts.context:,}", f"{cap_d.tokens:,}" if cap_d else "n/a"))
    return out


def format_table(header: tuple[str, ...], body: list[tuple[str, ...]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in body)) for i, h in enumerate(header)]
    line = "  ".join(h.rjust(w) for h, w in zip(header, widths))
    return "\n".join([line] + ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in body])


def report(shape: rl.ModelShape, hw: dict, opts: Options, features=None) -> str:
    """The command's whole output for a model shape and a hardware profile (a dict)."""
    prec = precisions(shape, opts, features)
    r = rl.rates(hw, prec.compute, opts.efficiency)
    prompt = opts.prompt or opts.context
    p = rl.param_counts(shape)
    cap = rl.kv_capacity(shape, r, prec.weights, prec.kv, 1, opts.context, opts.memory_utilization)
    title = (f"roofline lower bounds on hardware={hw.get('name')} ({hw.get('accelerator', '?')}; "
             f"{hw.get('source') or 'no source given'})")
    notes = ["prefill: the whole batch's prompts in one pass (a bound on its time to first token); "
             "decode: one step, one token per sequence (a bound on time per output token);",
             "limit: the larger of F/C (compute) and M/B (memory bandwidth), or KV capacity when "
             "batch x length does not fit; formulas: metrics/roofline.py"]
    return "\n".join([title, *input_lines(shape, p, prec, r, hw, opts, prompt, cap), "",
                      format_table(HEADER, rows(shape, prec, r, opts, prompt)), "", *notes])


def roofline_text(cfg, opts: Options) -> str:
    """The bounds for a composed config: its ``engine.model``'s config.json, its ``hardware``
    profile and its ``engine.features`` precisions."""
    from omegaconf import OmegaConf

    hw = OmegaConf.to_container(cfg.hardware, resolve=True)
    features = OmegaConf.to_container(cfg.engine.features, resolve=True)
    shape = rl.read_model_config(resolve_model_dir(cfg.engine.model))
    return report(shape, hw, opts, features)
