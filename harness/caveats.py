"""An experiment's warnings, once per kind, ranked by what they do to its answer.

Each kind (``KINDS``) reads the runs' summaries and, where some run has it, gives one line with
the runs it concerns counted (never one line per point and repeat).  Ranks:

- ``CHANGES``: changes a number in the answer (a point stopped as over-saturated, still filling,
  limited by the load generator, requests failed, an engine fault, output tokens counted by the
  client where the server sent no usage);
- ``LIMITS``: limits what the answer can say (energy not measured, emulated timings, a systematic
  token-count difference the prompts' counts do not explain: maybe another tokenizer);
- ``DETAILS``: changes nothing the user asked for (a token-count difference where every row took
  the server's usage, on a random-weight model the expected one); the report folds these into
  its provenance, the console says them after the answer in one line.

The console (``harness.finish``) and the report's first screen list them in this order, after
the answer.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from metrics.answer import (
    FILL_WORDS,
    FOLLOW_SHARE,
    filling_kind,
    prompts_confirm_tokenizer,
    systematic_token_difference,
)

CHANGES, LIMITS, DETAILS = 0, 1, 2
RANKS = {CHANGES: "changes the answer", LIMITS: "limits it", DETAILS: "details"}


@dataclass(frozen=True)
class Caveat:
    """One warning: its ``kind``, ``rank``, the line (runs counted) and per-run details."""
    kind: str
    rank: int
    text: str
    detail: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict:
        return {"kind": self.kind, "rank": RANKS[self.rank], "text": self.text, "detail": list(self.detail)}


Run = tuple[str, Mapping]  # (its name on the console: config, label, repeat; its summary)


def _f(v) -> float:
    try:
        return math.nan if v is None else float(v)
    except (TypeError, ValueError):
        return math.nan


def _of(runs: Sequence[Run], hit: Sequence[Run]) -> str:
    return f"{len(hit)} of {len(runs)} runs"


def split_reason(text: str) -> tuple[str, list[str]]:
    """'headline (part; part; ...)' -> (headline, parts): the parts split where ``; `` is outside
    any parenthesis (a part may hold its own).  Other text: what precedes its first parenthesis
    (or all of it), and no parts."""
    text = text.strip()
    i = text.find(" (")
    if i < 0:
        return text, []
    if not text.endswith(")"):
        return text[:i], []
    inner, parts, depth, start = text[i + 2:-1], [], 0, 0
    for j, ch in enumerate(inner):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth < 0:  # the headline's parenthesis closed before the end: not this shape
            return text[:i], []
        if depth == 0 and inner.startswith("; ", j):
            parts.append(inner[start:j])
            start = j + 2
    parts.append(inner[start:])
    return text[:i], [p for p in parts if p]


def _stopped(runs, hit):
    unsent = sum(int(m.get("num_requests_unsent") or 0) for _, m in hit)
    return (f"{_of(runs, hit)} stopped as over-saturated: {unsent} planned requests never sent",
            [f"{n}: " + (f"{m.get('num_requests_sent')} of {m['num_requests_planned']} planned sent, "
                         f"{m.get('num_requests_unsent')} never sent; " if m.get("num_requests_planned") is not None
                         else "") + str(m.get("saturation_reason") or "") for n, m in hit])


def _filling(runs, hit):
    kinds = [filling_kind(m) for _, m in hit]
    said = ", ".join(f"{kinds.count(k)} {FILL_WORDS.get(k, k)}" if len(hit) > 1 else FILL_WORDS.get(k, k)
                     for k in dict.fromkeys(kinds))
    return (f"{_of(runs, hit)} still filling ({said}): latencies a lower bound, SLO not met",
            [f"{n}: {FILL_WORDS.get(k, k)} (completed {_f(m.get('request_throughput')):.3g} req/s of "
             f"{_f(m.get('achieved_send_rate_rps')):.3g} sent); in flight rose from "
             f"{_f(m.get('in_flight_second_quarter')):.3g} to {_f(m.get('in_flight_last_quarter')):.3g} over the "
             "arrivals' second and last quarters" for (n, m), k in zip(hit, kinds)]
            + [f"a growing backlog: past capacity (completed under {FOLLOW_SHARE:.0%} of the rate sent), the queue "
               "grows whatever the run's length; a fill-up: it kept up, and more requests (or load.duration_s) "
               "reach the steady state"])


def _backlog(runs, hit):
    return (f"{_of(runs, hit)} with a growing backlog: the wait rose through the arrivals' second half, latencies "
            "grow with the run's length, SLO not met",
            [f"{n}: wait rose {_f(m.get('backlog_wait_rise_s')):.3g} s "
             f"(bound {_f(m.get('backlog_wait_bound_s')):.3g} s)" for n, m in hit])


def _guard_limit(runs, hit):
    return (f"the over-saturation guards are weaker in {_of(runs, hit)}: outside their measured bounds",
            [f"{n}: {m.get('saturation_guard_limit')}" for n, m in hit])


def _client(runs, hit):
    return (f"{_of(runs, hit)} limited by the load generator: the load sent was not the load offered",
            [f"{n}: p99 schedule lag {_f(m.get('schedule_lag_p99_ms')):.1f} ms (> client.max_schedule_lag_ms)"
             for n, m in hit])


def _failed(runs, hit):
    failed = sum(int(m.get("failed") or 0) for _, m in hit)
    total = sum(int(m.get("num_requests") or 0) for _, m in hit)
    return (f"requests failed in {_of(runs, hit)}: {failed} of {total} requests there (never good)",
            [f"{n}: {m.get('failed')} failed (http {m.get('num_http_error') or 0}, "
             f"timeout {m.get('num_timeout') or 0}, connection {m.get('num_connection_error') or 0}, "
             f"invalid {m.get('num_invalid_response') or 0}, "
             f"truncated {m.get('num_truncated') or 0})" for n, m in hit])


def _fault(runs, hit):
    return (f"engine faults in {_of(runs, hit)}",
            [f"{n}: {m.get('failure_reason') or str(m.get('engine_faults')) + ' fault(s)'}" for n, m in hit])


def _client_count(runs, hit):
    rows = sum(int(m.get("token_counts_client_only") or 0) for _, m in hit)
    return (f"output tokens counted by the client in {_of(runs, hit)}: no usage on {rows} requests",
            ["the server sent no usage: goodput in tokens and cost per good token rest on the client's tokenizer"]
            + [f"{n}: {m.get('token_counts_client_only')} requests" for n, m in hit])


def _token_detail(hit) -> list[str]:
    return [f"{n}: {_f(m.get('token_mismatch_rate')):.1%} of {m.get('token_counts_compared')} requests differ; mean "
            f"|diff| {_f(m.get('token_mismatch_mean_abs')):.2f}, max {m.get('token_mismatch_max_abs')}, mean server - "
            f"client {_f(m.get('token_mismatch_mean')):+.2f}" for n, m in hit]


def _systematic(runs, hit):
    mean = sum(_f(m.get("token_mismatch_mean")) for _, m in hit) / len(hit)
    return (f"token counts differ systematically in {_of(runs, hit)}: server - client {mean:+.2f} a request",
            ["likely a BOS/EOS counted on every request, chunks re-tokenized one by one, or engine.tokenizer is not "
             "the served model's; every row took the server's usage"] + _token_detail(hit))


def _one_sided(m) -> bool:
    """A systematic difference that the prompts' counts explain away (``prompts_confirm_tokenizer``)."""
    return systematic_token_difference(m) and prompts_confirm_tokenizer(m)


def _mismatch(runs, hit):
    share = max(_f(m.get("token_mismatch_rate")) for _, m in hit)
    one_sided = [m for _, m in hit if _one_sided(m)]
    if one_sided:
        mean = sum(_f(m.get("token_mismatch_mean")) for m in one_sided) / len(one_sided)
        way = f"server - client {mean:+.2f} a request"
        why = ("every prompt's token count agreed with the server's (the tokenizer is the served model's): the "
               "output's decode and re-encode differs one way, as a random-weight model's bytes do, or the server "
               "counts a token it does not send")
    else:
        way = "both ways"
        why = ("expected on a random-weight model (the embedded one, Dynamo's mocker): random token ids do not "
               "survive a decode and re-encode")
    return (f"token counts: the client's re-tokenization differs from the server's usage in {_of(runs, hit)} "
            f"(up to {share:.0%} of requests, {way}); every row took the server's count", [why] + _token_detail(hit))


def _energy(runs, hit):
    reason = str(hit[0][1].get("energy_unavailable_reason") or "")
    head, parts = split_reason(reason)
    return (f"energy not measured in {_of(runs, hit)}: {head}", parts or ([reason] if reason != head else []))


def _emulated(runs, hit):
    sources = ", ".join(sorted({str(m.get("timing_source")) for _, m in hit}))
    return (f"EMULATED: {_of(runs, hit)} ran on an emulated engine (timing: {sources}): their latencies and "
            "throughputs come from a model, not a measurement", [])


@dataclass(frozen=True)
class Kind:
    name: str
    rank: int
    applies: Callable[[Mapping], bool]
    say: Callable[[Sequence[Run], Sequence[Run]], tuple[str, list[str]]]


KINDS = (
    Kind("stopped", CHANGES, lambda m: bool(m.get("saturated")), _stopped),
    Kind("still_filling", CHANGES, lambda m: bool(m.get("still_filling")), _filling),
    Kind("backlog_growing", CHANGES, lambda m: bool(m.get("backlog_growing")) and not m.get("still_filling"),
         _backlog),
    Kind("client_limited", CHANGES, lambda m: bool(m.get("client_limited")), _client),
    Kind("failed_requests", CHANGES, lambda m: int(m.get("failed") or 0) > 0, _failed),
    Kind("engine_fault", CHANGES, lambda m: bool(m.get("point_failed")) or int(m.get("engine_faults") or 0) > 0,
         _fault),
    Kind("client_token_count", CHANGES, lambda m: int(m.get("token_counts_client_only") or 0) > 0, _client_count),
    Kind("emulated", LIMITS, lambda m: bool(m.get("emulated")), _emulated),
    Kind("energy_not_measured", LIMITS, lambda m: m.get("energy_available") is False, _energy),
    Kind("saturation_guard_limit", LIMITS, lambda m: bool(m.get("saturation_guard_limit")), _guard_limit),
    Kind("token_counts_systematic", LIMITS, lambda m: systematic_token_difference(m) and not _one_sided(m),
         _systematic),
    Kind("token_counts_random", DETAILS,
         lambda m: bool(m.get("token_counts_disagree")) and (not systematic_token_difference(m) or _one_sided(m)),
         _mismatch),
)


def collect(runs: Sequence[Run]) -> list[Caveat]:
    """Every kind some run has, once, in rank order (``KINDS`` order within a rank)."""
    out = []
    for k in KINDS:
        hit = [(n, m) for n, m in runs if k.applies(m)]
        if hit:
            text, detail = k.say(runs, hit)
            out.append(Caveat(k.name, k.rank, text, tuple(detail)))
    return sorted(out, key=lambda c: c.rank)


def run_name(row: Mapping) -> str:
    """A run's name in a warning: its config, load point, and its block or repeat past the first."""
    parts = [str(row.get("config") or ""), str(row.get("label") or "")]
    if int(row.get("block") or 0):
        parts.append(f"block {int(row['block'])}")
    if int(row.get("repeat") or 0):
        parts.append(f"repeat {int(row['repeat'])}")
    return " ".join(p for p in parts if p)


def from_rows(rows: Sequence[Mapping]) -> list[Caveat]:
    """``collect`` over runs.parquet's rows (load points only: probes and searches are not the answer's)."""
    return collect([(run_name(r), r) for r in rows if (r.get("role") or "point") == "point"])


def console_lines(caveats: Sequence[Caveat]) -> list[str]:
    """What the console prints after the answer: one line a warning, its rank said."""
    return [f"  [{RANKS[c.rank]}] {c.text}" for c in caveats]
