"""Server-sent events framing for OpenAI-style streams, on raw bytes.

The client timestamps each network read before it calls ``feed``; every ``data:`` payload
completed by that read is returned with it, so events coalesced into one read share the
read's time and an event split across reads gets the time of the read that completed it.
"""

from __future__ import annotations


class SSEDecoder:
    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, data: bytes) -> list[bytes]:
        """Return the ``data:`` payloads of the events completed by ``data`` (without the prefix)."""
        buf = self._buf + data if self._buf else data
        if b"\r" in buf:
            buf = buf.replace(b"\r\n", b"\n")
        events = buf.split(b"\n\n")
        self._buf = events.pop()
        out = []
        for ev in events:
            # The common case, one ``data: `` line per event, without the general loop.
            if ev[:6] == b"data: " and b"\n" not in ev:
                out.append(ev[6:])
                continue
            payload = None
            for line in ev.split(b"\n"):
                if line.startswith(b"data:"):
                    piece = line[5:].lstrip(b" ")
                    # Multi-line data fields join with newlines (SSE spec).
                    payload = piece if payload is None else payload + b"\n" + piece
            if payload is not None:
                out.append(payload)
        return out

    def tail(self) -> bytes:
        """Bytes of an event the stream never finished (for truncation reports)."""
        return self._buf
