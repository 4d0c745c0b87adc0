"""The streaming client (loadgen/client.py): against scripted byte streams (chunk times, token
attribution, statuses, the connection pool, TLS), then end to end against the fake server driven
by its prompt (timestamps against the server's own send times, the failure taxonomy, timeouts)."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
import time

import numpy as np
import pytest

from conf.schema import ClientTimeouts
from loadgen.client import ClientConfig, StreamingClient
from loadgen.records import RequestRecord
from metrics.request_metrics import complete_record, itl_per_token_s
from metrics.token_attribution import attribute_tokens, split_total
from tests.fake_server import CLOSE, END, HEAD_CHUNKED, FakeServer, chunk, completion, event


def _send(url, n=1, count_tokens=None, continuous=False, timeouts=None, max_tokens=8, api="completions"):
    cfg = ClientConfig(base_url=url, model="m", continuous_usage=continuous, api=api,
                       timeouts=timeouts or ClientTimeouts())

    async def go():
        async with StreamingClient(cfg) as c:
            out = []
            for i in range(n):
                rec = RequestRecord(request_id=f"r{i}", scheduled_ns=0)
                out.append(await c.send(rec, c.body("hi", max_tokens)))
            return out

    recs = asyncio.run(go())
    for rec in recs:  # tokens per chunk: the metrics' rule, as the dispatcher applies it
        attribute_tokens(rec, count_tokens)
    return recs


def test_coalesced_events_share_the_read_time_and_count_each_chunk():
    # Three output events and the usage event arrive in ONE write: three chunks, one time.
    body = (event(completion("s-1", "a")) + event(completion("s-1", "b")) +
            event(completion("s-1", "c", "length")) +
            event(completion("s-1", None, usage={"prompt_tokens": 3, "completion_tokens": 3})) + event(b"[DONE]"))

    def script(req, k):
        return [HEAD_CHUNKED, 0.01, chunk(body) + END]

    with FakeServer(script) as srv:
        (rec,) = _send(srv.url)
    assert rec.status == "ok", rec.error
    assert rec.response_id == "s-1"
    assert len(rec.chunk_ns) == 3 and len(set(rec.chunk_ns)) == 1
    assert rec.chunk_tokens == [1, 1, 1]
    assert rec.output_tokens == 3 and rec.prompt_tokens == 3
    assert rec.first_token_ns == rec.end_ns == rec.chunk_ns[0]
    assert rec.text == "abc"
    assert srv.requests[0]["stream_options"] == {"include_usage": True}
    assert srv.requests[0]["max_tokens"] == 8 and srv.requests[0]["stream"] is True


def test_event_split_across_reads_gets_the_time_of_the_completing_read():
    ev = event(completion("s-2", "hello", "stop"))
    cut = len(ev) // 2

    def script(req, k):
        # The HTTP chunk itself is split too: the decoder must stitch both layers.
        framed = chunk(ev)
        return [HEAD_CHUNKED, framed[:cut], 0.05, framed[cut:], chunk(event(b"[DONE]")) + END]

    with FakeServer(script) as srv:
        (rec,) = _send(srv.url)
    assert rec.status == "ok", rec.error
    first_part, second_part = srv.writes[1][1], srv.writes[2][1]
    assert second_part - first_part >= 40_000_000
    # The chunk is timed when its last byte arrived, not when its first did.
    assert rec.chunk_ns[0] >= second_part
    assert rec.chunk_ns[0] - rec.sent_ns >= 40_000_000
    assert rec.tokens_source == "chunks"  # no usage, no tokenizer: one token per chunk
    assert rec.chunk_tokens == [1] and rec.output_tokens == 1


def test_continuous_usage_deltas_give_tokens_per_chunk():
    # vLLM with continuous_usage_stats: every chunk carries the cumulative completion tokens;
    # a chunk holding 3 tokens (speculative decoding) must count 3, not 1.
    cum = [1, 4, 5, 7]
    evs = [event(completion("s-3", f"t{i}", "length" if i == 3 else None,
                            usage={"prompt_tokens": 2, "completion_tokens": c})) for i, c in enumerate(cum)]

    def script(req, k):
        steps = [HEAD_CHUNKED]
        for e in evs:
            steps += [chunk(e), 0.005]
        return steps + [chunk(event(b"[DONE]")) + END]

    with FakeServer(script) as srv:
        (rec,) = _send(srv.url, continuous=True)
    assert rec.status == "ok", rec.error
    assert srv.requests[0]["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert rec.chunk_tokens == [1, 3, 1, 2]
    assert rec.output_tokens == 7 and rec.tokens_source == "usage_continuous"
    assert len(rec.chunk_ns) == 4 and rec.chunk_ns == sorted(rec.chunk_ns)


def test_final_usage_split_over_chunks_by_tokenizer_weights():
    texts = ["a", "bb cc", "d"]
    evs = [event(completion("s-4", t, "length" if i == 2 else None)) for i, t in enumerate(texts)]
    evs.append(event(completion("s-4", None, usage={"prompt_tokens": 5, "completion_tokens": 6})))

    def script(req, k):
        return [HEAD_CHUNKED] + [chunk(e) for e in evs] + [chunk(event(b"[DONE]")) + END]

    words = lambda s: len(s.split())  # noqa: E731  a stand-in tokenizer: one token per word
    with FakeServer(script) as srv:
        (rec,) = _send(srv.url, count_tokens=words)
    assert rec.status == "ok"
    assert rec.output_tokens == 6
    assert sum(rec.chunk_tokens) == 6 and all(k >= 1 for k in rec.chunk_tokens)
    assert rec.chunk_tokens[1] == max(rec.chunk_tokens)  # the two-word chunk gets the rest
    assert rec.tokens_source == "usage+tokenizer_split"


def test_chat_deltas_role_only_chunk_is_not_output():
    evs = [event({"id": "c-1", "choices": [{"index": 0, "delta": {"role": "assistant"}}]}),
           event({"id": "c-1", "choices": [{"index": 0, "delta": {"content": "x"}}]}),
           event({"id": "c-1", "choices": [{"index": 0, "delta": {"content": "y"}, "finish_reason": "stop"}]})]

    def script(req, k):
        return [HEAD_CHUNKED, chunk(evs[0]), 0.03, chunk(evs[1]), chunk(evs[2]), chunk(event(b"[DONE]")) + END]

    with FakeServer(script) as srv:
        (rec,) = _send(srv.url, api="chat")
    assert rec.status == "ok"
    assert srv.requests[0]["messages"] == [{"role": "user", "content": "hi"}]
    assert len(rec.chunk_ns) == 2
    assert rec.first_token_ns - rec.sent_ns >= 25_000_000  # the role chunk did not start TTFT
    assert rec.finish_reason == "stop" and rec.text == "xy"


def test_keep_alive_reuses_one_connection_and_content_length_bodies_work():
    def script(req, k):
        body = event(completion(f"s-{k}", "z", "stop")) + event(b"[DONE]")
        return [b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n" % len(body),
                body]

    with FakeServer(script) as srv:
        recs = _send(srv.url, n=3)
    assert [r.status for r in recs] == ["ok"] * 3
    assert [r.response_id for r in recs] == ["s-0", "s-1", "s-2"]
    assert srv.connections == 1


def test_http_error_truncation_and_server_close():
    def script(req, k):
        if k == 0:
            msg = b'{"error": "overloaded"}'
            return [b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: %d\r\n\r\n" % len(msg), msg]
        if k == 1:  # output, then the connection drops without finish or [DONE]
            return [HEAD_CHUNKED, chunk(event(completion("s-1", "a"))), 0.01, CLOSE]
        return [HEAD_CHUNKED, chunk(event(completion("s-2", "b", "stop"))) + END]

    with FakeServer(script) as srv:
        recs = _send(srv.url, n=3)
    assert recs[0].status == "http_error" and recs[0].http_status == 503 and "overloaded" in recs[0].error
    assert recs[1].status == "connection_error" and len(recs[1].chunk_ns) == 1
    assert recs[2].status == "ok"  # a fresh connection after the drop
    assert srv.connections == 2


def test_ttft_and_idle_timeouts_say_which():
    def script(req, k):
        if k == 0:
            return [HEAD_CHUNKED, 1.0]
        return [HEAD_CHUNKED, chunk(event(completion("s", "a"))), 1.0]

    t = ClientTimeouts(connect_s=2, ttft_s=0.1, idle_s=0.1, total_s=5)
    with FakeServer(script) as srv:
        recs = _send(srv.url, n=2, timeouts=t)
    assert recs[0].status == "timeout" and recs[0].error.startswith("ttft timeout")
    assert recs[1].status == "timeout" and recs[1].error.startswith("idle timeout")
    assert 0.09e9 <= recs[0].done_ns - recs[0].sent_ns <= 0.5e9


def test_connection_refused_is_a_connection_error():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (rec,) = _send(f"http://127.0.0.1:{port}")
    assert rec.status == "connection_error" and rec.sent_ns is not None


def _pool_run(url, top_up: bool):
    cfg = ClientConfig(base_url=url, model="m")

    async def go():
        async with StreamingClient(cfg) as c:
            assert await c.prewarm(8, top_up=top_up) == 8
            futs = [c.start(RequestRecord(request_id=f"r{i}", scheduled_ns=0), c.body("hi", 4)) for i in range(7)]
            await asyncio.sleep(0.15)  # the responses take 0.3 s: all 7 still in flight
            idle_mid = len(c._idle)
            return idle_mid, await asyncio.gather(*futs)

    return asyncio.run(go())


def test_open_loop_pool_is_topped_up_in_the_background_before_it_runs_dry():
    def script(req, k):
        return [HEAD_CHUNKED, 0.3, chunk(event(completion(f"s-{k}", "z", "stop")) + event(b"[DONE]")) + END]

    # 8 prewarmed, 7 taken: below the low-water mark (max(8 // 4, 4) = 4 idle) four more open.
    with FakeServer(script) as srv:
        idle_mid, recs = _pool_run(srv.url, top_up=True)
    assert [r.status for r in recs] == ["ok"] * 7
    assert idle_mid == 1 + 4
    assert srv.connections == 12
    # Closed loop (no top-up): the users' own connections are all there is.
    with FakeServer(script) as srv:
        idle_mid, recs = _pool_run(srv.url, top_up=False)
    assert [r.status for r in recs] == ["ok"] * 7
    assert idle_mid == 1 and srv.connections == 8


async def _until(cond, limit_s: float = 10.0) -> bool:
    """Poll ``cond`` until it holds or ``limit_s`` passes (a bound on a hang, not a timing check)."""
    end = time.monotonic() + limit_s
    while not cond() and time.monotonic() < end:
        await asyncio.sleep(0.02)
    return cond()


def _burst_script(req, k):
    # max_tokens=99 marks a long request (in flight while the pool is swept); the rest are quick.
    wait = 1.0 if req.get("max_tokens") == 99 else 0.05
    return [HEAD_CHUNKED, wait, chunk(event(completion(f"s-{k}", "z", "stop")) + event(b"[DONE]")) + END]


def _burst_then_idle(srv, idle_close_s):
    """Prewarm 8, a burst of 24 at once, then 3 long requests while the pool is idle."""
    cfg = ClientConfig(base_url=srv.url, model="m", idle_close_s=idle_close_s)

    async def go():
        async with StreamingClient(cfg) as c:
            assert await c.prewarm(8) == 8  # with the background top-up (low-water mark 4)
            burst = [c.start(RequestRecord(request_id=f"b{i}", scheduled_ns=0), c.body("hi", 4)) for i in range(24)]
            burst = await asyncio.gather(*burst)
            peak = c.open_connections
            long = [c.start(RequestRecord(request_id=f"l{i}", scheduled_ns=0), c.body("hi", 99)) for i in range(3)]
            shrunk = await _until(lambda: c.open_connections <= 8 and srv.open_connections <= 8,
                                  10.0 if idle_close_s else 1.0)
            during = (c.open_connections, c.idle_connections, srv.open_connections)
            long = await asyncio.gather(*long)
            await asyncio.sleep(0.5)  # more sweeps: none goes below the prewarmed count
            return burst, long, peak, shrunk, during, (c.open_connections, srv.open_connections)

    return asyncio.run(go())


def test_idle_connections_above_the_prewarmed_count_are_closed_never_one_in_flight():
    with FakeServer(_burst_script) as srv:
        burst, long, peak, shrunk, during, after = _burst_then_idle(srv, idle_close_s=0.2)
    assert [r.status for r in burst + long] == ["ok"] * 27, [r.error for r in burst + long]
    assert peak >= 24  # the burst opened past the prewarmed 8
    assert shrunk
    # Down to the prewarmed 8, 3 of them carrying the long requests (which all completed).
    assert during == (8, 5, 8)
    assert after == (8, 8)


def test_idle_close_off_keeps_every_connection():
    with FakeServer(_burst_script) as srv:
        burst, long, peak, shrunk, during, after = _burst_then_idle(srv, idle_close_s=None)
    assert [r.status for r in burst + long] == ["ok"] * 27
    assert not shrunk and after == (peak, peak)


def test_connections_the_server_closed_leave_the_pool():
    def script(req, k):
        return [HEAD_CHUNKED, chunk(event(completion(f"s-{k}", "z", "stop")) + event(b"[DONE]")) + END]

    cfg = ClientConfig(base_url="", model="m", idle_close_s=None)

    async def go(url):
        cfg.base_url = url
        async with StreamingClient(cfg) as c:
            assert await c.prewarm(4, top_up=False) == 4
            first = await c.send(RequestRecord(request_id="r0", scheduled_ns=0), c.body("hi", 4))
            gone = await _until(lambda: c.open_connections == 0)  # the server's keep-alive timeout
            idle = c.idle_connections
            again = await c.send(RequestRecord(request_id="r1", scheduled_ns=0), c.body("hi", 4))
            return first, gone, idle, again

    with FakeServer(script, idle_close_s=0.2) as srv:
        first, gone, idle, again = asyncio.run(go(srv.url))
        connections = srv.connections
    assert first.status == "ok" and gone and idle == 0
    assert again.status == "ok" and connections == 5  # a fresh connection, not a dead pooled one


def _late_reader(url, kernel: bool):
    """One request whose only output chunk arrives while the client's loop is blocked."""
    cfg = ClientConfig(base_url=url, model="m", kernel_timestamps=kernel)

    async def go():
        async with StreamingClient(cfg) as c:
            await c.prewarm(1)  # so that start() writes at once
            fut = c.start(RequestRecord(request_id="r0", scheduled_ns=0), c.body("hi", 1))
            time.sleep(0.25)  # the event loop is busy elsewhere while the bytes arrive
            unblocked = time.perf_counter_ns()
            return c.timestamp_source, unblocked, await fut

    return asyncio.run(go())


def test_kernel_receive_stamps_time_a_chunk_the_loop_read_late():
    def script(req, k):
        return [HEAD_CHUNKED, 0.05,
                chunk(event(completion("s-k", "a", "length"))) + chunk(event(b"[DONE]")) + END]

    with FakeServer(script) as srv:
        source, unblocked, rec = _late_reader(srv.url, kernel=True)
        written = srv.writes[-1][1]
    assert source == "kernel" and rec.status == "ok", rec.error
    assert 0 <= rec.chunk_ns[0] - written < 5_000_000          # when the bytes reached this host
    assert unblocked - rec.chunk_ns[0] > 150_000_000          # not when the loop got to them
    with FakeServer(script) as srv:
        source, unblocked, rec = _late_reader(srv.url, kernel=False)
    assert source == "read" and rec.status == "ok"
    assert rec.chunk_ns[0] >= unblocked                       # the read time, after the stall


def test_request_larger_than_the_socket_buffer_is_sent_whole(monkeypatch):
    # 24 MB of prompt cannot leave in one send() (send and receive buffers hold at most ~10 MB
    # on Linux): the rest waits for the socket to drain.
    from loadgen.client import stamped_socket

    drained = []
    on_writable = stamped_socket.StampedTransport._on_writable
    monkeypatch.setattr(stamped_socket.StampedTransport, "_on_writable",
                        lambda self: (drained.append(len(self.out)), on_writable(self)))

    def script(req, k):
        return [HEAD_CHUNKED, chunk(event(completion("s-big", str(len(req["prompt"])), "length")))
                + chunk(event(b"[DONE]")) + END]

    async def go(url):
        async with StreamingClient(ClientConfig(base_url=url, model="m")) as c:
            assert c.timestamp_source == "kernel"
            rec = RequestRecord(request_id="r0", scheduled_ns=0)
            return await c.send(rec, c.body("x" * 24_000_000, 1))

    with FakeServer(script) as srv:
        rec = asyncio.run(go(srv.url))
    assert rec.status == "ok", rec.error
    assert rec.text == "24000000"                 # the server read every byte of the prompt
    assert drained and drained[0] < 24_000_000   # and the partial-send path carried the rest
    assert rec.sent_ns < rec.chunk_ns[0] <= rec.done_ns


@pytest.fixture(scope="module")
def tls_cert(tmp_path_factory):
    """A self-signed certificate for 127.0.0.1 (made with the openssl command)."""
    if not shutil.which("openssl"):
        pytest.skip("the openssl command is needed to make a test certificate")
    d = tmp_path_factory.mktemp("tls")
    cert, key = d / "cert.pem", d / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key),
                    "-out", str(cert), "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"], check=True, capture_output=True)
    return cert, key


def _tls_server(script, tls_cert, monkeypatch):
    cert, key = tls_cert
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ctx.load_cert_chain(cert, key)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))  # the client's default context trusts it
    return FakeServer(script, ssl_context=ctx)


def test_https_stream_is_timed_by_the_kernel_too(tls_cert, monkeypatch):
    def script(req, k):
        return [HEAD_CHUNKED, 0.05,
                chunk(event(completion("s-k", "a", "length"))) + chunk(event(b"[DONE]")) + END]

    with _tls_server(script, tls_cert, monkeypatch) as srv:
        assert srv.url.startswith("https://")
        source, unblocked, rec = _late_reader(srv.url, kernel=True)
        written = srv.writes[-1][1]
        # keep-alive and several requests over one TLS connection
        recs = _send(srv.url, n=3)
    assert source == "kernel" and rec.status == "ok", rec.error
    assert 0 <= rec.chunk_ns[0] - written < 5_000_000      # the encrypted bytes' arrival
    assert unblocked - rec.chunk_ns[0] > 150_000_000
    assert [r.status for r in recs] == ["ok"] * 3 and [r.text for r in recs] == ["a"] * 3
    with _tls_server(script, tls_cert, monkeypatch) as srv:
        source, unblocked, rec = _late_reader(srv.url, kernel=False)  # asyncio's own TLS transport
    assert source == "read" and rec.status == "ok" and rec.chunk_ns[0] >= unblocked


def test_https_with_an_untrusted_certificate_is_a_connection_error(tls_cert, monkeypatch):
    def script(req, k):
        return [HEAD_CHUNKED, chunk(event(completion("s", "a", "length"))) + END]

    with _tls_server(script, tls_cert, monkeypatch) as srv:
        monkeypatch.delenv("SSL_CERT_FILE")
        (rec,) = _send(srv.url)
    assert rec.status == "connection_error" and "CERTIFICATE_VERIFY_FAILED" in rec.error


# ------------------------------------------------ end to end against the fake server driven by its prompt
@pytest.fixture(scope="module")
def server():
    with FakeServer() as s:
        yield s


@pytest.fixture(scope="module")
def server_no_cont():
    with FakeServer(continuous_usage=False) as s:
        yield s


def _send_prompt(base_url, prompt, api="completions", timeouts=None, count_tokens=None, max_tokens=16):
    cfg = ClientConfig(base_url=base_url, model="fake", api=api, timeouts=timeouts or ClientTimeouts(),
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
    rec = _send_prompt(server.base_url, "mode:ok n=6 gap_ms=20 ttft_ms=30", api=api)
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
    rec = _send_prompt(server.base_url, "mode:ok k=3 n=4 gap_ms=10")
    assert rec.status == "ok"
    assert rec.chunk_tokens == [3, 3, 3, 3]
    assert rec.output_tokens == 12
    itl = itl_per_token_s(rec.chunk_ns, rec.chunk_tokens)
    assert len(itl) == 11  # the first chunk's other 2 tokens came with the first: 0 each
    assert (itl[:2] == 0).all() and itl.mean() == pytest.approx(rec.tpot_s)
    assert itl.sum() == pytest.approx((rec.chunk_ns[-1] - rec.chunk_ns[0]) / 1e9)


def test_usage_only_at_end_splits_tokens(server_no_cont):
    rec = _send_prompt(server_no_cont.base_url, "mode:ok k=2 n=3 gap_ms=5",
                count_tokens=lambda s: len(s.split()))
    assert rec.status == "ok"
    assert rec.output_tokens == 6
    assert rec.tokens_source == "usage+tokenizer_split"
    assert rec.chunk_tokens == [2, 2, 2]


def test_role_only_chunk_is_not_the_first_token(server):
    rec = _send_prompt(server.base_url, "mode:role_only_first ttft_ms=40 n=2", api="chat")
    assert rec.status == "ok"
    assert rec.ttft_s >= 0.040


def test_coalesced_events_share_the_read_time(server):
    rec = _send_prompt(server.base_url, "mode:coalesced n=5 gap_ms=15")
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
    rec = _send_prompt(server.base_url, prompt)
    assert rec.status == status, (rec.status, rec.error)
    assert needle in (rec.error or "")
    assert not rec.slo_ok


def test_http429_is_counted_as_rejection(server):
    rec = _send_prompt(server.base_url, "mode:http429")
    assert rec.status == "http_error" and rec.http_status == 429


def test_ttft_timeout(server):
    rec = _send_prompt(server.base_url, "mode:stall_first", timeouts=ClientTimeouts(ttft_s=0.3, idle_s=5, total_s=10))
    assert rec.status == "timeout" and rec.error.startswith("ttft timeout")
    assert rec.first_token_ns is None
    assert 0.25 < (rec.done_ns - rec.sent_ns) / 1e9 < 3


def test_idle_timeout_keeps_received_chunks(server):
    rec = _send_prompt(server.base_url, "mode:stall_mid n=5 gap_ms=5",
                       timeouts=ClientTimeouts(ttft_s=5, idle_s=0.3, total_s=10))
    assert rec.status == "timeout" and rec.error.startswith("idle timeout")
    assert len(rec.chunk_ns) == 2


def test_total_timeout(server):
    rec = _send_prompt(server.base_url, "mode:ok n=50 gap_ms=20",
                       timeouts=ClientTimeouts(ttft_s=5, idle_s=5, total_s=0.3))
    assert rec.status == "timeout" and rec.error.startswith("total timeout")




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
