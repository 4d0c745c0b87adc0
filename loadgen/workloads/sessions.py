"""Multi-turn sessions: a turn is sent when the previous turn of its session has finished,
plus a think time, and its prompt carries the real previous responses, as a chat client's.

The dispatcher sends each session's first turn like any request (at its trace time, or
from the load's arrival process); when a turn ends it calls ``followup(record)``, which
returns the next turn and the think time to wait, or None.  A turn that fails ends its
session (a user whose request failed does not carry on with a history that never came):
the session counts as not completed.
"""

from __future__ import annotations

import numpy as np

from loadgen.records import RequestRecord
from loadgen.workloads.item import WorkItem
from loadgen.workloads.table import WorkloadTable
from loadgen.workloads.traces.prompts import TracePrompts


def request_id(row: int) -> str:
    return f"r{row:07d}"


class SessionReplay:
    def __init__(self, table: WorkloadTable, prompts: TracePrompts, default_think_s: float = 0.0,
                 think_dist: str = "fixed", seed: int = 0):
        self.table = table
        self.prompts = prompts
        self.default_think_s = float(default_think_s)
        if think_dist not in ("fixed", "exponential"):
            raise ValueError(f"workload.think_dist={think_dist!r}: expected fixed or exponential")
        self.think_dist = think_dist
        self.rng = np.random.default_rng([seed, 13])
        self.unbuildable = 0  # turns whose prompt could not be built (their session ends there)
        s = table.session
        rows = np.flatnonzero(s >= 0)
        order = rows[np.lexsort((table.turn[rows], s[rows]))]
        codes = s[order]
        cuts = np.flatnonzero(np.diff(codes)) + 1
        self.rows: dict[int, np.ndarray] = {}  # session code -> its rows in turn order
        if order.size:
            for a, b in zip(np.r_[0, cuts], np.r_[cuts, order.size]):
                self.rows[int(codes[a])] = order[a:b]
        self.by_name = {self.name(c): c for c in self.rows}
        self.history: dict[int, list[tuple[str, str]]] = {}
        self.asked: dict[int, str] = {}   # the user's message of each session's turn in flight

    def name(self, code: int) -> str:
        names = self.table.session_names
        return str(names[code]) if names is not None else f"s{code}"

    @property
    def expected_turns(self) -> dict[str, int]:
        return {self.name(c): int(r.size) for c, r in self.rows.items()}

    def is_first_turn(self, i: int) -> bool:
        return self.table.session[i] < 0 or i == int(self.rows[int(self.table.session[i])][0])

    def first_item(self, i: int, prompt, n: int) -> WorkItem:
        code = int(self.table.session[i])
        self.asked[code] = prompt if isinstance(prompt, str) else prompt[-1]["content"]
        self.history[code] = []
        return WorkItem(request_id=request_id(i), prompt=prompt, prompt_tokens=n,
                        max_tokens=self.prompts.output_tokens(i), session_id=self.name(code), turn=0)

    def draw_think(self) -> float:
        """Think time where the trace gives none: ``workload.think_s``, fixed or the mean of
        an exponential draw (``workload.think_dist``)."""
        if self.think_dist == "exponential" and self.default_think_s > 0:
            return float(self.rng.exponential(self.default_think_s))
        return self.default_think_s

    def followup(self, rec: RequestRecord) -> tuple[WorkItem, float] | None:
        """The session's next turn after ``rec`` ended, and how long to wait before it."""
        code = self.by_name.get(rec.session_id) if rec.session_id is not None else None
        if code is None:
            return None
        asked = self.asked.pop(code, None)
        if rec.status != "ok" or asked is None:
            self.history.pop(code, None)
            return None
        hist = self.history.setdefault(code, [])
        hist.append((asked, rec.text))
        rows = self.rows[code]
        k = len(hist)
        if k >= rows.size:
            self.history.pop(code, None)
            return None
        i = int(rows[k])
        try:
            prompt, n, text = self.prompts.turn(i, hist)
        except ValueError:
            self.unbuildable += 1
            self.history.pop(code, None)
            return None
        self.asked[code] = text
        think = self.table.think_s[i] if self.table.think_s is not None else np.nan
        think = float(think) if np.isfinite(think) else self.draw_think()
        item = WorkItem(request_id=request_id(i), prompt=prompt, prompt_tokens=n,
                        max_tokens=self.prompts.output_tokens(i), session_id=self.name(code),
                        turn=int(self.table.turn[i]))
        return item, max(think, 0.0)
