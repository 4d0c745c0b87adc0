"""Per-task metrics: tasks (DAGs of LLM calls, ``loadgen.workloads.tasks``) completed, their time,
how much of it waited on the engine, their critical path, attempts, task SLO and cost.

Everything comes from the rows of ``requests.parquet`` alone, through their task columns
(``loadgen.records.RequestRecord``: ``task_id``, ``node``, ``parents``, ``attempt`` from 1,
``task_calls``, ``check_ok`` on sinks).  A table without task rows (no row with ``attempt >= 1``,
or a file written before the columns existed) has no task metrics: ``task_summary`` gives ``{}``.

Definitions:
- tasks: the distinct ``task_id`` of rows with ``attempt >= 1``; a task with any warm-up row is
  left out (as sessions are in ``metrics.summary``).  ``num_tasks`` counts them.
- an attempt (``task_id``, ``attempt``) succeeded iff it has ``task_calls`` rows, every one with
  status ``ok``, and every sink row (a row whose ``node`` no row of that attempt lists in its
  ``parents``) has ``check_ok`` true.  A task completed iff one of its attempts succeeded (attempts
  are sequential: the succeeded one is the last).  ``completed_tasks``.
- censored: a task that did not complete and whose last attempt was cut by the run's end, not
  failed: no row of it has a status other than ``ok`` or ``cancelled`` nor ``check_ok`` false, and it
  has a ``cancelled`` row (in flight when the run stopped) or fewer than ``task_calls`` rows (a call
  due after the drain's end was never sent).  ``censored_tasks``; ``task_censored_rate`` =
  censored_tasks / num_tasks.  Its outcome is unknown, so it is neither completed nor failed:
  ``task_completion_rate`` = completed_tasks / (num_tasks - censored_tasks) (NaN when every task
  was censored).  With ``load.duration_s`` a started task's calls are still sent during the drain
  (``loadgen.dispatch``), so only what ``load.drain_timeout_s`` cuts is censored.  (A failed attempt
  whose retry the end cut counts as failed: the rows do not say attempts were left; a call whose
  prompt could not be built, ``workload_unbuildable_calls``, leaves its attempt short like a cut.)
- ``task_attempts`` = the distinct attempts of every counted task (censored ones included: they
  were spent); ``attempts_per_completed_task`` = task_attempts / completed_tasks (+inf with none
  completed).
- a call's end: its ``end_ns`` (last token), else its ``done_ns`` (a call that ended with no token
  at all, a failed one); a row with no ``sent_ns`` or no end was never on the engine and is left
  out of the times below.
- task time T (completed tasks only): min ``sent_ns`` over every row of the task (attempt 1's
  first call) to the last end among its succeeded attempt's rows: tool time, client lag and
  failed attempts included.  ``mean_/median_/pXX_task_time_ms`` with their within-run intervals
  (``metrics.percentiles.add_latency_stats``), ``n_task_time``.
- engine share: |U_i [sent_i, end_i]| / T, the union of the task's calls' intervals (every
  attempt, clipped to the task's span) over its time; ``mean_task_engine_share`` over completed
  tasks.  Its complement is tool time, client lag and gaps between attempts.
- critical-path engine time, per attempt: start at its row with the last end, add (end - sent),
  step to that row's parent (a row of the same attempt named in its ``parents``) with the latest
  end, until a row with none; summed over the task's attempts.  ``mean_/pXX_critical_path_engine_ms``
  over completed tasks.
- task SLO (``slo.task_s``): a good task completed with T <= task_s (every completed task is good
  when no task_s is set); ``good_tasks``; ``task_slo_attainment`` = good_tasks / (num_tasks -
  censored_tasks) (only with task_s).  ``good_task_output_tokens``: the output tokens of the
  succeeded attempt's calls of the good tasks.
- cost (``task_cost``, with the window's ``cost_total``, ``metrics.cost``):
  ``cost_per_completed_task`` = cost_total / completed_tasks, ``cost_per_task_attempt`` =
  cost_total / task_attempts, ``cost_per_mtok_good_task`` = 1e6 x cost_total /
  good_task_output_tokens (+inf when the denominator is 0: the cost was still paid).  The
  numerator is the whole window's cost, censored tasks' calls included (principle 1: nothing
  leaves the window); the denominator counts completed tasks only, so a run whose drain cut
  tasks (``censored_tasks`` > 0) reads high by at most the censored tasks' share of the work:
  raise ``load.drain_timeout_s`` to let them finish.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from metrics.cost import per_million, per_unit
from metrics.percentiles import add_latency_stats
from metrics.slo import SLO

# the columns a table needs to have tasks (loadgen.records): older files lack them
TASK_COLUMNS = ("task_id", "node", "parents", "attempt", "task_calls", "check_ok")
_READ = TASK_COLUMNS + ("status", "sent_ns", "end_ns", "done_ns", "output_tokens")


@dataclass(frozen=True)
class Call:
    """One row of a task: what the definitions read of it."""

    node: str | None
    parents: tuple[str, ...]
    status: str
    sent_ns: int | None
    end_ns: int | None      # the call's end (module doc): end_ns, else done_ns
    task_calls: int | None
    check_ok: bool | None
    output_tokens: int

    @property
    def on_engine(self) -> bool:
        return self.sent_ns is not None and self.end_ns is not None


@dataclass
class Task:
    """A task's rows, by attempt."""

    task_id: str
    attempts: dict[int, list[Call]]

    @cached_property
    def succeeded(self) -> int | None:
        """The attempt that succeeded (the last one, attempts being sequential), else None."""
        won = [a for a, calls in self.attempts.items() if attempt_succeeded(calls)]
        return max(won) if won else None

    @cached_property
    def censored(self) -> bool:
        """Did not complete, and its last attempt was cut by the run's end (module doc)."""
        return self.succeeded is None and attempt_cut(self.attempts[max(self.attempts)])

    def span_ns(self) -> tuple[int, int] | None:
        """(first send of any row, last end of the succeeded attempt); None when the task did not
        complete (or, in a malformed file, its rows carry no such time)."""
        won = self.succeeded
        if won is None:
            return None
        sent = [c.sent_ns for calls in self.attempts.values() for c in calls if c.sent_ns is not None]
        ends = [c.end_ns for c in self.attempts[won] if c.end_ns is not None]
        return (min(sent), max(ends)) if sent and ends else None

    def time_s(self) -> float:
        """Task time T (module doc); NaN when the task did not complete."""
        span = self.span_ns()
        return (span[1] - span[0]) / 1e9 if span else math.nan

    def engine_s(self) -> float:
        """|U [sent, end]| over the task's calls, clipped to its span (``span_ns``)."""
        span = self.span_ns()
        if span is None:
            return math.nan
        lo, hi = span
        calls = [c for cs in self.attempts.values() for c in cs if c.on_engine]
        return union_length_ns([(max(c.sent_ns, lo), min(c.end_ns, hi)) for c in calls]) / 1e9

    def critical_path_s(self) -> float:
        """Critical-path engine time (module doc), summed over the attempts."""
        return sum(critical_path_ns(calls) for calls in self.attempts.values()) / 1e9


def attempt_succeeded(calls: list[Call]) -> bool:
    """``task_calls`` rows, all ``ok``, every sink's ``check_ok`` true (module doc)."""
    expected = max((c.task_calls for c in calls if c.task_calls is not None), default=None)
    if expected is None or len(calls) != expected or any(c.status != "ok" for c in calls):
        return False
    return all(c.check_ok is True for c in sinks(calls))


def attempt_cut(calls: list[Call]) -> bool:
    """Cut by the run's end, not failed: no row failed (a status other than ``ok``/``cancelled``, or
    ``check_ok`` false), and a row was ``cancelled`` or fewer than ``task_calls`` rows exist."""
    if any(c.status not in ("ok", "cancelled") or c.check_ok is False for c in calls):
        return False
    expected = max((c.task_calls for c in calls if c.task_calls is not None), default=None)
    return any(c.status == "cancelled" for c in calls) or (expected is not None and len(calls) < expected)


def sinks(calls: list[Call]) -> list[Call]:
    """The calls of one attempt no other call of it lists among its parents."""
    waited_for = {p for c in calls for p in c.parents}
    return [c for c in calls if c.node not in waited_for]


def union_length_ns(intervals: list[tuple[int, int]]) -> int:
    """Length of the union of closed intervals [a, b] (empty ones, b < a, count 0)."""
    total, cur_lo, cur_hi = 0, None, None
    for a, b in sorted(i for i in intervals if i[1] >= i[0]):
        if cur_hi is None or a > cur_hi:
            if cur_hi is not None:
                total += cur_hi - cur_lo
            cur_lo, cur_hi = a, b
        else:
            cur_hi = max(cur_hi, b)
    if cur_hi is not None:
        total += cur_hi - cur_lo
    return total


def critical_path_ns(calls: list[Call]) -> int:
    """One attempt's critical-path engine time: from its call with the last end, (end - sent) of
    each call on the path, stepping to the parent with the latest end until a call with none."""
    on = [c for c in calls if c.on_engine]
    if not on:
        return 0
    by_node: dict[str | None, Call] = {}
    for c in on:
        if c.node not in by_node or c.end_ns > by_node[c.node].end_ns:
            by_node[c.node] = c
    cur, seen, total = max(on, key=lambda c: c.end_ns), set(), 0
    while cur is not None and cur.node not in seen:  # seen: a malformed file's cycle ends the walk
        seen.add(cur.node)
        total += cur.end_ns - cur.sent_ns
        ps = [by_node[p] for p in cur.parents if p in by_node]
        cur = max(ps, key=lambda c: c.end_ns) if ps else None
    return total


def has_tasks(table: pa.Table) -> bool:
    """Whether ``table`` has the task columns and a row of a task."""
    if not all(c in table.column_names for c in TASK_COLUMNS):
        return False
    return bool(pc.any(pc.greater_equal(table.column("attempt"), 1)).as_py())


def read_tasks(table: pa.Table) -> list[Task]:
    """The counted tasks of a requests table (warm-up tasks left out), in first-row order."""
    if not has_tasks(table):
        return []
    is_task = pc.and_(pc.greater_equal(table.column("attempt"), 1), pc.is_valid(table.column("task_id")))
    rows = table.filter(pc.fill_null(is_task, False))
    warmup = rows.column("warmup").to_pylist() if "warmup" in rows.column_names else [False] * rows.num_rows
    warm = {t for t, w in zip(rows.column("task_id").to_pylist(), warmup) if w}
    cols = {c: rows.column(c).to_pylist() if c in rows.column_names else [None] * rows.num_rows for c in _READ}
    out: dict[str, Task] = {}
    for i, tid in enumerate(cols["task_id"]):
        if tid in warm:
            continue
        end = cols["end_ns"][i] if cols["end_ns"][i] is not None else cols["done_ns"][i]
        call = Call(cols["node"][i], tuple(cols["parents"][i] or ()), cols["status"][i], cols["sent_ns"][i], end,
                    cols["task_calls"][i], cols["check_ok"][i], int(cols["output_tokens"][i] or 0))
        out.setdefault(tid, Task(tid, {})).attempts.setdefault(int(cols["attempt"][i]), []).append(call)
    return list(out.values())


def task_summary(table: pa.Table, slo: SLO | None = None) -> dict:
    """The task keys of ``summary.json`` (module doc); ``{}`` when the table has no task rows."""
    tasks = read_tasks(table)
    if not tasks:
        return {}
    task_s = slo.task_s if slo is not None else None
    done = [t for t in tasks if t.succeeded is not None]
    times = np.array([t.time_s() for t in done], dtype=np.float64)
    engine = np.array([t.engine_s() for t in done], dtype=np.float64)
    attempts = sum(len(t.attempts) for t in tasks)
    censored = sum(t.censored for t in tasks)
    judged = len(tasks) - censored  # tasks whose outcome is known
    out: dict = {"num_tasks": len(tasks), "completed_tasks": len(done), "censored_tasks": censored,
                 "task_censored_rate": censored / len(tasks),
                 "task_completion_rate": len(done) / judged if judged else math.nan, "task_attempts": attempts,
                 "attempts_per_completed_task": attempts / len(done) if done else math.inf}
    add_latency_stats(out, "task_time", times)
    shares = engine[times > 0] / times[times > 0]
    out["mean_task_engine_share"] = float(shares.mean()) if shares.size else math.nan
    add_latency_stats(out, "critical_path_engine", np.array([t.critical_path_s() for t in done], dtype=np.float64))
    good = [t for t, s in zip(done, times) if task_s is None or s <= task_s]
    out["good_tasks"] = len(good)
    if task_s is not None:
        out["task_slo_s"] = float(task_s)
        out["task_slo_attainment"] = len(good) / judged if judged else math.nan
    out["good_task_output_tokens"] = int(sum(c.output_tokens for t in good for c in t.attempts[t.succeeded]))
    return out


def task_cost(cost_total: float, tasks: dict) -> dict:
    """The cost keys of a run with tasks (``tasks``: ``task_summary``'s keys), module doc."""
    if not tasks:
        return {}
    return {"cost_per_completed_task": per_unit(cost_total, tasks["completed_tasks"]),
            "cost_per_task_attempt": per_unit(cost_total, tasks["task_attempts"]),
            "cost_per_mtok_good_task": per_million(cost_total, tasks["good_task_output_tokens"])}
