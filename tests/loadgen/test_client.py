"""The streaming client end to end against a fake server that records its own send times."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from loadgen.client import ClientConfig, StreamingClient, Timeouts
from loadgen.records import RequestRecord
from metrics.request_metrics import complete_record, itl_per_token_s
from metrics.token_attribution import split_total
from tests.fake_server import FakeServer


@pytest.fixture(scope="module")
def server():
    with FakeServer() as s:
        yield s


@pytest.fixture(scope="module")
def server_no_cont():
    with FakeServer(continuous_usage=False) as s:
        yield s


def _send(base_url, prompt, api="completions", timeouts=None, count_tokens=None, max_tokens=16):
    cfg = ClientConfig(base_url=base_url, model="fake", api=api, timeouts=timeouts or Timeouts(),
                       continuous_usage=True)

    async def go():
        async with StreamingClient(cfg) as c:
            rec = RequestRecord(request_id="r1", scheduled_ns=0, expected_prompt_tokens=7, max_tokens=max_tokens)
            await c.send(rec, c.body(prompt, max_tokens))
            return rec

    rec = asyncio.run(go())
    complete_record(rec, count_tokens=count_tokens)
    return rec


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_ok_stream_timestamps_match_server_truth(server, api):
    rec = _send(server.base_url, "mode:ok n=6 gap_ms=20 ttft_ms=30", api=api)
    assert rec.status == "ok", rec.error
    truth = server.truth[rec.response_id]
    assert rec.response_id.startswith("fake-")
    assert len(rec.chunk_ns) == 6 == len(truth["chunk_ns"])
    # Received after written, and within a generous bound on a shared CI machine.
    lag_ms = (np.array(rec.chunk_ns) - np.array(truth["chunk_ns"])) / 1e6
    assert (lag_ms >= 0).all() and (lag_ms < 50).all(), lag_ms
    assert rec.output_tokens == 6 and rec.prompt_tokens == 7
    assert rec.tokens_source == "usage_continuous"
    assert rec.chunk_tokens == [1] * 6
    assert rec.first_token_ns == rec.chunk_ns[0] and rec.end_ns == rec.chunk_ns[-1]
    assert rec.ttft_s >= 0.030
    assert rec.finish_reason == "length"
    assert rec.tpot_s == pytest.approx((rec.e2el_s - rec.ttft_s) / 5)


def test_multi_token_chunks_from_usage_deltas(server):
    rec = _send(server.base_url, "mode:ok k=3 n=4 gap_ms=10")
    assert rec.status == "ok"
    assert rec.chunk_tokens == [3, 3, 3, 3]
    assert rec.output_tokens == 12
    itl = itl_per_token_s(rec.chunk_ns, rec.chunk_tokens)
    assert len(itl) == 11  # the first chunk's other 2 tokens came with the first: 0 each
    assert (itl[:2] == 0).all() and itl.mean() == pytest.approx(rec.tpot_s)
    assert itl.sum() == pytest.approx((rec.chunk_ns[-1] - rec.chunk_ns[0]) / 1e9)


def test_usage_only_at_end_splits_tokens(server_no_cont):
    rec = _send(server_no_cont.base_url, "mode:ok k=2 n=3 gap_ms=5",
                count_tokens=lambda s: len(s.split()))
    assert rec.status == "ok"
    assert rec.output_tokens == 6
    assert rec.tokens_source == "usage+tokenizer_split"
    assert rec.chunk_tokens == [2, 2, 2]


def test_role_only_chunk_is_not_the_first_token(server):
    rec = _send(server.base_url, "mode:role_only_first ttft_ms=40 n=2", api="chat")
    assert rec.status == "ok"
    assert rec.ttft_s >= 0.040


def test_coalesced_events_share_the_read_time(server):
    rec = _send(server.base_url, "mode:coalesced n=5 gap_ms=15")
    assert rec.status == "ok"
    assert len(rec.chunk_ns) == 5
    assert rec.chunk_ns[0] == rec.chunk_ns[1]  # written in one piece -> one read
    assert rec.chunk_ns[2] == rec.chunk_ns[3]
    assert rec.chunk_ns[3] < rec.chunk_ns[4]


@pytest.mark.parametrize("prompt,status,needle", [
    ("mode:http500", "http_error", "HTTP 500"),
    ("mode:badjson", "invalid_response", "JSONDecodeError"),
    ("mode:error_event", "invalid_response", "model crashed"),
    ("mode:truncated n=3", "truncated", "finish_reason"),
    ("mode:no_output", "invalid_response", "no output token"),
    ("mode:disconnect n=5", "connection_error", ""),
])
def test_failure_taxonomy(server, prompt, status, needle):
    rec = _send(server.base_url, prompt)
    assert rec.status == status, (rec.status, rec.error)
    assert needle in (rec.error or "")
    assert not rec.slo_ok


def test_http429_is_counted_as_rejection(server):
    rec = _send(server.base_url, "mode:http429")
    assert rec.status == "http_error" and rec.http_status == 429


def test_ttft_timeout(server):
    rec = _send(server.base_url, "mode:stall_first", timeouts=Timeouts(ttft_s=0.3, idle_s=5, total_s=10))
    assert rec.status == "timeout" and rec.error.startswith("ttft timeout")
    assert rec.first_token_ns is None
    assert 0.25 < (rec.done_ns - rec.sent_ns) / 1e9 < 3


def test_idle_timeout_keeps_received_chunks(server):
    rec = _send(server.base_url, "mode:stall_mid n=5 gap_ms=5", timeouts=Timeouts(ttft_s=5, idle_s=0.3, total_s=10))
    assert rec.status == "timeout" and rec.error.startswith("idle timeout")
    assert len(rec.chunk_ns) == 2


def test_total_timeout(server):
    rec = _send(server.base_url, "mode:ok n=50 gap_ms=20", timeouts=Timeouts(ttft_s=5, idle_s=5, total_s=0.3))
    assert rec.status == "timeout" and rec.error.startswith("total timeout")


def test_connection_refused():
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    rec = _send(f"http://127.0.0.1:{port}", "mode:ok")
    assert rec.status == "connection_error"


def test_request_body_dialect(server):
    cfg = ClientConfig(base_url=server.base_url, model="m", extra_body={"ignore_eos": True, "min_tokens": 0},
                       continuous_usage=True)
    body = __import__("orjson").loads(StreamingClient(cfg).body("hi", 12))
    assert body["max_tokens"] == 12 and body["min_tokens"] == 12 and body["ignore_eos"] is True
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}


@pytest.mark.parametrize("total,weights,expected", [
    (6, [2, 2, 2], [2, 2, 2]),
    (7, [1, 1, 1], [3, 2, 2]),
    (3, [5, 1, 1], [1, 1, 1]),
    (10, [4, 1, 1], [7, 2, 1]),
    (4, [1, 1, 1, 1, 9], [1, 1, 1, 1, 0]),
])
def test_split_total(total, weights, expected):
    got = split_total(total, weights)
    assert sum(got) == total
    assert got == expected
