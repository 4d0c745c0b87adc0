"""One response of an OpenAI-compatible streaming route, event by event, into its record.

The transport hands over body bytes with the time they arrived; this module cuts them into
server-sent events (``sse``) and reads each JSON event: the response ``id``, output text
(``choices[0].text`` or ``delta.content``, ``delta.reasoning`` / ``delta.reasoning_content``, or
``delta.tool_calls``), ``finish_reason``,
``usage`` (per chunk with ``continuous_usage_stats``, else in the final event; with its
``prompt_tokens_details.cached_tokens``, the prompt tokens served from the prefix cache) and error
events.  A chunk counts as output only when it carries text: a role-only or empty chunk is
not an output chunk (TTFT's definition).  Per output chunk the record keeps its time, its
text and the cumulative ``usage.completion_tokens`` it carried (-1: none); how many tokens
each chunk carried is decided from these in ``metrics.token_attribution``.

Each output chunk also gets a kind (``chunk_kind``): ``reasoning`` (``delta.reasoning``, vLLM >=
0.11's name, or the older ``delta.reasoning_content``; a server that sends both with the same text
is read once, ``reasoning`` first), ``tool_call`` (``delta.tool_calls``: the function names and
argument fragments are its text; it is output, so it counts for TTFT) or ``answer`` (``content``,
or the completions API's ``text``, which never separates reasoning).  A delta that carries several
kinds at once (vLLM's reasoning parser at ``</think>`` when several tokens arrive together: the
reasoning's end and the answer's start; content beside a tool call's first fragment) keeps every
one: its text is theirs joined in the order reasoning, answer, tool call, and its kind the tuple of
its ``(kind, text)`` parts in that order (``metrics.token_attribution.tokens_by_kind`` shares its
tokens between them).  ``first_answer_ns`` is the first chunk that carries anything but reasoning;
``first_token_ns`` the first of any kind.  The whole text, every kind joined, is the record's
``text`` (the next turn's assistant message) and what the client's tokenizer counts.
"""

from __future__ import annotations

import orjson

from loadgen.client.sse import SSEDecoder
from loadgen.records import RequestRecord

NO_USAGE = -1
# chunk kinds (RequestRecord.chunk_kind; the same strings in metrics.token_attribution)
ANSWER, REASONING, TOOL_CALL = "answer", "reasoning", "tool_call"


def _wrong(what: str, value) -> ValueError:
    """A field of the wrong type, named (it would otherwise reach requests.parquet's typed
    columns and break the file, or the text join at the end)."""
    return ValueError(f"{what} is {type(value).__name__} {str(value)[:80]!r}, not the type the API gives it")


class OpenAIStream:
    __slots__ = ("rec", "sse", "saw_done", "events", "first_bytes", "worker_said")

    def __init__(self, rec: RequestRecord):
        self.rec = rec
        self.sse = SSEDecoder()
        self.saw_done = False
        self.events = 0          # data events seen (none: the body is not an SSE stream)
        self.first_bytes = b""   # the body's start, for the error when it is not an SSE stream
        self.worker_said: str | None = None  # Dynamo's nvext.worker_id: the worker that served it

    def feed(self, data: bytes, now: int) -> None:
        """Body bytes received at ``now``; every event they complete gets that time."""
        if not self.events and len(self.first_bytes) < 200:
            self.first_bytes += data[:200]
        for ev in self.sse.feed(data):
            self.events += 1
            self._event(ev, now)

    def _event(self, ev: bytes, now: int) -> None:
        # Types are checked inline, on the hot path only as a class comparison.
        rec = self.rec
        if ev == b"[DONE]":
            self.saw_done = True
            return
        obj = orjson.loads(ev)
        if obj.__class__ is not dict:
            raise ValueError(f"event is not a JSON object: {ev[:200]!r}")
        if rec.response_id is None and obj.get("id") is not None:
            rec.response_id = str(obj["id"])
        choices = obj.get("choices")
        if self.worker_said is None and "nvext" in obj:
            self.worker_said = _worker_id(obj["nvext"])
        if "error" in obj and not choices:
            raise ValueError(f"error event in stream: {str(obj['error'])[:500]}")
        usage = obj.get("usage")
        cum = None
        if usage:
            if usage.__class__ is not dict:
                raise _wrong("usage", usage)
            pt, cum = usage.get("prompt_tokens"), usage.get("completion_tokens")
            if pt is not None:
                if pt.__class__ is not int:
                    raise _wrong("usage.prompt_tokens", pt)
                rec.usage_prompt_tokens = pt
            if cum is not None:
                if cum.__class__ is not int:
                    raise _wrong("usage.completion_tokens", cum)
                rec.usage_completion_tokens = cum
            details = usage.get("prompt_tokens_details")
            if details:  # vLLM (--enable-prompt-tokens-details), SGLang (--enable-cache-report), Dynamo
                if details.__class__ is not dict:
                    raise _wrong("usage.prompt_tokens_details", details)
                cached = details.get("cached_tokens")
                if cached is not None:
                    if cached.__class__ is not int:
                        raise _wrong("usage.prompt_tokens_details.cached_tokens", cached)
                    rec.cached_tokens = cached
        if not choices:
            return
        if choices.__class__ is not list:
            raise _wrong("choices", choices)
        c0 = choices[0]
        if c0.__class__ is not dict:
            raise _wrong("choices[0]", c0)
        delta = c0.get("delta")
        if delta is not None:
            if delta.__class__ is not dict:
                raise _wrong("choices[0].delta", delta)
            text, kind, what = delta.get("content"), ANSWER, "choices[0].delta.content"
            if "reasoning" in delta or "reasoning_content" in delta or "tool_calls" in delta:
                text, kind = _delta_parts(delta, text)
        else:
            text, kind, what = c0.get("text"), ANSWER, "choices[0].text"
        if text and text.__class__ is not str:
            raise _wrong(what, text)
        fr = c0.get("finish_reason")
        if fr and fr.__class__ is not str:
            raise _wrong("choices[0].finish_reason", fr)
        if text:
            rec.chunk_ns.append(now)
            rec.chunk_text.append(text)
            rec.chunk_usage.append(NO_USAGE if cum is None else cum)
            rec.chunk_kind.append(kind)
            if rec.first_token_ns is None:
                rec.first_token_ns = now
            if rec.first_answer_ns is None and kind != REASONING:
                rec.first_answer_ns = now
            rec.end_ns = now
        if fr:
            rec.finish_reason = fr

    def not_sse(self, content_type: str | None) -> str | None:
        """Why the body is not an SSE stream, when no event came at all (else None)."""
        if self.events or b"data:" in self.first_bytes:  # (data lines never closed by a blank line: unfinished)
            return None
        return (f"the body is not a server-sent event stream (no SSE data event; Content-Type: "
                f"{content_type or 'none'}): {self.first_bytes[:200]!r}")

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


def _delta_parts(delta: dict, content) -> tuple[str | None, str | tuple]:
    """A delta's output text and kind: one kind's text and its name, or, where it carries several
    (module doc), their texts joined and the tuple of its ``(kind, text)`` parts."""
    parts = []
    for kind, what, text in ((REASONING, "choices[0].delta.reasoning",
                              delta.get("reasoning") or delta.get("reasoning_content")),
                             (ANSWER, "choices[0].delta.content", content)):
        if text:
            if text.__class__ is not str:
                raise _wrong(what, text)
            parts.append((kind, text))
    if delta.get("tool_calls"):
        text = _tool_text(delta["tool_calls"])
        if text:
            parts.append((TOOL_CALL, text))
    if len(parts) > 1:
        return "".join(text for _, text in parts), tuple(parts)
    return (parts[0][1], parts[0][0]) if parts else (None, ANSWER)


def _tool_text(calls) -> str:
    """A ``delta.tool_calls`` fragment's text: each call's function name and arguments piece."""
    if calls.__class__ is not list:
        raise _wrong("choices[0].delta.tool_calls", calls)
    parts = []
    for c in calls:
        fn = c.get("function") if c.__class__ is dict else None
        if fn.__class__ is not dict:
            continue  # a fragment without a function part (only its index or id): no text
        for key in ("name", "arguments"):
            v = fn.get(key)
            if v:
                if v.__class__ is not str:
                    raise _wrong(f"choices[0].delta.tool_calls[].function.{key}", v)
                parts.append(v)
    return "".join(parts)


def _worker_id(nvext) -> str | None:
    """The worker Dynamo's frontend says served the request (``nvext.worker_id``, asked for with
    ``nvext.extra_fields=["worker_id"]``): its decode worker (the prefill one where none decodes)."""
    wid = nvext.get("worker_id") if nvext.__class__ is dict else None
    if wid.__class__ is not dict:
        return None
    said = wid.get("decode_worker_id", wid.get("prefill_worker_id"))
    return None if said is None else str(said)


def finish_text(rec: RequestRecord) -> None:
    """The generated text, whole (kept in memory for multi-turn prompts, not written)."""
    rec.text = "".join(rec.chunk_text)
