"""Synthetic workloads: token-exact prompts with fixed or distributed lengths."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np

from loadgen.prompts import PromptBuilder
from loadgen.workload import WorkItem

DISTRIBUTIONS = ("fixed", "uniform", "normal", "lognormal")


def sample_lengths(rng: np.random.Generator, center: int, dist, n: int, field: str) -> np.ndarray:
    """``n`` lengths around ``center``: fixed, uniform[min, max], normal(center, std) or
    lognormal(median=center, sigma), the last two clipped to [min, max] (default [1, inf))."""
    dist = dict(dist or {})
    kind = dist.get("kind", "fixed")
    lo = int(dist.get("min") or 1)
    hi = int(dist["max"]) if dist.get("max") is not None else None
    if kind == "fixed":
        v = np.full(n, center, dtype=np.float64)
    elif kind == "uniform":
        if hi is None:
            raise ValueError(f"workload.{field}.max is required for a uniform distribution")
        v = rng.integers(lo, hi + 1, size=n).astype(np.float64)
    elif kind == "normal":
        if dist.get("std") is None:
            raise ValueError(f"workload.{field}.std is required for a normal distribution")
        v = rng.normal(center, float(dist["std"]), size=n)
    elif kind == "lognormal":
        if dist.get("sigma") is None:
            raise ValueError(f"workload.{field}.sigma is required for a lognormal distribution")
        v = rng.lognormal(np.log(center), float(dist["sigma"]), size=n)
    else:
        raise ValueError(f"workload.{field}.kind: unknown distribution {kind!r} (expected one of {DISTRIBUTIONS})")
    v = np.clip(np.rint(v), lo, hi if hi is not None else np.inf)
    return v.astype(np.int64)


def synthetic_items(cfg, builder: PromptBuilder, n: int | None, max_model_len: int | None = None) -> Iterator[WorkItem]:
    """Yield ``n`` requests (endless when ``n`` is None) with lengths from ``cfg``."""
    if int(cfg.input_tokens) < 1 or int(cfg.output_tokens) < 1:
        raise ValueError("workload.input_tokens and workload.output_tokens must be >= 1")
    rng = np.random.default_rng(int(cfg.get("seed", 0)))
    block = 1024
    for start in itertools.count(0, block):
        k = block if n is None else min(block, n - start)
        if k <= 0:
            return
        ins = sample_lengths(rng, int(cfg.input_tokens), cfg.get("input_dist"), k, "input_dist")
        outs = sample_lengths(rng, int(cfg.output_tokens), cfg.get("output_dist"), k, "output_dist")
        for i, (a, b) in enumerate(zip(ins, outs)):
            if max_model_len and a + b > max_model_len:
                raise ValueError(f"workload: a request of {a} input + {b} output tokens exceeds the "
                                 f"model's max length {max_model_len}; lower workload.input_tokens/output_tokens")
            idx = start + i
            yield WorkItem(request_id=f"r{idx:07d}", prompt=builder.prompt(int(a)), prompt_tokens=int(a),
                           max_tokens=int(b))
