"""GuideLLM's conversation graphs (``conversation_turns``) read as tasks: a row its synthetic
generator wrote (GuideLLM 0.8.1: 4 turns, a sub-agent branch of 2 at turn 1, a 0.5 s delay)
and a hand-written timed graph, bad graphs named by line and field."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from loadgen.workloads.traces.common import TraceError
from loadgen.workloads.traces.readers import read_trace

FIXTURE = Path(__file__).parents[3] / "fixtures" / "guidellm_0.8.1_conversation_turns.jsonl"


def test_a_branched_graph_reads_as_a_dag_with_its_delays_on_the_children():
    t = read_trace("guidellm", FIXTURE)
    assert t.source == "guidellm" and t.task_input == "message"
    # graph g2 has a relative_timestamp, the first none: timed tasks first
    assert t.task_names == ["g2", "line1"]
    assert t.node.tolist() == ["turn_0", "turn_1", "main_0", "main_1", "main_2", "main_3", "branch_0_0", "branch_0_1"]
    assert t.parents.tolist() == [(), ("turn_0",), (), ("main_0",), ("main_1", "branch_0_1"), ("main_2",),
                                  ("main_1",), ("branch_0_0",)]
    assert t.input_tokens.tolist() == [100, 50] + [24] * 6
    assert t.output_tokens.tolist() == [10, 20] + [8] * 6
    # a node's requeue_delay is its children's wait: main_2 waits the larger of its parents' (0.5, none)
    np.testing.assert_allclose(t.tool_s, [np.nan, np.nan, np.nan, 0.5, 0.5, 0.5, 0.5, np.nan])
    assert t.arrival_s[0] == 0.0 and np.isnan(t.arrival_s[1:]).all()
    assert t.line.tolist() == [2, 2, 1, 1, 1, 1, 1, 1]
    assert any("history_context=new" in n for n in t.notes) and any("prefix_column" in n for n in t.notes)


def _turn(node, parents=(), n_in=10, n_out=5, **extra):
    return {"node_id": node, "parents": [{"parent_node_id": p} for p in parents],
            "columns": {"prompt_tokens_count_column": [n_in], "output_tokens_count_column": [n_out]}, **extra}


def _write(tmp_path, graphs) -> Path:
    p = tmp_path / "graphs.jsonl"
    p.write_text("".join(json.dumps({"conversation_turns": g}) + "\n" for g in graphs))
    return p


@pytest.mark.parametrize(("graph", "why"), [
    ({"turns": [_turn("a"), _turn("b", ["zz"])]}, "parent 'zz' of node 'b' is not a node of task"),
    ({"turns": [_turn("a", ["b"]), _turn("b", ["a"])]}, "has a cycle through node"),
    ({"turns": [_turn("a"), _turn("a")]}, "has node 'a' twice"),
    ({"turns": [_turn("a"), {"node_id": "b", "columns": {"output_tokens_count_column": [3]}}]},
     r"turns\[1\]: missing 'columns.prompt_tokens_count_column'"),
    ({"turns": [_turn("a", settings={"requeue_delay": -1})]}, r"turns\[0\]: 'settings.requeue_delay' must be >= 0"),
    ({"turns": [{"node_id": "a", "parents": [{"parent_node_id": "x", "history_context": "most"}]}]},
     r"turns\[0\].parents\[0\]: 'history_context'"),
    ({"turns": []}, "non-empty 'turns' list"),
])
def test_a_bad_graph_names_its_line_and_field_and_skip_drops_the_task(tmp_path, graph, why):
    p = _write(tmp_path, [{"graph_id": "ok", "turns": [_turn("a")]}, graph])
    with pytest.raises(TraceError, match=rf"^{p}:2: .*{why}"):
        read_trace("guidellm", p)
    t = read_trace("guidellm", p, "skip")
    assert t.bad_lines == 1 and t.task_names == ["ok"]


def test_a_line_without_the_graph_column_says_which_column(tmp_path):
    p = tmp_path / "g.jsonl"
    p.write_text('{"prompt": "hi"}\n')
    with pytest.raises(TraceError, match=rf"^{p}:1: missing 'conversation_turns'"):
        read_trace("guidellm", p)
