"""``tokenfactory roofline engine.model=DIR hardware=NAME [roofline.KEY=VALUE ...]``: the
roofline lower bound of prefill and of a decode step per batch size, from the model's
``config.json`` alone (no weights) and a hardware profile (``conf/hardware/``); the
formulas are in ``metrics/roofline.py``.  It prints the inputs it used (parameters, weight
bytes, KV bytes per token, C, B) so every number can be checked by hand.

Its own options (not in the Hydra config; taken out of the overrides before composing):

    roofline.batch=[1,64]        batch sizes, one row each (also a single number)
    roofline.context=2048        tokens in each sequence's KV cache at the decode step
    roofline.prompt=N            prompt tokens per sequence at prefill (default: context)
    roofline.dtype=bf16          weights' precision (default: engine.features.dtype, else
                                 config.json's quantization_config, else its torch_dtype/dtype)
    roofline.compute_dtype=...   precision of the matmuls, whose peak is looked up (default:
                                 the weights'; for int4 / int8 weights, the activations')
    roofline.kv_dtype=...        KV cache precision (default: engine.features.kv_cache_dtype,
                                 else the activations': roofline.dtype when it is a 16- or
                                 32-bit float, else config.json's dtype)
    roofline.efficiency=1.0      share of the peaks reached (1.0: a true lower bound)
    roofline.memory_utilization=0.9   share of memory the engine may take (weights + KV)
    roofline.expert_reads=uniform     MoE experts a step reads: uniform | min | all
"""

from __future__ import annotations

import sys

import yaml

from harness.roofline_table import Options, roofline_text
from metrics import roofline as rl

_INTS = ("context", "prompt")
_FLOATS = ("efficiency", "memory_utilization")
_STRS = ("dtype", "compute_dtype", "kv_dtype", "expert_reads")
KNOWN = ("batch",) + _INTS + _STRS + _FLOATS


def _positive_int(key: str, v) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ValueError(f"roofline.{key}={v!r}: expected a positive integer")
    return v


def _value(key: str, text: str):
    """The typed value of ``roofline.<key>=<text>`` (YAML scalars: ``[1,64]``, ``0.5``, ``bf16``)."""
    try:
        v = yaml.safe_load(text)
    except yaml.YAMLError:
        raise ValueError(f"roofline.{key}={text}: not a value") from None
    if key == "batch":
        items = v if isinstance(v, list) else [v]
        if not items:
            raise ValueError("roofline.batch=[]: give at least one batch size")
        return [_positive_int(key, b) for b in items]
    if key in _INTS:
        return _positive_int(key, v)
    if key in _FLOATS:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1:
            raise ValueError(f"roofline.{key}={text}: expected a number in (0, 1]")
        return float(v)
    if key == "expert_reads":
        if text not in ("uniform", "min", "all"):
            raise ValueError(f"roofline.expert_reads={text}: expected uniform, min or all")
        return text
    try:
        return rl.canonical_dtype(text)
    except ValueError as e:
        raise ValueError(f"roofline.{key}={text}: {e}") from None


def split_options(argv: list[str]) -> tuple[Options, list[str]]:
    """(``roofline.*`` options, the other overrides for Hydra); ``ValueError`` for an unknown
    ``roofline.x`` or a bad value."""
    opts, rest = Options(), []
    for arg in argv:
        key = arg.lstrip("+~")
        if not (key.startswith("roofline.") or key.split("=", 1)[0] == "roofline"):
            rest.append(arg)
            continue
        name, eq, text = key.partition("=")
        name = name.removeprefix("roofline.")
        if name not in KNOWN or not eq or arg.startswith("~"):
            raise ValueError(f"{arg}: unknown roofline option (known: "
                             f"{', '.join('roofline.' + k + '=' for k in KNOWN)})")
        setattr(opts, name, _value(name, text))
    return opts, rest


def main(argv: list[str]) -> int:
    """Print the bounds; 2 and one line on bad input."""
    from hydra import compose, initialize_config_module
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    if any(a in ("-h", "--help", "help") for a in argv):
        print(__doc__)
        return 0
    try:
        opts, rest = split_options(argv)
        with initialize_config_module(config_module="conf", version_base="1.3"):
            cfg = compose(config_name="config", overrides=rest)
        text = roofline_text(cfg, opts)
    except (HydraException, OmegaConfBaseException, ValueError) as e:
        # Hydra appends its config search path: noise for a user who picked a bad option.
        cause = f": {e.__cause__}" if e.__cause__ and str(e.__cause__) not in str(e) else ""
        msg = " ".join((str(e) + cause).split("Config search path")[0].split())
        print(f"error: {msg or type(e).__name__}", file=sys.stderr)
        return 2
    print(text)
    return 0


if __name__ == "__main__":  # python -m harness.commands.roofline [overrides]
    sys.exit(main(sys.argv[1:]))
