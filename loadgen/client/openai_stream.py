"""One response of an OpenAI-compatible streaming route, event by event, into its record.

The transport hands over body bytes with the time they arrived; this module cuts them into
server-sent events (``sse``) and reads each JSON event: the response ``id``, output text
(``choices[0].text`` or ``delta.content``/``reasoning_content``), ``finish_reason``,
``usage`` (per chunk with ``continuous_usage_stats``, else in the final event) and error
events.  A chunk counts as output only when it carries text: a role-only or empty chunk is
not an output chunk (TTFT's definition).  Per output chunk the record keeps its time, its
text and the cumulative ``usage.completion_tokens`` it carried (-1: none); how many tokens
each chunk carried is decided from these in ``metrics.token_attribution``.
"""

from __future__ import annotations

import orjson

from loadgen.client.sse import SSEDecoder
from loadgen.records import RequestRecord

NO_USAGE = -1


class OpenAIStream:
    __slots__ = ("rec", "sse", "saw_done")

    def __init__(self, rec: RequestRecord):
        self.rec = rec
        self.sse = SSEDecoder()
        self.saw_done = False

    def feed(self, data: bytes, now: int) -> None:
        """Body bytes received at ``now``; every event they complete gets that time."""
        for ev in self.sse.feed(data):
            self._event(ev, now)

    def _event(self, ev: bytes, now: int) -> None:
        rec = self.rec
        if ev == b"[DONE]":
            self.saw_done = True
            return
        obj = orjson.loads(ev)
        if rec.response_id is None:
            rec.response_id = obj.get("id")
        choices = obj.get("choices")
        if "error" in obj and not choices:
            raise ValueError(f"error event in stream: {str(obj['error'])[:500]}")
        usage = obj.get("usage")
        if usage:
            rec.usage_prompt_tokens = usage.get("prompt_tokens", rec.usage_prompt_tokens)
            rec.usage_completion_tokens = usage.get("completion_tokens", rec.usage_completion_tokens)
        if not choices:
            return
        c0 = choices[0]
        delta = c0.get("delta")
        if delta is not None:
            text = delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning")
        else:
            text = c0.get("text")
        if text:
            rec.chunk_ns.append(now)
            rec.chunk_text.append(text)
            cum = usage.get("completion_tokens") if usage else None
            rec.chunk_usage.append(NO_USAGE if cum is None else int(cum))
            if rec.first_token_ns is None:
                rec.first_token_ns = now
            rec.end_ns = now
        fr = c0.get("finish_reason")
        if fr:
            rec.finish_reason = fr

    def unfinished(self) -> bytes:
        """Bytes of an event the stream never completed (empty when it ended cleanly)."""
        return b"" if self.saw_done else self.sse.tail().strip()

    def outcome(self) -> tuple[str, str | None]:
        """Status of a response whose body ended cleanly: ``ok``, or why not."""
        rec = self.rec
        if not rec.chunk_ns:
            if rec.usage_completion_tokens:  # generated, but none of it decoded to text on the way
                return "invalid_response", (
                    f"the stream carried no output text although usage.completion_tokens={rec.usage_completion_tokens}"
                    " (tokens whose text is empty on its own, e.g. special tokens or pieces of an unfinished "
                    "UTF-8 character, which the server sends as nothing)")
            return "invalid_response", "the stream carried no output token"
        if not (self.saw_done or rec.finish_reason):
            return "truncated", "stream closed before a finish_reason or [DONE]"
        return "ok", None


def finish_text(rec: RequestRecord) -> None:
    """The generated text, whole (kept in memory for multi-turn prompts, not written)."""
    rec.text = "".join(rec.chunk_text)
