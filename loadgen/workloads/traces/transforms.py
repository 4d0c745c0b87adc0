"""Time transforms of a workload table: window, speed-up, target rate, request cap, stress.

Each returns a new table built with one gather (``WorkloadTable.take``), never per request.
Times are those of the table: ``arrival_s`` of requests that start something (a single
request, a session's first turn, a task's roots); later turns of a session carry ``think_s``
instead, later calls of a task ``tool_s``.  A session or a task is one unit: kept, dropped,
sampled and counted whole.
"""

from __future__ import annotations

import numpy as np

from loadgen.workloads.table import WorkloadTable


def units(table: WorkloadTable) -> np.ndarray:
    """Each row's unit: its session, its task, or itself (codes: >= 0 sessions, then tasks
    after the sessions' codes, < 0 single requests)."""
    unit = -1 - np.arange(len(table), dtype=np.int64)
    if table.session is not None:
        unit = np.where(table.session >= 0, table.session, unit)
    if table.task is not None:
        base = int(table.session.max()) + 1 if table.session is not None and table.session.size else 0
        unit = np.where(table.task >= 0, base + np.maximum(table.task, 0), unit)
    return unit


def single_rows(table: WorkloadTable) -> np.ndarray:
    """Rows that are requests of their own (in no session and no task)."""
    return units(table) < 0


def _session_start(table: WorkloadTable) -> np.ndarray:
    """For each row, the arrival of the request that starts it (its session's first turn, its
    task's first root, or itself)."""
    a = table.arrival_s.copy()
    if table.has_tasks:
        t = table.task
        rows = np.flatnonzero(t >= 0)
        first = np.full(int(t.max()) + 1, np.inf)
        np.fmin.at(first, t[rows], np.where(np.isnan(a[rows]), np.inf, a[rows]))
        a[rows] = np.where(np.isinf(first[t[rows]]), np.nan, first[t[rows]])
    if table.has_sessions:
        s = table.session
        firsts = (s >= 0) & (table.turn == 0)
        start_of = dict(zip(s[firsts].tolist(), a[firsts].tolist()))
        later = (s >= 0) & (table.turn > 0)
        a[later] = [start_of.get(c, np.nan) for c in s[later].tolist()]
    return a


def replay_order(table: WorkloadTable) -> np.ndarray:
    """Row order of a replay: by start time, then session turn (rows without time keep file order)."""
    start = _session_start(table)
    turn = table.turn if table.turn is not None else np.zeros(len(table), dtype=np.int32)
    key = np.where(np.isnan(start), np.inf, start)
    return np.lexsort((turn, key))


def window(table: WorkloadTable, start_s: float | None, end_s: float | None) -> WorkloadTable:
    """Requests starting in [start_s, end_s) (whole sessions go with their first turn),
    shifted so that ``start_s`` becomes 0."""
    start = _session_start(table)
    lo = float(start_s) if start_s is not None else 0.0
    hi = float(end_s) if end_s is not None else np.inf
    if hi <= lo:
        raise ValueError(f"workload.window=[{start_s}, {end_s}]: the end must be after the start")
    keep = (start >= lo) & (start < hi)
    out = table.take(np.flatnonzero(keep))
    out.arrival_s = out.arrival_s - lo
    return out


def scale_time(table: WorkloadTable, time_scale: float) -> WorkloadTable:
    """Speed the trace up by ``time_scale`` (2: twice as fast); think times too."""
    time_scale = float(time_scale)
    if not np.isfinite(time_scale) or time_scale <= 0:
        raise ValueError(f"workload.time_scale must be > 0, got {time_scale}")
    if time_scale == 1.0:
        return table
    out = table.take(np.arange(len(table)))
    out.arrival_s = table.arrival_s / time_scale
    if table.think_s is not None:
        out.think_s = table.think_s / time_scale
    if table.tool_s is not None:
        out.tool_s = table.tool_s / time_scale
    return out


def mean_rate(arrival_s: np.ndarray) -> float:
    """Requests per second over the span of the arrivals: (n - 1) / (last - first)."""
    a = arrival_s[~np.isnan(arrival_s)]
    if a.size < 2:
        return float("nan")
    span = float(a.max() - a.min())
    return (a.size - 1) / span if span > 0 else float("inf")


def to_rate(table: WorkloadTable, target_rate: float) -> WorkloadTable:
    """Stretch or compress time uniformly so the mean rate is ``target_rate``: the burst
    shape (the relative timing of every request) is kept."""
    target_rate = float(target_rate)
    if not np.isfinite(target_rate) or target_rate <= 0:
        raise ValueError(f"workload.target_rate must be > 0 requests/s, got {target_rate}")
    now = mean_rate(table.arrival_s)
    if not np.isfinite(now):
        raise ValueError(f"workload.target_rate: the trace's arrivals span no time (mean rate {now}); cannot rescale")
    return scale_time(table, target_rate / now)


def first_n(table: WorkloadTable, n: int) -> WorkloadTable:
    """The first ``n`` requests in replay order (a session cut at the cap keeps its first turns);
    of a task workload, the first ``n`` tasks (a task is never cut: its DAG would not hold)."""
    n = int(n)
    if n < 1:
        raise ValueError(f"workload.max_requests must be >= 1, got {n}")
    order = replay_order(table)
    if table.has_tasks:
        unit = units(table)[order]
        _, first = np.unique(unit, return_index=True)
        keep = set(unit[np.sort(first)[:n]].tolist())
        return table.take(np.sort(order[np.isin(unit, list(keep))]))
    return table.take(np.sort(order[:n]))


def sample(table: WorkloadTable, fraction: float, seed: int = 0) -> WorkloadTable:
    """Each request (a session with all its turns) kept with probability ``fraction``, drawn
    from ``seed``: the trace thinned to a rate an engine can take, its shape over time kept
    (with ``time_scale``: a long window compressed at the rate the trace had)."""
    if not 0 < fraction <= 1:
        raise ValueError(f"workload.sample_fraction must be in (0, 1], got {fraction}")
    if fraction == 1:
        return table
    unit = units(table)   # a session's turns, a task's calls go together
    keys, inverse = np.unique(unit, return_inverse=True)
    keep = np.random.default_rng(seed).random(keys.size) < fraction
    return table.take(np.flatnonzero(keep[inverse]))


def burst(table: WorkloadTable, factor: float, start_s: float, end_s: float, seed: int = 0) -> WorkloadTable:
    """``factor`` x the rate over [start_s, end_s): each single request starting there gets
    ``factor - 1`` copies (the fraction drawn at random), spread evenly in the gap to the
    next arrival, so the burst keeps the trace's own shape inside the window."""
    factor = float(factor)
    if factor < 1:
        raise ValueError(f"workload.stress.burst.factor must be >= 1, got {factor}")
    if end_s is None or start_s is None or float(end_s) <= float(start_s):
        raise ValueError("workload.stress.burst needs start_s < end_s")
    rng = np.random.default_rng(seed)
    a = table.arrival_s
    single = single_rows(table)
    order = np.argsort(np.where(np.isnan(a), np.inf, a), kind="stable")
    timed = order[~np.isnan(a[order])]
    nxt = np.empty(len(table))
    nxt[:] = np.nan
    nxt[timed[:-1]] = a[timed[1:]]
    if timed.size:
        nxt[timed[-1]] = min(float(end_s), a[timed[-1]] + 1.0)
    inside = np.flatnonzero(single & (a >= float(start_s)) & (a < float(end_s)))
    extra = factor - 1.0
    copies = np.floor(extra).astype(int) + (rng.random(inside.size) < (extra - np.floor(extra))).astype(int)
    src = np.repeat(inside, copies)
    j = np.concatenate([np.arange(1, c + 1) for c in copies]) if src.size else np.empty(0)
    cnt = np.repeat(copies, copies)
    gap = np.minimum(nxt[src], float(end_s)) - a[src]
    times = a[src] + gap * j / (cnt + 1)
    out = table.take(np.concatenate([np.arange(len(table)), src]))
    out.arrival_s = np.concatenate([table.arrival_s, times])
    out.notes.append(f"burst x{factor:g} over [{start_s}, {end_s}) s: {src.size} copies added")
    return out


def long_tail(table: WorkloadTable, fraction: float, kind: str, input_tokens: int | None,
              output_tokens: int | None, seed: int = 0) -> WorkloadTable:
    """Replace a ``fraction`` of the single requests by long-input (``kind=input``) or
    long-output (``kind=output``) ones of the given lengths."""
    fraction = float(fraction)
    if not 0 <= fraction <= 1:
        raise ValueError(f"workload.stress.long_tail.fraction must be in [0, 1], got {fraction}")
    if kind not in ("input", "output"):
        raise ValueError(f"workload.stress.long_tail.kind must be input or output, got {kind!r}")
    length = input_tokens if kind == "input" else output_tokens
    if length is None or int(length) < 1:
        raise ValueError(f"workload.stress.long_tail.{kind}_tokens must be >= 1 for kind={kind}")
    rng = np.random.default_rng(seed)
    single = np.flatnonzero(single_rows(table))
    k = int(round(fraction * single.size))
    chosen = rng.choice(single, size=k, replace=False) if k else np.empty(0, dtype=np.int64)
    out = table.take(np.arange(len(table)))
    col = out.input_tokens if kind == "input" else out.output_tokens
    col[chosen] = int(length)
    if kind == "input" and out.text is not None:
        for i in chosen.tolist():
            out.text[i] = None  # the length now rules, not the trace's text
    out.notes.append(f"long tail: {k} requests given {kind} length {int(length)}")
    return out
