"""GuideLLM ``benchmarks.json`` reports (``guidellm benchmark --output-path``).

Two per-request layouts are read, both under ``benchmarks[].requests.{successful, errored,
incomplete}``:

- 0.2/0.3 (``GenerativeTextResponseStats``): flat ``start_time``, ``end_time``,
  ``first_token_time``, ``last_token_time`` (``time.time()`` seconds), ``prompt_tokens``,
  ``output_tokens``, ``scheduler_info.targeted_start_time``, ``error`` on errored ones.
- 0.4 and later (``GenerativeRequestStats``): ``info.timings.{targeted_start, request_start,
  first_token_iteration, last_token_iteration, token_iterations, request_end}`` (older 0.4
  builds: ``first_iteration``/``last_iteration``/``iterations``), ``info.error``, and the
  computed ``prompt_tokens``/``output_tokens``.

Both also carry GuideLLM's own per-request ``time_to_first_token_ms``,
``time_per_output_token_ms`` and ``inter_token_latency_ms``, which we recompute from the
timestamps to check the import.
"""

from __future__ import annotations

import math

from harness.imports.common import (
    Check,
    ImportedRun,
    SecondsClock,
    entry_error,
    failure_status,
    finish,
)
from loadgen.records import RequestRecord

TOOL = "guidellm"
GROUPS = ("successful", "errored", "incomplete")


def looks_like(obj) -> bool:
    """A GuideLLM report: a ``benchmarks`` list whose entries hold ``requests``."""
    b = obj.get("benchmarks") if isinstance(obj, dict) else None
    return isinstance(b, list) and bool(b) and all(isinstance(x, dict) and "requests" in x for x in b)


def parse(obj: dict, path, slo) -> list[ImportedRun]:
    """Every benchmark of the report -> an imported run."""
    version = (obj.get("metadata") or {}).get("guidellm_version")
    return [_benchmark(b, i, path, slo, version) for i, b in enumerate(obj["benchmarks"])]


def _benchmark(bench: dict, b: int, path, slo, version) -> ImportedRun:
    reqs = bench["requests"]
    if not isinstance(reqs, dict) or not any(isinstance(reqs.get(g), list) for g in GROUPS):
        raise entry_error(path, TOOL, f"benchmarks[{b}].requests",
                          "expected lists 'successful', 'errored', 'incomplete'")
    rows = [(g, j, _flat(r, f"benchmarks[{b}].requests.{g}[{j}]", path))
            for g in GROUPS for j, r in enumerate(reqs.get(g) or [])]
    clock = SecondsClock([x["start"] for _, _, x in rows] + [x["targeted"] for _, _, x in rows], rebase=True)
    new_layout = any(x["layout"] == "0.4+" for _, _, x in rows)
    measure = _measure_window(bench) if new_layout else None
    records = [_record(g, x, clock, measure, slo) for g, _, x in rows]
    declared = _declared_window(bench, clock)
    sampled = _sampled(bench, reqs)
    strategy = ((bench.get("config") or {}).get("strategy") or (bench.get("args") or {}).get("strategy") or {})
    label = f"benchmarks[{b}]" + (f" {strategy.get('type_')}" if isinstance(strategy, dict) and
                                  strategy.get("type_") else "")
    return ImportedRun(
        tool=TOOL, version=version, records=records, notes=_notes(new_layout, measure, sampled, version),
        source_metrics={k: v for k, v in bench.items() if k != "requests"},
        clock="time.time() seconds (wall clock, float) of the GuideLLM process: *_ns = ns since clock_origin_ns "
              "(epoch ns)", window_ns=declared, clock_origin_ns=clock.origin_ns, label=label,
        provenance={"layout": "0.4+" if new_layout else "0.2/0.3", "benchmark_id": bench.get("id_")},
        equivalents=_equivalents(bench),
        checks=lambda s: _checks(bench, [(g, x, r) for (g, _, x), r in zip(rows, records)], s, sampled, new_layout))


def _num(v):
    return None if v is None else float(v)


def _flat(r: dict, where: str, path) -> dict:
    """One request of either layout -> start/first/last/end (s), tokens, error, GuideLLM's own numbers."""
    if not isinstance(r, dict):
        raise entry_error(path, TOOL, where, f"expected an object, got {type(r).__name__}")
    try:
        if isinstance(r.get("info"), dict):
            info = r["info"]
            t = info.get("timings") or {}
            x = {"layout": "0.4+", "start": _num(t.get("request_start") or t.get("resolve_start")),
                 "first": _num(t.get("first_token_iteration", t.get("first_iteration"))),
                 "last": _num(t.get("last_token_iteration", t.get("last_iteration"))),
                 "end": _num(t.get("request_end") or t.get("resolve_end")),
                 "targeted": _num(t.get("targeted_start")),
                 "iterations": t.get("token_iterations", t.get("iterations")),
                 "error": info.get("error"), "session": info.get("conversation_id"),
                 "turn": info.get("turn_index") or 0}
        else:
            sched = r.get("scheduler_info") or {}
            targeted = _num(sched.get("targeted_start_time"))
            x = {"layout": "0.2/0.3", "start": _num(r["start_time"]), "first": _num(r.get("first_token_time")),
                 "last": _num(r.get("last_token_time")), "end": _num(r.get("end_time")),
                 "targeted": targeted if targeted is not None and targeted > 0 else None,
                 "iterations": None, "error": r.get("error"), "session": None, "turn": 0}
        x.update(request_id=r.get("request_id"), response_id=r.get("response_id"),
                 prompt_tokens=r.get("prompt_tokens"), output_tokens=r.get("output_tokens"),
                 ttft_ms=r.get("time_to_first_token_ms"), tpot_ms=r.get("time_per_output_token_ms"),
                 itl_ms=r.get("inter_token_latency_ms"), latency_s=r.get("request_latency"))
    except (KeyError, TypeError, ValueError) as e:
        raise entry_error(path, TOOL, where, f"missing or malformed field {e}") from None
    if x["start"] is None or not math.isfinite(x["start"]):
        raise entry_error(path, TOOL, where, "no request start time")
    return x


def _measure_window(bench: dict) -> tuple[float, float] | None:
    sm = bench.get("scheduler_metrics") or {}
    lo, hi = sm.get("measure_start_time"), sm.get("measure_end_time")
    return (float(lo), float(hi)) if lo is not None and hi is not None and lo > 0 and hi > 0 else None


def _declared_window(bench: dict, clock: SecondsClock) -> tuple[int, int] | None:
    """The whole run (warm-up included) where 0.4+ gives it; 0.2/0.3's start/end are the first
    request's start and the last one's end."""
    sm = bench.get("scheduler_metrics") or {}
    lo, hi = sm.get("start_time"), sm.get("end_time")
    if lo is None or hi is None or lo <= 0 or hi <= 0:
        lo, hi = bench.get("start_time"), bench.get("end_time")
    if lo is None or hi is None or hi < lo:
        return None
    return clock.ns(float(lo)), clock.ns(float(hi))


def _record(group: str, x: dict, clock: SecondsClock, measure, slo) -> RequestRecord:
    """No chunk times in GuideLLM: chunk_ns/chunk_tokens stay empty; first/last token and the
    request's end are exact."""
    rec = RequestRecord(request_id=str(x["request_id"]) if x["request_id"] is not None else None,
                        response_id=x["response_id"], session_id=x["session"], turn=int(x["turn"] or 0),
                        sent_ns=clock.ns(x["start"]), first_token_ns=clock.ns(x["first"]),
                        end_ns=clock.ns(_first_of(x["last"], x["first"], x["end"])),
                        done_ns=clock.ns(x["end"]), prompt_tokens=_int(x["prompt_tokens"]),
                        output_tokens=_int(x["output_tokens"]), tokens_source="guidellm")
    rec.scheduled_ns = clock.ns(x["targeted"]) if x["targeted"] is not None else rec.sent_ns
    rec.slot_ns = rec.scheduled_ns
    if group == "successful":
        rec.status = "ok"
    elif group == "incomplete":
        rec.status, rec.error = "cancelled", x["error"] or "incomplete when the benchmark ended (GuideLLM)"
    else:
        rec.status, rec.http_status = failure_status(x["error"])
        rec.error = x["error"] or "errored (GuideLLM recorded no error text)"
    if measure is not None:  # GuideLLM leaves requests outside its measurement window out of its metrics
        end = x["end"] if x["end"] is not None else x["start"]
        rec.warmup = not (end >= measure[0] and x["start"] <= measure[1])
    return finish(rec, slo)


def _first_of(*values):
    """The last output we know of: last token, else first token, else (non-streaming) the end."""
    return next((v for v in values if v is not None), None)


def _int(v):
    return None if v is None else int(v)


def _sampled(bench: dict, reqs: dict) -> str | None:
    """'n of N' when GuideLLM kept only a sample of the successful requests."""
    totals = (bench.get("metrics") or {}).get("request_totals") or bench.get("total_count") or {}
    n, total = len(reqs.get("successful") or []), totals.get("successful")
    return f"{n} of {total}" if isinstance(total, int) and total > n else None


def _notes(new_layout: bool, measure, sampled: str | None, version) -> list[str]:
    notes = [
        ("TPOT: GuideLLM's time_per_output_token_ms is (last token - request start) / output tokens: it "
         "includes TTFT and divides by every output token." if new_layout else
         "TPOT: GuideLLM's time_per_output_token_ms is (last token - first token) / output tokens: it divides "
         "by every output token, the first included.")
        + " Ours is (last token - first token) / (output tokens - 1). GuideLLM's inter_token_latency_ms is "
        "(last - first) / (output tokens - 1) per request: our TPOT, not our ITL.",
        "No chunk times: GuideLLM keeps the first and last token times only, so chunk_ns/chunk_tokens are "
        "empty and our per-token ITL, chunk gaps and their percentiles cannot be reconstructed (n_itl = 0). "
        "TTFT, TPOT and E2EL are exact.",
        "E2EL: ours ends at the last token (end_ns); GuideLLM's request_latency at the request's end, which "
        "is our done_ns (duration_s uses it).",
        "GuideLLM's percentiles are read off its (weighted) distribution: the lowest value whose cumulative "
        "share reaches p, not interpolated as ours; medians and percentiles can differ on the same values.",
        "Timestamps are time.time() floats (wall clock, about 0.2 us resolution today); *_ns are ns since "
        "clock_origin_ns (source.json) and keep every digit the floats hold. scheduled_ns is GuideLLM's "
        "targeted start where it has one, else the send.",
        "Output tokens are GuideLLM's (the server's usage where it reported it); prompt tokens likewise.",
        "Errored requests keep GuideLLM's error text; our status is read from it. Incomplete ones (still "
        "running when the benchmark ended) are 'cancelled'.",
    ]
    if new_layout:
        notes.append("GuideLLM's aggregate TPOT and ITL weight each request by its output tokens (ITL: output "
                     "tokens - 1): their means are token-weighted; ours are means over requests.")
    if measure is not None:
        notes.append("Requests outside GuideLLM's measurement window (warm-up, cool-down) are marked warmup = "
                     "True: left out of latency statistics, as GuideLLM leaves them out of its metrics.")
    if sampled:
        notes.append(f"GuideLLM kept a sample of the successful requests ({sampled}): our per-request "
                     "statistics are over the sample; its aggregates (source_metrics) over all.")
    if not version:
        notes.append("The report does not record the GuideLLM version (0.2/0.3 reports have no metadata).")
    return notes


def _dist(bench: dict, name: str, group: str = "successful") -> dict:
    d = ((bench.get("metrics") or {}).get(name) or {}).get(group)
    return d if isinstance(d, dict) else {}


def _equivalents(bench: dict) -> dict:
    """GuideLLM's aggregates whose definition is ours, under our names (TTFT; its ITL is our TPOT,
    token-weighted in 0.4+)."""
    out = {}
    for theirs, ours in (("time_to_first_token_ms", "ttft"),):
        d = _dist(bench, theirs)
        if "mean" in d:
            out[f"mean_{ours}_ms"] = d["mean"]
    return out


def _checks(bench: dict, rows, s: dict, sampled, new_layout: bool) -> list[Check]:
    """Per request: GuideLLM's own TTFT/TPOT/ITL beside the same formulas applied to our imported
    timestamps (the worst request); aggregates: counts and mean TTFT."""
    out = []
    for key, formula in (("ttft_ms", _their_ttft), ("tpot_ms", _their_tpot(new_layout)), ("itl_ms", _their_itl)):
        pairs = [(x[key], formula(r)) for g, x, r in rows if g == "successful" and x[key] is not None]
        pairs = [(a, b) for a, b in pairs if b is not None]
        if pairs:
            worst = max(pairs, key=lambda p: abs(p[0] - p[1]))
            out.append(Check(f"per_request_{key} (GuideLLM's definition, worst request)", worst[0], worst[1],
                             note="recomputed from the imported *_ns"))
    totals = (bench.get("metrics") or {}).get("request_totals") or {}
    if isinstance(totals.get("successful"), int):
        out.append(Check("completed", totals["successful"], s.get("completed"), same_definition=not sampled,
                         note="GuideLLM kept a sample" if sampled else ""))
    d = _dist(bench, "time_to_first_token_ms")
    if "mean" in d:
        out.append(Check("mean_ttft_ms", d["mean"], s.get("mean_ttft_ms"), same_definition=not sampled))
    if "median" in d:
        out.append(Check("median_ttft_ms", d["median"], s.get("median_ttft_ms"), same_definition=False,
                         note="GuideLLM's median is the lowest value reaching half the distribution"))
    d = _dist(bench, "time_per_output_token_ms")
    if "mean" in d:
        out.append(Check("mean_tpot_ms", d["mean"], s.get("mean_tpot_ms"), same_definition=False,
                         note="GuideLLM's TPOT includes TTFT (0.4+) and divides by all output tokens"))
    return out


def _ms(a_ns, b_ns):
    return None if a_ns is None or b_ns is None else (a_ns - b_ns) / 1e6


def _their_ttft(r: RequestRecord):
    """GuideLLM's TTFT: first token - request start."""
    return _ms(r.first_token_ns, r.sent_ns)


def _their_tpot(new_layout: bool):
    """GuideLLM's TPOT: (last token - request start) / output tokens (0.4+), or from the first token (0.2/0.3)."""
    def f(r: RequestRecord):
        if not r.output_tokens:
            return None
        span = _ms(r.end_ns, r.sent_ns if new_layout else r.first_token_ns)
        return None if span is None else span / r.output_tokens
    return f


def _their_itl(r: RequestRecord):
    """GuideLLM's per-request ITL: (last - first) / (output tokens - 1), our TPOT."""
    if not r.output_tokens or r.output_tokens <= 1:
        return None
    span = _ms(r.end_ns, r.first_token_ns)
    return None if span is None else span / (r.output_tokens - 1)
