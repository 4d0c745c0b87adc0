"""The shape of a task workload (``workload.json``'s ``tasks``), from its table alone.

Definitions (a task is a DAG of calls, ``loadgen/workloads/table.py``):

- ``calls_per_task``: calls of each task.
- ``depth``: calls on a task's longest root-to-sink chain (``TaskGraph.depth``: a task of one
  call: 1; a chain of n turns: n); the fewest engine round trips it takes one after another.
- ``fan_out``: children of each call (a sink: 0); ``fan_in``: parents of each call (a
  root: 0); ``joins``: calls that wait for two or more parents.
- ``tool_s``: the tool time each call waits after its last parent ended, over calls that are
  not roots and whose trace gives one (``tool_s_default_calls``: those that take
  ``workload.task.tool_s`` instead); ``tool_calls_share``: share of non-root calls with a
  tool time > 0.
- ``tool_s_critical``: per task, the largest sum of tool times along a root-to-sink chain
  (calls without one count 0): what the task takes with an engine that answers at once.  The
  table holds no engine time, so the share of a task's time spent in tools is a run's number
  (from its records), not the table's.
- prefix tree reuse (``prefix_tree``: a call's ``prefix`` is a path in it; each node's
  tokens are its own segment's):
  ``independent_tokens`` = sum over calls of their prefix path's tokens plus their own
  message (every call prefilled alone); ``tree_tokens`` = the tokens of the tree's nodes used
  by at least one call, once each, plus every call's own message (each shared segment
  prefilled once); ``reused_tokens`` = their difference; ``reuse_share`` = reused /
  independent.  A call's own message is its ``input_tokens`` (``task_input="message"``), or
  what its prefix path leaves of them (``"total"``: the whole prompt).  Context carried from
  earlier calls (their messages and replies) is not part of the tree and is not counted here.
"""

from __future__ import annotations

import math

import numpy as np

from loadgen.workloads.distribution import distribution
from loadgen.workloads.table import WorkloadTable, path_segments
from loadgen.workloads.traces.task_graph import task_graphs


def prefix_tree_reuse(table: WorkloadTable, ins: np.ndarray | None = None) -> dict:
    """Independent against tree prefill tokens of the calls' prefix paths (module doc)."""
    tree = table.prefix_tree or {}
    ins = table.input_tokens if ins is None else ins
    used: set[str] = set()
    independent = own_total = 0
    for i in range(len(table)):
        path = str(table.prefix[i]) if table.prefix is not None else ""
        nodes = path_segments(path) if path else []
        missing = [p for p in nodes if p not in tree]
        if missing:
            raise ValueError(f"{table.where_text(i)}: prefix {table.prefix[i]!r} is not a path of the prefix tree "
                             f"(no node {missing[0]!r})")
        path_tokens = sum(int(tree[p]) for p in nodes)
        own = int(ins[i]) if table.task_input == "message" else max(int(ins[i]) - path_tokens, 0)
        independent += path_tokens + own
        own_total += own
        used.update(nodes)
    tree_tokens = sum(int(tree[p]) for p in used) + own_total
    return {"nodes": len(tree), "nodes_used": len(used), "independent_tokens": independent,
            "tree_tokens": tree_tokens, "reused_tokens": independent - tree_tokens,
            "reuse_share": (independent - tree_tokens) / independent if independent > 0 else math.nan}


def task_arrays(table: WorkloadTable) -> dict[str, np.ndarray]:
    """The per-task and per-call values the shape summarises (module doc): ``calls``, ``depth``,
    ``tool_s_critical`` per task; ``fan_out``, ``fan_in`` per call; ``tool_s`` per later call
    whose trace gives one; ``later``: how many calls are not roots."""
    graphs = task_graphs(table, check_prefixes=False).values()
    tool = table.tool_s if table.tool_s is not None else np.full(len(table), np.nan)
    calls, depth, critical, fan_out, fan_in, given = [], [], [], [], [], []
    later = 0
    for g in graphs:
        calls.append(len(g.rows))
        depth.append(g.depth())
        longest: dict[str, float] = {}
        for n in g.order:  # topological: every parent's longest tool chain is known first
            i = g.node_row[n]
            wait = float(tool[i]) if g.parents[n] and np.isfinite(tool[i]) else 0.0
            longest[n] = wait + max((longest[p] for p in g.parents[n]), default=0.0)
            fan_out.append(len(g.children.get(n, ())))
            fan_in.append(len(g.parents[n]))
            if g.parents[n]:
                later += 1
                if np.isfinite(tool[i]):
                    given.append(float(tool[i]))
        critical.append(max(longest.values()))
    return {"calls": np.array(calls, dtype=np.int64), "depth": np.array(depth, dtype=np.int64),
            "tool_s_critical": np.array(critical, dtype=np.float64), "fan_out": np.array(fan_out, dtype=np.int64),
            "fan_in": np.array(fan_in, dtype=np.int64), "tool_s": np.array(given, dtype=np.float64),
            "later": np.int64(later)}


def task_shape(table: WorkloadTable, ins: np.ndarray | None = None) -> dict:
    """``workload.json``'s ``tasks`` for ``table`` (``{"count": 0}`` without tasks)."""
    if not table.has_tasks:
        return {"count": 0}
    a = task_arrays(table)
    later = int(a["later"])
    out = {"count": int(a["calls"].size), "calls": int(a["calls"].sum()), "task_input": table.task_input,
           "calls_per_task": distribution(a["calls"]), "calls_per_task_hist": np.bincount(a["calls"]).tolist(),
           "depth": distribution(a["depth"]), "depth_hist": np.bincount(a["depth"]).tolist(),
           "fan_out": distribution(a["fan_out"]), "fan_out_hist": np.bincount(a["fan_out"]).tolist(),
           "fan_in": distribution(a["fan_in"]), "joins": int((a["fan_in"] >= 2).sum()),
           "roots": int((a["fan_in"] == 0).sum()), "sinks": int((a["fan_out"] == 0).sum()),
           "tool_s": distribution(a["tool_s"]), "tool_s_default_calls": later - int(a["tool_s"].size),
           "tool_calls_share": float((a["tool_s"] > 0).sum() / later) if later else math.nan,
           "tool_s_critical": distribution(a["tool_s_critical"])}
    out["prefix_tree"] = prefix_tree_reuse(table, ins) if table.prefix_tree else {"nodes": 0}
    return out
