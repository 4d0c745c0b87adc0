"""``vllm bench serve`` result files (``--save-result``; per request with ``--save-detailed``).

What the file holds (``vllm/benchmarks/serve.py``, 0.32.0): the run's aggregates under the
names our ``summary.json`` borrows (``mean_ttft_ms``, ``p99_itl_ms`` ...) and, with
``--save-detailed``, lists with one entry per request: ``start_times`` (``time.perf_counter()``
at send), ``ttfts``, ``itls`` (the gaps between consecutive streamed chunks), ``latencies``
(send to the last chunk with ``choices``), ``queue_times`` (send minus the request's arrival
in the schedule), ``input_lens``, ``output_lens`` (usage, else vLLM's re-tokenisation) and
``errors`` ('' when it succeeded).  ``--append-result`` files (one result a line) give one
run per line.
"""

from __future__ import annotations

import math

import numpy as np

from harness.imports.common import (
    Check,
    ImportedRun,
    SecondsClock,
    chunk_tokens_for,
    entry_error,
    failure_status,
    finish,
    s_to_ns,
)
from loadgen.records import RequestRecord

TOOL = "vllm bench serve"
DETAIL_KEYS = ("input_lens", "output_lens", "ttfts", "itls", "latencies", "start_times", "queue_times",
               "generated_texts", "errors")
REQUIRED = ("ttfts", "itls", "start_times", "output_lens", "latencies")
STATS = ("mean", "median", "std") + tuple(f"p{q}" for q in (50, 90, 95, 99))


def looks_like(obj) -> bool:
    """A vLLM bench result: its aggregate keys, with or without the per-request lists."""
    return isinstance(obj, dict) and ("ttfts" in obj or ("date" in obj and "backend" in obj
                                                          and "request_throughput" in obj))


def parse(obj: dict, path, slo, label: str | None = None) -> ImportedRun:
    """One result object -> an imported run."""
    source_metrics = {k: v for k, v in obj.items() if k not in DETAIL_KEYS}
    if not all(k in obj for k in REQUIRED):
        return _aggregate_only(obj, path, source_metrics, label)
    n = _lengths(obj, path)
    clock = SecondsClock(obj["start_times"])
    records = [_record(obj, i, clock, path, slo) for i in range(n)]
    one_per_chunk = [i for i, r in enumerate(records) if r.status == "ok" and r.tokens_source == "vllm_output_lens"]
    split = [i for i, r in enumerate(records) if r.status == "ok" and r.tokens_source.endswith("even_split")]
    return ImportedRun(
        tool=TOOL, version=obj.get("vllm_version"), records=records,
        notes=_notes(obj, records, one_per_chunk, split), source_metrics=source_metrics,
        clock="time.perf_counter() seconds of the vllm bench process (CLOCK_MONOTONIC), as integer ns",
        label=label, provenance={"model_id": obj.get("model_id"), "backend": obj.get("backend"),
                                 "date": obj.get("date")},
        equivalents=_equivalents(obj), checks=lambda s: _checks(obj, s, len(split) == 0))


def _lengths(obj: dict, path) -> int:
    """The number of requests; every per-request list must have one entry each."""
    if not isinstance(obj["ttfts"], list):
        raise entry_error(path, TOOL, "ttfts", f"expected a list, got {type(obj['ttfts']).__name__}")
    n = len(obj["ttfts"])
    for k in DETAIL_KEYS:
        if k in obj and (not isinstance(obj[k], list) or len(obj[k]) != n):
            raise entry_error(path, TOOL, k, f"expected a list of {n} entries (one per request, as 'ttfts'), "
                                             f"got {type(obj[k]).__name__} of length "
                                             f"{len(obj[k]) if isinstance(obj[k], list) else '-'}")
    return n


def _record(obj: dict, i: int, clock: SecondsClock, path, slo) -> RequestRecord:
    """Request ``i``: chunk times are start + ttft + cumulative itls, exact to 1 ns."""
    try:
        start = float(obj["start_times"][i])
        ttft = float(obj["ttfts"][i] or 0.0)
        itls = [float(x) for x in (obj["itls"][i] or [])]
        error = str((obj.get("errors") or [""] * (i + 1))[i] or "")
        out_len = int(obj["output_lens"][i] or 0)
        in_len = obj.get("input_lens", [None] * (i + 1))[i]
        queue = obj["queue_times"][i] if "queue_times" in obj else None
    except (TypeError, ValueError) as e:
        raise entry_error(path, TOOL, i, f"not a request entry ({e})") from None
    if not math.isfinite(start) or ttft < 0 or any(x < 0 for x in itls):
        raise entry_error(path, TOOL, i, "start_time not finite, or a negative ttft/itl")
    sent = clock.ns(start)
    rec = RequestRecord(request_id=f"vllm-bench-{i}", sent_ns=sent,
                        prompt_tokens=None if in_len is None else int(in_len))
    _schedule(rec, queue, obj.get("max_concurrency"))
    # vLLM sets ttft at the first chunk; success needs one (and no error text).
    received = ttft > 0
    if received:
        offsets = np.concatenate([[ttft], ttft + np.cumsum(itls)]) if itls else np.array([ttft])
        rec.chunk_ns = [sent + s_to_ns(x) for x in offsets]
        rec.first_token_ns, rec.end_ns = rec.chunk_ns[0], rec.chunk_ns[-1]
    if received and not error:
        rec.status = "ok"
        rec.output_tokens = out_len
        rec.chunk_tokens, one = chunk_tokens_for(len(rec.chunk_ns), out_len)
        rec.tokens_source = "vllm_output_lens" if one else "vllm_output_lens+even_split"
    else:
        rec.status, rec.http_status = failure_status(error)
        rec.error = error or "no chunk received (vllm bench recorded no error text)"
        # vLLM counts a failed request's output as 0; the chunks it did receive were produced.
        rec.chunk_tokens = [1] * len(rec.chunk_ns)
        rec.output_tokens = len(rec.chunk_ns)
        rec.tokens_source = "chunks" if rec.chunk_ns else "none"
    return finish(rec, slo)


def _schedule(rec: RequestRecord, queue, max_concurrency) -> None:
    """scheduled = send - queue_time.  With max_concurrency the wait was for vLLM's semaphore
    (queueing: slot = send); without, it is the client's own lag (slot = schedule)."""
    if queue is None:
        rec.scheduled_ns = rec.slot_ns = rec.sent_ns
        return
    rec.scheduled_ns = rec.sent_ns - s_to_ns(float(queue))
    rec.slot_ns = rec.sent_ns if max_concurrency else rec.scheduled_ns


def _notes(obj: dict, records, one_per_chunk: list[int], split: list[int]) -> list[str]:
    ok = sum(r.status == "ok" for r in records)
    notes = [
        "ITL: vLLM's *_itl_ms is per chunk (every gap between two streamed chunks is one value, whatever the "
        "chunk carried); ours is per token (a chunk of k tokens gives k values of gap/k). Our *_chunk_gap_ms is "
        f"vLLM's ITL definition. They agree where every chunk carries one token: {len(one_per_chunk)} of {ok} "
        "completed requests here.",
        "Chunk times = start_time + ttft + cumulative itls (rounded to 1 ns). Tokens per chunk: one where "
        "output_lens equals the chunks received; "
        + (f"requests {split} have more tokens than chunks: their total is split evenly over the chunks (the "
           "extra tokens on the first chunks, as our client does without per-chunk counts), so only their "
           "per-token ITL values are approximate; TTFT, TPOT and E2EL do not depend on the split."
           if split else "every completed request here."),
        "TPOT, TTFT and E2EL: same definitions as ours (vLLM's latency ends at the last chunk with 'choices'; "
        "the usage chunk is not timed). vLLM starts TTFT at the first chunk with a 'choices' entry even if its "
        "text is empty; the file cannot tell, so TTFT is taken as vLLM measured it.",
        "No stream-close time in the file (done_ns is empty): our duration_s runs from the first send to the "
        "last output chunk, where vLLM's 'duration' runs from its benchmark start to the end of gathering all "
        "requests; throughputs differ by that denominator.",
        "output_lens come from the server's usage when it sent any, else from vLLM re-tokenising the generated "
        "text; the file does not say which.",
        "Failed requests: vLLM keeps only an error text (a traceback or an HTTP reason phrase); our status "
        "and http_status are read from it. vLLM counts their output as 0 tokens; ours counts the chunks they "
        "received (one token each).",
        "vllm bench's warm-up requests (--num-warmups) are not in the file.",
    ]
    if "queue_times" in obj:
        notes.append("scheduled_ns = start_time - queue_time (the request's arrival in vLLM's schedule); "
                     + ("with max_concurrency the wait is for vLLM's semaphore: slot_ns = sent_ns, it shows as "
                        "queue_wait_*." if obj.get("max_concurrency") else
                        "without max_concurrency it is the client's own lag: it shows as schedule_lag_*."))
    else:
        notes.append("No queue_times in the file: scheduled_ns = slot_ns = sent_ns (no schedule lag known).")
    if not obj.get("vllm_version"):
        notes.append("The file does not record the vLLM version.")
    return notes


def _aggregate_only(obj: dict, path, source_metrics: dict, label) -> ImportedRun:
    missing = [k for k in REQUIRED if k not in obj]
    return ImportedRun(
        tool=TOOL, version=obj.get("vllm_version"), records=[], source_metrics=source_metrics,
        notes=[f"No per-request data ({', '.join(missing)} missing: run vllm bench serve with --save-detailed): "
               "requests.parquet is empty, so per-request metrics, goodput under our SLOs and percentile bounds "
               "cannot be recomputed. vLLM's own aggregates are in source_metrics and, under our names, in "
               "source_equivalents (its TTFT/TPOT/E2EL definitions are ours; its ITL is our chunk gap)."],
        clock="none (no per-request timestamps)", label=label, equivalents=_equivalents(obj))


def _equivalents(obj: dict) -> dict:
    """vLLM's aggregates under our names: the same names, except ITL (per chunk) -> chunk_gap."""
    out = {}
    for k in ("completed", "failed", "total_input_tokens", "total_output_tokens", "request_throughput",
              "output_throughput", "total_token_throughput", "request_goodput"):
        if obj.get(k) is not None:
            out[k] = obj[k]
    for metric in ("ttft", "tpot", "e2el", "itl"):
        ours = "chunk_gap" if metric == "itl" else metric
        for stat in STATS:
            if obj.get(f"{stat}_{metric}_ms") is not None:
                out[f"{stat}_{ours}_ms"] = obj[f"{stat}_{metric}_ms"]
    if obj.get("duration") is not None:
        out["duration_s"] = obj["duration"]
    return out


def _checks(obj: dict, s: dict, one_token_per_chunk: bool) -> list[Check]:
    """vLLM's numbers beside ours: counts, TTFT/TPOT/E2EL (same definitions), its ITL against our
    chunk gaps (same definition) and our per-token ITL (same only with one token a chunk)."""
    out = [Check(k, obj.get(k), s.get(k)) for k in ("completed", "failed", "total_input_tokens",
                                                      "total_output_tokens") if obj.get(k) is not None]
    for metric in ("ttft", "tpot", "e2el"):
        out += [Check(f"{st}_{metric}_ms", obj[f"{st}_{metric}_ms"], s.get(f"{st}_{metric}_ms"))
                for st in STATS if obj.get(f"{st}_{metric}_ms") is not None]
    for st in STATS:
        theirs = obj.get(f"{st}_itl_ms")
        if theirs is None:
            continue
        out.append(Check(f"{st}_chunk_gap_ms", theirs, s.get(f"{st}_chunk_gap_ms"),
                         note="vLLM's ITL is per chunk: our chunk gap"))
        out.append(Check(f"{st}_itl_ms", theirs, s.get(f"{st}_itl_ms"), same_definition=one_token_per_chunk,
                         note="" if one_token_per_chunk else "some chunks carried more than one token: ours is "
                         "per token, vLLM's per chunk"))
    dur = obj.get("duration")
    if dur is not None:
        out.append(Check("duration_s", dur, s.get("duration_s"), same_definition=False,
                         note="vLLM: its benchmark start to all requests gathered; ours: first send to last chunk"))
        for k in ("request_throughput", "output_throughput", "total_token_throughput"):
            if obj.get(k) is not None:
                out.append(Check(k, obj[k], s.get(k), same_definition=False,
                                 note="divided by each one's duration (see duration_s)"))
    return out
