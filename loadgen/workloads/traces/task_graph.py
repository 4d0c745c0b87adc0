"""A task's DAG as the workload table holds it: the prefix tree declared once, each task's
calls in a topological order, and the reader's columns turned into the table's task fields.
Readers build tables with ``tasks_from_columns``; the replay (loadgen/workloads/tasks.py)
walks the ``TaskGraph`` s."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from loadgen.workloads.table import WorkloadTable
from loadgen.workloads.traces.common import TraceError


def flatten_prefix_tree(tree, where: str) -> dict[str, int]:
    """``{name: {tokens: N, children: {...}}}`` as ``{"name": N, "name/child": M, ...}``;
    ``where`` names the source in errors (a file's line, or ``workload.task.prefix_tree``)."""
    out: dict[str, int] = {}

    def walk(node, path: str) -> None:
        if not isinstance(node, Mapping):
            raise TraceError(f"{where}: prefix tree node {path!r} must be a mapping with 'tokens' "
                             f"(and optional 'children'), got {node!r}")
        unknown = set(node) - {"tokens", "children"}
        if unknown:
            raise TraceError(f"{where}: prefix tree node {path!r} has unknown keys {sorted(unknown)} "
                             "(expected tokens, children)")
        n = node.get("tokens")
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise TraceError(f"{where}: prefix tree node {path!r}: 'tokens' must be an integer >= 1, got {n!r}")
        out[path] = n
        kids = node.get("children") or {}
        if not isinstance(kids, Mapping):
            raise TraceError(f"{where}: prefix tree node {path!r}: 'children' must be a mapping")
        for name, child in kids.items():
            walk(child, f"{path}/{name}")

    if not isinstance(tree, Mapping) or not tree:
        raise TraceError(f"{where}: the prefix tree must be a non-empty mapping {{name: {{tokens: N}}}}")
    for name, node in tree.items():
        if "/" in str(name):
            raise TraceError(f"{where}: prefix tree node name {name!r} must not contain '/'")
        walk(node, str(name))
    return out


@dataclass
class TaskGraph:
    """One task's DAG: its rows in a topological order (ties: file order)."""

    name: str
    rows: list[int]                       # topological order
    node_row: dict[str, int]
    parents: dict[str, tuple[str, ...]]
    children: dict[str, list[str]] = field(default_factory=dict)
    ancestors: dict[str, list[str]] = field(default_factory=dict)  # each in topological order

    @property
    def roots(self) -> list[str]:
        return [n for n in self.order if not self.parents[n]]

    @property
    def sinks(self) -> list[str]:
        return [n for n in self.order if not self.children.get(n)]

    @property
    def order(self) -> list[str]:
        return list(self.node_row)

    def depth(self) -> int:
        """Calls on the longest root-to-sink chain."""
        d: dict[str, int] = {}
        for n in self.order:
            d[n] = 1 + max((d[p] for p in self.parents[n]), default=0)
        return max(d.values())


def task_graphs(table: WorkloadTable, check_prefixes: bool = True) -> dict[int, TaskGraph]:
    """Every task of ``table`` as a ``TaskGraph``; raises TraceError naming the file and line of
    a duplicate node, a parent not in the task, a cycle, or (``check_prefixes``) a prefix path
    not in the tree."""
    out: dict[int, TaskGraph] = {}
    if not table.has_tasks:
        return out
    t = table.task
    rows = np.flatnonzero(t >= 0)
    line = table.line if table.line is not None else np.arange(1, len(table) + 1)
    order = rows[np.lexsort((line[rows], t[rows]))]
    codes = t[order]
    cuts = np.flatnonzero(np.diff(codes)) + 1
    tree = table.prefix_tree or {}
    for a, b in zip(np.r_[0, cuts], np.r_[cuts, order.size]):
        code = int(codes[a])
        name = str(table.task_names[code]) if table.task_names is not None else f"t{code}"
        mine = order[a:b].tolist()
        node_row: dict[str, int] = {}
        for i in mine:
            n = str(table.node[i])
            if n in node_row:
                raise TraceError(f"{table.where_text(i)}: task {name!r} has node {n!r} twice "
                                 f"(also {table.where_text(node_row[n])})")
            node_row[n] = i
            path = str(table.prefix[i]) if table.prefix is not None else ""
            if check_prefixes and path and path not in tree:
                known = ", ".join(sorted(tree)) or "none declared"
                raise TraceError(f"{table.where_text(i)}: 'prefix' {path!r} is not a path of the prefix tree "
                                 f"(paths: {known})")
        parents = {n: tuple(str(p) for p in table.parents[i]) for n, i in node_row.items()}
        for n, ps in parents.items():
            for p in ps:
                if p not in node_row:
                    raise TraceError(f"{table.where_text(node_row[n])}: parent {p!r} of node {n!r} is not a "
                                     f"node of task {name!r}")
        # Kahn's order, file order among the ready ones: a cycle leaves nodes unplaced.
        left = {n: len(set(ps)) for n, ps in parents.items()}
        children: dict[str, list[str]] = {n: [] for n in node_row}
        for n, ps in parents.items():
            for p in dict.fromkeys(ps):
                children[p].append(n)
        ready = [n for n in node_row if left[n] == 0]
        placed: list[str] = []
        while ready:
            n = ready.pop(0)
            placed.append(n)
            for c in children[n]:
                left[c] -= 1
                if left[c] == 0:
                    ready.append(c)
            ready.sort(key=lambda m: line[node_row[m]])
        if len(placed) < len(node_row):
            stuck = next(n for n in node_row if n not in placed)
            raise TraceError(f"{table.where_text(node_row[stuck])}: task {name!r} has a cycle through node "
                             f"{stuck!r} (a call cannot wait for itself)")
        anc: dict[str, list[str]] = {}
        pos = {n: k for k, n in enumerate(placed)}
        for n in placed:
            s = set()
            for p in parents[n]:
                s.add(p)
                s.update(anc[p])
            anc[n] = sorted(s, key=pos.__getitem__)
        out[code] = TaskGraph(name=name, rows=[node_row[n] for n in placed],
                              node_row={n: node_row[n] for n in placed}, parents=parents,
                              children=children, ancestors=anc)
    return out


def tasks_from_columns(table: WorkloadTable, task_ids: list, nodes: list, parents: list, tool_s: list,
                       prefixes: list, prefix_tree: dict | None = None) -> None:
    """Set ``table``'s task fields from per-row columns as a reader parsed them: ``task_ids``
    (str, "" or None: not a task), ``nodes`` (str or None: the call's position in its task,
    ``n0``, ``n1``, ...), ``parents`` (list of node names), ``tool_s`` (float or None),
    ``prefixes`` (path or None).  A task's arrival is its first root's (the other rows' are
    NaN: they are sent when their parents end).  Checks the DAGs (``task_graphs``)."""
    tid = np.asarray(["" if x is None else str(x) for x in task_ids], dtype=object)
    has = tid != ""
    if not has.any():
        return
    names, codes = np.unique(tid[has].astype(str), return_inverse=True)
    task = np.full(len(table), -1, dtype=np.int64)
    task[has] = codes
    node = np.empty(len(table), dtype=object)
    seen: dict[int, int] = {}
    for i in range(len(table)):
        if task[i] >= 0:
            k = seen.get(int(task[i]), 0)
            seen[int(task[i])] = k + 1
            node[i] = str(nodes[i]) if nodes[i] is not None else f"n{k}"
        else:
            node[i] = ""
    par = np.empty(len(table), dtype=object)
    par[:] = [tuple(str(p) for p in (ps or ())) for ps in parents]
    table.task, table.task_names, table.node, table.parents = task, names.tolist(), node, par
    table.tool_s = np.asarray([np.nan if x is None else float(x) for x in tool_s], dtype=np.float64)
    table.prefix = np.asarray(["" if x is None else str(x) for x in prefixes], dtype=object)
    if prefix_tree is not None:
        table.prefix_tree = prefix_tree
    graphs = task_graphs(table, check_prefixes=prefix_tree is not None)  # else: when the config's tree is known
    arrival = table.arrival_s.copy()
    for g in graphs.values():
        start = np.nanmin(arrival[g.rows]) if np.isfinite(arrival[g.rows]).any() else np.nan
        arrival[g.rows] = np.nan
        arrival[g.rows[0]] = start
    table.arrival_s = arrival
