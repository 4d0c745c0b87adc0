"""Metric formulas on hand-built request records, with exact expected numbers."""

from __future__ import annotations

import math

import numpy as np
import pyarrow.parquet as pq
import pytest

from loadgen.records import RecordWriter, RequestRecord
from metrics.percentiles import describe, early_stopping_min_samples, order_statistic_ci, percentile
from metrics.request_metrics import complete_record, e2el_s, finalize_record, itl_per_token_s, tpot_s, ttft_s
from metrics.slo import SLO, good_mask
from metrics.summary import summarize

MS = 1_000_000  # ns per ms


def test_ttft_e2el_tpot():
    assert ttft_s(1_000 * MS, 1_250 * MS) == pytest.approx(0.25)
    assert e2el_s(1_000 * MS, 2_000 * MS) == pytest.approx(1.0)
    # 11 tokens: (1.0 - 0.25) / 10
    assert tpot_s(0.25, 1.0, 11) == pytest.approx(0.075)
    assert math.isnan(float(tpot_s(0.25, 0.25, 1)))


def test_itl_attributes_multi_token_chunks_per_token():
    # chunks at 0, 10, 40, 50 ms carrying 1, 1, 3, 2 tokens
    itl = itl_per_token_s([0, 10 * MS, 40 * MS, 50 * MS], [1, 1, 3, 2])
    np.testing.assert_allclose(itl * 1e3, [10, 10, 10, 10, 5, 5])
    assert itl.sum() == pytest.approx(0.050)
    # one chunk of 4 tokens: the three after the first came with it (TPOT 0 / 3 = 0)
    np.testing.assert_allclose(itl_per_token_s([5 * MS], [4]), [0, 0, 0])
    assert itl_per_token_s([5 * MS], [1]).size == 0 and itl_per_token_s([], []).size == 0


def _stream_record(chunk_ms, texts, usage_per_chunk=None, final_usage=None):
    """A record as the OpenAI stream leaves it: chunk times, texts, cumulative counts (or not)."""
    r = RequestRecord(request_id="r", scheduled_ns=0, sent_ns=0, status="ok", finish_reason="length")
    r.chunk_ns = [int(t * MS) for t in chunk_ms]
    r.first_token_ns, r.end_ns, r.done_ns = r.chunk_ns[0], r.chunk_ns[-1], r.chunk_ns[-1]
    r.chunk_text = list(texts)
    r.chunk_usage = list(usage_per_chunk) if usage_per_chunk is not None else []
    r.usage_completion_tokens = final_usage
    return r


WORDS = lambda s: len(s.split())  # noqa: E731 - a tokenizer for hand-made texts: one token a word


@pytest.mark.parametrize("case, chunk_ms, texts, per_chunk, final, tokens, source", [
    # the issue's case: 3 chunks, usage 2 (one chunk's text carried no token of its own)
    ("fewer tokens than chunks", [100, 110, 120], ["a", "b", "c"], None, 2, [1, 1, 0], "usage+tokenizer_split"),
    # tokens only in the final usage: split by the tokenizer's count of each text
    ("final usage only", [100, 120, 160], ["a b", "c", "d e f"], None, 6, [2, 1, 3], "usage+tokenizer_split"),
    ("one token a chunk", [100, 120, 160], ["a", "b", "c"], None, 3, [1, 1, 1], "usage"),
    # a chunk with text and no usage between chunks that have counts: it shares the next count
    ("a chunk without usage", [100, 110, 130, 150], ["a", "b c", "d", "e"], [1, -1, 4, 5], 5, [1, 2, 1, 1],
     "usage+tokenizer_split"),
    # a count that does not move: text without a token of its own
    ("count does not move", [100, 110, 130], ["a", "b", "c"], [1, 1, 2], 2, [1, 0, 1], "usage_continuous"),
    # the final usage counts a token after the last text (end-of-text, no text)
    ("token after the last text", [100, 110, 130], ["a", "b", "c"], [1, 2, 3], 4, [1, 1, 2], "usage_continuous"),
    ("multi-token first chunk", [100, 110, 130], ["a b c", "d", "e f"], [3, 4, 6], 6, [3, 1, 2], "usage_continuous"),
    ("no usage at all", [100, 120], ["a b", "c"], None, None, [2, 1], "tokenizer"),
])
def test_token_attribution_keeps_itl_consistent_with_tpot(case, chunk_ms, texts, per_chunk, final, tokens, source):
    r = _stream_record(chunk_ms, texts, per_chunk, final)
    complete_record(r, count_tokens=WORDS)
    assert r.chunk_tokens == tokens and r.tokens_source == source, case
    assert sum(r.chunk_tokens) == r.output_tokens, case
    itl = itl_per_token_s(r.chunk_ns, r.chunk_tokens)
    decode_s = (r.chunk_ns[-1] - r.chunk_ns[0]) / 1e9
    assert itl.size == r.output_tokens - 1, case
    assert itl.sum() == pytest.approx(decode_s), case            # per-token ITLs sum to the decode time
    assert itl.mean() == pytest.approx(r.tpot_s), case           # so their mean is the TPOT


def test_itl_of_the_issue_example():
    # 3 chunks 10 ms apart, usage 2: TPOT = 20 ms / 1 = 20 ms; the per-token ITL was 10, 10 (mean 10)
    r = _stream_record([100, 110, 120], ["a", "b", "c"], None, 2)
    complete_record(r)
    assert r.tpot_s == pytest.approx(0.020)
    np.testing.assert_allclose(itl_per_token_s(r.chunk_ns, r.chunk_tokens), [0.020])


def test_percentile_is_numpy_linear():
    v = [1, 2, 3, 4, 10]
    assert percentile(v, 50) == 3
    assert percentile(v, 90) == pytest.approx(7.6)  # 4 + 0.6 * (10 - 4)
    assert math.isnan(percentile([], 50))


def test_early_stopping_minimums_match_mlperf():
    assert early_stopping_min_samples(90) == 64
    assert early_stopping_min_samples(95) == 130
    assert early_stopping_min_samples(99) == 662


def test_order_statistic_ci_brackets_and_is_open_when_sample_small():
    v = np.arange(1, 1001, dtype=float)
    lo, hi = order_statistic_ci(v, 50, 0.95)
    # Binomial(1000, 0.5): 2.5% / 97.5% quantiles are 469 and 531 -> ranks 469 and 532
    assert (lo, hi) == (469.0, 532.0)
    lo, hi = order_statistic_ci(v[:20], 99, 0.95)
    assert math.isnan(hi)
    d = describe(v, (90, 99))
    assert d["p90_sufficient"] and d["p99_sufficient"] is True
    assert describe(v[:100], (99,))["p99_sufficient"] is False


def test_goodput_mask_is_inclusive_and_needs_ok():
    slo = SLO(ttft_ms=100, tpot_ms=20)
    good = good_mask(slo, ["ok", "ok", "ok", "timeout", "ok"],
                     [0.100, 0.1001, 0.05, 0.01, 0.05],
                     [0.020, 0.010, 0.0201, 0.01, float("nan")],
                     [1, 1, 1, 1, 1])
    assert good.tolist() == [True, False, False, False, True]


def _rec(i, sent_ms, chunks_ms, tokens, status="ok", warmup=False, http=200):
    r = RequestRecord(request_id=f"r{i}", scheduled_ns=int(sent_ms * MS) - MS, warmup=warmup,
                      expected_prompt_tokens=10, max_tokens=sum(tokens))
    r.sent_ns = int(sent_ms * MS)
    r.chunk_ns = [int(c * MS) for c in chunks_ms]
    r.chunk_tokens = list(tokens)
    r.status, r.http_status = status, http
    if chunks_ms:
        r.first_token_ns, r.end_ns = r.chunk_ns[0], r.chunk_ns[-1]
    r.done_ns = (r.end_ns or r.sent_ns) + MS
    r.prompt_tokens = 10
    r.output_tokens = sum(tokens)
    return r


def test_summary_recomputes_from_parquet(tmp_path):
    slo = SLO(ttft_ms=100, tpot_ms=30)
    recs = [
        _rec(0, 0, [50, 60], [1, 1], warmup=True),                # warm-up: out of stats
        _rec(1, 100, [150, 170, 190, 210], [1, 1, 1, 1]),        # ttft 50, tpot 20 -> good
        _rec(2, 200, [400, 410, 440], [1, 2, 1]),                 # ttft 200 -> not good
        _rec(3, 300, [350, 400], [1, 3]),                         # ttft 50, tpot (100-50)/3=16.7 -> good
        _rec(4, 400, [], [], status="http_error", http=429),      # rejected
        _rec(5, 500, [520], [1], status="timeout"),               # failed after one chunk
    ]
    w = RecordWriter(tmp_path / "requests.parquet", batch_size=2)
    for r in recs:
        finalize_record(r, slo)
        w.append(r)
    w.close()
    assert not (tmp_path / "requests.parquet.partial").exists()
    t = pq.read_table(tmp_path / "requests.parquet")
    assert t.num_rows == 6
    s = summarize(t, slo, window_start_ns=0, window_end_ns=3_600 * 1000 * MS,
                  cost_cfg={"model": "rental", "num_gpus": 1, "hourly_per_gpu": 2.0, "num_hosts": 1,
                            "hourly_per_host": 0.0})
    assert s["num_requests"] == 5 and s["num_warmup"] == 1
    assert s["completed"] == 3 and s["failed"] == 2
    assert s["num_rejected"] == 1 and s["rejection_rate"] == pytest.approx(0.2)
    assert s["num_timeout"] == 1 and s["num_http_error"] == 1
    # duration: first measured send (100 ms) to last done (520 + 1 ms)
    assert s["duration_s"] == pytest.approx(0.421)
    assert s["total_output_tokens"] == 4 + 4 + 4
    assert s["output_throughput"] == pytest.approx(12 / 0.421)
    assert s["mean_ttft_ms"] == pytest.approx((50 + 200 + 50) / 3)
    assert s["p50_ttft_ms"] == pytest.approx(50)
    # TPOTs: 20, (240-200)/3=13.33, 16.67
    assert s["mean_tpot_ms"] == pytest.approx((20 + 40 / 3 + 50 / 3) / 3)
    # per-token ITL: r1 20,20,20; r2 10 -> (5,5), 30; r3 50 over 3 tokens
    itl = [20, 20, 20, 5, 5, 30, 50 / 3, 50 / 3, 50 / 3]
    assert s["n_itl"] == 9 and s["mean_itl_ms"] == pytest.approx(np.mean(itl))
    assert s["n_chunk_gap"] == 6
    assert s["good_requests"] == 2 and s["good_output_tokens"] == 8
    assert s["slo_attainment"] == pytest.approx(2 / 5)
    assert s["slo_attainment_ttft"] == pytest.approx(2 / 5)
    assert s["goodput_rps"] == pytest.approx(2 / 0.421)
    assert s["slo_ttft_met"] is False
    assert s["schedule_lag_p99_ms"] == pytest.approx(1.0)
    assert s["window_s"] == pytest.approx(3600)
    assert s["cost_total"] == pytest.approx(2.0)
    assert s["cost_per_mtok_good"] == pytest.approx(1e6 * 2.0 / 8)
    # all output tokens of measured requests, failed ones included: 4+4+4+0+1
    assert s["cost_per_mtok_all"] == pytest.approx(1e6 * 2.0 / 13)
    # the slo_ok column agrees with the recomputed goodput
    assert t.column("slo_ok").to_pylist() == [True, True, False, True, False, False]


def test_summary_nothing_good_is_infinite_cost_with_reason(tmp_path):
    slo = SLO(ttft_ms=1)
    r = _rec(1, 0, [50, 60], [1, 1])
    finalize_record(r, slo)
    w = RecordWriter(tmp_path / "r.parquet")
    w.append(r)
    w.close()
    s = summarize(pq.read_table(tmp_path / "r.parquet"), slo, 0, 3_600_000 * MS,
                  cost_cfg={"model": "rental", "num_hosts": 1, "hourly_per_host": 1.0})
    assert s["cost_total"] == pytest.approx(1.0)
    assert s["cost_per_mtok_good"] == math.inf
    assert "no good output tokens" in s["cost_per_mtok_good_reason"]
