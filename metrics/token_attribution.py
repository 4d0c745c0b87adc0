"""How many output tokens each output chunk carried: the rule behind ``chunk_tokens``,
``output_tokens`` and ``tokens_source`` of ``requests.parquet`` (and so behind per-token ITL).

From what the stream said (``loadgen.client.openai_stream``): the cumulative
``usage.completion_tokens`` at each output chunk where the engine streams it
(``continuous_usage_stats``), the final ``usage``, and each chunk's text.

- ``usage_continuous``: every chunk carried a cumulative count; a chunk carries
  ``max(count - previous count, 1)`` tokens.  ``output_tokens`` is the final usage.
- ``usage``: the final usage only, and it equals the number of output chunks: one each.
- ``usage+tokenizer_split``: the final usage only, and it differs from the number of chunks:
  the total is split over the chunks in proportion to their texts' token counts under the
  served model's tokenizer (largest remainder, at least one a chunk while tokens go round).
- ``tokenizer``: no usage at all; each chunk carries its text's token count (at least 1).
- ``chunks``: neither usage nor a tokenizer; one token a chunk.
The prompt's tokens are ``usage.prompt_tokens``, else the count the workload built.
"""

from __future__ import annotations

from collections.abc import Callable

NO_USAGE = -1


def attribute_tokens(rec, count_tokens: Callable[[str], int] | None = None) -> None:
    """Fill ``rec.chunk_tokens``, ``rec.output_tokens``, ``rec.tokens_source`` and
    ``rec.prompt_tokens`` from the stream's raw counts (see module doc)."""
    rec.prompt_tokens = rec.usage_prompt_tokens if rec.usage_prompt_tokens is not None else rec.expected_prompt_tokens
    n_chunks = len(rec.chunk_ns)
    total = rec.usage_completion_tokens
    cumulative = rec.chunk_usage if len(rec.chunk_usage) == n_chunks else []
    if total is not None:
        rec.output_tokens = int(total)
        if n_chunks and all(c != NO_USAGE for c in cumulative):
            rec.tokens_source = "usage_continuous"
            rec.chunk_tokens = continuous_deltas(cumulative)
            return
        rec.tokens_source = "usage"
        if rec.output_tokens == n_chunks:
            rec.chunk_tokens = [1] * n_chunks
            return
        rec.tokens_source = "usage+tokenizer_split"
        weights = [max(count_tokens(p), 1) for p in rec.chunk_text] if count_tokens else [1] * n_chunks
        rec.chunk_tokens = split_total(rec.output_tokens, weights)
    elif n_chunks:
        rec.tokens_source = "tokenizer" if count_tokens else "chunks"
        counts = [max(count_tokens(p), 1) for p in rec.chunk_text] if count_tokens else [1] * n_chunks
        rec.chunk_tokens = counts
        rec.output_tokens = sum(counts)
    else:
        rec.chunk_tokens = []
        rec.output_tokens = 0


def continuous_deltas(cumulative: list[int]) -> list[int]:
    """Tokens per chunk from cumulative counts: each chunk's increase, at least 1."""
    out, last = [], 0
    for c in cumulative:
        out.append(max(c - last, 1))
        last = c
    return out


def split_total(total: int, weights: list[int]) -> list[int]:
    """Split ``total`` tokens over chunks in proportion to ``weights`` (largest remainder),
    at least one token a chunk while there are tokens to go round."""
    n = len(weights)
    if n == 0:
        return []
    if total <= n:
        return [1] * total + [0] * (n - total)
    w = [max(x, 1) for x in weights]
    sw = sum(w)
    shares = [total * x / sw for x in w]
    out = [max(1, int(s)) for s in shares]
    left = total - sum(out)
    order = sorted(range(n), key=lambda i: shares[i] - int(shares[i]), reverse=True)
    j = 0
    while left > 0:
        out[order[j % n]] += 1
        left -= 1
        j += 1
    big = sorted(range(n), key=lambda i: out[i], reverse=True)
    j = 0
    while left < 0:  # the minimum of one a chunk overshot: take back from the largest
        i = big[j % n]
        if out[i] > 1:
            out[i] -= 1
            left += 1
        j += 1
    return out
