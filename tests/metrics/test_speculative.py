"""Tokens per decode step from the rows (speculative decoding seen in the stream) against the
engine's acceptance counters."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from engines import prometheus
from engines.vllm import VLLM
from loadgen.client.openai_stream import OpenAIStream
from loadgen.records import RequestRecord
from metrics.engine_counters import counter_deltas
from metrics.request_metrics import complete_record
from metrics.slo import SLO
from metrics.speculative import engine_accept_length, spec_agreement, spec_summary, step_tokens
from metrics.summary import summarize
from tests.telemetry_fixtures import S, request_table


def known_steps():
    """40 steps of 1 token, 30 of 2, 20 of 3, 10 of 4, over 10 requests (each: the prefill's chunk first)."""
    steps = [1] * 40 + [2] * 30 + [3] * 20 + [4] * 10
    rng = np.random.default_rng(7)
    rng.shuffle(steps)
    return [[1] + steps[i * 10:(i + 1) * 10] for i in range(10)]


def test_tokens_per_step_of_a_known_distribution():
    chunks = known_steps()
    s = spec_summary(chunks, ["usage_continuous"] * 10)
    assert s["spec_decode_steps"] == 100
    assert s["spec_tokens_per_step_mean"] == pytest.approx(2.0)   # (40 + 60 + 60 + 40) / 100
    assert s["spec_tokens_per_step_p50"] == pytest.approx(2.0)
    assert s["spec_tokens_per_step_p90"] == pytest.approx(3.1)    # sorted[89.1]: 3 + 0.1 x (4 - 3)
    assert s["spec_tokens_per_step_hist"] == {"1": 40, "2": 30, "3": 20, "4": 10}


def test_only_server_counted_chunks_and_decode_steps_count():
    # the first chunk (prefill) and chunks without a token are not steps; a tokenizer split is not
    # what a step delivered
    k = step_tokens([[1, 3, 0, 2], [5, 5], [2, 2]], ["usage_continuous", "usage+tokenizer_split", "usage"])
    assert k.tolist() == [3, 2, 2]
    assert math.isnan(spec_summary([], [])["spec_tokens_per_step_mean"])


def test_summary_reports_tokens_per_step():
    rows = [{"sent": float(i), "output_tokens": 11, "chunks": [i + 0.1 * j for j in range(1, 6)],
             "chunk_tokens": c[:5], "tokens_source": "usage_continuous"} for i, c in
            enumerate([[1, 3, 3, 3, 1], [1, 1, 1, 4, 4]])]
    s = summarize(request_table(rows), SLO(), 0, 10 * S)
    assert s["spec_decode_steps"] == 8
    assert s["spec_tokens_per_step_mean"] == pytest.approx(20 / 8)


def test_engine_mean_accepted_length_and_the_rows_against_it():
    assert engine_accept_length(150, 100) == 2.5 and math.isnan(engine_accept_length(0, 0))
    d = counter_deltas({"spec_decode_drafts": 10, "spec_decode_draft_tokens": 30, "spec_decode_accepted_tokens": 4},
                       {"spec_decode_drafts": 110, "spec_decode_draft_tokens": 330, "spec_decode_accepted_tokens": 104})
    assert d["engine_spec_decode_mean_accepted_length"] == pytest.approx(2.0)      # 1 + 100 / 100
    assert d["engine_spec_decode_acceptance_rate"] == pytest.approx(100 / 300)
    rows = spec_summary(known_steps(), ["usage_continuous"] * 10)
    assert spec_agreement({**rows, **d}) == {"spec_tokens_per_step_vs_engine": pytest.approx(0.0)}
    assert spec_agreement(rows) == {}


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def test_real_vllm_ngram_stream_against_its_counters():
    # vLLM 0.32.0 CPU on the tiny model, --speculative-config '{"method": "ngram",
    # "num_speculative_tokens": 3, "prompt_lookup_max": 3, "prompt_lookup_min": 1}', one completion
    # (temperature 0, max_tokens 48, a prompt that repeats itself), /metrics before and after it
    rec = RequestRecord(request_id="r", sent_ns=0, expected_prompt_tokens=220)
    st = OpenAIStream(rec)
    st.feed((FIXTURES / "vllm_0.32.0_ngram_spec_completions.sse").read_bytes(), 1000)
    assert st.outcome() == ("ok", None)
    complete_record(rec)
    assert rec.tokens_source == "usage_continuous" and rec.output_tokens == 48
    assert rec.chunk_tokens == [1, 1, 1, 1, 3, 3] + [4] * 9 + [2]
    rows = spec_summary([rec.chunk_tokens], [rec.tokens_source])
    assert rows["spec_decode_steps"] == 15 and rows["spec_tokens_per_step_mean"] == pytest.approx(47 / 15)
    start, end = (prometheus.common_values((FIXTURES / f"vllm_0.32.0_ngram_spec_metrics_{w}.txt").read_text(),
                                           VLLM.server_metric_map) for w in ("before", "after"))
    eng = counter_deltas(start, end)
    assert (eng["engine_spec_decode_drafts"], eng["engine_spec_decode_accepted_tokens"]) == (12, 34)
    assert eng["engine_spec_decode_mean_accepted_length"] == pytest.approx(1 + 34 / 12)
    # 3 steps before the n-gram matched (1 token, no draft) and the last drafting step cut to 2 by
    # max_tokens: 3 + (12 + 34 - 2) = 47 tokens over 15 steps, against 46 over 12 drafts
    assert spec_agreement({**rows, **eng})["spec_tokens_per_step_vs_engine"] == pytest.approx(47 / 15 - 46 / 12)
