"""What a workload hands the load generator: one ``WorkItem`` per request."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(slots=True)
class WorkItem:
    request_id: str
    prompt: str | list  # text for /v1/completions, messages for /v1/chat/completions
    prompt_tokens: int  # expected prompt tokens under the served model's tokenizer
    max_tokens: int
    arrival_s: float | None = None  # offset from the start of the load, when the workload fixes it (traces)
    session_id: str | None = None
    turn: int = 0
    model: str | None = None  # a LoRA adapter's name sent as the request's model (None: the engine's model)
    # a call of a task (loadgen.workloads.tasks): the record's task columns, the sink's success
    # rule, and the task's other roots (sent at the same time as this, its first root)
    task_id: str | None = None
    node: str | None = None
    parents: tuple = ()
    attempt: int = 0
    tool_s: float | None = None
    task_calls: int | None = None
    check: Callable | None = None
    companions: list = field(default_factory=list)
