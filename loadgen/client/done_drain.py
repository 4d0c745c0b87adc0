"""The connection's part after ``[DONE]``: the request is over, the body's end still to come.

The request's record ends at ``[DONE]`` and its caller goes on; the connection takes the
body's tail in the background, then goes back to the pool, or is closed when the tail is
overdue or its framing breaks.  A mixin of ``transport``'s connection: the state it reads
(``head``, ``chunked``, ``body_left``, ``junk``, ``draining``, ``timer``) is the connection's.
"""

from __future__ import annotations

import time

perf_ns = time.perf_counter_ns
# The request is over at [DONE]: its record ends there and its caller goes on (a closed-loop
# user sends its next request at once).  The connection takes the body's end in the
# background and then goes back to the pool; a server that keeps the body open after [DONE]
# (keep-alive pings, a proxy's buffering) gets this long (at most idle_s), then the
# connection is closed, instead of an idle timeout.
DONE_GRACE_S = 1.0


class DoneDrain:
    """What a keep-alive connection does between ``[DONE]`` and the body's end."""

    def _over_at_done(self) -> None:
        """[DONE] came before the body's end: the request is over now.  Its record is finished and
        its future resolved; the connection keeps the body's framing and takes the rest (the
        terminating chunk) in ``_drain_tail``, then rejoins the pool, or is closed after the grace."""
        head, chunked, body_left, junk = self.head, self.chunked, self.body_left, self.junk
        self._finish(None, None, reusable=False, drain=True)
        if self.closed:
            return
        self.draining = True
        self.head, self.chunked, self.body_left, self.junk = head, chunked, body_left, junk
        grace = min(DONE_GRACE_S, self.client.cfg.timeouts.idle_s)
        self.timer = self.client.loop.call_later(grace, self._tail_overdue)

    def _drain_tail(self, data: bytes) -> None:
        """Bytes after [DONE]: the body's end (the pool takes the connection back) or more of it."""
        head = self.head
        if head.mode == "chunked":
            self.chunked.feed(data, [])
            done, junk = self.chunked.done, bool(self.chunked.extra)
        elif head.mode == "length":
            junk = len(data) > self.body_left
            self.body_left = max(self.body_left - len(data), 0)
            done = self.body_left == 0
        else:  # the body ends with the connection (connection_lost)
            return
        if done:
            self._cancel_timer()
            self.draining = False
            reusable = head.keep_alive and not junk and not self.junk
            self._clear()
            self._to_pool(reusable, perf_ns())

    def _tail_overdue(self) -> None:
        """The body did not end within the grace after [DONE] (or its framing broke): the
        connection is not reused."""
        self._cancel_timer()
        if self.draining:
            self.draining = False
            self._clear()
            self._to_pool(False, perf_ns())

    def _to_pool(self, reusable: bool, now: int) -> None:
        if reusable and not self.closed:
            self.reused = True
            self.idle_since = now
            self.client._idle.append(self)
        elif not self.closed:
            self.closed = True
            self.transport.close()
