"""The ``proxy`` group: ``tokenfactory proxy`` between an incumbent and a candidate endpoint."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from conf.schema.client import ClientTimeouts
from conf.schema.rules import checked

PROXY_MODES = ("shadow", "canary", "rollback")


@dataclass
class Proxy:
    """``tokenfactory proxy`` (harness/proxy/): an OpenAI-compatible streaming proxy in front of
    an incumbent and a candidate endpoint."""
    incumbent: Optional[str] = None           # http(s)://HOST:PORT of the incumbent
    candidate: Optional[str] = None
    # shadow: copies to the candidate; canary: a share of callers on it; rollback: all on the incumbent
    mode: str = checked("shadow", choices=PROXY_MODES)
    canary_share: float = checked(0.05, ge=0, le=1)  # canary: the candidate's share of callers (sticky)
    mirror: float = checked(0.0, ge=0, le=1)  # canary: share of candidate-served requests also run on the incumbent
    sticky: str = checked("session", choices=("session", "api_key", "none"))  # what keeps a caller on one side
    salt: str = "tokenfactory"                # the canary split's hash salt
    host: str = "127.0.0.1"
    port: int = checked(8080, ge=0, le=65535)  # 0: a free port (printed)
    incumbent_model: Optional[str] = None     # model name sent to each side (default: the caller's)
    candidate_model: Optional[str] = None
    incumbent_api_key_env: Optional[str] = None
    candidate_api_key_env: Optional[str] = None
    compare: str = checked("greedy", choices=("greedy", "all", "off"))  # whose outputs are compared
    prewarm: int = checked(16, ge=0)          # idle upstream connections kept per side
    timeouts: ClientTimeouts = field(default_factory=ClientTimeouts)
    # the proxy's process (harness/proxy/runtime.py): CPU list ("1", "2-3"), nice value, or
    # SCHED_FIFO priority (1-99; needs CAP_SYS_NICE) so it never waits out another process's slice
    cpus: Optional[str] = None
    nice: Optional[int] = checked(None, ge=-20, le=19)
    realtime: Optional[int] = checked(None, ge=1, le=99)

