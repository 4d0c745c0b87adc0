"""Synthetic workloads: token-exact prompts with fixed or distributed lengths."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np

from loadgen.workloads.item import WorkItem
from loadgen.workloads.prompts import PromptBuilder

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


def prefix_group_spec(cfg) -> tuple[int, int, np.ndarray | None]:
    """(count, prefix_tokens, popularity) of ``workload.prefix_groups``; popularity is
    ``uniform`` or ``zipf`` (P(group g) proportional to 1 / (g + 1) ** zipf_s)."""
    pg = cfg.get("prefix_groups") or {}
    count = int(pg.get("count") or 0)
    plen = int(pg.get("prefix_tokens") or 0)
    if count <= 0 or plen <= 0:
        return 0, 0, None
    kind = pg.get("popularity") or "uniform"
    if kind == "uniform":
        p = np.full(count, 1.0 / count)
    elif kind == "zipf":
        s = float(pg.get("zipf_s") if pg.get("zipf_s") is not None else 1.0)
        w = 1.0 / np.arange(1, count + 1) ** s
        p = w / w.sum()
    else:
        raise ValueError(f"workload.prefix_groups.popularity={kind!r}: expected uniform or zipf")
    return count, plen, p


def _long_tail(cfg) -> tuple[float, str, int] | None:
    stress = cfg.get("stress") or {}
    burst = stress.get("burst") or {}
    if burst.get("factor") not in (None, 1, 1.0):
        raise ValueError("workload.stress.burst applies to trace workloads (arrival times of their own); for "
                         "synthetic requests use a burstier arrival process (load=gamma load.burstiness=0.2)")
    lt = stress.get("long_tail") or {}
    frac = float(lt.get("fraction") or 0.0)
    if frac <= 0:
        return None
    kind = lt.get("kind", "input")
    length = lt.get("input_tokens") if kind == "input" else lt.get("output_tokens")
    if kind not in ("input", "output") or length is None or int(length) < 1 or frac > 1:
        raise ValueError("workload.stress.long_tail needs fraction in (0, 1], kind input|output and "
                         f"{kind}_tokens >= 1")
    return frac, kind, int(length)


def synthetic_blocks(cfg, n: int | None):
    """Blocks of (input lengths, output lengths, prefix group or -1) for ``n`` requests."""
    if int(cfg.input_tokens) < 1 or int(cfg.output_tokens) < 1:
        raise ValueError("workload.input_tokens and workload.output_tokens must be >= 1")
    rng = np.random.default_rng(int(cfg.get("seed", 0)))
    count, plen, pop = prefix_group_spec(cfg)
    # Group draws use their own generator so adding groups leaves the lengths unchanged.
    grng = np.random.default_rng([int(cfg.get("seed", 0)), 7])
    tail = _long_tail(cfg)
    trng = np.random.default_rng([int(cfg.get("seed", 0)), 11])
    block = 1024
    for start in itertools.count(0, block):
        k = block if n is None else min(block, n - start)
        if k <= 0:
            return
        ins = sample_lengths(rng, int(cfg.input_tokens), cfg.get("input_dist"), k, "input_dist")
        outs = sample_lengths(rng, int(cfg.output_tokens), cfg.get("output_dist"), k, "output_dist")
        groups = grng.choice(count, size=k, p=pop) if count else np.full(k, -1)
        if tail:  # stress: a fraction made long-input or long-output (own generator, as above)
            hit = trng.random(k) < tail[0]
            (ins if tail[1] == "input" else outs)[hit] = tail[2]
        if count:
            ins = np.maximum(ins, plen + 1)  # a group member carries the prefix and at least one own token
        yield start, ins, outs, groups


def synthetic_items(cfg, builder: PromptBuilder, n: int | None, max_model_len: int | None = None) -> Iterator[WorkItem]:
    """Yield ``n`` requests (endless when ``n`` is None) with lengths from ``cfg``; with
    ``workload.prefix_groups`` each request starts with its group's shared prefix."""
    _, plen, _ = prefix_group_spec(cfg)
    seed = int(cfg.get("seed", 0))
    for start, ins, outs, groups in synthetic_blocks(cfg, n):
        for i, (a, b, g) in enumerate(zip(ins, outs, groups)):
            if max_model_len and a + b > max_model_len:
                raise ValueError(f"workload: a request of {a} input + {b} output tokens exceeds the "
                                 f"model's max length {max_model_len}; lower workload.input_tokens/output_tokens")
            idx = start + i
            prefix = None
            if g >= 0:
                prefix = group_prefix_ids(builder, seed, int(g), plen)[:max(int(a) - builder.overhead, 0)]
            yield WorkItem(request_id=f"r{idx:07d}", prompt=builder.prompt(int(a), prefix_ids=prefix),
                           prompt_tokens=int(a), max_tokens=int(b))


def group_prefix_ids(builder: PromptBuilder, seed: int, group: int, n: int) -> np.ndarray:
    """The ``n`` token ids every request of prefix group ``group`` starts with (after any
    BOS or template), the same for every run with the same seed."""
    rng = np.random.default_rng([seed, (1 << 40) + group])
    return builder.pool[rng.integers(0, len(builder.pool), size=n)]
