"""The shape of a task workload (``workload.json``'s ``tasks``), from its table alone.

Definitions (a task is a DAG of calls, ``loadgen/workloads/table.py``):

- ``calls_per_task``: calls of each task.
- ``depth``: calls on a task's longest root-to-sink chain (a task of one call: 1; a chain of
  n turns: n); the fewest engine round trips the task takes one after another.
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
from loadgen.workloads.table import WorkloadTable


def path_nodes(path: str) -> list[str]:
    """The tree nodes a prefix path runs through, root first (``a/b`` -> ``a``, ``a/b``)."""
    if not path:
        return []
    parts = path.split("/")
    return ["/".join(parts[:i + 1]) for i in range(len(parts))]


def prefix_tree_reuse(table: WorkloadTable, ins: np.ndarray | None = None) -> dict:
    """Independent against tree prefill tokens of the calls' prefix paths (module doc)."""
    tree = table.prefix_tree or {}
    ins = table.input_tokens if ins is None else ins
    used: set[str] = set()
    independent = own_total = 0
    for i in range(len(table)):
        nodes = path_nodes(str(table.prefix[i])) if table.prefix is not None else []
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


def task_rows(table: WorkloadTable) -> dict[int, np.ndarray]:
    """Rows of each task, in table order."""
    rows = np.flatnonzero(table.task >= 0)
    order = rows[np.argsort(table.task[rows], kind="stable")]
    out: dict[int, np.ndarray] = {}
    if order.size:
        cuts = np.flatnonzero(np.diff(table.task[order])) + 1
        for a, b in zip(np.r_[0, cuts], np.r_[cuts, order.size]):
            out[int(table.task[order[a]])] = order[a:b]
    return out


def _longest(rows: np.ndarray, table: WorkloadTable, weight) -> float:
    """The largest sum of ``weight(row)`` along a root-to-sink chain of one task's calls."""
    at = {table.node[i]: i for i in rows.tolist()}
    best: dict[str, float] = {}

    def reach(node: str) -> float:  # iterative: a chain of thousands of turns must not recurse
        stack = [node]
        while stack:
            n = stack[-1]
            if n in best:
                stack.pop()
                continue
            todo = [p for p in table.parents[at[n]] if p not in best]
            if todo:
                stack.extend(todo)
                continue
            stack.pop()
            best[n] = weight(at[n]) + max((best[p] for p in table.parents[at[n]]), default=0.0)
        return best[node]

    return max(reach(n) for n in at)


def task_arrays(table: WorkloadTable) -> dict[str, np.ndarray]:
    """The per-task and per-call values the shape summarises (module doc): ``calls``, ``depth``,
    ``tool_s_critical`` per task; ``fan_out``, ``fan_in`` per call; ``tool_s`` per later call
    whose trace gives one; ``later``: how many calls are not roots."""
    groups = task_rows(table)
    rows = np.flatnonzero(table.task >= 0)
    children: dict[tuple[int, str], int] = {}
    for i in rows.tolist():
        for p in table.parents[i]:
            children[(int(table.task[i]), p)] = children.get((int(table.task[i]), p), 0) + 1
    tool = table.tool_s if table.tool_s is not None else np.full(len(table), np.nan)
    fan_in = np.array([len(table.parents[i]) for i in rows.tolist()], dtype=np.int64)
    later = rows[fan_in > 0]

    def tool_wait(i: int) -> float:
        return float(tool[i]) if table.parents[i] and np.isfinite(tool[i]) else 0.0

    return {"calls": np.array([r.size for r in groups.values()], dtype=np.int64),
            "depth": np.array([_longest(r, table, lambda i: 1.0) for r in groups.values()], dtype=np.int64),
            "tool_s_critical": np.array([_longest(r, table, tool_wait) for r in groups.values()], dtype=np.float64),
            "fan_out": np.array([children.get((int(table.task[i]), table.node[i]), 0) for i in rows.tolist()],
                                dtype=np.int64),
            "fan_in": fan_in, "tool_s": tool[later][np.isfinite(tool[later])], "later": np.int64(later.size)}


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
