"""AIPerf exports: ``profile_export.jsonl`` (one record a request) and the aggregate
``profile_export_aiperf.json``.

A per-request record (``MetricRecordInfo``, AIPerf 0.2 - 0.14 docs) is ``{"metadata": {...},
"metrics": {name: {"value", "unit"}}, "error": null | {"code", "type", "message"}}``; the
metadata holds ``request_start_ns``/``request_end_ns`` (wall clock, epoch ns),
``benchmark_phase`` (``warmup``/``profiling``), ``was_cancelled``, ``x_request_id``,
``turn_index`` and, in newer versions, ``credit_issued_ns``.  Latencies (``time_to_first_token``,
``request_latency``, ``inter_chunk_latency``) are display-unit durations on AIPerf's perf
counter.  The aggregate file holds ``{metric: {"unit", "avg", "p50", ...}}`` at its top level
(``records`` in early versions) with ``aiperf_version``, ``start_time``/``end_time`` (ISO, UTC).
Importing the JSONL also reads the aggregate file beside it, when there is one.
"""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from harness.imports.common import (
    NS_PER_S,
    UNIT_NS,
    Check,
    ImportedRun,
    chunk_tokens_for,
    duration_ns,
    entry_error,
    failure_status,
    finish,
)
from loadgen.records import RequestRecord

TOOL = "aiperf"
CLOCK = "wall clock (time.time_ns) of the AIPerf workers: *_ns = ns since clock_origin_ns (epoch ns)"
STATS = {"avg": "mean", "p50": "p50", "p90": "p90", "p95": "p95", "p99": "p99"}
# AIPerf aggregate -> our summary key stem (same definitions; see NOTES)
SAME = {"time_to_first_token": "ttft", "request_latency": "e2el", "inter_token_latency": "tpot",
        "inter_chunk_latency": "chunk_gap"}
SCALARS = {"request_count": "completed", "error_request_count": "failed", "request_throughput": "request_throughput",
           "output_token_throughput": "output_throughput", "benchmark_duration": "duration_s",
           "total_isl": "total_input_tokens", "total_osl": "total_output_tokens"}

NOTES = [
    "ITL: AIPerf's inter_token_latency is per request, (request_latency - TTFT) / (output_sequence_length - 1): "
    "our TPOT. AIPerf's inter_chunk_latency (every gap between streamed messages) is our chunk gap; our ITL "
    "spreads each gap over the tokens of its chunk.",
    "Output tokens: AIPerf counts them with a client-side tokenizer over the streamed text unless run with "
    "--use-server-token-count; output_sequence_length (output + reasoning tokens) is our output_tokens, else "
    "output_token_count.",
    "TTFT: AIPerf's first non-empty response, like ours. E2EL: AIPerf's request_latency ends at the last "
    "response message, which can be a usage-only one; ours at the last chunk carrying output: the file cannot "
    "tell them apart.",
    "Chunk times = request_start_ns + TTFT + cumulative inter_chunk_latency (display units to ns, rounded). "
    "Latencies are on AIPerf's perf counter, request_start_ns/request_end_ns (our done_ns) on the wall clock.",
    "AIPerf aggregates inter_chunk_latency with a t-digest: its ICL percentiles are approximate (its docs: "
    "within 0.5 %), count/avg exact. Its std for scalar metrics is the sample std (n - 1); ours the population.",
]


def looks_like_record(obj) -> bool:
    """One line of profile_export.jsonl."""
    return isinstance(obj, dict) and isinstance(obj.get("metadata"), dict) and "request_start_ns" in obj["metadata"]


def looks_like_aggregate(obj) -> bool:
    """profile_export_aiperf.json: metric blocks with unit/avg, and AIPerf's provenance or config keys."""
    if not isinstance(obj, dict):
        return False
    body = obj.get("records") if isinstance(obj.get("records"), dict) else obj
    has_blocks = any(isinstance(v, dict) and "unit" in v and "avg" in v for v in body.values())
    return has_blocks and any(k in obj for k in ("aiperf_version", "input_config", "schema_version",
                                                   "request_throughput", "records"))


def parse_records(lines: list[tuple[int, dict]], path: Path, slo) -> ImportedRun:
    """profile_export.jsonl (its lines, numbered from 1) -> an imported run."""
    records, e2el_mismatch = [], 0
    # sessions are kept only when the file has multi-turn conversations
    multi_turn = any((o.get("metadata") or {}).get("turn_index") for _, o in lines)
    origin = _origin(lines, path)
    for lineno, obj in lines:
        rec, mismatch = _record(obj, lineno, path, multi_turn, origin)
        records.append(finish(rec, slo))
        e2el_mismatch += mismatch
    agg_path, agg = _sibling_aggregate(path)
    notes = list(NOTES)
    if e2el_mismatch:
        notes.append(f"{e2el_mismatch} request(s): TTFT + sum(inter_chunk_latency) differs from request_latency by "
                     "more than 1 us; our end_ns is the last chunk (our E2EL), AIPerf's latency in source_metrics.")
    if any(r.warmup for r in records):
        notes.append("Records of AIPerf's warm-up phase are kept with warmup = True (out of latency statistics).")
    notes.append(f"Aggregates from {agg_path.name} beside the records." if agg is not None else
                 "No aggregate export (profile_export_aiperf.json) beside the records: no AIPerf aggregates to "
                 "compare; source_metrics is empty.")
    body = _body(agg) if agg is not None else {}
    return ImportedRun(
        tool=TOOL, version=(agg or {}).get("aiperf_version"), records=records, notes=notes,
        source_metrics=agg or {}, clock=CLOCK, clock_origin_ns=origin, window_ns=_window(agg, origin),
        provenance={"aggregate_file": str(agg_path) if agg is not None else None},
        equivalents=_equivalents(body),
        checks=lambda s: _per_request_checks(lines, records) + _aggregate_checks(body, s))


def parse_aggregate(obj: dict, path: Path) -> ImportedRun:
    """profile_export_aiperf.json alone: no requests; what AIPerf reported, under our names where they match."""
    body = _body(obj)
    window = _window(obj, 0)
    origin = window[0] // NS_PER_S * NS_PER_S if window else 0
    return ImportedRun(
        tool=TOOL, version=obj.get("aiperf_version"), records=[], source_metrics=obj, clock_origin_ns=origin,
        notes=[f"No per-request records ({path.name} is AIPerf's aggregate export; the per-request records are "
               "in profile_export.jsonl): requests.parquet is empty, so per-request metrics, goodput under our "
               "SLOs, percentile bounds and the window's token counts cannot be recomputed. AIPerf's aggregates "
               "are in source_metrics and, where its definition is ours, under our names in source_equivalents."]
        + NOTES, clock="none (no per-request timestamps); window: " + CLOCK,
        window_ns=(window[0] - origin, window[1] - origin) if window else None, equivalents=_equivalents(body))


def _value(metrics: dict, name: str):
    m = metrics.get(name)
    return m.get("value") if isinstance(m, dict) else None


def _dur(metrics: dict, name: str) -> int | None:
    m = metrics.get(name)
    if not isinstance(m, dict) or m.get("value") is None or isinstance(m["value"], list):
        return None
    return duration_ns(m["value"], m.get("unit", "ms"))


def _origin(lines, path: Path) -> int:
    """The first whole second of the records' wall clock: *_ns are ns since it (epoch ns would lose
    256 ns in the float64 arithmetic of ``metrics/``)."""
    try:
        return min(int(o["metadata"]["request_start_ns"]) for _, o in lines) // NS_PER_S * NS_PER_S
    except (KeyError, TypeError, ValueError) as e:
        raise entry_error(path, TOOL, "metadata", f"request_start_ns missing or not an integer ({e!r})") from None


def _record(obj: dict, lineno: int, path: Path, multi_turn: bool, origin: int) -> tuple[RequestRecord, int]:
    """One JSONL record -> our row (not yet finished); and 1 when its latencies do not add up."""
    try:
        md, metrics, err = obj["metadata"], obj.get("metrics") or {}, obj.get("error")
        sent = int(md["request_start_ns"]) - origin
        ttft, latency = _dur(metrics, "time_to_first_token"), _dur(metrics, "request_latency")
        icl = metrics.get("inter_chunk_latency")
        osl = _value(metrics, "output_sequence_length")
        osl = _value(metrics, "output_token_count") if osl is None else osl
        isl = _value(metrics, "input_sequence_length")
        isl = _value(metrics, "error_isl") if isl is None else isl
        turn = int(md.get("turn_index") or 0)
        rec = RequestRecord(
            request_id=md.get("x_request_id") or f"aiperf-{md.get('request_num', md.get('session_num'))}-{turn}",
            session_id=md.get("x_correlation_id") if multi_turn else None, turn=turn,
            sent_ns=sent, done_ns=_rel(md.get("request_end_ns"), origin),
            scheduled_ns=sent if md.get("credit_issued_ns") is None else _rel(md["credit_issued_ns"], origin),
            prompt_tokens=None if isl is None else int(isl), warmup=md.get("benchmark_phase") == "warmup")
        rec.slot_ns = rec.scheduled_ns
        mismatch = _timings(rec, ttft, latency, icl)
    except (KeyError, TypeError, ValueError) as e:
        raise entry_error(path, TOOL, f"line {lineno}", f"not a profile_export.jsonl record ({e!r})") from None
    if err or md.get("was_cancelled"):
        err = err if isinstance(err, dict) else {}
        text = ": ".join(str(x) for x in (err.get("type"), err.get("message")) if x) or "cancelled by AIPerf"
        rec.status, rec.http_status = ("cancelled", err.get("code")) if md.get("was_cancelled") else \
            failure_status(text, err.get("code"))
        rec.error = text
    else:
        rec.status = "ok"
    if osl is None and rec.status != "ok":  # a failed request's chunks were produced: one token each
        rec.chunk_tokens, rec.output_tokens = [1] * len(rec.chunk_ns), len(rec.chunk_ns) or None
        rec.tokens_source = "chunks" if rec.chunk_ns else "none"
    else:
        rec.output_tokens = None if osl is None else int(osl)
        rec.chunk_tokens, one = chunk_tokens_for(len(rec.chunk_ns), rec.output_tokens)
        rec.tokens_source = "aiperf_output_sequence_length" + ("" if one else "+even_split")
    return rec, mismatch


def _rel(v, origin: int) -> int | None:
    return None if v is None else int(v) - origin


def _timings(rec: RequestRecord, ttft: int | None, latency: int | None, icl) -> int:
    """first token = send + TTFT; chunks = first + cumulative ICL (summed in the file's unit, then
    rounded, so rounding does not accumulate); end = last chunk, else send + request_latency."""
    if ttft is None:  # non-streaming: no first token; E2EL is still known (finalize_record keeps it)
        rec.end_ns = rec.sent_ns + latency if latency is not None else None
        rec.e2el_s = latency / 1e9 if latency is not None else None
        return 0
    rec.first_token_ns = rec.sent_ns + ttft
    if isinstance(icl, dict) and isinstance(icl.get("value"), list):
        cum = np.cumsum(np.asarray(icl["value"], dtype=np.float64))
        scale = duration_ns(1, icl.get("unit", "ms"))
        rec.chunk_ns = [rec.first_token_ns] + [rec.first_token_ns + round(c * scale) for c in cum]
    else:
        rec.chunk_ns = [rec.first_token_ns]
    rec.end_ns = rec.chunk_ns[-1]
    if latency is not None and len(rec.chunk_ns) == 1 and latency > ttft:
        rec.chunk_ns, rec.end_ns = [], rec.sent_ns + latency  # no chunk list: only first and last are known
    return int(latency is not None and abs(rec.sent_ns + latency - rec.end_ns) > 1000)


def _sibling_aggregate(path: Path) -> tuple[Path, dict | None]:
    """The aggregate export written with the JSONL: ``<stem>_aiperf.json`` or profile_export_aiperf.json."""
    for cand in (path.with_name(path.stem + "_aiperf.json"), path.with_name("profile_export_aiperf.json")):
        if cand.is_file():
            try:
                obj = json.loads(cand.read_text())
            except (UnicodeDecodeError, json.JSONDecodeError):
                continue
            if looks_like_aggregate(obj):
                return cand, obj
    return path.with_name("profile_export_aiperf.json"), None


def _body(agg: dict) -> dict:
    return agg["records"] if isinstance(agg.get("records"), dict) else agg


def _window(agg: dict | None, origin: int) -> tuple[int, int] | None:
    """start_time/end_time (ISO; UTC unless they say otherwise) -> ns since ``origin`` (epoch ns)."""
    if not agg or not agg.get("start_time") or not agg.get("end_time"):
        return None
    try:
        lo, hi = (datetime.fromisoformat(str(agg[k]).replace("Z", "+00:00")) for k in ("start_time", "end_time"))
    except ValueError:
        return None
    lo, hi = (t if t.tzinfo else t.replace(tzinfo=UTC) for t in (lo, hi))
    return _epoch_ns(lo) - origin, _epoch_ns(hi) - origin


def _epoch_ns(t: datetime) -> int:
    """Whole microseconds, exactly (timestamp() is a float and would round)."""
    return (int(t.replace(microsecond=0).timestamp()) * 1_000_000 + t.microsecond) * 1000


def _time_block(body: dict, name: str) -> dict | None:
    """A metric block in a time unit we know (others are left to source_metrics)."""
    block = body.get(name)
    return block if isinstance(block, dict) and block.get("unit", "ms") in UNIT_NS else None


def _equivalents(body: dict) -> dict:
    """AIPerf's aggregates under our key names, where its definition is ours."""
    out = {}
    for theirs, ours in SAME.items():
        block = _time_block(body, theirs)
        if block is None:
            continue
        for st, our_st in STATS.items():
            if block.get(st) is not None:
                out[f"{our_st}_{ours}_ms"] = _to_ms(block[st], block.get("unit", "ms"))
        if block.get("p50") is not None:
            out[f"median_{ours}_ms"] = _to_ms(block["p50"], block.get("unit", "ms"))
    for theirs, ours in SCALARS.items():
        block = body.get(theirs)
        if isinstance(block, dict) and block.get("avg") is not None:
            out[ours] = block["avg"]
    return out


def _to_ms(v: float, unit: str) -> float:
    return duration_ns(1, unit) / 1e6 * float(v)


def _per_request_checks(lines, records) -> list[Check]:
    """AIPerf's per-request ITL (= our TPOT) and latency beside ours: the worst request."""
    out = []
    for name, ours_of in (("inter_token_latency", lambda r: r.tpot_s), ("request_latency", lambda r: r.e2el_s)):
        pairs = []
        for (_, obj), r in zip(lines, records):
            m = _time_block(obj.get("metrics") or {}, name)
            if r.status == "ok" and m is not None and m.get("value") is not None and ours_of(r) is not None:
                pairs.append((_to_ms(m["value"], m.get("unit", "ms")), ours_of(r) * 1e3))
        if pairs:
            worst = max(pairs, key=lambda p: abs(p[0] - p[1]))
            ours_name = "tpot" if name == "inter_token_latency" else "e2el"
            out.append(Check(f"per_request_{name}_ms vs our {ours_name} (worst request)", worst[0], worst[1]))
    return out


def _aggregate_checks(body: dict, s: dict) -> list[Check]:
    out = []
    for theirs, ours in SAME.items():
        block = _time_block(body, theirs)
        if block is None:
            continue
        unit = block.get("unit", "ms")
        for st, our_st in STATS.items():
            if block.get(st) is not None:
                approx = ours == "chunk_gap" and st != "avg"
                out.append(Check(f"{our_st}_{ours}_ms", _to_ms(block[st], unit), s.get(f"{our_st}_{ours}_ms"),
                                 same_definition=not approx, note="t-digest percentile" if approx else ""))
        if block.get("std") is not None:
            out.append(Check(f"std_{ours}_ms", _to_ms(block["std"], unit), s.get(f"std_{ours}_ms"),
                             same_definition=False, note="AIPerf: sample std; ours: population"))
    for theirs, ours in SCALARS.items():
        block = body.get(theirs)
        if isinstance(block, dict) and block.get("avg") is not None and not math.isnan(float(block["avg"])):
            out.append(Check(ours, block["avg"], s.get(ours)))
    return out
