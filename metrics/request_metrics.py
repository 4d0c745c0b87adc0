"""Per-request latency metrics: the one definition of TTFT, E2EL, TPOT and ITL.

All inputs are ``time.perf_counter_ns()`` readings on the load generator's host.  The
functions take numpy arrays (one element per request) so the same formula serves a single
record, the load generator's live progress and the summary recomputed from
``requests.parquet``.
"""

from __future__ import annotations

import numpy as np

from metrics.slo import good_mask
from metrics.token_attribution import attribute_tokens

NS = 1e9


def ttft_s(sent_ns, first_token_ns):
    """TTFT = first chunk carrying output - sent_ns (seconds); NaN where no output arrived."""
    sent = np.asarray(sent_ns, dtype=np.float64)
    first = np.asarray(first_token_ns, dtype=np.float64)
    return (first - sent) / NS


def ttfa_s(sent_ns, first_answer_ns):
    """Time to first answer token: TTFA = first output chunk that is not reasoning (an answer or
    tool-call chunk, ``first_answer_ns``) - sent_ns (seconds); NaN where none arrived (all
    reasoning).  Without reasoning it equals TTFT; TTFT counts the first token of any kind."""
    return ttft_s(sent_ns, first_answer_ns)


def ttfa_or_ttft(ttfa, ttft, reasoning_tokens):
    """Per row, the TTFA an SLO and the summary read: ``ttfa_s``; where it is NaN and the row never
    counted reasoning (``reasoning_tokens`` null: an imported or older row, a proxy's), ``ttft_s``
    (nothing told reasoning apart, so the first token is the first answer token).  A row that
    counted reasoning and got no answer token keeps NaN (it misses a TTFA limit)."""
    ttfa = np.asarray(ttfa, dtype=np.float64)
    unknown = np.isnan(np.asarray(reasoning_tokens, dtype=np.float64))
    return np.where(np.isnan(ttfa) & unknown, np.asarray(ttft, dtype=np.float64), ttfa)


def e2el_s(sent_ns, end_ns):
    """E2EL = last output chunk - sent_ns (seconds); ``end_ns`` is the last output chunk."""
    return (np.asarray(end_ns, dtype=np.float64) - np.asarray(sent_ns, dtype=np.float64)) / NS


def tpot_s(ttft, e2el, output_tokens):
    """TPOT = (E2EL - TTFT) / (output_tokens - 1), defined only for output_tokens > 1 (else NaN)."""
    ttft = np.asarray(ttft, dtype=np.float64)
    e2el = np.asarray(e2el, dtype=np.float64)
    n = np.asarray(output_tokens, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        out = (e2el - ttft) / (n - 1.0)
    return np.where(n > 1, out, np.nan)


def schedule_lag_s(scheduled_ns, slot_ns, sent_ns):
    """The load generator's own delay: sent_ns - max(scheduled_ns, slot_ns) (seconds).

    ``slot_ns`` is when the request got its ``load.max_concurrency`` slot (= scheduled_ns when
    nothing caps it; a missing slot counts as scheduled_ns): waiting for a slot is queueing,
    not the client's delay.  A send that had to open a connection includes the connect
    (``connect_s``, reported on its own)."""
    scheduled = np.asarray(scheduled_ns, dtype=np.float64)
    slot = np.asarray(slot_ns, dtype=np.float64)
    ready = np.fmax(scheduled, slot)  # fmax: a NaN slot leaves the schedule
    return (np.asarray(sent_ns, dtype=np.float64) - ready) / NS


def queue_wait_s(scheduled_ns, slot_ns):
    """Time waited for a ``load.max_concurrency`` slot: slot_ns - scheduled_ns (seconds; 0 uncapped)."""
    scheduled = np.asarray(scheduled_ns, dtype=np.float64)
    slot = np.asarray(slot_ns, dtype=np.float64)
    return np.where(np.isnan(slot), 0.0, slot - scheduled) / NS


def chunk_gaps_s(chunk_ns) -> np.ndarray:
    """Raw gaps between consecutive output chunks of one request (seconds)."""
    c = np.asarray(chunk_ns, dtype=np.int64)
    return np.diff(c).astype(np.float64) / NS


def itl_per_token_s(chunk_ns, chunk_tokens) -> np.ndarray:
    """Per-token ITL of one request: ``output_tokens - 1`` values that sum to its decode time
    (last output chunk - first output chunk), so their mean is its TPOT.

    With ``n`` tokens over chunks at times ``t_0 .. t_m`` carrying ``k_0 .. k_m`` tokens
    (``metrics.token_attribution``): the first token is the first of the first chunk that
    carries any; the other tokens of that chunk arrived with it and contribute 0 each.  Every
    later chunk that carries ``k > 0`` tokens contributes ``k`` values of ``G / k``, where
    ``G`` is the time since the previous output chunk plus the gaps of the chunks before it
    that carried none (text without a token of its own); a multi-token chunk (speculative
    decoding, buffered detokenisation) is not mistaken for one slow token.  Gaps after the
    last chunk that carries tokens are spread over that chunk's values.
    """
    c = np.asarray(chunk_ns, dtype=np.int64)
    k = np.asarray(chunk_tokens, dtype=np.int64)
    n = int(k.sum()) if k.size else 0
    if c.size == 0 or n < 2:
        return np.empty(0)
    first = int(np.argmax(k > 0))
    gaps = np.diff(c).astype(np.float64) / NS
    values = [np.zeros(k[first] - 1)]
    pending = float(gaps[:first].sum())   # before the first token: part of the decode time still
    for i in range(first + 1, c.size):
        pending += gaps[i - 1]
        if k[i] > 0:
            values.append(np.full(k[i], pending / k[i]))
            pending = 0.0
    if pending:  # trailing chunks that carried no token: their time goes to the last tokens
        last = values[-1]
        if last.size:
            values[-1] = last + pending / last.size
    return np.concatenate(values)


def complete_record(rec, slo=None, count_tokens=None) -> None:
    """A record as the stream left it -> its row: tokens attributed to chunks
    (``metrics.token_attribution``), then the derived columns (``finalize_record``)."""
    attribute_tokens(rec, count_tokens)
    finalize_record(rec, slo)


def finalize_record(rec, slo=None) -> None:
    """Fill a record's derived columns (ttft_s, ttfa_s, tpot_s, e2el_s, slo_ok) from its timestamps."""
    if rec.first_answer_ns is not None and rec.sent_ns is not None:
        rec.ttfa_s = float(ttfa_s(rec.sent_ns, rec.first_answer_ns))
    if rec.first_token_ns is not None and rec.sent_ns is not None:
        rec.ttft_s = float(ttft_s(rec.sent_ns, rec.first_token_ns))
        rec.e2el_s = float(e2el_s(rec.sent_ns, rec.end_ns))
        t = float(tpot_s(rec.ttft_s, rec.e2el_s, rec.output_tokens or 0))
        rec.tpot_s = None if np.isnan(t) else t
    if slo is not None:
        nan = float("nan")
        val = lambda v: [nan if v is None else v]  # noqa: E731
        rec.slo_ok = bool(good_mask(slo, [rec.status], val(rec.ttft_s), val(rec.tpot_s), val(rec.e2el_s),
                                    ttfa_s=ttfa_or_ttft(val(rec.ttfa_s), val(rec.ttft_s),
                                                        val(rec.reasoning_tokens)))[0])
    else:
        rec.slo_ok = rec.status == "ok"
