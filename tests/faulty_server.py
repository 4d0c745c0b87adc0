"""A catalogue of misbehaving streaming servers, for ``tests/fake_server.FakeServer``.

``FAULTS`` maps a fault's name to its script (``steps(name, k)`` -> the server's steps for
request ``k``) and what the client must make of it: status, HTTP status, a piece of the
error, and which timeout (if any) ends it.  ``fault_script`` answers each request with the
fault its prompt names (``fault=NAME``), or, for prompts the test does not choose (a
harness run builds them from a tokenizer), with ``order[k % len(order)]``.

Response ids are ``NAME-k`` (k: the server's request number), so a record's rows can be
matched with the server's ground-truth write times (``FakeServer.writes``).  A healthy
stream writes its head, then one write per output chunk, then the end: output chunk ``i``
is write ``1 + i`` of its request.
"""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from tests.fake_server import CLOSE, END, HEAD_CHUNKED, RESET, chunk, completion, event

# The client timeouts every fault is run under (seconds): short, so the suite is fast, and the
# idle limit far below the TTFT one, so that an idle timeout fired at the TTFT deadline shows.
TIMEOUTS = {"connect_s": 2.0, "ttft_s": 2.0, "idle_s": 0.3, "total_s": 4.0}
TTFT = f"ttft timeout after {TIMEOUTS['ttft_s']:g} s"
IDLE = f"idle timeout after {TIMEOUTS['idle_s']:g} s"
TOTAL = f"total timeout after {TIMEOUTS['total_s']:g} s"
HEALTHY_CHUNKS = 30
HEALTHY_GAP_S = 0.02
FOREVER_S = 30.0  # longer than any timeout: "never"


@dataclass
class Fault:
    steps: object                 # (name, k) -> list of steps
    status: str                   # the record's status
    needle: str | None = None     # a piece of its error (None: no error)
    http_status: int | None = 200
    timeout: str | None = None    # ttft | idle | total: which limit must end it, at its configured value
    chunks: int | None = None     # output chunks the record must keep
    what: str = ""                # for the README's table


def _ev(name: str, k: int, text: str | None, finish=None, usage=None) -> bytes:
    return event(completion(f"{name}-{k}", text, finish, usage))


def _ok_tail(name: str, k: int, n: int) -> bytes:
    """finish_reason, usage and [DONE], then the chunked body's end."""
    return (chunk(_ev(name, k, "", "length") + _ev(name, k, None, usage={"prompt_tokens": 3, "completion_tokens": n})
                  + event(b"[DONE]")) + END)


def healthy(name, k):
    steps = [HEAD_CHUNKED, HEALTHY_GAP_S]
    for _ in range(HEALTHY_CHUNKS):
        steps += [chunk(_ev(name, k, "tok ")), HEALTHY_GAP_S]
    return steps + [_ok_tail(name, k, HEALTHY_CHUNKS)]


def _two_then(name, k, *rest):
    return [HEAD_CHUNKED, chunk(_ev(name, k, "a ")), 0.02, chunk(_ev(name, k, "b ")), *rest]


def _raw(head: bytes, body: bytes) -> list:
    return [head + b"Content-Length: %d\r\n\r\n" % len(body) + body]


def _sse_body(name, k, n=3) -> bytes:
    return b"".join(_ev(name, k, f"t{i} ") for i in range(n)) + _ev(name, k, "", "stop") + event(b"[DONE]")


def byte_per_second(name, k):
    out = []
    for b in (HEAD_CHUNKED + chunk(_ev(name, k, "a ")))[:40]:
        out += [bytes([b]), 1.0]
    return out


def trickle_after_first(name, k):
    rest = chunk(_ev(name, k, "b ")) + _ok_tail(name, k, 2)
    out = [HEAD_CHUNKED, chunk(_ev(name, k, "a "))]
    for b in rest[:40]:
        out += [0.2, bytes([b])]
    return out


def never_ending(name, k):
    out = [HEAD_CHUNKED]
    for _ in range(int(FOREVER_S / 0.1)):
        out += [chunk(_ev(name, k, "x ")), 0.1]
    return out


def crlf_split(name, k):
    """sse-starlette's CRLF line ends, every write cut between the CR and the LF."""
    body = _sse_body(name, k).replace(b"\n", b"\r\n")
    out = [HEAD_CHUNKED]
    for piece in body.split(b"\r\n\r\n")[:-1]:
        out += [chunk(piece + b"\r"), 0.005, chunk(b"\n\r\n"), 0.005]
    return out + [END]


def sse_fields(name, k):
    """Comments (keep-alive pings), event/id/retry fields and a data field without its space."""
    body = (b": ping\n\n" + b"event: message\nid: 1\n" + _ev(name, k, "a ") + b"retry: 100\n\n"
            + b"data:" + orjson.dumps(completion(f"{name}-{k}", "b ", "stop")) + b"\n\n" + b": ping\n\n"
            + event(b"[DONE]"))
    return [HEAD_CHUNKED, chunk(body) + END]


def chunked_edges(name, k):
    """Chunk extensions, upper-case hex with leading zeros, a trailer, one chunk per event
    and several events per chunk."""
    a, b = _ev(name, k, "a "), _ev(name, k, "b ", "stop") + event(b"[DONE]")
    return [HEAD_CHUNKED, b"%X;ext=1;q=\"x\"\r\n%s\r\n" % (len(a), a), 0.01,
            b"000%X\r\n%s\r\n" % (len(b), b), b"0\r\nX-Trailer: 1\r\n\r\n"]


def chunked_split(name, k):
    """Every chunk cut into three writes: inside the size line, the data, and the CRLF."""
    out = [HEAD_CHUNKED]
    for ev in (_ev(name, k, "a "), _ev(name, k, "b ", "stop"), event(b"[DONE]")):
        framed = chunk(ev)
        out += [framed[:1], 0.005, framed[1:len(framed) // 2], 0.005, framed[len(framed) // 2:-1], 0.005,
                framed[-1:], 0.005]
    return out + [END]


def big_chunk(name, k):
    text = "x" * (1 << 20)  # 1 MiB of text in one event, one HTTP chunk: 4x the client's read buffer
    return [HEAD_CHUNKED, chunk(_ev(name, k, text, "length")) + chunk(event(b"[DONE]")) + END]


def utf8_split(name, k):
    ev = _ev(name, k, "h\u00e9\u4e16 ", "stop")
    cut = ev.index("\u4e16".encode()) + 1  # inside the 3-byte character
    return [HEAD_CHUNKED, chunk(ev[:cut]), 0.01, chunk(ev[cut:]), chunk(event(b"[DONE]")) + END]


def invalid_utf8(name, k):
    ev = _ev(name, k, "AB", "stop").replace(b"AB", b"A\xff\xfeB")
    return [HEAD_CHUNKED, chunk(ev + event(b"[DONE]")) + END]


def storm(name, k):
    return _raw(b"HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\n",
                b'{"error": "CUDA out of memory"}')


FAULTS: dict[str, Fault] = {
    "healthy": Fault(healthy, "ok", chunks=HEALTHY_CHUNKS, what="a healthy stream (30 chunks, 20 ms apart)"),
    "no_first_byte": Fault(lambda n, k: [FOREVER_S], "timeout", TTFT, None, "ttft", 0,
                           what="no first byte (request read, nothing sent)"),
    "head_only": Fault(lambda n, k: [HEAD_CHUNKED, FOREVER_S], "timeout", TTFT, 200, "ttft", 0,
                       what="headers, then nothing"),
    "stall_mid": Fault(lambda n, k: _two_then(n, k, FOREVER_S), "timeout", IDLE, 200, "idle", 2,
                       what="a stall mid-stream"),
    "byte_per_second": Fault(byte_per_second, "timeout", TTFT, None, "ttft", 0,
                             what="one byte a second"),
    "trickle_after_first": Fault(trickle_after_first, "timeout", IDLE, 200, "idle", 1,
                                 what="first chunk, then one byte every 0.2 s"),
    "never_ending": Fault(never_ending, "timeout", TOTAL, 200, "total",
                          what="a stream that never ends (a chunk every 0.1 s)"),
    "reset_mid": Fault(lambda n, k: _two_then(n, k, 0.02, RESET), "connection_error", "ConnectionResetError", 200,
                       chunks=2, what="connection reset (RST) mid-stream"),
    "close_mid": Fault(lambda n, k: _two_then(n, k, 0.02, CLOSE), "connection_error", "closed by the server", 200,
                       chunks=2, what="connection closed (FIN) mid-stream"),
    "reset_before_head": Fault(lambda n, k: [RESET], "connection_error", "ConnectionResetError", None, chunks=0,
                               what="connection reset before any byte"),
    "not_http": Fault(lambda n, k: [b"SSH-2.0-OpenSSH_9.6\r\n\r\n"], "invalid_response", "not an HTTP response", None,
                      what="not HTTP at all"),
    "huge_head": Fault(lambda n, k: [b"HTTP/1.1 200 OK\r\nX-Pad: " + b"p" * 70000 + b"\r\n", FOREVER_S],
                       "invalid_response", "headers longer than 64 KiB", None, what="70 KiB of headers, unended"),
    "interim_100": Fault(lambda n, k: [b"HTTP/1.1 100 Continue\r\n\r\n", 0.01, HEAD_CHUNKED,
                                       chunk(_sse_body(n, k)) + END], "ok", chunks=3,
                         what="a 100 Continue before the response"),
    "sse_ndjson": Fault(lambda n, k: [HEAD_CHUNKED, chunk(b"".join(orjson.dumps(completion(f"{n}-{k}", "a")) + b"\n"
                                                                   for _ in range(3))) + END],
                        "invalid_response", "no SSE data event", what="JSON lines instead of SSE (no data: fields)"),
    "sse_no_blank_line": Fault(lambda n, k: [HEAD_CHUNKED, chunk(_sse_body(n, k).replace(b"\n\n", b"\n")) + END],
                               "invalid_response", "stream ended inside an event",
                               what="SSE events not separated by a blank line"),
    "sse_crlf_split": Fault(crlf_split, "ok", chunks=3, what="CRLF line ends, cut between CR and LF"),
    "sse_fields": Fault(sse_fields, "ok", chunks=2, what="comments, event/id/retry fields, data: without a space"),
    "malformed_json": Fault(lambda n, k: [HEAD_CHUNKED, chunk(_ev(n, k, "a ") + b"data: {not json\n\n") + END],
                            "invalid_response", "JSONDecodeError", chunks=1, what="malformed JSON in an event"),
    "json_not_object": Fault(lambda n, k: [HEAD_CHUNKED, chunk(b"data: [1, 2]\n\n") + END], "invalid_response",
                             "not a JSON object", what="an event that is JSON but not an object"),
    "json_wrong_types": Fault(lambda n, k: [HEAD_CHUNKED, chunk(event({"id": 7, "choices": [
        {"index": 0, "text": 5, "finish_reason": 3}], "usage": {"completion_tokens": "many"}})) + END],
        "invalid_response", "not the type the API gives it",
        what="fields of the wrong type (id, text, finish_reason, usage)"),
    "error_event": Fault(lambda n, k: [HEAD_CHUNKED, chunk(_ev(n, k, "a ") + event(
        {"error": {"message": "model crashed", "code": 500}})) + END], "invalid_response", "model crashed", chunks=1,
        what="an error event mid-stream"),
    "json_content_type": Fault(lambda n, k: _raw(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n",
                                                 orjson.dumps(completion(f"{n}-{k}", "whole answer", "stop"))),
                               "invalid_response", "application/json",
                               what="wrong content type: a non-streamed JSON answer"),
    "html_content_type": Fault(lambda n, k: _raw(b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n",
                                                 b"<html><body>gateway login</body></html>"),
                               "invalid_response", "text/html", what="wrong content type: an HTML page"),
    "http10_close": Fault(lambda n, k: [b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n",
                                        _sse_body(n, k), 0.01, CLOSE], "ok", chunks=3,
                          what="HTTP/1.0, body delimited by the close"),
    "http11_close": Fault(lambda n, k: [b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                                        b"Connection: close\r\n\r\n",
                                        _sse_body(n, k), 0.01, CLOSE], "ok", chunks=3,
                          what="HTTP/1.1 without length or chunking (close-delimited)"),
    "chunked_edges": Fault(chunked_edges, "ok", chunks=2,
                           what="chunk extensions, upper-case hex, leading zeros, a trailer"),
    "chunked_split": Fault(chunked_split, "ok", chunks=2, what="every chunk cut inside its size line, data and CRLF"),
    "chunked_bad_size": Fault(lambda n, k: [HEAD_CHUNKED, b"zz\r\nhello\r\n"], "invalid_response", "bad chunk size",
                              what="a chunk size that is not hex"),
    "chunked_no_crlf": Fault(lambda n, k: [HEAD_CHUNKED, b"5\r\nhelloXX"], "invalid_response", "missing CRLF",
                             what="chunk data not followed by CRLF"),
    "junk_after_end": Fault(lambda n, k: [HEAD_CHUNKED, chunk(_sse_body(n, k)) + END + b"garbage"], "ok", chunks=3,
                            what="bytes after the end of a complete chunked body"),
    "big_chunk": Fault(big_chunk, "ok", chunks=1, what="one 1 MiB event in one chunk (4x the read buffer)"),
    "utf8_split": Fault(utf8_split, "ok", chunks=1, what="a UTF-8 character cut between two chunks"),
    "invalid_utf8": Fault(invalid_utf8, "invalid_response", "UTF-8", what="invalid UTF-8 in an event"),
    "no_done": Fault(lambda n, k: [HEAD_CHUNKED, chunk(_ev(n, k, "a ") + _ev(n, k, "b ", "stop")) + END], "ok",
                     chunks=2, what="no [DONE] (finish_reason given)"),
    "no_done_no_finish": Fault(lambda n, k: [HEAD_CHUNKED, chunk(_ev(n, k, "a ")) + END], "truncated",
                               "before a finish_reason or [DONE]", chunks=1,
                               what="neither [DONE] nor finish_reason, body ended cleanly"),
    "double_done": Fault(lambda n, k: [HEAD_CHUNKED, chunk(_sse_body(n, k) + event(b"[DONE]")) + END], "ok",
                         chunks=3, what="[DONE] twice"),
    "done_then_hang": Fault(lambda n, k: [HEAD_CHUNKED, chunk(_sse_body(n, k)), FOREVER_S], "ok", chunks=3,
                            what="[DONE], then the body never ends"),
    "http429": Fault(lambda n, k: _raw(b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 7\r\n",
                                       b'{"error": "rate limited"}'), "http_error", "Retry-After: 7", 429,
                     what="429 with Retry-After"),
    "http503": Fault(lambda n, k: _raw(b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 2\r\nConnection: close\r\n",
                                       b"overloaded"), "http_error", "Retry-After: 2", 503,
                     what="503 with Retry-After, connection closed"),
    "http500": Fault(storm, "http_error", "HTTP 500: {\"error\": \"CUDA out of memory\"}", 500,
                     what="a 500 storm (20 at once)"),
}
STORM = 20  # how many http500 requests are sent at once


def fault_script(order: list[str] | None = None):
    """The server's script: each request gets the fault its prompt names, else ``order[k % len]``."""
    def script(body, k):
        prompt = body.get("prompt") or (body.get("messages") or [{}])[-1].get("content") or ""
        name = prompt[len("fault="):] if prompt.startswith("fault=") else order[k % len(order)]
        return FAULTS[name].steps(name, k)
    return script
