"""Task columns built from readers' calls: the DAG checks, tasks in order of their start,
arrival times on the roots only."""

from __future__ import annotations

import numpy as np
import pytest

from loadgen.workloads.traces.common import BadLines, TraceError
from loadgen.workloads.traces.task_columns import Call, task_table


def call(task, node, parents=(), line=1, t=np.nan):
    return Call(task=task, node=node, parents=tuple(parents), input_tokens=5, output_tokens=3, line=line,
                arrival_s=t)


@pytest.mark.parametrize(("calls", "why"), [
    ([call("x", "a", line=1), call("x", "a", line=2)], "^f:2: task 'x' has node 'a' twice"),
    ([call("x", "a", ["a"], line=4)], "^f:4: task 'x' has a cycle through node 'a'"),
    ([call("x", "r"), call("x", "a", ["b"], line=2), call("x", "b", ["a"], line=3)], "^f:2: task 'x' has a cycle"),
])
def test_the_dag_rules_of_the_task_graph_name_the_line(calls, why):
    with pytest.raises(TraceError, match=why):
        task_table(calls, BadLines("f", "error"), "f", "test")
    with pytest.raises(TraceError, match="^f: the trace has no tasks"):
        task_table(calls, BadLines("f", "skip"), "f", "test")


def test_tasks_start_in_time_order_and_only_roots_carry_a_time(tmp_path):
    calls = [call("late", "a", t=9.0), call("late", "b", ["a"], t=10.0), call("untimed", "a"),
             call("early", "a", t=4.0), call("early", "z", t=5.0), call("early", "j", ["a", "z"])]
    t = task_table(calls, BadLines("f", "error"), "f", "test")
    assert [t.task_names[c] for c in t.task] == ["early"] * 3 + ["late"] * 2 + ["untimed"]
    # a task starts at its earliest root's time, carried by its first root only
    np.testing.assert_array_equal(t.arrival_s, [0.0, np.nan, np.nan, 5.0, np.nan, np.nan])
    assert t.node.tolist() == ["a", "z", "j", "a", "b", "a"] and t.parents.tolist()[2] == ("a", "z")


def test_a_broken_task_names_its_line_or_is_dropped_whole():
    calls = [call("ok", "a", line=1), call("bad", "a", line=2), call("bad", "b", ["nope"], line=3)]
    with pytest.raises(TraceError, match="^f:3: parent 'nope' of node 'b' is not a node of task 'bad'"):
        task_table(calls, BadLines("f", "error"), "f", "test")
    t = task_table(calls, BadLines("f", "skip"), "f", "test")
    assert t.task_names == ["ok"] and t.bad_lines == 1
