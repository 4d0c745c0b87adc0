"""summary.json's ``per_adapter``: each LoRA adapter's requests, completions, tokens, goodput and
latencies over its own measured rows, its rates over the run's duration (the adapters share it)."""

from __future__ import annotations

import pytest

from metrics.slo import SLO
from metrics.summary import summarize
from tests.telemetry_fixtures import S, request_table


def adapter_run():
    """Adapter a: a good request (20 tokens), one over the 200 ms TTFT (10), a time-out (5 partial
    tokens) and a 429; adapter b: one good (30); one on the base model (8).  First send at 0, last
    done at 0.8 s: a run shorter than a second."""
    return request_table([
        {"sent": 0.0, "done": 0.5, "ttft": 0.1, "output_tokens": 20, "lora": "a"},
        {"sent": 0.1, "done": 0.6, "ttft": 0.3, "output_tokens": 10, "lora": "a"},
        {"sent": 0.2, "done": 0.7, "status": "timeout", "output_tokens": 5, "partial": True, "lora": "a"},
        {"sent": 0.25, "done": 0.3, "status": "http_error", "http": 429, "output_tokens": 0, "partial": True,
         "lora": "a"},
        {"sent": 0.3, "done": 0.8, "ttft": 0.1, "output_tokens": 30, "lora": "b"},
        {"sent": 0.4, "done": 0.7, "ttft": 0.1, "output_tokens": 8},
    ])


def test_each_adapter_over_its_own_rows_and_the_run_duration():
    s = summarize(adapter_run(), SLO(ttft_ms=200), 0, 10 * S)
    assert s["duration_s"] == pytest.approx(0.8)
    a, b = s["per_adapter"]["a"], s["per_adapter"]["b"]
    assert set(s["per_adapter"]) == {"a", "b"}
    # a: 2 of 4 completed, 30 tokens; 1 good of 20 tokens; over 0.8 s
    assert (a["num_requests"], a["completed"], a["total_output_tokens"], a["good_requests"]) == (4, 2, 30, 1)
    assert a["request_throughput"] == pytest.approx(2.5) and a["output_throughput"] == pytest.approx(37.5)
    assert a["goodput_rps"] == pytest.approx(1.25) and a["good_output_throughput"] == pytest.approx(25.0)
    assert a["slo_attainment"] == pytest.approx(1 / 4)
    # latencies over its completed rows: TTFT 100 and 300 ms, E2EL 500 ms each
    assert a["n_ttft"] == 2 and a["mean_ttft_ms"] == pytest.approx(200.0) and a["max_ttft_ms"] == pytest.approx(300.0)
    assert a["mean_e2el_ms"] == pytest.approx(500.0)
    assert (b["num_requests"], b["completed"], b["total_output_tokens"], b["good_requests"]) == (1, 1, 30, 1)
    assert b["request_throughput"] == pytest.approx(1.25) and b["good_output_throughput"] == pytest.approx(37.5)
    assert b["slo_attainment"] == 1.0 and b["mean_ttft_ms"] == pytest.approx(100.0)
    # with the base model's request, the adapters' rates add up to the run's
    assert s["request_throughput"] == pytest.approx(a["request_throughput"] + b["request_throughput"] + 1 / 0.8)


def test_no_adapter_no_per_adapter_key():
    plain = adapter_run().drop_columns(["lora"])
    assert "per_adapter" not in summarize(plain, SLO(ttft_ms=200), 0, 10 * S)         # a file before the column
    rows = [{"sent": float(i)} for i in range(3)]
    assert "per_adapter" not in summarize(request_table(rows), SLO(), 0, 10 * S)      # every row the base model
