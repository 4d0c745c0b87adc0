"""A trace workload from its config: read, transform, fit, then stream ``WorkItem`` s.

``TraceWorkload`` is an iterator over the requests that start something (single requests
and sessions' first turns) in replay order, each with ``arrival_s`` (the trace's time
after the transforms, used by ``load=trace``); its ``followup`` hands the dispatcher the
later turns of sessions.  Prompts are built one request at a time from the shared table.
"""

from __future__ import annotations

import numpy as np

from conf.schema import TraceStress, typed
from conf.schema import TraceWorkload as TraceConfig
from loadgen.workloads.item import WorkItem
from loadgen.workloads.prompts import PromptBuilder
from loadgen.workloads.sessions import SessionReplay, request_id
from loadgen.workloads.table import WorkloadTable
from loadgen.workloads.tasks import TaskReplay, check_tasks, with_prefix_tree
from loadgen.workloads.traces import transforms
from loadgen.workloads.traces.prompts import TracePrompts, fit_lengths
from loadgen.workloads.traces.readers import FORMATS, read_trace


def trace_config(wcfg) -> TraceConfig:
    """``workload`` (composed, or a partial mapping) as the typed trace workload schema."""
    return wcfg if isinstance(wcfg, TraceConfig) else typed(wcfg, TraceConfig)


_CACHE: dict = {}


def _read(w: TraceConfig) -> WorkloadTable:
    """The trace as read, kept for the next call with the same file and options (a run
    checks it before starting the engine, then replays it at each load point)."""
    import os

    key = (w.name, str(w.path), w.on_bad_line, w.model_filter)
    try:
        st = os.stat(w.path)
        key += (st.st_mtime_ns, st.st_size)
    except (OSError, TypeError):
        pass  # the reader names the problem
    if key not in _CACHE:
        _CACHE.clear()  # one trace at a time: a big table is not kept twice
        _CACHE[key] = read_trace(key[0], w.path, key[2], key[3])
    return _CACHE[key]


def check_workload(wcfg, max_model_len: int | None) -> None:
    """Raise ValueError for a trace workload that cannot be replayed (bad file, bad line,
    lengths over the limit under on_too_long=error), before any engine is started."""
    if wcfg.get("name") not in FORMATS:
        return
    w = trace_config(wcfg)
    table = load_table(w)
    fit_lengths(table, int(max_model_len) if max_model_len else None, w.on_too_long)
    if table.has_tasks:
        check_tasks(table, w.task)


def load_table(wcfg, n: int | None = None) -> WorkloadTable:
    """The workload table of a trace config after window, sample_fraction, max_requests, time
    scaling, target rate and stress (in that order); ``n`` caps the requests further."""
    w = trace_config(wcfg)
    table = _read(w)
    win = w.window
    if win is not None:
        if len(win) != 2:
            raise ValueError(f"workload.window must be [start_s, end_s], got {list(win)}")
        table = transforms.window(table, win[0], win[1])
    if w.sample_fraction is not None:
        table = transforms.sample(table, w.sample_fraction, w.seed)
    cap = w.max_requests
    if n is not None:
        cap = min(cap, n) if cap is not None else n
    if cap is not None:
        table = transforms.first_n(table, cap)
    if len(table) == 0:
        raise ValueError(f"{table.path}: no request left after workload.window={list(win) if win else None}")
    table = transforms.scale_time(table, w.time_scale)
    if w.target_rate is not None:
        table = transforms.to_rate(table, w.target_rate)
    table = apply_stress(table, w.stress, w.seed)
    cap_out = w.max_output_tokens
    if cap_out is not None:
        if cap_out < 1:
            raise ValueError(f"workload.max_output_tokens must be >= 1, got {cap_out}")
        over = table.output_tokens > cap_out
        if over.any():
            table = table.take(np.arange(len(table)))
            table.output_tokens = np.minimum(table.output_tokens, cap_out)
            table.notes.append(f"{int(over.sum())} outputs capped at workload.max_output_tokens={cap_out}")
    return table


def apply_stress(table: WorkloadTable, stress: TraceStress, seed: int = 0) -> WorkloadTable:
    """Stress variants of any workload (``workload.stress.burst``, ``workload.stress.long_tail``)."""
    b, lt = stress.burst, stress.long_tail
    if b.factor != 1:
        table = transforms.burst(table, b.factor, b.start_s, b.end_s, seed)
    if lt.fraction > 0:
        table = transforms.long_tail(table, lt.fraction, lt.kind, lt.input_tokens, lt.output_tokens, seed)
    return table


class TraceWorkload:
    """Iterates the replay's starting requests; ``followup`` serves sessions' later turns."""

    def __init__(self, wcfg, builder: PromptBuilder, n: int | None = None, max_model_len: int | None = None,
                 table: WorkloadTable | None = None):
        if wcfg.get("name") not in FORMATS:
            raise ValueError(f"workload={wcfg.get('name')}: unknown trace format (known: {', '.join(FORMATS)})")
        w = trace_config(wcfg)
        table = table if table is not None else load_table(w, n)
        self.table = fit_lengths(table, max_model_len, w.on_too_long)
        if self.table.has_tasks:
            self.table = with_prefix_tree(self.table, w.task)
        if self.table.has_sessions and self.table.has_tasks:
            raise ValueError(f"{self.table.path}: a workload has sessions (session_id) or tasks (task_id), not both")
        self.prompts = TracePrompts(self.table, builder, seed=w.seed, max_model_len=max_model_len,
                                    on_too_long=w.on_too_long, max_output_tokens=w.max_output_tokens)
        self.sessions = SessionReplay(self.table, self.prompts, w.think_s, w.think_dist, w.seed) \
            if self.table.has_sessions else None
        self.tasks = TaskReplay(self.table, self.prompts, w.task, w.seed) if self.table.has_tasks else None
        self.followup = self.sessions.followup if self.sessions else self.tasks.followup if self.tasks else None
        self.skipped = 0
        self._it = self._generate()

    @property
    def expected_turns(self) -> dict | None:
        return self.sessions.expected_turns if self.sessions else None

    def __iter__(self):
        return self

    def __next__(self) -> WorkItem:
        return next(self._it)

    def _generate(self):
        t = self.table
        for i in transforms.replay_order(t).tolist():
            if t.task is not None and t.task[i] >= 0:
                if self.tasks.is_start(i):
                    item = self.tasks.first_item(i)
                    item.arrival_s = float(t.arrival_s[i]) if np.isfinite(t.arrival_s[i]) else None
                    yield item
                continue
            in_session = t.session is not None and t.session[i] >= 0
            if in_session and not self.sessions.is_first_turn(i):
                continue
            built = self.prompts.single(i)
            if built is None:
                self.skipped += 1
                continue
            prompt, n = built
            arrival = float(t.arrival_s[i]) if np.isfinite(t.arrival_s[i]) else None
            if in_session:
                item = self.sessions.first_item(i, prompt, n)
                item.arrival_s = arrival
            else:
                item = WorkItem(request_id=request_id(i), prompt=prompt, prompt_tokens=n,
                                max_tokens=self.prompts.output_tokens(i), arrival_s=arrival)
            yield item
