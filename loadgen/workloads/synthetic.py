"""Synthetic workloads: token-exact prompts with fixed or distributed lengths."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np

from conf.schema import LengthDist, SyntheticWorkload, typed
from loadgen.workloads.item import WorkItem
from loadgen.workloads.prompts import PromptBuilder

DISTRIBUTIONS = ("fixed", "uniform", "normal", "lognormal")


def sample_lengths(rng: np.random.Generator, center: int, dist: LengthDist, n: int, field: str) -> np.ndarray:
    """``n`` lengths around ``center``: fixed, uniform[min, max], normal(center, std) or
    lognormal(median=center, sigma), the last two clipped to [min, max] (default [1, inf))."""
    lo = dist.min or 1
    hi = dist.max
    if dist.kind == "fixed":
        v = np.full(n, center, dtype=np.float64)
    elif dist.kind == "uniform":
        if hi is None:
            raise ValueError(f"workload.{field}.max is required for a uniform distribution")
        v = rng.integers(lo, hi + 1, size=n).astype(np.float64)
    elif dist.kind == "normal":
        if dist.std is None:
            raise ValueError(f"workload.{field}.std is required for a normal distribution")
        v = rng.normal(center, dist.std, size=n)
    elif dist.kind == "lognormal":
        if dist.sigma is None:
            raise ValueError(f"workload.{field}.sigma is required for a lognormal distribution")
        v = rng.lognormal(np.log(center), dist.sigma, size=n)
    else:
        raise ValueError(f"workload.{field}.kind: unknown distribution {dist.kind!r} (expected one of "
                         f"{DISTRIBUTIONS})")
    v = np.clip(np.rint(v), lo, hi if hi is not None else np.inf)
    return v.astype(np.int64)


def workload_config(cfg) -> SyntheticWorkload:
    """``workload`` (composed, or a partial mapping) as the typed ``SyntheticWorkload``."""
    return cfg if isinstance(cfg, SyntheticWorkload) else typed(cfg, SyntheticWorkload)


def prefix_group_spec(cfg) -> tuple[int, int, np.ndarray | None]:
    """(count, prefix_tokens, popularity) of ``workload.prefix_groups``; popularity is
    ``uniform`` or ``zipf`` (P(group g) proportional to 1 / (g + 1) ** zipf_s)."""
    pg = workload_config(cfg).prefix_groups
    count, plen = pg.count, pg.prefix_tokens
    if count <= 0 or plen <= 0:
        return 0, 0, None
    if pg.popularity == "uniform":
        p = np.full(count, 1.0 / count)
    elif pg.popularity == "zipf":
        w = 1.0 / np.arange(1, count + 1) ** pg.zipf_s
        p = w / w.sum()
    else:
        raise ValueError(f"workload.prefix_groups.popularity={pg.popularity!r}: expected uniform or zipf")
    return count, plen, p


def _long_tail(w: SyntheticWorkload) -> tuple[float, str, int] | None:
    lt = w.stress.long_tail
    if lt.fraction <= 0:
        return None
    length = lt.input_tokens if lt.kind == "input" else lt.output_tokens
    if lt.kind not in ("input", "output") or length is None or length < 1 or lt.fraction > 1:
        raise ValueError("workload.stress.long_tail needs fraction in (0, 1], kind input|output and "
                         f"{lt.kind}_tokens >= 1")
    return lt.fraction, lt.kind, length


def synthetic_blocks(cfg, n: int | None):
    """Blocks of (input lengths, output lengths, prefix group or -1) for ``n`` requests."""
    w = workload_config(cfg)
    if w.input_tokens < 1 or w.output_tokens < 1:
        raise ValueError("workload.input_tokens and workload.output_tokens must be >= 1")
    rng = np.random.default_rng(w.seed)
    count, plen, pop = prefix_group_spec(w)
    # Group draws use their own generator so adding groups leaves the lengths unchanged.
    grng = np.random.default_rng([w.seed, 7])
    tail = _long_tail(w)
    trng = np.random.default_rng([w.seed, 11])
    block = 1024
    for start in itertools.count(0, block):
        k = block if n is None else min(block, n - start)
        if k <= 0:
            return
        ins = sample_lengths(rng, w.input_tokens, w.input_dist, k, "input_dist")
        outs = sample_lengths(rng, w.output_tokens, w.output_dist, k, "output_dist")
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
    w = workload_config(cfg)
    _, plen, _ = prefix_group_spec(w)
    for start, ins, outs, groups in synthetic_blocks(w, n):
        for i, (a, b, g) in enumerate(zip(ins, outs, groups)):
            if max_model_len and a + b > max_model_len:
                raise ValueError(f"workload: a request of {a} input + {b} output tokens exceeds the "
                                 f"model's max length {max_model_len}; lower workload.input_tokens/output_tokens")
            idx = start + i
            prefix = None
            if g >= 0:
                prefix = group_prefix_ids(builder, w.seed, int(g), plen)[:max(int(a) - builder.overhead, 0)]
            yield WorkItem(request_id=f"r{idx:07d}", prompt=builder.prompt(int(a), prefix_ids=prefix),
                           prompt_tokens=int(a), max_tokens=int(b), prefix_group=int(g) if g >= 0 else None)


def group_prefix_ids(builder: PromptBuilder, seed: int, group: int, n: int) -> np.ndarray:
    """The ``n`` token ids every request of prefix group ``group`` starts with (after any
    BOS or template), the same for every run with the same seed."""
    rng = np.random.default_rng([seed, (1 << 40) + group])
    return builder.pool[rng.integers(0, len(builder.pool), size=n)]
