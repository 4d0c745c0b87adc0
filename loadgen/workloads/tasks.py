"""Tasks: DAGs of LLM calls with tool time between them, a shared prefix tree, and retries.

A task is a set of calls (the table's rows with one ``task`` code), each named by its
``node`` and waiting for its ``parents`` (nodes of the same task).  The replay sends a task's
roots at the task's arrival; a call whose parents have all ended is sent ``tool_s`` after the
last of them ended (the tool the agent ran on their output), never earlier, and its prompt is
built then, off the send loop, from the parents' real replies:

    prompt = its prefix path's tokens + (message, reply) of each call of its context + its message

where the context is every ancestor (``workload.task.context=ancestors``: the agent's history,
in the task's order) or its parents only.  A prefix path ``sys/docA`` is the tree's segments
along it, each segment's tokens drawn once from ``(workload.seed, its path)``: every call
under ``sys/docA`` starts with the same tokens, so an engine's prefix cache can reuse them.

An attempt succeeds when every call of it ended ``ok`` and every sink (a call no other waits
for) passed the success rule (``TaskCheck``, judged on the sink's record as it is stored, into
its ``check_ok``).  A failed call or check stops the attempt: nothing more of it is sent, the
calls in flight finish, and then, with attempts left (``workload.task.max_attempts``), the
task starts again from its roots (``attempt`` + 1).  A failed attempt's calls stay in the
records, the window and the cost.
"""

from __future__ import annotations

import copy
import zlib
from dataclasses import dataclass, field

import numpy as np
import regex

from loadgen.records import RequestRecord
from loadgen.workloads.item import WorkItem
from loadgen.workloads.table import WorkloadTable
from loadgen.workloads.traces.common import TraceError
from loadgen.workloads.traces.prompts import TracePrompts
from loadgen.workloads.traces.task_graph import flatten_prefix_tree, task_graphs


def with_prefix_tree(table: WorkloadTable, rule) -> WorkloadTable:
    """``table``, or a shallow copy carrying ``workload.task.prefix_tree`` where the trace
    declares no tree (the trace's own tree wins; the table read is cached: never changed)."""
    if table.prefix_tree is None and rule.prefix_tree is not None:
        table = copy.copy(table)
        table.prefix_tree = flatten_prefix_tree(rule.prefix_tree, "workload.task.prefix_tree")
    return table


def check_tasks(table: WorkloadTable, rule) -> dict:
    """The task graphs of ``table`` (with ``with_prefix_tree``'s tree); raises TraceError naming
    the file, line and field of what does not hold (before any engine starts:
    ``check_workload`` calls it)."""
    table = with_prefix_tree(table, rule)
    if table.prefix_tree is None and table.prefix is not None and (table.prefix != "").any():
        i = int(np.flatnonzero(table.prefix != "")[0])
        raise TraceError(f"{table.where_text(i)}: 'prefix' {table.prefix[i]!r} but no prefix tree is declared "
                         "(a 'prefix_tree' line in the trace, or workload.task.prefix_tree)")
    task_check(rule, 0)  # a bad success_regex, now
    return task_graphs(table)


@dataclass(frozen=True)
class TaskCheck:
    """The success rule on a sink's record (``workload.task.success``): ``ok`` (the call ended
    ok), ``rate`` (and a verifier passed it: a draw from ``(seed, task, attempt)`` below
    ``success_rate``, the same for every sink of an attempt), ``regex`` (and its reply
    matches ``success_regex``).

    It runs on the dispatcher's event loop, as the sink's record is stored: a regex match is cut
    after ``success_regex_timeout_s`` (a backtracking pattern on a long reply would otherwise stall
    every send for seconds); a match cut there fails the check and says so in the record's
    ``error``."""

    success: str = "ok"
    success_rate: float = 1.0
    success_regex: str | None = None
    seed: int = 0
    success_regex_timeout_s: float = 0.01

    def __call__(self, rec: RequestRecord) -> bool:
        if rec.status != "ok":
            return False
        if self.success == "rate":
            key = zlib.crc32(str(rec.task_id).encode())
            return bool(np.random.default_rng([self.seed, 29, key, rec.attempt]).random() < self.success_rate)
        if self.success == "regex":
            try:
                return regex.search(self.success_regex or "", rec.text or "",
                                    timeout=self.success_regex_timeout_s) is not None
            except TimeoutError:
                rec.error = (f"workload.task.success_regex={self.success_regex!r} ran over "
                             f"workload.task.success_regex_timeout_s={self.success_regex_timeout_s:g} on this reply "
                             f"({len(rec.text or '')} characters): check failed")
                return False
        return True


def task_check(rule, seed: int) -> TaskCheck:
    """The check of ``workload.task`` (conf/schema/workload.py ``TaskRule``)."""
    if rule.success == "regex":
        if not rule.success_regex:
            raise ValueError("workload.task.success=regex needs workload.task.success_regex")
        try:
            regex.compile(rule.success_regex)
        except regex.error as e:
            raise ValueError(f"workload.task.success_regex={rule.success_regex!r}: not a regular expression "
                             f"({e})") from None
    return TaskCheck(str(rule.success), float(rule.success_rate), rule.success_regex, int(seed),
                     float(rule.success_regex_timeout_s))


def request_id(row: int, attempt: int) -> str:
    return f"r{row:07d}" if attempt <= 1 else f"r{row:07d}.{attempt}"


@dataclass
class _Attempt:
    number: int
    ended: dict = field(default_factory=dict)     # node -> (done_ns, message, reply) of calls that ended ok
    asked: dict = field(default_factory=dict)     # node -> its own message, while in flight
    in_flight: int = 0
    failed: bool = False


class TaskReplay:
    """Serves a task workload's calls: ``first_item`` (a task's roots, at its arrival) and
    ``followup`` (after each call: the calls it made ready, each with its wait)."""

    def __init__(self, table: WorkloadTable, prompts: TracePrompts, rule, seed: int = 0):
        self.table = table
        self.prompts = prompts
        self.graphs = check_tasks(table, rule)  # (its prefix tree: the caller's with_prefix_tree)
        self.check = task_check(rule, seed)
        self.max_attempts = int(rule.max_attempts)
        self.context = str(rule.context)
        self.default_tool_s = float(rule.tool_s)
        if rule.tool_dist not in ("fixed", "exponential"):
            raise ValueError(f"workload.task.tool_dist={rule.tool_dist!r}: expected fixed or exponential")
        self.tool_dist = str(rule.tool_dist)
        self.rng = np.random.default_rng([seed, 31])
        self.by_name = {g.name: code for code, g in self.graphs.items()}
        self.first_root = {g.rows[0]: code for code, g in self.graphs.items()}
        self.state: dict[int, _Attempt] = {}
        self.unbuildable = 0  # calls whose prompt could not be built (their attempt failed there)

    def is_start(self, i: int) -> bool:
        """Row ``i`` starts its task (the first root): the replay yields it, with the other roots."""
        return i in self.first_root

    @property
    def calls_per_task(self) -> dict[str, int]:
        return {g.name: len(g.rows) for g in self.graphs.values()}

    def tool_time(self, i: int) -> float:
        """Row ``i``'s tool time: the trace's, else ``workload.task.tool_s`` (fixed, or the mean
        of an exponential draw)."""
        t = self.table.tool_s[i] if self.table.tool_s is not None else np.nan
        if np.isfinite(t):
            return max(float(t), 0.0)
        if self.tool_dist == "exponential" and self.default_tool_s > 0:
            return float(self.rng.exponential(self.default_tool_s))
        return self.default_tool_s

    def _item(self, code: int, node: str, st: _Attempt) -> WorkItem:
        g = self.graphs[code]
        i = g.node_row[node]
        ctx_nodes = g.ancestors[node] if self.context == "ancestors" else list(g.parents[node])
        context = [(st.ended[n][1], st.ended[n][2]) for n in ctx_nodes]
        path = str(self.table.prefix[i]) if self.table.prefix is not None else ""
        prompt, n, text = self.prompts.task_call(i, path, context)
        st.asked[node] = text
        st.in_flight += 1
        return WorkItem(request_id=request_id(i, st.number), prompt=prompt, prompt_tokens=n,
                        max_tokens=self.prompts.output_tokens(i), task_id=g.name, node=node,
                        parents=g.parents[node], attempt=st.number, task_calls=len(g.rows),
                        check=self.check if not g.children[node] else None)

    def _roots(self, code: int, st: _Attempt) -> list[WorkItem]:
        items = []
        for r in self.graphs[code].roots:
            it = self._item(code, r, st)
            it.tool_s = 0.0
            items.append(it)
        return items

    def first_item(self, i: int) -> WorkItem:
        """The first root of row ``i``'s task with the task's other roots as its companions
        (sent at the same time); raises ValueError where a root's prompt cannot be built."""
        code = self.first_root[i]
        st = self.state[code] = _Attempt(1)
        first, *others = self._roots(code, st)
        first.companions = others
        return first

    def followup(self, rec: RequestRecord) -> list[tuple[WorkItem, float]]:
        """After ``rec`` (a call) ended: the calls of its task it made ready, each with how long
        after ``rec``'s end to send it (its tool time after the last of its parents ended);
        a new attempt's roots when this attempt failed and attempts are left."""
        code = self.by_name.get(rec.task_id) if rec.task_id is not None else None
        st = self.state.get(code) if code is not None else None
        if st is None or rec.attempt != st.number:
            return []
        g = self.graphs[code]
        message = st.asked.pop(rec.node, None)
        st.in_flight -= 1
        ended_ns = rec.done_ns or rec.end_ns or 0
        if rec.status != "ok" or rec.check_ok is False or message is None:
            st.failed = True
        else:
            st.ended[rec.node] = (ended_ns, message, rec.text)
        out: list[tuple[WorkItem, float]] = []
        if not st.failed:
            for child in g.children[rec.node]:
                ps = g.parents[child]
                if child in st.asked or child in st.ended or not all(p in st.ended for p in ps):
                    continue
                try:
                    item = self._item(code, child, st)
                except ValueError:  # too long for the model even without its context
                    self.unbuildable += 1
                    st.failed = True
                    for it, _w in out:  # the attempt has failed: what it made ready is not sent
                        st.asked.pop(it.node, None)
                    st.in_flight -= len(out)
                    out = []
                    break
                item.tool_s = self.tool_time(g.node_row[child])
                last = max(st.ended[p][0] for p in ps)
                out.append((item, max((last - ended_ns) / 1e9, 0.0) + item.tool_s))
        if st.in_flight > 0 or out:
            return out
        if not st.failed and len(st.ended) == len(g.rows):
            del self.state[code]  # completed
            return []
        if st.number >= self.max_attempts:
            del self.state[code]  # out of attempts
            return []
        nxt = self.state[code] = _Attempt(st.number + 1)
        try:
            return [(it, 0.0) for it in self._roots(code, nxt)]
        except ValueError:
            self.unbuildable += 1
            del self.state[code]
            return []
