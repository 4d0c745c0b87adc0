"""The over-saturation rule (``loadgen.saturation``) wired to an open loop's sends: what each
request waited (``sent``, ``ended``) and, every window, the stage where a backlog waits
(``until_saturated``), until the rule trips; the dispatcher then stops sending and cuts the
backlog (``loadgen.dispatch``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from loadgen.records import RequestRecord
from loadgen.saturation import SaturationMonitor, SaturationRule, streams, waiting_stage

perf_ns = time.perf_counter_ns


class SaturationWatch:
    """One open-loop point under the rule, from its schedule's origin ``t0``."""

    def __init__(self, rule: SaturationRule, t0: int):
        self.rule = rule
        self.t0 = t0
        self.monitor = SaturationMonitor(rule)
        self.flying: dict[int, tuple[RequestRecord, int]] = {}  # id(rec) -> (rec, when it was sent), in send order
        self.max_wait_ns = 0  # the longest wait for a first token (or the end) among those that ended

    def sent(self, rec: RequestRecord) -> None:
        """``rec`` goes now: the rule's clock, and how long it waited past its schedule (or slot)."""
        now = perf_ns()
        self.flying[id(rec)] = (rec, now)
        self.monitor.sent((now - self.t0) / 1e9, (now - max(rec.scheduled_ns, rec.slot_ns)) / 1e9)

    def ended(self, rec: RequestRecord) -> None:
        flying = self.flying.pop(id(rec), None)
        if flying is not None:
            first = rec.first_token_ns if rec.first_token_ns is not None else perf_ns()
            self.max_wait_ns = max(self.max_wait_ns, first - flying[1])

    async def until_saturated(self, ended: Callable[[], tuple[int, int]]) -> tuple[str, int]:
        """Every window, the stage where a backlog waits: the requests served (past their first
        token, or ended without an error), those still waiting for one, those that ended with none
        by an error or the client's timeout (not served), and the longest wait seen (the slowest
        first token, or the oldest request still waiting).  ``ended``: the requests ended and, of
        them, those ended with no token.  Returns why the rule tripped, and when."""
        while True:
            await asyncio.sleep(self.rule.window_s)
            now = perf_ns()
            completed, failed = ended()
            served, waiting, wait_s = waiting_stage(((r.first_token_ns, sent) for r, sent in self.flying.values()),
                                                    completed - failed, self.max_wait_ns, now)
            streaming = streams((r.first_token_ns, r.end_ns) for r, _sent in self.flying.values())
            why = self.monitor.check((now - self.t0) / 1e9, served, waiting, wait_s, failed=failed,
                                     streaming=streaming)
            if why:
                return why, now
