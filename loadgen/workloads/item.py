"""What a workload hands the load generator: one ``WorkItem`` per request."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class WorkItem:
    request_id: str
    prompt: str | list  # text for /v1/completions, messages for /v1/chat/completions
    prompt_tokens: int  # expected prompt tokens under the served model's tokenizer
    max_tokens: int
    arrival_s: float | None = None  # offset from the start of the load, when the workload fixes it (traces)
    session_id: str | None = None
    turn: int = 0
