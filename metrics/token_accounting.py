"""Per-request token truth from ``requests.parquet``: prompt tokens served from the prefix cache,
and the server's output-token count reconciled with the client's.

Prefix cache (rows whose ``cached_tokens`` is not null: the server reported it, e.g. vLLM with
``--enable-prompt-tokens-details``, SGLang with ``--enable-cache-report``):
- hit rate of a set of rows = sum(cached_tokens) / sum(prompt_tokens) over its rows that report
  ``cached_tokens`` (tokens, as vLLM's ``prefix_cache_hits`` / ``prefix_cache_queries`` count
  them); NaN when no row reports it or their prompts sum to 0.
- ``cache_hit_rate``: over the measured rows (``warmup == False``), any status.
- ``cache_hit_rate_all``: over every row, warm-up included: the requests the engine's counters
  saw, so it is the figure to set beside ``engine_prefix_cache_hit_rate``.
- ``cached_tokens_total`` (measured), ``cached_tokens_rows`` (measured rows that report it).
- ``cache_hit_rate_by_prefix_group`` / ``cache_hit_rate_by_node``: the same rate per
  ``prefix_group`` (``workload.prefix_groups``) / per task ``node``, measured rows.
- cached share of a row = cached_tokens / prompt_tokens (the report's TTFT figure).

Client and server counts (completed measured rows with both ``server_output_tokens``, the
server's ``usage.completion_tokens``, and ``client_output_tokens``, the tokenizer's count of the
whole text received):
- diff = server_output_tokens - client_output_tokens per row; a row *mismatches* when
  |diff| > ``tolerance`` tokens (``client.token_mismatch_tolerance``).
- ``token_counts_compared``: rows compared; ``token_mismatch_rate`` = mismatching rows / rows
  compared (NaN when none); ``token_mismatch_mean_abs`` / ``token_mismatch_max_abs`` = mean / max
  |diff| over the rows compared; ``token_mismatch_mean`` = mean diff (a constant +1: a token the
  server counts that the text does not carry, e.g. BOS or EOS).
- ``token_counts_disagree`` = ``token_mismatch_rate`` > ``threshold``
  (``client.token_mismatch_threshold``): the run says so on the console and in the report.
- ``token_counts_client_only``: completed measured rows without the server's count (no usage sent):
  their ``output_tokens`` are the client's, so goodput in tokens and cost per good token rest on it.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc


def _num(t: pa.Table, name: str) -> np.ndarray:
    """A numeric column as float (null -> NaN); all NaN when the table has no such column
    (a file written before it existed)."""
    if name not in t.column_names:
        return np.full(t.num_rows, np.nan)
    return t.column(name).to_numpy(zero_copy_only=False).astype(np.float64)


def hit_rate(cached, prompt) -> float:
    """sum(cached) / sum(prompt) over the rows where ``cached`` is known (not NaN); NaN when none
    is or those prompts sum to 0."""
    c = np.asarray(cached, dtype=np.float64)
    p = np.asarray(prompt, dtype=np.float64)
    known = ~np.isnan(c) & ~np.isnan(p)
    den = float(p[known].sum())
    return float(c[known].sum()) / den if den > 0 else math.nan


def cached_share(cached, prompt) -> np.ndarray:
    """Per row: cached_tokens / prompt_tokens (NaN where either is unknown or the prompt is empty)."""
    c = np.asarray(cached, dtype=np.float64)
    p = np.asarray(prompt, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(p > 0, c / p, np.nan)


def hit_rate_by(t: pa.Table, key: str) -> dict:
    """``hit_rate`` per value of column ``key`` (rows where it is null left out), for the values
    whose rows report ``cached_tokens``; keys as strings (JSON)."""
    if key not in t.column_names or not t.num_rows:
        return {}
    keys = t.column(key).to_pylist()
    cached, prompt = _num(t, "cached_tokens"), _num(t, "prompt_tokens")
    groups: dict = {}
    for i, k in enumerate(keys):
        if k is not None and not math.isnan(cached[i]):
            groups.setdefault(k, []).append(i)
    return {str(k): hit_rate(cached[ix], prompt[ix]) for k, ix in sorted(groups.items(), key=lambda kv: kv[0])}


def cache_summary(table: pa.Table) -> dict:
    """The prefix-cache keys of the module doc."""
    measured = table.filter(pc.invert(table.column("warmup")))
    cached = _num(measured, "cached_tokens")
    known = ~np.isnan(cached)
    return {"cache_hit_rate": hit_rate(cached, _num(measured, "prompt_tokens")),
            "cache_hit_rate_all": hit_rate(_num(table, "cached_tokens"), _num(table, "prompt_tokens")),
            "cached_tokens_total": int(cached[known].sum()), "cached_tokens_rows": int(known.sum()),
            "cache_hit_rate_by_prefix_group": hit_rate_by(measured, "prefix_group"),
            "cache_hit_rate_by_node": hit_rate_by(measured, "node")}


def mismatch_summary(table: pa.Table, tolerance: int = 1, threshold: float = 0.01) -> dict:
    """The client-server token count keys of the module doc."""
    measured = table.filter(pc.invert(table.column("warmup")))
    ok = np.asarray(measured.column("status").to_pylist(), dtype=object) == "ok"
    server = _num(measured, "server_output_tokens")
    client_only = int((ok & np.isnan(server)).sum()) if "server_output_tokens" in measured.column_names else 0
    diff = (server - _num(measured, "client_output_tokens"))[ok]
    diff = diff[~np.isnan(diff)]
    n = int(diff.size)
    a = np.abs(diff)
    rate = float((a > tolerance).sum()) / n if n else math.nan
    return {"token_counts_compared": n, "token_mismatch_rate": rate,
            "token_mismatch_mean_abs": float(a.mean()) if n else math.nan,
            "token_mismatch_max_abs": int(a.max()) if n else math.nan,
            "token_mismatch_mean": float(diff.mean()) if n else math.nan,
            "token_mismatch_tolerance": int(tolerance), "token_mismatch_threshold": float(threshold),
            "token_counts_disagree": bool(n and rate > threshold), "token_counts_client_only": client_only}


def mismatch_line(m: dict) -> str | None:
    """What the console and the report say when the counts disagree beyond the threshold (else None)."""
    if not m.get("token_counts_disagree"):
        return None
    return (f"TOKEN COUNTS DISAGREE: server usage and the client's tokenizer differ by more than "
            f"{m['token_mismatch_tolerance']} token(s) on {m['token_mismatch_rate']:.1%} of "
            f"{m['token_counts_compared']} requests (> client.token_mismatch_threshold="
            f"{m['token_mismatch_threshold']:g}); mean |diff| {m['token_mismatch_mean_abs']:.2f}, "
            f"max {m['token_mismatch_max_abs']}, mean server - client {m['token_mismatch_mean']:+.2f}"
            # Dynamo's mocker streams random token ids: their text re-tokenizes into other tokens
            + ("; expected on emulated workers (random token ids: their text splits into other tokens; "
               "the server's count is the one generated)" if m.get("emulated") else ""))
