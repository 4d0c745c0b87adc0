"""HTTP/1.1 response framing for the streaming client: status line, headers, body framing.

Small on purpose: the client only needs the status, whether the connection may be reused
and the body bytes (de-chunked) as they arrive, so that it can timestamp every read itself
before any parsing instead of after a library's buffering and task switches.
"""

from __future__ import annotations


class HTTPFramingError(ValueError):
    pass


class ResponseHead:
    __slots__ = ("status", "reason", "headers", "keep_alive", "mode", "length")

    def __init__(self, status: int, reason: str, headers: dict[str, str], keep_alive: bool, mode: str, length: int):
        self.status = status
        self.reason = reason
        self.headers = headers
        self.keep_alive = keep_alive
        self.mode = mode      # chunked | length | close (body runs until the server closes)
        self.length = length  # for mode == length


def parse_head(head: bytes) -> ResponseHead:
    """Parse the status line and headers (``head`` excludes the blank line)."""
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if len(parts) < 2 or not parts[0].startswith("HTTP/"):
        raise HTTPFramingError(f"not an HTTP response: {lines[0][:100]!r}")
    try:
        status = int(parts[1])
    except ValueError:
        raise HTTPFramingError(f"bad HTTP status line: {lines[0][:100]!r}") from None
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep:
            raise HTTPFramingError(f"bad HTTP header line: {line[:100]!r}")
        name = name.strip().lower()
        value = value.strip()
        headers[name] = headers[name] + ", " + value if name in headers else value
    conn = headers.get("connection", "").lower()
    keep_alive = ("close" not in conn) if parts[0] != "HTTP/1.0" else ("keep-alive" in conn)
    te = headers.get("transfer-encoding", "").lower()
    if "chunked" in te:
        mode, length = "chunked", 0
    elif "content-length" in headers:
        try:
            length = int(headers["content-length"])
        except ValueError:
            raise HTTPFramingError(f"bad Content-Length: {headers['content-length']!r}") from None
        mode = "length"
    elif status in (204, 304) or 100 <= status < 200:
        mode, length = "length", 0
    else:
        mode, length, keep_alive = "close", 0, False
    return ResponseHead(status, parts[2] if len(parts) > 2 else "", headers, keep_alive, mode, length)


class ChunkedDecoder:
    """Incremental ``Transfer-Encoding: chunked`` decoder: bytes in, body pieces out."""

    __slots__ = ("_buf", "_left", "_state", "done", "extra")

    def __init__(self) -> None:
        self._buf = b""
        self._left = 0        # bytes of chunk data still to come
        self._state = 0       # 0: size line next, 1: chunk data, 2: CRLF after data, 3: trailers
        self.done = False
        self.extra = 0        # bytes after the end of the body: the connection's framing is lost

    def feed(self, data: bytes, out: list) -> None:
        """Append the body pieces completed by ``data`` to ``out``; sets ``done`` at the end."""
        if not self._buf and self._state == 0:
            # The common read: exactly one whole chunk (a server writes one event per chunk).
            i = data.find(b"\r\n")
            if 0 < i < 16:
                try:
                    size = int(data[:i], 16)
                except ValueError:
                    size = -1
                if size > 0 and len(data) == i + size + 4 and data[-2:] == b"\r\n":
                    out.append(data[i + 2:-2])
                    return
        buf = self._buf + data if self._buf else data
        pos = 0
        n = len(buf)
        state = self._state
        while pos < n:
            if state == 1:
                take = n - pos if n - pos < self._left else self._left
                out.append(buf[pos:pos + take] if (pos or take != n) else buf)
                pos += take
                self._left -= take
                if self._left:
                    break
                state = 2
            elif state == 2:
                if n - pos < 2:
                    break
                if buf[pos:pos + 2] != b"\r\n":
                    raise HTTPFramingError("chunked body: missing CRLF after chunk data")
                pos += 2
                state = 0
            elif state == 0:
                i = buf.find(b"\r\n", pos)
                if i < 0:
                    if n - pos > 1024:
                        raise HTTPFramingError("chunked body: chunk size line too long")
                    break
                try:
                    size = int(buf[pos:i].split(b";", 1)[0], 16)
                except ValueError:
                    raise HTTPFramingError(f"chunked body: bad chunk size {buf[pos:i][:40]!r}") from None
                pos = i + 2
                if size == 0:
                    state = 3
                else:
                    self._left = size
                    state = 1
            else:  # trailers: lines until an empty one
                i = buf.find(b"\r\n", pos)
                if i < 0:
                    break
                empty = i == pos
                pos = i + 2
                if empty:
                    self.done = True
                    break
        self._state = state
        self._buf = buf[pos:] if pos < n else b""
        if self.done and self._buf:
            # The body itself is complete; what follows belongs to no response (the caller
            # must not reuse the connection).
            self.extra, self._buf = len(self._buf), b""
