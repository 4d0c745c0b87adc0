"""Reasoning in the summary: TTFA beside TTFT, an SLO on TTFA (per request and run level), reasoning
and tool-call token totals, and cost per million good answer tokens, from requests.parquet's rows."""

from __future__ import annotations

import math

import numpy as np
import pytest

from conf.schema import Slo
from metrics.request_metrics import ttfa_or_ttft, ttfa_s
from metrics.slo import SLO, good_mask, percentiles_missed, slo_holds
from metrics.summary import summarize
from tests.telemetry_fixtures import S, request_table

RENTAL = {"model": "rental", "currency": "USD", "num_gpus": 1, "hourly_per_gpu": 1.5, "num_hosts": 1,
          "hourly_per_host": 0.2, "extra_hourly": {"network": 0.1}}  # 1.8 per hour


def reasoning_run():
    # 4 requests that answer 0.3 s after sending (8 of their 20 tokens reasoning), one whose answer
    # came at 0.9 s (12 reasoning), one timed out; TTFT is 0.1 s for every completed one
    rows = [{"sent": 10.0 + i, "output_tokens": 20, "reasoning_tokens": 8, "tool_call_tokens": 0,
             "ttfa_s": 0.3, "first_answer_ns": int((10.3 + i) * S)} for i in range(4)]
    rows += [{"sent": 20.0, "output_tokens": 20, "reasoning_tokens": 12, "tool_call_tokens": 3, "ttfa_s": 0.9,
              "first_answer_ns": int(20.9 * S)}]
    rows += [{"sent": 30.0, "status": "timeout", "output_tokens": 0}]
    return request_table(rows)


def test_ttfa_formula():
    assert ttfa_s(1_000_000_000, 1_250_000_000) == pytest.approx(0.25)
    # NaN TTFA: TTFT stands in only where reasoning was never told apart (reasoning_tokens null)
    out = ttfa_or_ttft([np.nan, np.nan, 0.5], [0.1, 0.1, 0.1], [np.nan, 7, 0])
    assert out[0] == 0.1 and math.isnan(out[1]) and out[2] == 0.5


def test_summary_ttfa_reasoning_and_cost_per_good_answer_token():
    slo = SLO(ttft_ms=2000, ttfa_ms=500, percentile=50)
    s = summarize(reasoning_run(), slo, 0, 100 * S, cost_cfg=RENTAL)
    assert s["completed"] == 5 and s["good_requests"] == 4          # the 0.9 s answer misses TTFA
    assert s["mean_ttft_ms"] == pytest.approx(100.0)
    assert s["mean_ttfa_ms"] == pytest.approx((4 * 300 + 900) / 5)
    assert s["p50_ttfa_ms"] == pytest.approx(300.0) and s["n_ttfa"] == 5
    assert s["total_reasoning_tokens"] == 4 * 8 + 12 and s["total_tool_call_tokens"] == 3
    assert s["good_output_tokens"] == 80 and s["good_answer_tokens"] == 80 - 32
    assert s["cost_total"] == pytest.approx(0.05)                     # 1.8/h over 100 s
    assert s["cost_per_mtok_good"] == pytest.approx(1e6 * 0.05 / 80)
    assert s["cost_per_mtok_good_answer"] == pytest.approx(1e6 * 0.05 / 48)
    assert s["slo_attainment_ttfa"] == pytest.approx(4 / 6)
    assert s["slo_ttfa_p50_ms"] == pytest.approx(300.0) and s["slo_ttfa_met"] is True
    assert slo_holds(s) == (True, "")


def test_run_misses_the_ttfa_percentile():
    s = summarize(reasoning_run(), SLO(ttft_ms=2000, ttfa_ms=500, percentile=90), 0, 100 * S)
    # p90 of [0.3 x 4, 0.9]: 0.3 + 0.6 x 0.6 = 0.66 s
    assert s["slo_ttfa_p90_ms"] == pytest.approx(660.0) and s["slo_ttfa_met"] is False
    assert s["slo_ttft_met"] is True
    assert slo_holds(s) == (False, "missed: ttfa")


def test_rows_without_reasoning_columns_read_ttft_as_ttfa():
    t = request_table([{"sent": float(i), "ttft": 0.2, "output_tokens": 10} for i in range(3)])
    t = t.drop_columns(["reasoning_tokens", "tool_call_tokens", "first_answer_ns", "ttfa_s"])
    s = summarize(t, SLO(ttfa_ms=150), 0, 10 * S, cost_cfg=RENTAL)
    assert s["mean_ttfa_ms"] == pytest.approx(200.0) and s["good_requests"] == 0
    assert s["total_reasoning_tokens"] == 0 and s["good_answer_tokens"] == s["good_output_tokens"] == 0
    # rows of today's schema that never told reasoning apart (null reasoning_tokens): the same
    s2 = summarize(request_table([{"sent": float(i), "ttft": 0.2, "output_tokens": 10} for i in range(3)]),
                   SLO(ttfa_ms=250), 0, 10 * S, cost_cfg=RENTAL)
    assert s2["good_requests"] == 3 and s2["good_answer_tokens"] == 30
    assert s2["cost_per_mtok_good_answer"] == s2["cost_per_mtok_good"]


def test_good_mask_and_percentiles_with_and_without_ttfa():
    slo = SLO(ttfa_ms=200, percentile=50)
    status = ["ok", "ok", "ok"]
    ttft, nan3 = [0.1, 0.1, 0.1], [np.nan] * 3
    assert good_mask(slo, status, ttft, nan3, nan3, ttfa_s=[0.15, 0.25, 0.2]).tolist() == [True, False, True]
    assert good_mask(slo, status, ttft, nan3, nan3).tolist() == [True, True, True]  # no column: TTFT stands in
    assert percentiles_missed(slo, ttft, nan3, nan3, ttfa_s=[0.3, 0.25, 0.1]) == ["ttfa"]
    assert percentiles_missed(slo, ttft, nan3, nan3) == []


def test_slo_config_has_ttfa():
    assert Slo().ttfa_ms is None
    assert SLO.from_config({"ttfa_ms": 800, "ttft_ms": None}).limits() == {"ttfa_ms": 800.0}


def test_ttft_slo_reads_ttft_though_the_answer_came_later():
    s = summarize(reasoning_run(), SLO(ttft_ms=200, percentile=50), 0, 100 * S)
    # TTFT 0.1 s on all 5 completed of 6 (their answers at 0.3 and 0.9 s do not count here)
    assert s["slo_attainment_ttft"] == pytest.approx(5 / 6)
    assert s["slo_ttft_p50_ms"] == pytest.approx(100.0) and s["slo_ttft_met"] is True
    assert s["good_requests"] == 5 and s["good_answer_tokens"] == 100 - 44
