"""The shape of a task workload on the characterisation page: the seed's prefix tree (14,060
tokens prefilled independently against 8,060 on the tree), and a DAG's depth, fan-out and
tool time."""

from __future__ import annotations

import math

import numpy as np
import pytest

from loadgen.workloads.characterise import characterise
from loadgen.workloads.table import WorkloadTable
from loadgen.workloads.task_shape import prefix_tree_reuse, task_shape


def _objects(values) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def tasks(task, node, parents, ins, tool=None, prefix=None, tree=None, arrival=None, task_input="message"):
    n = len(task)
    return WorkloadTable(arrival_s=np.asarray(arrival if arrival is not None else [np.nan] * n, dtype=np.float64),
                         input_tokens=np.asarray(ins, dtype=np.int64), output_tokens=np.full(n, 10, dtype=np.int64),
                         source="test", task=np.asarray(task, dtype=np.int64),
                         task_names=[f"task{i}" for i in range(max(task) + 1)], node=_objects(node),
                         parents=_objects([tuple(p) for p in parents]),
                         tool_s=np.asarray(tool if tool is not None else [np.nan] * n, dtype=np.float64),
                         prefix=_objects(prefix if prefix is not None else [""] * n), prefix_tree=tree,
                         task_input=task_input)


SEED_TREE = {"sys": 1000, "sys/docA": 4000, "sys/docB": 3000}


def test_the_seeds_prefix_tree_reuses_6000_of_14060_tokens():
    # a 1000-token system prompt, documents of 4000 and 3000 under it; two 20-token questions on
    # the first, one on the second: 2 x (1000 + 4000 + 20) + (1000 + 3000 + 20) = 14,060 alone,
    # 1000 + 4000 + 3000 + 3 x 20 = 8,060 on the tree
    t = tasks([0, 1, 2], ["q", "q", "q"], [(), (), ()], [20, 20, 20],
              prefix=["sys/docA", "sys/docA", "sys/docB"], tree=SEED_TREE)
    got = prefix_tree_reuse(t)
    assert got["independent_tokens"] == 14060 and got["tree_tokens"] == 8060 and got["reused_tokens"] == 6000
    assert got["reuse_share"] == pytest.approx(6000 / 14060) and got["nodes_used"] == 3


def test_a_whole_prompt_length_counts_the_prefix_once_not_twice():
    t = tasks([0, 1, 2], ["q", "q", "q"], [(), (), ()], [5020, 5020, 4020],
              prefix=["sys/docA", "sys/docA", "sys/docB"], tree=SEED_TREE, task_input="total")
    got = prefix_tree_reuse(t)
    assert (got["independent_tokens"], got["tree_tokens"]) == (14060, 8060)


def test_an_unused_node_costs_nothing_and_a_path_outside_the_tree_is_named():
    t = tasks([0], ["q"], [()], [20], prefix=["sys/docA"], tree={**SEED_TREE, "other": 99})
    got = prefix_tree_reuse(t)
    assert got["tree_tokens"] == got["independent_tokens"] == 5020 and got["reused_tokens"] == 0
    bad = tasks([0], ["q"], [()], [20], prefix=["sys/docC"], tree=SEED_TREE)
    with pytest.raises(ValueError, match="'sys/docC' is not a path of the prefix tree"):
        prefix_tree_reuse(bad)


def test_depth_fan_out_calls_and_tool_time_of_a_dag():
    # task 0: plan -> {a, b, c} -> join (a diamond of fan-out 3); task 1: a chain of two
    t = tasks([0, 0, 0, 0, 0, 1, 1], ["plan", "a", "b", "c", "join", "t0", "t1"],
              [(), ("plan",), ("plan",), ("plan",), ("a", "b", "c"), (), ("t0",)], [50] * 7,
              tool=[np.nan, 2.0, 0.5, np.nan, 1.0, np.nan, 0.0], arrival=[0, np.nan, np.nan, np.nan, np.nan, 3, np.nan])
    s = task_shape(t)
    assert s["count"] == 2 and s["calls"] == 7
    assert s["calls_per_task"]["mean"] == 3.5 and s["calls_per_task_hist"][5] == 1
    assert (s["depth"]["max"], s["depth"]["min"]) == (3, 2)
    assert s["fan_out"]["max"] == 3 and s["fan_out_hist"] == [2, 4, 0, 1]
    assert s["joins"] == 1 and s["roots"] == 2 and s["sinks"] == 2
    # tool times of non-root calls the trace gives: 2.0, 0.5, 1.0, 0.0; c takes the default
    assert s["tool_s"]["n"] == 4 and s["tool_s_default_calls"] == 1 and s["tool_calls_share"] == pytest.approx(3 / 5)
    # the longest tool chain: plan -> a (2.0) -> join (1.0) = 3.0; the chain: 0
    assert s["tool_s_critical"]["max"] == 3.0 and s["tool_s_critical"]["min"] == 0.0
    assert s["prefix_tree"] == {"nodes": 0}


def test_characterise_carries_the_task_shape_and_a_table_without_tasks_says_none():
    t = tasks([0, 1, 2], ["q", "q", "q"], [(), (), ()], [20, 20, 20],
              prefix=["sys/docA", "sys/docA", "sys/docB"], tree=SEED_TREE, arrival=[0.0, 1.0, 2.0])
    stats = characterise(t)
    assert stats["tasks"]["prefix_tree"]["reused_tokens"] == 6000 and "prefix_tree" in stats["prefix_info"]
    assert math.isnan(stats["prefix_reuse_share"]) and any("tasks.prefix_tree" in n for n in stats["notes"])
    plain = WorkloadTable(arrival_s=np.array([0.0, 1.0]), input_tokens=np.array([5, 5]),
                          output_tokens=np.array([1, 1]))
    assert characterise(plain)["tasks"] == {"count": 0}
    assert math.isnan(task_shape(tasks([0], ["a"], [()], [1]))["tool_calls_share"])
