"""Task columns of a ``WorkloadTable`` (``task``, ``task_names``, ``node``, ``parents``,
``tool_s``, ``prefix``) from one record per call, for the readers of peers' agentic formats.

Checked here, once for every reader: a node name is unique in its task, every parent is a
node of the same task, and the calls form no cycle.  A task that fails a check is a bad
line (the offending call's): under ``workload.on_bad_line=skip`` the whole task is dropped
(a call without its parents cannot be sent) and counted as one bad line.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from loadgen.workloads.table import WorkloadTable
from loadgen.workloads.traces.common import BadLines, empty_trace


@dataclass
class Call:
    """One LLM call of a task as a reader found it."""

    task: str
    node: str
    parents: tuple
    input_tokens: int
    output_tokens: int
    line: int                        # the line of the file it came from (table.line)
    raw: str = ""                    # the text shown in an error message
    where: str = ""                  # its place in one JSON document, for messages ("": the line)
    arrival_s: float = np.nan        # the task's start on the trace's clock (roots only)
    tool_s: float = np.nan           # NaN: workload.task.tool_s applies
    prefix: str = ""
    text: str | None = None          # the call's own message as text (then input_tokens is -1)


def dag_problem(calls: list[Call]) -> tuple[int, str] | None:
    """The first call of one task that breaks the DAG rules, and why; None if it is a DAG."""
    seen: dict[str, int] = {}
    for i, c in enumerate(calls):
        if c.node in seen:
            return i, f"node {c.node!r} appears twice in task {c.task!r}"
        seen[c.node] = i
    for i, c in enumerate(calls):
        for p in c.parents:
            if p not in seen:
                return i, f"parent {p!r} is not a node of task {c.task!r}"
            if p == c.node:
                return i, f"node {c.node!r} is its own parent"
    # Kahn's algorithm: whatever is left once no root remains lies on a cycle.
    indeg = {c.node: len(set(c.parents)) for c in calls}
    children: dict[str, list[str]] = {c.node: [] for c in calls}
    for c in calls:
        for p in set(c.parents):
            children[p].append(c.node)
    ready = [n for n, d in indeg.items() if d == 0]
    done = 0
    while ready:
        n = ready.pop()
        done += 1
        for ch in children[n]:
            indeg[ch] -= 1
            if indeg[ch] == 0:
                ready.append(ch)
    if done < len(calls):
        i = next(i for i, c in enumerate(calls) if indeg[c.node] > 0)
        return i, f"the parents of task {calls[i].task!r} form a cycle through node {calls[i].node!r}"
    return None


def task_table(calls: list[Call], bad: BadLines, path: str, source: str, task_input: str = "message",
               prefix_tree: dict | None = None, notes: list | None = None) -> WorkloadTable:
    """The table of ``calls`` (each task's calls in the reader's order), every task checked as a
    DAG, tasks in order of their start; ``arrival_s`` is the task's start (its roots' earliest
    time) on its roots and NaN on the calls after them, shifted so the earliest task starts at 0."""
    by_task: dict[str, list[Call]] = {}
    for c in calls:
        by_task.setdefault(c.task, []).append(c)
    good: list[tuple[float, list[Call]]] = []
    for rows in by_task.values():
        problem = dag_problem(rows)
        if problem is not None:
            i, why = problem
            bad(rows[i].where or rows[i].line, rows[i].raw, why)
            continue  # on_bad_line=skip: the whole task goes
        starts = [c.arrival_s for c in rows if not c.parents and np.isfinite(c.arrival_s)]
        good.append((min(starts) if starts else np.inf, rows))
    if not good:
        raise empty_trace(path, "tasks")
    # Tasks in order of their start (untimed ones after, in file order), each task's calls together.
    good.sort(key=lambda g: g[0])
    kept = [c for _, rows in good for c in rows]
    start = {rows[0].task: t for t, rows in good}
    names = list(start)
    code = {n: i for i, n in enumerate(names)}
    n = len(kept)
    arrival = np.array([start[c.task] if not c.parents and np.isfinite(start[c.task]) else np.nan for c in kept],
                       dtype=np.float64)
    if np.isfinite(arrival).any():
        arrival = arrival - np.nanmin(arrival)
    line = np.array([c.line for c in kept], dtype=np.int64)

    def objects(values) -> np.ndarray:
        out = np.empty(n, dtype=object)
        out[:] = values
        return out

    return WorkloadTable(
        arrival_s=arrival, input_tokens=np.array([c.input_tokens for c in kept], dtype=np.int64),
        output_tokens=np.array([c.output_tokens for c in kept], dtype=np.int64), source=source, path=path,
        line=line, bad_lines=bad.count, task=np.array([code[c.task] for c in kept], dtype=np.int64),
        task_names=names, node=objects([c.node for c in kept]), parents=objects([tuple(c.parents) for c in kept]),
        tool_s=np.array([c.tool_s for c in kept], dtype=np.float64), prefix=objects([c.prefix for c in kept]),
        prefix_tree=prefix_tree, task_input=task_input, notes=list(notes or []),
        text=[c.text for c in kept] if any(c.text is not None for c in kept) else None)
