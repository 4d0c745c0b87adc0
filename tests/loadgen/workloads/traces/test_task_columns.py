"""Task columns built from readers' calls: the DAG checks, tasks in order of their start,
arrival times on the roots only."""

from __future__ import annotations

import numpy as np
import pytest

from loadgen.workloads.traces.common import BadLines, TraceError
from loadgen.workloads.traces.task_columns import Call, dag_problem, task_table


def call(task, node, parents=(), line=1, t=np.nan):
    return Call(task=task, node=node, parents=tuple(parents), input_tokens=5, output_tokens=3, line=line,
                raw=f"{task}/{node}", arrival_s=t)


def test_dag_rules():
    assert dag_problem([call("x", "a"), call("x", "b", ["a"]), call("x", "c", ["a", "b"])]) is None
    assert dag_problem([call("x", "a"), call("x", "a")])[1] == "node 'a' appears twice in task 'x'"
    assert "is its own parent" in dag_problem([call("x", "a", ["a"])])[1]
    assert "form a cycle" in dag_problem([call("x", "r"), call("x", "a", ["b"]), call("x", "b", ["a"])])[1]


def test_tasks_start_in_time_order_and_only_roots_carry_a_time(tmp_path):
    calls = [call("late", "a", t=9.0), call("late", "b", ["a"], t=10.0), call("untimed", "a"),
             call("early", "a", t=4.0), call("early", "z", t=5.0), call("early", "j", ["a", "z"])]
    t = task_table(calls, BadLines("f", "error"), "f", "test")
    assert t.task_names == ["early", "late", "untimed"] and t.task.tolist() == [0, 0, 0, 1, 1, 2]
    # a task starts at its earliest root; every root carries that start
    np.testing.assert_array_equal(t.arrival_s, [0.0, 0.0, np.nan, 5.0, np.nan, np.nan])
    assert t.node.tolist() == ["a", "z", "j", "a", "b", "a"] and t.parents.tolist()[2] == ("a", "z")


def test_a_broken_task_names_its_line_or_is_dropped_whole():
    calls = [call("ok", "a", line=1), call("bad", "a", line=2), call("bad", "b", ["nope"], line=3)]
    with pytest.raises(TraceError, match="^f:3: parent 'nope' is not a node of task 'bad'"):
        task_table(calls, BadLines("f", "error"), "f", "test")
    t = task_table(calls, BadLines("f", "skip"), "f", "test")
    assert t.task_names == ["ok"] and t.bad_lines == 1
