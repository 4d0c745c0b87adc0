"""HTTP chunked framing and SSE decoding on raw bytes, at every split point."""

from __future__ import annotations

import pytest

from loadgen.client.http1 import ChunkedDecoder, HTTPFramingError, parse_head
from loadgen.client.sse import SSEDecoder


def _dechunk(data: bytes, cuts) -> tuple[bytes, bool]:
    d = ChunkedDecoder()
    out: list[bytes] = []
    prev = 0
    for c in list(cuts) + [len(data)]:
        d.feed(data[prev:c], out)
        prev = c
    return b"".join(out), d.done


def test_chunked_body_survives_every_single_split():
    body = b"data: {\"a\": 1}\n\n", b"data: [DONE]\n\n"
    wire = b"".join(b"%x;ext=1\r\n%s\r\n" % (len(p), p) for p in body) + b"0\r\nX-Trailer: 1\r\n\r\n"
    for cut in range(1, len(wire)):
        got, done = _dechunk(wire, [cut])
        assert got == b"".join(body) and done, cut
    got, done = _dechunk(wire, range(1, len(wire)))  # one byte per read
    assert got == b"".join(body) and done


def test_chunked_errors_are_clear():
    with pytest.raises(HTTPFramingError, match="bad chunk size"):
        _dechunk(b"zz\r\nabc\r\n", [])
    with pytest.raises(HTTPFramingError, match="missing CRLF"):
        _dechunk(b"3\r\nabcXX", [])
    d = ChunkedDecoder()  # a complete body with bytes after it: done, and the extra bytes counted
    out: list[bytes] = []
    d.feed(b"3\r\nabc\r\n0\r\n\r\nextra", out)
    assert (b"".join(out), d.done, d.extra) == (b"abc", True, 5)
    assert _dechunk(b"3\r\nabc\r\n", []) == (b"abc", False)  # incomplete: not done


def test_parse_head_modes():
    h = parse_head(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Type: text/event-stream")
    assert (h.status, h.mode, h.keep_alive) == (200, "chunked", True)
    h = parse_head(b"HTTP/1.1 404 Not Found\r\nContent-Length: 12\r\nConnection: close")
    assert (h.status, h.mode, h.length, h.keep_alive) == (404, "length", 12, False)
    h = parse_head(b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream")
    assert (h.mode, h.keep_alive) == ("close", False)
    with pytest.raises(HTTPFramingError, match="not an HTTP response"):
        parse_head(b"SSH-2.0")


def test_sse_coalesced_split_crlf_and_multiline():
    d = SSEDecoder()
    # Two events in one read.
    assert d.feed(b"data: {\"x\":1}\n\ndata: {\"x\":2}\n\n") == [b"{\"x\":1}", b"{\"x\":2}"]
    # One event split over three reads: only the completing read returns it.
    assert d.feed(b"data: {\"x\"") == []
    assert d.feed(b":3}\n") == []
    assert d.feed(b"\n") == [b"{\"x\":3}"]
    # CRLF line ends, comments, an id line and a multi-line data field.
    assert d.feed(b": keepalive\r\n\r\nid: 7\r\ndata: a\r\ndata: b\r\n\r\n") == [b"a\nb"]
    assert d.feed(b"data: tail") == [] and d.tail() == b"data: tail"
