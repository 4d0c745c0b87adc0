"""Sessions in summary.json: a session completes when every turn of it is ``ok``; given the
workload's planned turns, every planned session counts, sent or not, and needs each planned turn
sent and ``ok``; a session with a warm-up turn is left out."""

from __future__ import annotations

import math

import pytest

from metrics.slo import SLO
from metrics.summary import summarize
from tests.telemetry_fixtures import S, request_table

RENTAL = {"model": "rental", "num_gpus": 1, "hourly_per_gpu": 3.6, "num_hosts": 1, "hourly_per_host": 0.0,
          "extra_hourly": {}}       # 3.6 per hour: 0.1 for the 100 s window
PLANNED = {"a": 2, "b": 2, "c": 2, "d": 1, "w": 2}


def session_run():
    """A request of no session first; a: both turns ok; b: its first turn only; c: ok then a 503;
    d: planned, never sent; w: a warm-up turn then an ok one; x: an ok turn of a session the plan
    does not have."""
    turns = [(None, "ok", False), ("a", "ok", False), ("a", "ok", False), ("b", "ok", False), ("c", "ok", False),
             ("c", "http_error", False), ("w", "ok", True), ("w", "ok", False), ("x", "ok", False)]
    return request_table([{"sent": float(i), "session": sid, "turn": i, "status": st, "warmup": warm}
                          for i, (sid, st, warm) in enumerate(turns)])


def test_planned_sessions_need_every_planned_turn_ok():
    s = summarize(session_run(), SLO(), 0, 100 * S, cost_cfg=RENTAL, expected_turns=PLANNED)
    # a, b, c, d count (w had a warm-up turn, x was not planned); only a completed
    assert s["num_sessions"] == 4 and s["completed_sessions"] == 1
    assert s["session_completion_rate"] == pytest.approx(0.25)
    assert s["cost_per_completed_session"] == pytest.approx(0.1)


def test_more_ok_turns_than_planned_is_every_planned_turn_sent():
    rows = [{"sent": float(i), "session": "e", "turn": i} for i in range(2)]
    s = summarize(request_table(rows), SLO(), 0, 100 * S, expected_turns={"e": 1})
    assert (s["num_sessions"], s["completed_sessions"]) == (1, 1)


def test_without_a_plan_the_measured_sessions_count():
    s = summarize(session_run(), SLO(), 0, 100 * S, cost_cfg=RENTAL)
    # a, b, c, w (its measured turn), x: all but c had every turn ok
    assert s["num_sessions"] == 5 and s["completed_sessions"] == 4
    assert s["cost_per_completed_session"] == pytest.approx(0.1 / 4)


def test_no_session_no_rate():
    s = summarize(request_table([{"sent": 1.0}]), SLO(), 0, 100 * S, cost_cfg=RENTAL)
    assert s["num_sessions"] == 0 and s["completed_sessions"] == 0 and math.isnan(s["session_completion_rate"])
    assert "cost_per_completed_session" not in s
    # a plan whose sessions were never sent: every one incomplete
    s = summarize(request_table([{"sent": 1.0}]), SLO(), 0, 100 * S, cost_cfg=RENTAL, expected_turns={"a": 1})
    assert (s["num_sessions"], s["completed_sessions"], s["cost_per_completed_session"]) == (1, 0, math.inf)


def test_a_plan_beside_a_file_without_session_ids():
    # an older requests.parquet (no session_id column) with the workload's plan: every planned
    # session counts, none was seen, none completed (it raised KeyError on the warm-up filter)
    table = request_table([{"sent": 1.0}, {"sent": 2.0, "warmup": True}]).drop_columns(["session_id"])
    s = summarize(table, SLO(), 0, 100 * S, cost_cfg=RENTAL, expected_turns={"a": 1, "b": 2})
    assert (s["num_sessions"], s["completed_sessions"], s["cost_per_completed_session"]) == (2, 0, math.inf)
