"""An engine's timing profile from its runs' requests: prefill time against prompt length, and
decode step time against batch size and context length (``protocol=profile``; the timing the
plan and Dynamo's mocker read).

Per run of the profile's ladders, over its completed requests outside warm-up (``status ==
"ok"``, ``warmup`` false):

- ``prefill_ms`` (a prefill run: concurrency 1, one output token) = the median over requests
  of TTFT in ms.  At concurrency 1 no request waits for another, so TTFT is the prefill of
  ``prompt_tokens`` plus the serving path's own time (HTTP, tokenisation, the first token's
  detokenisation): what a request of that length pays before its first token.
- ``step_ms`` (a decode run) = the median over every output token after a request's first of
  its per-token ITL (``metrics.request_metrics.itl_per_token_s``), in ms: the time between two
  decode steps, each of which emits one token per running sequence.  The median keeps a step
  that also ran another request's prefill (a closed loop's next request arriving) out.  Chunks
  stamped with one time (events the client read at once: vLLM CPU streams a token an event, and
  three in four of a run's gaps were exactly 0) count as one chunk of their tokens together
  (``one_chunk_a_read``), so a burst of k tokens after a gap G gives k values of G / k, as a
  multi-token chunk does.  The tokens read with a request's first token show no step and are
  left out (``after_first_read``): vLLM CPU on two cores at times holds a stream back and sends
  it whole in one read, whose 63 zeros made a run's step 0.  The run's ITL in ``summary.json``
  keeps each event's own gap: what the client saw, as peers count it; here the engine's step is
  what is estimated.
- ``batch`` = the mean, over those same tokens (each arriving at ``t``), of the number of the
  run's completed requests, warm-up included (a warm-up request holds a slot of the batch
  too), with ``first_token_ns <= t <= end_ns``: the batch each measured token was decoded in.
  At concurrency ``c`` with equal lengths in full waves it is ``c``; lower where the engine
  caps its batch (``max_num_seqs``) and the rest queue, or where a request runs alone.
- ``context`` = the ladder's prompt length + mean over requests of ``output_tokens / 2``: the
  mean tokens in a sequence's KV cache over its decode steps (at step ``j`` it holds ``prompt +
  j``).  Prompt lengths are the ladder's (the prompts are built to exactly that many tokens of
  the served model's tokenizer); the server's own count stands beside them
  (``reported_prompt_tokens``).
- ``kv_tokens`` = ``batch * context``: the KV tokens a step reads, summed over the batch.
- ``prefill_in_step_ms`` (a mixed run: ``c`` requests of prompt ``L`` in a closed loop, their
  output lengths spread so that each new request's prefill runs while the others decode): what
  a prefill of ``L`` adds to the decode step it shares (vLLM and SGLang run a prefill chunk and
  the running sequences' decode in one forward pass).  Every completed request's first token
  (at ``f``) ends the step that ran its prefill; each other counted request decoding then (its
  first read before ``f``, its last after) got that step's token in its read nearest ``f``
  (reads: ``one_chunk_a_read``), within ``MIXED_READ_TOLERANCE_NS`` and carrying one token:
  the gap before that read is a step with a prefill in it.  ``step_with_prefill_ms`` = the
  median of those gaps; ``step_ms`` = the median per-token ITL of the run's other reads;
  ``prefill_in_step_ms`` = their difference.  The scheduler model charges a step that carries
  a prefill this increment, not the prefill's TTFT (``protocols.plan.scheduler``): the rest of
  a TTFT (the serving path: HTTP, tokenisation, the engine's scheduling) delays the request
  without holding the batch.
- The engine's own phase histograms where it has them (vLLM's
  ``vllm:request_prefill_time_seconds`` and ``vllm:request_decode_time_seconds``, the run's
  ``engine_mean_prefill_ms`` and ``engine_mean_decode_ms``; ``metrics.engine_counters``):
  ``engine_prefill_ms`` = engine_mean_prefill_ms; ``engine_step_ms`` = engine_mean_decode_ms /
  (mean output_tokens - 1).  They stand beside the client's figures (their difference is the
  serving path's own time); the fits use the client's, which is what a user waits for.

Fits (non-negative least squares, ``scipy.optimize.nnls``: no coefficient may be negative, a
time that shrinks with work being noise):

- prefill: ``prefill_ms(L) = a + b*L + c*L^2`` over the prefill runs' ``(prompt_tokens,
  prefill_ms)``: a fixed cost, a per-token cost (the weights' FLOPs) and a quadratic one
  (attention over the prompt).
- decode: ``step_ms(B, KV) = alpha + beta*B + gamma*KV`` over the decode runs' ``(batch,
  kv_tokens, step_ms)``: a fixed cost per step (the weights read once), a per-sequence cost and
  a per-KV-token cost (attention reads every sequence's cache each step).  With a single
  context length among the runs ``KV`` is proportional to ``B`` and ``gamma`` is not
  identifiable: it is set to 0 and the record says so (``identifiable``).
- prefill in a step: ``prefill_in_step_ms(L) = a + b*L + c*L^2`` over the mixed runs'
  ``(prompt_tokens, prefill_in_step_ms)``, as the prefill fit.
- residuals, per point: ``measured - fitted`` (ms) and ``(measured - fitted) / measured``;
  ``rms_ms`` and ``max_abs_rel`` over the points.

Dynamo's mocker tables (``--planner-profile-data FILE.npz``; the arrays its Rust
``PerfModel::from_npz`` reads, float64, interpolated linearly with extrapolation):
``prefill_isl`` (n,) = linspace(min L, max L, n) and ``prefill_ttft_ms`` = prefill_ms there;
``decode_active_kv_tokens`` (n,) = linspace(0, max kv_tokens at the longest context, n),
``decode_context_length`` (n,) = linspace(1, max context, n), ``decode_itl`` (n, n) [ms] =
step_ms(B = clip(kv_i / ctx_j, 1, B_max), KV = kv_i): the grid Dynamo's own converter
(``dynamo.mocker.utils.planner_profiler_perf_data_converter``) writes from its profiler's fits,
but for ``B_max``, the largest batch measured: the grid's corner of much KV over short contexts
(kv / ctx far above any batch that ran) would extrapolate the per-sequence cost to thousands of
sequences, and bilinear interpolation carries such a corner into the short-context cells the
mocker does query.  The mocker floors a decode step at 1 ms.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.optimize import nnls

from metrics.request_metrics import itl_per_token_s

MS = 1e3
MOCKER_KEYS = ("prefill_isl", "prefill_ttft_ms", "decode_active_kv_tokens", "decode_context_length", "decode_itl")


def counted(rows: list[dict]) -> list[dict]:
    """The requests a profile point counts: completed, outside warm-up."""
    return [r for r in rows if r.get("status") == "ok" and not r.get("warmup")]


def _reported(rs: list[dict]) -> float:
    vals = [r["prompt_tokens"] for r in rs if r.get("prompt_tokens") is not None]
    return float(np.mean(vals)) if vals else math.nan


def prefill_point(rows: list[dict], prompt_tokens: int) -> dict:
    """A prefill run's figures (module doc) at the ladder's ``prompt_tokens`` (the prompts are
    built to that many tokens; ``reported_prompt_tokens``: the mean the server's usage
    reported): ``prefill_ms`` (median TTFT), ``p90_ttft_ms``, ``requests``."""
    rs = [r for r in counted(rows) if r.get("ttft_s") is not None and math.isfinite(r["ttft_s"])]
    if not rs:
        return {"prompt_tokens": prompt_tokens, "reported_prompt_tokens": math.nan, "prefill_ms": math.nan,
                "p90_ttft_ms": math.nan, "requests": 0}
    ttft = np.array([r["ttft_s"] for r in rs]) * MS
    return {"prompt_tokens": prompt_tokens, "reported_prompt_tokens": _reported(rs),
            "prefill_ms": float(np.median(ttft)), "p90_ttft_ms": float(np.percentile(ttft, 90)),
            "requests": len(rs)}


def decode_batch(first_ns, end_ns, token_ns) -> float:
    """``batch`` (module doc): the mean over tokens arriving at ``token_ns`` of #{i: first_i <=
    t <= end_i} over the spans ``[first_ns, end_ns]``; NaN without tokens."""
    t = np.asarray(token_ns, dtype=np.int64)
    if t.size == 0:
        return math.nan
    f = np.sort(np.asarray(first_ns, dtype=np.int64))
    e = np.sort(np.asarray(end_ns, dtype=np.int64))
    inside = np.searchsorted(f, t, side="right") - np.searchsorted(e, t, side="left")
    return float(inside.mean())


def _token_times(chunk_ns, chunk_tokens) -> np.ndarray:
    """The arrival time of every output token after a request's first (a chunk of k tokens:
    k tokens at its time; the first chunk's extra tokens with it), as ``itl_per_token_s`` counts them."""
    c = np.asarray(chunk_ns, dtype=np.int64)
    k = np.asarray(chunk_tokens, dtype=np.int64)
    if c.size == 0 or k.sum() < 2:
        return np.empty(0, dtype=np.int64)
    first = int(np.argmax(k > 0))
    counts = k.copy()
    counts[first] -= 1
    counts[:first] = 0
    return np.repeat(c, np.maximum(counts, 0))


def one_chunk_a_read(chunk_ns, chunk_tokens) -> tuple[np.ndarray, np.ndarray]:
    """Consecutive chunks with the same time stamp merged into one carrying their tokens together
    (``step_ms``, module doc)."""
    c = np.asarray(chunk_ns, dtype=np.int64)
    k = np.asarray(chunk_tokens, dtype=np.int64)
    if c.size == 0:
        return c, k
    starts = np.flatnonzero(np.r_[True, c[1:] != c[:-1]])
    return c[starts], np.add.reduceat(k, starts)


def after_first_read(chunk_ns, chunk_tokens) -> np.ndarray:
    """The per-token ITLs (s) of the tokens read after a request's first read: the tokens that
    came with its first token show no step (``step_ms``, module doc)."""
    k = np.asarray(chunk_tokens, dtype=np.int64)
    itl = itl_per_token_s(chunk_ns, chunk_tokens)
    with_first = int(k[np.argmax(k > 0)]) - 1 if k.size and (k > 0).any() else 0
    return itl[with_first:]


def decode_point(rows: list[dict], prompt_tokens: int) -> dict:
    """A decode run's figures (module doc) at the ladder's ``prompt_tokens``: ``step_ms`` (median
    per-token ITL), ``mean_itl_ms``, ``p90_itl_ms``, ``batch``, ``context`` (with each request's
    own output length: an engine without ``ignore_eos`` may stop early), ``kv_tokens``,
    ``output_tokens`` (mean), ``reported_prompt_tokens``, ``requests``, ``decode_requests`` (those
    with a token read after their first read: a run without one has no step, NaN)."""
    rs = [r for r in counted(rows) if (r.get("output_tokens") or 0) > 1 and r.get("chunk_ns")]
    if not rs:
        return {"prompt_tokens": prompt_tokens, "reported_prompt_tokens": math.nan, "step_ms": math.nan,
                "mean_itl_ms": math.nan, "p90_itl_ms": math.nan, "batch": math.nan, "context": math.nan,
                "kv_tokens": math.nan, "output_tokens": math.nan, "requests": 0, "decode_requests": 0}
    gaps = [after_first_read(*one_chunk_a_read(r["chunk_ns"], r["chunk_tokens"])) for r in rs]
    itl = np.concatenate(gaps) * MS
    held = [r for r in rows if r.get("status") == "ok" and r.get("first_token_ns") is not None]
    batch = decode_batch([r["first_token_ns"] for r in held], [r["end_ns"] for r in held],
                         np.concatenate([_token_times(r["chunk_ns"], r["chunk_tokens"]) for r in rs]))
    context = float(prompt_tokens + np.mean([r["output_tokens"] for r in rs]) / 2)
    none = not itl.size
    return {"prompt_tokens": prompt_tokens, "reported_prompt_tokens": _reported(rs),
            "step_ms": math.nan if none else float(np.median(itl)),
            "mean_itl_ms": math.nan if none else float(np.mean(itl)),
            "p90_itl_ms": math.nan if none else float(np.percentile(itl, 90)),
            "decode_requests": sum(1 for g in gaps if g.size), "batch": batch, "context": context,
            "kv_tokens": batch * context, "output_tokens": float(np.mean([r["output_tokens"] for r in rs])),
            "requests": len(rs)}


MIXED_READ_TOLERANCE_NS = 2_000_000   # a decoding stream's read this close to another's first token is of its step


def mixed_point(rows: list[dict], prompt_tokens: int) -> dict:
    """A mixed run's figures (module doc) at the ladder's ``prompt_tokens``:
    ``step_with_prefill_ms``, ``step_ms``, ``prefill_in_step_ms``, ``steps_with_prefill`` (the
    gaps counted), ``requests``."""
    ok = [r for r in rows if r.get("status") == "ok" and r.get("first_token_ns") is not None and r.get("chunk_ns")]
    firsts = np.sort(np.array([r["first_token_ns"] for r in ok], dtype=np.int64))
    mixed: list[float] = []
    pure: list[np.ndarray] = []
    for r in counted(ok):
        c, k = one_chunk_a_read(r["chunk_ns"], r["chunk_tokens"])
        if c.size < 3:
            continue
        # the other requests' first tokens while this one decodes (its own is c[0])
        inside = firsts[(firsts > c[0]) & (firsts < c[-1])]
        near = np.clip(np.searchsorted(c, inside), 1, c.size - 1)
        near = np.where(np.abs(c[near - 1] - inside) < np.abs(c[near] - inside), near - 1, near)
        hit = (near >= 1) & (np.abs(c[near] - inside) <= MIXED_READ_TOLERANCE_NS) & (k[near] == 1)
        marked = np.unique(near[hit])
        mixed += ((c[marked] - c[marked - 1]) / 1e6).tolist()
        keep = np.ones(c.size, dtype=bool)
        keep[marked] = False
        keep[0] = True                       # the first token's read opens the first gap
        gaps = np.diff(c) / 1e6
        per_token = gaps / np.maximum(k[1:], 1)
        pure.append(np.repeat(per_token[keep[1:]], np.maximum(k[1:][keep[1:]], 1)))
    pure_all = np.concatenate(pure) if pure else np.empty(0)
    with_prefill = float(np.median(mixed)) if mixed else math.nan
    step = float(np.median(pure_all)) if pure_all.size else math.nan
    return {"prompt_tokens": prompt_tokens, "step_with_prefill_ms": with_prefill, "step_ms": step,
            "prefill_in_step_ms": with_prefill - step, "steps_with_prefill": len(mixed),
            "requests": len(counted(ok))}


def engine_step_ms(engine_mean_decode_ms, output_tokens) -> float:
    """``engine_step_ms`` = engine_mean_decode_ms / (output_tokens - 1); NaN without either."""
    if engine_mean_decode_ms is None or output_tokens is None or not output_tokens > 1:
        return math.nan
    return float(engine_mean_decode_ms) / (float(output_tokens) - 1)


def _residuals(measured: np.ndarray, fitted: np.ndarray) -> dict:
    res = measured - fitted
    rel = np.divide(res, measured, out=np.full_like(res, np.nan), where=measured > 0)
    return {"fitted_ms": fitted.tolist(), "residual_ms": res.tolist(), "residual_rel": rel.tolist(),
            "rms_ms": float(np.sqrt(np.mean(res ** 2))) if res.size else math.nan,
            "max_abs_rel": float(np.nanmax(np.abs(rel))) if np.isfinite(rel).any() else math.nan}


def _finite(*cols) -> np.ndarray:
    arr = np.array(cols, dtype=np.float64).T
    return arr[np.isfinite(arr).all(axis=1)] if arr.size else arr.reshape(0, len(cols))


def fit_prefill(prompt_tokens, prefill_ms) -> dict:
    """``prefill_ms(L) = a + b*L + c*L^2`` by non-negative least squares (module doc); the
    coefficients (``a_ms``, ``b_ms_per_token``, ``c_ms_per_token2``) and residuals per point."""
    pts = _finite(prompt_tokens, prefill_ms)
    if len(pts) < 2:
        raise ValueError(f"the prefill fit needs at least 2 prompt lengths with a measured TTFT, got {len(pts)}")
    L, y = pts[:, 0], pts[:, 1]
    scale = max(float(L.max()), 1.0)  # columns of like size: nnls is then well conditioned
    X = np.column_stack([np.ones_like(L), L / scale, (L / scale) ** 2])
    coef, _ = nnls(X, y)
    a, b, c = float(coef[0]), float(coef[1] / scale), float(coef[2] / scale ** 2)
    fit = {"a_ms": a, "b_ms_per_token": b, "c_ms_per_token2": c}
    return {"model": "prefill_ms = a + b*L + c*L^2", "coefficients": fit, "prompt_tokens": L.tolist(),
            "measured_ms": y.tolist(), **_residuals(y, prefill_ms_at(fit, L))}


def prefill_ms_at(coefficients: dict, prompt_tokens) -> np.ndarray:
    L = np.asarray(prompt_tokens, dtype=np.float64)
    c = coefficients
    return c["a_ms"] + c["b_ms_per_token"] * L + c["c_ms_per_token2"] * L ** 2


def fit_decode(batch, kv_tokens, step_ms) -> dict:
    """``step_ms(B, KV) = alpha + beta*B + gamma*KV`` by non-negative least squares (module doc);
    the coefficients, whether ``gamma`` was identifiable, and residuals per point."""
    pts = _finite(batch, kv_tokens, step_ms)
    if len(pts) < 2:
        raise ValueError(f"the decode fit needs at least 2 decode runs with a measured step, got {len(pts)}")
    B, KV, y = pts[:, 0], pts[:, 1], pts[:, 2]
    ctx = KV / B
    # gamma is separable from beta only when the runs span more than one context length
    identifiable = bool(np.ptp(ctx) > 0.05 * ctx.mean())
    sb, skv = max(float(B.max()), 1.0), max(float(KV.max()), 1.0)
    cols = [np.ones_like(B), B / sb] + ([KV / skv] if identifiable else [])
    coef, _ = nnls(np.column_stack(cols), y)
    fit = {"alpha_ms": float(coef[0]), "beta_ms_per_seq": float(coef[1] / sb),
           "gamma_ms_per_kv_token": float(coef[2] / skv) if identifiable else 0.0}
    return {"model": "step_ms = alpha + beta*B + gamma*KV", "coefficients": fit, "identifiable": identifiable,
            "batch": B.tolist(), "kv_tokens": KV.tolist(), "measured_ms": y.tolist(),
            **_residuals(y, step_ms_at(fit, B, KV))}


def step_ms_at(coefficients: dict, batch, kv_tokens) -> np.ndarray:
    c = coefficients
    return (c["alpha_ms"] + c["beta_ms_per_seq"] * np.asarray(batch, dtype=np.float64)
            + c["gamma_ms_per_kv_token"] * np.asarray(kv_tokens, dtype=np.float64))


def mocker_tables(prefill: dict, decode: dict, *, isl_range: tuple[float, float], kv_max: float, ctx_max: float,
                  batch_max: float | None = None, resolution: int = 50) -> dict[str, np.ndarray]:
    """The five arrays of Dynamo's mocker NPZ (module doc) from the two fits' coefficients;
    ``batch_max``: B_max (None: no cap, as Dynamo's converter)."""
    if resolution < 2:
        raise ValueError(f"the mocker grid needs a resolution >= 2, got {resolution}")
    lo, hi = float(isl_range[0]), float(isl_range[1])
    if not hi > lo:
        hi = lo + 1.0  # one prompt length: a flat segment the mocker extrapolates from
    isl = np.linspace(lo, hi, resolution)
    kv = np.linspace(0.0, max(float(kv_max), 1.0), resolution)
    ctx = np.linspace(1.0, max(float(ctx_max), 2.0), resolution)
    bs = np.clip(kv[:, None] / ctx[None, :], 1.0, max(float(batch_max), 1.0) if batch_max else None)
    itl = step_ms_at(decode, bs, np.broadcast_to(kv[:, None], bs.shape))
    return {"prefill_isl": isl, "prefill_ttft_ms": prefill_ms_at(prefill, isl).astype(np.float64),
            "decode_active_kv_tokens": kv, "decode_context_length": ctx,
            "decode_itl": np.ascontiguousarray(itl, dtype=np.float64)}
