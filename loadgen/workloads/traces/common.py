"""What every trace reader shares: the error type, bad-line handling, time order and
sessions built from a column of session ids."""

from __future__ import annotations

import os

import numpy as np

from loadgen.workloads.table import WorkloadTable

BAD_LINE_POLICIES = ("error", "skip")


class TraceError(ValueError):
    """A trace the user gave cannot be read; the message names the file and line."""


class BadLines:
    def __init__(self, path: str, policy: str):
        if policy not in BAD_LINE_POLICIES:
            raise TraceError(f"workload.on_bad_line={policy!r}: expected one of {BAD_LINE_POLICIES}")
        self.path, self.policy, self.count = path, policy, 0

    def __call__(self, lineno: int | str, text: str, why: str) -> None:
        if self.policy == "skip":
            self.count += 1
            return
        snippet = text.rstrip("\r\n")
        snippet = snippet if len(snippet) <= 200 else snippet[:200] + "..."
        raise TraceError(f"{self.path}:{lineno}: {why}: {snippet!r} "
                         "(workload.on_bad_line=skip skips and counts such lines)")


def check_file(path) -> str:
    if not path:
        raise TraceError("workload.path is not set: give the trace file with workload.path=FILE")
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise TraceError(f"workload.path={path}: no such file")
    return path


def first_line(path: str) -> str:
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.readline().lstrip("\ufeff").rstrip("\r\n")


def empty_trace(path: str, what: str = "requests") -> TraceError:
    return TraceError(f"{path}: the trace has no {what}")


def sorted_by_time(table: WorkloadTable) -> WorkloadTable:
    a = table.arrival_s
    if a.size > 1 and (np.diff(a[~np.isnan(a)]) < 0).any():
        table = table.take(np.argsort(a, kind="stable"))
        table.notes.append("rows were not in time order; sorted by timestamp")
    return table


def sessions_from_ids(table: WorkloadTable, sid: np.ndarray, elapsed: np.ndarray | None,
                       order_key: np.ndarray | None = None) -> None:
    """Sessions from a column of session ids (empty: none); turns in time order.

    Think time of turn k = its timestamp - the previous turn's timestamp - the previous
    turn's elapsed (response) time where the trace has it, never below 0.
    """
    valid = (sid != "") & (sid != "nan") & (sid != "None")
    names, codes = np.unique(np.where(valid, sid, ""), return_inverse=True)
    codes = codes.astype(np.int64)
    if "" in names:
        empty = int(np.searchsorted(names, ""))
        codes = np.where(codes == empty, -1, codes - (codes > empty))
        names = names[names != ""]
    order = np.lexsort((table.arrival_s if order_key is None else order_key, codes))
    turn = np.zeros(len(table), dtype=np.int32)
    think = np.full(len(table), np.nan)
    arrival = table.arrival_s.copy()
    prev = last = -1
    k = 0
    for i in order.tolist():
        c = codes[i]
        if c < 0:
            prev = -1
            continue
        if c == prev:
            k += 1
            j = last
            gap = table.arrival_s[i] - table.arrival_s[j]
            if elapsed is not None and np.isfinite(elapsed[j]):
                gap -= elapsed[j]
            think[i] = max(gap, 0.0) if np.isfinite(gap) else np.nan  # NaN: workload.think_s applies
            arrival[i] = np.nan  # sent when the previous turn ends, plus the think time
        else:
            k = 0
        turn[i] = k
        prev, last = c, i
    table.session, table.turn, table.think_s = codes, turn, think
    table.arrival_s = arrival
    table.session_names = names.tolist()
