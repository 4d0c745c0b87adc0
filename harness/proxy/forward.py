"""A caller's stream: the upstream's body bytes written to the caller as they are read.

Only whole server-sent events are passed on (a piece is cut after its last blank line, the
rest waits for the next read), so a stream that has to be continued elsewhere never leaves
the caller holding half an event.  Until the first event the pieces are held: the caller's
response has not started, so a candidate that fails before its first token is replaced by
the incumbent without the caller seeing anything.  Once the response has started, pieces are
written straight to the caller's socket from the upstream connection's read callback (as
HTTP chunks; aiohttp sent the headers with the first one), not through another task, so a
chunk waits for no other part of the event loop.

``Splice`` continues a candidate stream that broke after its first event: the request is run
again on the incumbent and its output is passed on from the character where the candidate's
stopped (the same text under greedy decoding when the two agree; usage is the incumbent's,
for the whole output).
"""

from __future__ import annotations

import asyncio

import orjson

from loadgen.client.sse import SSEDecoder


def event_boundary(data: bytes) -> int:
    """Length of the prefix of ``data`` made of whole events (ending in a blank line)."""
    if data.endswith(b"\n\n"):
        return len(data)
    i = data.rfind(b"\n\n")
    j = data.rfind(b"\r\n\r\n")
    return max(i + 2 if i >= 0 else 0, j + 4 if j >= 0 else 0)


class Forward:
    __slots__ = ("pending", "waiter", "direct", "tail", "transport", "closed", "events_out", "on_closed")

    def __init__(self) -> None:
        self.pending: list[bytes] = []
        self.waiter: asyncio.Future | None = None
        self.direct = False
        self.tail = b""
        self.transport = None
        self.closed = False          # the caller went away
        self.events_out = 0          # pieces passed on (held or written)
        self.on_closed = None        # called once when the caller is found gone

    def sink(self, data: bytes) -> None:
        if self.tail:
            data = self.tail + data
        cut = event_boundary(data)
        if cut < len(data):
            self.tail = data[cut:]
            data = data[:cut]
        else:
            self.tail = b""
        if not data:
            return
        self.events_out += 1
        if self.direct:
            self.write(data)
            return
        self.pending.append(data)
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    def write(self, data: bytes) -> None:
        t = self.transport
        if t is None or t.is_closing():
            if not self.closed:
                self.closed = True
                if self.on_closed is not None:  # later: we are inside the upstream connection's parsing
                    asyncio.get_running_loop().call_soon(self.on_closed)
            return
        t.write(b"%x\r\n%s\r\n" % (len(data), data))

    def go_direct(self, transport) -> None:
        """The response has started: write what is held, then every later piece as it comes."""
        self.transport = transport
        self.direct = True
        if self.pending:
            data, self.pending = b"".join(self.pending), []
            self.write(data)


class Splice:
    """Passes the incumbent's events on from character ``skip`` of its output (module doc)."""

    __slots__ = ("fwd", "skip", "sse")

    def __init__(self, fwd: Forward, skip: int):
        self.fwd, self.skip, self.sse = fwd, skip, SSEDecoder()

    def sink(self, data: bytes) -> None:
        out = []
        for ev in self.sse.feed(data):
            if ev == b"[DONE]" or self.skip <= 0:
                out.append(b"data: " + ev + b"\n\n")
                continue
            try:
                obj = orjson.loads(ev)
            except orjson.JSONDecodeError:
                continue
            choices = obj.get("choices") or []
            c0 = choices[0] if choices else None
            if c0 is None:
                out.append(b"data: " + ev + b"\n\n")
                continue
            delta = c0.get("delta")
            holder, key = (delta, "content") if delta is not None else (c0, "text")
            text = holder.get(key) or ""
            if text:
                cut = min(self.skip, len(text))
                self.skip -= cut
                holder[key] = text[cut:]
                if not holder[key] and not c0.get("finish_reason") and not obj.get("usage"):
                    continue  # all of it was delivered by the candidate already
            out.append(b"data: " + orjson.dumps(obj) + b"\n\n")
        if out:
            self.fwd.sink(b"".join(out))
