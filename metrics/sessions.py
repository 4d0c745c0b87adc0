"""Per-session results of a multi-turn replay, from ``requests.parquet`` and the plan.

- ``sessions``: sessions the workload planned (``expected_turns``: session -> turns).
- ``sessions_completed``: sessions whose every planned turn was sent and ended ``ok``
  (measured or warm-up alike: a session is the user's task, whole or not at all).
- ``session_completion_rate`` = sessions_completed / sessions.
- ``cost_per_completed_session`` = cost of the whole window / sessions_completed (+inf
  when none completed: the cost was paid for nothing), the task cost of a user.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa


def session_summary(table: pa.Table, expected_turns: dict, cost_total: float | None = None) -> dict:
    sid = table.column("session_id").to_pylist()
    status = table.column("status").to_pylist()
    ok_turns: dict[str, int] = {}
    sent: dict[str, int] = {}
    for s, st in zip(sid, status):
        if s is None:
            continue
        sent[s] = sent.get(s, 0) + 1
        if st == "ok":
            ok_turns[s] = ok_turns.get(s, 0) + 1
    n = len(expected_turns)
    done = sum(1 for s, k in expected_turns.items() if ok_turns.get(s, 0) >= k)
    started = sum(1 for s in expected_turns if sent.get(s, 0) > 0)
    out = {"sessions": n, "sessions_started": started, "sessions_completed": done,
           "session_completion_rate": done / n if n else math.nan,
           "turns_per_session_mean": float(np.mean(list(expected_turns.values()))) if n else math.nan}
    if cost_total is not None:
        out["cost_per_completed_session"] = cost_total / done if done else math.inf
    return out
