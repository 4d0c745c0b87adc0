"""Per-request token truth read off the stream (issue 35, items 1 and 4): the prompt tokens the
server served from its prefix cache (``usage.prompt_tokens_details.cached_tokens``) and its
``usage.completion_tokens`` beside the client's tokenizer count of the text received, from fake
servers that stream in vLLM's and SGLang's documented formats, through to ``summary.json``'s keys."""

from __future__ import annotations

import asyncio
import math

import pyarrow.parquet as pq

from loadgen.client import ClientConfig, StreamingClient
from loadgen.records import RecordWriter, RequestRecord
from metrics.request_metrics import complete_record
from metrics.slo import SLO
from metrics.summary import summarize
from tests.fake_server import END, HEAD_CHUNKED, FakeServer, chunk, event


def words(text: str) -> int:
    """The test's tokenizer: one token a whitespace-separated word."""
    return len(text.split())


def _stream(chunks: list[dict], usage_chunk: dict) -> list:
    return [HEAD_CHUNKED, *(chunk(event(c)) for c in chunks), chunk(event(usage_chunk)),
            chunk(b"data: [DONE]\n\n"), END]


# (texts streamed, usage.prompt_tokens, cached_tokens, usage.completion_tokens) per request
VLLM = [(["hel", "lo", " world"], 32, 0, 2),            # "hello world": 2 words, joined (not 3 per chunk)
        (["a", " b", " c"], 32, 16, 3),
        (["a", " b", " c"], 32, 16, 5)]                  # the server counts 2 tokens more
SGLANG = [(["x", " y"], 40, 0, 2),
          (["x", " y"], 40, 32, 3),                      # off by one: within client.token_mismatch_tolerance=1
          (["x", " y"], 40, 40, 2)]


def vllm_script(body, k):
    """vLLM's /v1/completions stream with ``stream_options.include_usage`` and the server started
    with ``--enable-prompt-tokens-details``: ``usage: null`` on each text chunk, then a chunk with
    empty ``choices`` whose usage carries ``prompt_tokens_details.cached_tokens``."""
    texts, pt, cached, ct = VLLM[k]
    rid = f"cmpl-{k}"
    base = {"id": rid, "object": "text_completion", "created": 1, "model": "m"}
    chunks = [{**base, "choices": [{"index": 0, "text": t, "logprobs": None, "finish_reason": None,
                                    "stop_reason": None}], "usage": None} for t in texts]
    chunks[-1]["choices"][0]["finish_reason"] = "length"
    usage = {**base, "choices": [], "usage": {"prompt_tokens": pt, "total_tokens": pt + ct, "completion_tokens": ct,
                                              "prompt_tokens_details": {"cached_tokens": cached}}}
    return _stream(chunks, usage)


def sglang_script(body, k):
    """SGLang's /v1/completions stream with ``--enable-cache-report``: ``matched_stop`` on the
    choice, the final usage with ``prompt_tokens_details: {cached_tokens}``."""
    texts, pt, cached, ct = SGLANG[k]
    base = {"id": f"sg{k}", "object": "text_completion", "created": 1, "model": "m"}
    chunks = [{**base, "choices": [{"index": 0, "text": t, "logprobs": None, "finish_reason": None,
                                    "matched_stop": None}], "usage": None} for t in texts]
    chunks[-1]["choices"][0]["finish_reason"] = "length"
    usage = {**base, "choices": [], "usage": {"prompt_tokens": pt, "completion_tokens": ct,
                                              "total_tokens": pt + ct,
                                              "prompt_tokens_details": {"cached_tokens": cached},
                                              "reasoning_tokens": 0}}
    return _stream(chunks, usage)


def _send(script, n: int, replica: str, tmp_path=None) -> list[RequestRecord]:
    with FakeServer(script) as srv:
        c = ClientConfig(base_url=srv.url, model="m", default_replica=replica)

        async def go():
            async with StreamingClient(c) as client:
                return [await client.send(RequestRecord(request_id=f"{replica}-{i}", scheduled_ns=0,
                                                        prefix_group=i % 2), client.body("hi", 4)) for i in range(n)]

        recs = asyncio.run(go())
    for r in recs:
        complete_record(r, None, words)
    return recs


def test_vllm_stream_cached_and_server_counts():
    recs = _send(vllm_script, 3, "r0")
    assert [r.status for r in recs] == ["ok"] * 3
    assert [r.cached_tokens for r in recs] == [0, 16, 16]
    assert [r.server_output_tokens for r in recs] == [2, 3, 5]
    assert [r.client_output_tokens for r in recs] == [2, 3, 3]
    assert [r.output_tokens for r in recs] == [2, 3, 5]  # the server's usage still rules output_tokens


def test_sglang_stream_cached_and_server_counts():
    recs = _send(sglang_script, 3, "r1")
    assert [r.cached_tokens for r in recs] == [0, 32, 40]
    assert [r.server_output_tokens for r in recs] == [2, 3, 2]
    assert [r.client_output_tokens for r in recs] == [2, 2, 2]


def test_no_details_no_tokenizer_leaves_nulls():
    def bare(body, k):
        base = {"id": "b", "object": "text_completion", "created": 1, "model": "m"}
        c = {**base, "choices": [{"index": 0, "text": "a b", "finish_reason": "length"}]}
        return _stream([c], {**base, "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 2,
                                                             "prompt_tokens_details": None}})
    with FakeServer(bare) as srv:
        c = ClientConfig(base_url=srv.url, model="m")

        async def go():
            async with StreamingClient(c) as client:
                return await client.send(RequestRecord(request_id="q", scheduled_ns=0), client.body("hi", 4))

        rec = asyncio.run(go())
    complete_record(rec, None, None)
    assert (rec.status, rec.cached_tokens, rec.server_output_tokens, rec.client_output_tokens) == ("ok", None, 2, None)


def test_summary_keys_from_both_engines(tmp_path):
    recs = _send(vllm_script, 3, "r0") + _send(sglang_script, 3, "r1")
    w = RecordWriter(tmp_path / "requests.parquet")
    for r in recs:
        w.append(r)
    w.close()
    t = pq.read_table(tmp_path / "requests.parquet")
    assert t.column("cached_tokens").to_pylist() == [0, 16, 16, 0, 32, 40]
    s = summarize(t, SLO(), 0, 10**9)
    # (0+16+16+0+32+40) / (3*32 + 3*40) = 104 / 216
    assert s["cache_hit_rate"] == 104 / 216 and s["cache_hit_rate_all"] == 104 / 216
    assert s["cached_tokens_total"] == 104 and s["cached_tokens_rows"] == 6
    # prefix_group = i % 2: group 0 = rows 0, 2 of each; group 1 = row 1 of each
    assert s["cache_hit_rate_by_prefix_group"] == {"0": (0 + 16 + 0 + 40) / (2 * 32 + 2 * 40), "1": (16 + 32) / 72}
    assert s["cache_hit_rate_by_node"] == {}
    # diffs server - client: 0, 0, 2, 0, 1, 0; tolerance 1 -> one mismatch of six
    assert s["token_counts_compared"] == 6
    assert s["token_mismatch_rate"] == 1 / 6
    assert math.isclose(s["token_mismatch_mean_abs"], 3 / 6) and s["token_mismatch_max_abs"] == 2
    assert math.isclose(s["token_mismatch_mean"], 3 / 6)
    assert s["token_counts_disagree"] is True  # 1/6 > 0.01
    assert summarize(t, SLO(), 0, 10**9, token_mismatch_tolerance=2)["token_mismatch_rate"] == 0.0
    assert summarize(t, SLO(), 0, 10**9, token_mismatch_threshold=0.5)["token_counts_disagree"] is False
