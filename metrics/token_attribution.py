"""How many output tokens each output chunk carried: the rule behind ``chunk_tokens``,
``output_tokens`` and ``tokens_source`` of ``requests.parquet`` (and so behind per-token ITL).

From what the stream said (``loadgen.client.openai_stream``): the cumulative
``usage.completion_tokens`` at each output chunk where the engine streams it
(``continuous_usage_stats``), the final ``usage``, and each chunk's text.

- ``output_tokens`` is the final ``usage.completion_tokens``; without usage, the sum of the
  chunks' token counts below.
- A chunk with a cumulative count carries its increase over the previous known count (0
  when the count did not move: text without a token of its own).  Chunks without a count
  before it share that increase with it, in proportion to their texts' token counts under
  the served model's tokenizer (largest remainder).  Chunks after the last count share what
  the final usage adds to it the same way; tokens the final usage counts after the last
  chunk that had a count of its own (no text, e.g. an end-of-text token) go to that chunk.
  So the chunks always carry exactly ``output_tokens``.
- With the final usage only: one token a chunk when they are as many, else the total split
  over the chunks by their texts' token counts (at least one a chunk while tokens go round).
- ``tokens_source``: ``usage_continuous`` (a count on every chunk), ``usage`` (the final
  usage only, one token a chunk), ``usage+tokenizer_split`` (the final usage split by the
  tokenizer, or counts on some chunks only), ``tokenizer`` (no usage: each chunk's text
  counted, at least 1), ``chunks`` (no usage, no tokenizer: one a chunk).
The prompt's tokens are ``usage.prompt_tokens``, else the count the workload built.
``server_output_tokens`` is the final ``usage.completion_tokens`` (null without usage);
``client_output_tokens`` the tokenizer's count of the whole text received, joined (null without a
tokenizer): the two counts ``metrics.token_accounting`` reconciles.

By chunk kind (``chunk_kind``: ``answer``, ``reasoning``, ``tool_call``, set by the stream reader):
``reasoning_tokens`` = sum of ``chunk_tokens`` over reasoning chunks, ``tool_call_tokens`` = sum over
tool-call chunks (both 0 when none came; both are part of ``output_tokens``, so the answer's
tokens are ``output_tokens - reasoning_tokens``).  A record without kinds leaves them null.
A chunk that carried several kinds at once (its kind the tuple of its ``(kind, text)`` parts:
vLLM's ``</think>`` chunk, content beside a tool call) shares its ``chunk_tokens`` between them in
proportion to their texts' token counts under the served model's tokenizer (their characters
without one), largest remainder, a tie to the earlier part (reasoning, answer, tool call): each kind
gets its share and the chunk's tokens stay what they were (``tokens_by_kind``).
"""

from __future__ import annotations

from collections.abc import Callable

NO_USAGE = -1


REASONING, TOOL_CALL = "reasoning", "tool_call"  # chunk kinds (loadgen.client.openai_stream)


def attribute_tokens(rec, count_tokens: Callable[[str], int] | None = None) -> None:
    """Fill ``rec.chunk_tokens``, ``rec.output_tokens``, ``rec.tokens_source``,
    ``rec.prompt_tokens``, ``rec.reasoning_tokens`` and ``rec.tool_call_tokens`` from the stream's
    raw counts (see module doc)."""
    _attribute(rec, count_tokens)
    kinds = getattr(rec, "chunk_kind", None)
    if kinds is not None and len(kinds) == len(rec.chunk_tokens):
        by_kind = tokens_by_kind(rec.chunk_tokens, kinds, count_tokens)
        rec.reasoning_tokens = by_kind.get(REASONING, 0)
        rec.tool_call_tokens = by_kind.get(TOOL_CALL, 0)


def tokens_by_kind(chunk_tokens: list[int], kinds: list, count_tokens: Callable[[str], int] | None = None) -> dict:
    """Output tokens per chunk kind: each chunk's ``chunk_tokens`` to its kind, or, for a chunk of
    several kinds (a tuple of ``(kind, text)`` parts), shared between them by their texts' token
    counts (``count_tokens``; None: characters), largest remainder (module doc)."""
    out: dict[str, int] = {}
    for k, kind in zip(chunk_tokens, kinds):
        if kind.__class__ is str:
            out[kind] = out.get(kind, 0) + k
            continue
        weights = [count_tokens(text) if count_tokens is not None else len(text) for _, text in kind]
        for (name, _), share in zip(kind, split_total(k, weights, at_least_one=False)):
            out[name] = out.get(name, 0) + share
    return out


def _attribute(rec, count_tokens) -> None:
    rec.prompt_tokens = rec.usage_prompt_tokens if rec.usage_prompt_tokens is not None else rec.expected_prompt_tokens
    n_chunks = len(rec.chunk_ns)
    total = rec.usage_completion_tokens
    rec.server_output_tokens = total
    # the whole text counted once (per-chunk counts overcount words a chunk boundary splits)
    rec.client_output_tokens = count_tokens("".join(rec.chunk_text)) if count_tokens is not None else None

    def weights(lo: int, hi: int) -> list[int]:
        if count_tokens is None:
            return [1] * (hi - lo)
        return [max(count_tokens(p), 1) for p in rec.chunk_text[lo:hi]]

    if total is None:
        rec.chunk_tokens = weights(0, n_chunks)
        rec.output_tokens = sum(rec.chunk_tokens)
        rec.tokens_source = ("tokenizer" if count_tokens else "chunks") if n_chunks else "none"
        return
    rec.output_tokens = total = int(total)
    counts = list(rec.chunk_usage) if len(rec.chunk_usage) == n_chunks else [NO_USAGE] * n_chunks
    if all(c == NO_USAGE for c in counts):
        rec.tokens_source = "usage"
        if total == n_chunks:
            rec.chunk_tokens = [1] * n_chunks
            return
        rec.tokens_source = "usage+tokenizer_split" if n_chunks else "usage"
        rec.chunk_tokens = split_total(total, weights(0, n_chunks))
        return
    rec.chunk_tokens = split_counts(counts, total, weights)
    rec.tokens_source = "usage_continuous" if NO_USAGE not in counts else "usage+tokenizer_split"


def split_counts(counts: list[int], total: int, weights: Callable[[int, int], list[int]]) -> list[int]:
    """Tokens per chunk from cumulative counts (``NO_USAGE`` where a chunk had none) and the
    final usage ``total``; ``weights(lo, hi)`` weighs chunks ``lo .. hi-1`` (module doc)."""
    out: list[int] = []
    last, start = 0, 0
    for i, c in enumerate(counts):
        if c == NO_USAGE:
            continue
        inc = max(c - last, 0)
        out += split_total(inc, weights(start, i + 1), at_least_one=False) if i > start else [inc]
        last, start = max(c, last), i + 1
    rest = max(total - last, 0)
    if start < len(counts):
        out += split_total(rest, weights(start, len(counts)), at_least_one=False)
    elif rest:
        out[-1] += rest
    if sum(out) != total:  # counts that run past the final usage: the final usage rules
        out = split_total(total, weights(0, len(counts)))
    return out


def split_total(total: int, weights: list[int], at_least_one: bool = True) -> list[int]:
    """Split ``total`` tokens over chunks in proportion to ``weights`` (largest remainder).
    With ``at_least_one``, every chunk gets one while there are tokens to go round (the
    first ``total`` chunks when there are fewer tokens than chunks)."""
    n = len(weights)
    if n == 0:
        return []
    if total <= 0:
        return [0] * n
    if at_least_one and total <= n:
        return [1] * total + [0] * (n - total)
    w = [max(x, 1) for x in weights]
    sw = sum(w)
    shares = [total * x / sw for x in w]
    floor = 1 if at_least_one else 0
    out = [max(floor, int(s)) for s in shares]
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
        if out[i] > floor:
            out[i] -= 1
            left += 1
        j += 1
    return out
