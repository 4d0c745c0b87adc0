"""Task columns of a ``WorkloadTable`` from one record per call, for the readers of peers'
agentic formats: the calls as a reader found them (``Call``), set into the table's task fields
by ``task_graph.tasks_from_columns``, whose checks (a node unique in its task, every parent a
node of the same task, no cycle) stop the read with the file and line.  Under
``workload.on_bad_line=skip`` a task that fails them is dropped whole (a call without its
parents cannot be sent) and counted as one bad line.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from loadgen.workloads.table import WorkloadTable
from loadgen.workloads.traces.common import BadLines, TraceError, empty_trace
from loadgen.workloads.traces.task_graph import task_graphs, tasks_from_columns


@dataclass
class Call:
    """One LLM call of a task as a reader found it."""

    task: str
    node: str
    parents: tuple
    input_tokens: int
    output_tokens: int
    line: int                        # the line of the file it came from (table.line)
    arrival_s: float = np.nan        # the task's start on the trace's clock (roots only)
    tool_s: float = np.nan           # NaN: workload.task.tool_s applies
    prefix: str = ""
    text: str | None = None          # the call's own message as text (then input_tokens is -1)


def _table(calls: list[Call], path: str, source: str, task_input: str, prefix_tree: dict | None,
           bad_lines: int = 0, notes: list | None = None) -> WorkloadTable:
    table = WorkloadTable(
        arrival_s=np.array([np.nan if c.parents else c.arrival_s for c in calls], dtype=np.float64),
        input_tokens=np.array([c.input_tokens for c in calls], dtype=np.int64),
        output_tokens=np.array([c.output_tokens for c in calls], dtype=np.int64), source=source, path=path,
        line=np.array([c.line for c in calls], dtype=np.int64), bad_lines=bad_lines, task_input=task_input,
        notes=list(notes or []), text=[c.text for c in calls] if any(c.text is not None for c in calls) else None)
    tasks_from_columns(table, [c.task for c in calls], [c.node for c in calls], [c.parents for c in calls],
                       [c.tool_s for c in calls], [c.prefix for c in calls], prefix_tree)
    return table


def task_table(calls: list[Call], bad: BadLines, path: str, source: str, task_input: str = "message",
               prefix_tree: dict | None = None, notes: list | None = None) -> WorkloadTable:
    """The table of ``calls`` (each task's calls in the reader's order), every task checked as a
    DAG, tasks in order of their start (untimed ones after, in file order); a task's start (its
    roots' earliest time, shifted so the earliest task starts at 0) is on its first root, NaN on
    its other calls."""
    by_task: dict[str, list[Call]] = {}
    for c in calls:
        by_task.setdefault(c.task, []).append(c)
    good: list[tuple[float, list[Call]]] = []
    for rows in by_task.values():
        if bad.policy == "skip":
            try:
                task_graphs(_table(rows, path, source, task_input, prefix_tree))
            except TraceError:
                bad.count += 1
                continue  # the whole task goes
        starts = [c.arrival_s for c in rows if not c.parents and np.isfinite(c.arrival_s)]
        good.append((min(starts) if starts else np.inf, rows))
    if not good:
        raise empty_trace(path, "tasks")
    good.sort(key=lambda g: g[0])
    kept = [c for _, rows in good for c in rows]
    first = min((t for t, _ in good if np.isfinite(t)), default=0.0)
    for c in kept:
        c.arrival_s -= first
    return _table(kept, path, source, task_input, prefix_tree, bad.count, notes)
