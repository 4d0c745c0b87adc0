"""Speculative decoding seen from the stream: the tokens each decode step delivered.

Where the engine sends one chunk per engine step (vLLM does), an output chunk's ``chunk_tokens``
is what that step produced: 1 without speculation, 1 + the accepted draft tokens with it.

- decode steps of a request = its output chunks after the first (the first is the prefill's
  token) that carry at least one token; tokens per step = their ``chunk_tokens``.
- Only rows whose per-chunk counts are the server's (``tokens_source`` ``usage_continuous``, or
  ``usage`` with one token a chunk) count: a split by the tokenizer is not what a step delivered.
- ``spec_tokens_per_step_mean`` = sum of tokens over decode steps / number of decode steps;
  ``spec_tokens_per_step_p50`` / ``_p90`` their percentiles (linear interpolation);
  ``spec_decode_steps`` the steps counted; ``spec_tokens_per_step_hist`` how many steps delivered
  1, 2, ... tokens (a mapping "k" -> steps; not a metric, MLflow skips it).
- The engine's own figure (``metrics.engine_counters``): mean accepted length = 1 + Δ accepted
  draft tokens / Δ drafts.  ``spec_tokens_per_step_vs_engine`` = the rows' mean - the engine's.
  They agree when every decode step drafted; steps that drafted nothing (an n-gram proposer
  without a match) deliver 1 token and pull the rows' mean below the engine's, and the engine's
  counters also cover warm-up and failed requests, which the rows' figure leaves out.
"""

from __future__ import annotations

import math

import numpy as np

EXACT_SOURCES = ("usage_continuous", "usage")


def step_tokens(chunk_tokens, tokens_source) -> np.ndarray:
    """Tokens per decode step over the given rows (lists of ``chunk_tokens``, their ``tokens_source``)."""
    steps = [np.asarray(k[1:], dtype=np.int64) for k, src in zip(chunk_tokens, tokens_source)
             if src in EXACT_SOURCES and k is not None and len(k) > 1]
    cat = np.concatenate(steps) if steps else np.empty(0, dtype=np.int64)
    return cat[cat > 0]


def spec_summary(chunk_tokens, tokens_source) -> dict:
    """The rows' tokens-per-step keys (module doc)."""
    k = step_tokens(chunk_tokens, tokens_source)
    if not k.size:
        return {"spec_decode_steps": 0, "spec_tokens_per_step_mean": math.nan,
                "spec_tokens_per_step_p50": math.nan, "spec_tokens_per_step_p90": math.nan}
    values, counts = np.unique(k, return_counts=True)
    return {"spec_decode_steps": int(k.size), "spec_tokens_per_step_mean": float(k.mean()),
            "spec_tokens_per_step_p50": float(np.percentile(k, 50)),
            "spec_tokens_per_step_p90": float(np.percentile(k, 90)),
            "spec_tokens_per_step_hist": {str(int(v)): int(c) for v, c in zip(values, counts)}}


def engine_accept_length(accepted: float, drafts: float) -> float:
    """The engine's mean accepted length = 1 + accepted draft tokens / drafts (NaN: no draft)."""
    return 1.0 + accepted / drafts if drafts > 0 else math.nan


def spec_agreement(summary) -> dict:
    """``spec_tokens_per_step_vs_engine`` = rows' mean tokens per step - the engine's mean accepted
    length, where the summary holds both (else nothing)."""
    rows, eng = summary.get("spec_tokens_per_step_mean"), summary.get("engine_spec_decode_mean_accepted_length")
    if rows is None or eng is None or math.isnan(rows) or math.isnan(eng):
        return {}
    return {"spec_tokens_per_step_vs_engine": rows - eng}
