"""The ``router`` group: the router process in front of a deployment's replicas."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import List, Optional

from conf.schema.rules import checked


@dataclass
class Router:
    """The router in front of the replicas (engines/routers.py): a real process from its PyPI
    package (vllm-router, sglang-router); `none` for a single engine."""
    name: str = checked("none", choices=("none", "vllm", "sglang"))
    policy: Optional[str] = None              # the router's own policy name (its --policy); null: its default
    host: str = "127.0.0.1"
    port: Optional[int] = checked(None, ge=1, le=65535)  # null: a free port
    binary: Optional[str] = None              # the router's executable; null: next to this Python, else on PATH
    extra_args: List[str] = field(default_factory=list)  # flags appended to the router's command
    startup_timeout_s: float = checked(60.0, gt=0)
