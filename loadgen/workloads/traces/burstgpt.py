"""BurstGPT CSV, releases 1 and 3: ``Timestamp,Model,Request tokens,Response tokens,Total
tokens,Log Type`` (seconds); release 3 adds ``Session ID,Elapsed time``."""

from __future__ import annotations

import numpy as np

from loadgen.workloads.table import WorkloadTable
from loadgen.workloads.traces.common import (
    BadLines,
    TraceError,
    check_file,
    empty_trace,
    sessions_from_ids,
    sorted_by_time,
)
from loadgen.workloads.traces.csv_fields import csv_fast, csv_slow, float_field, int_field, read_header

BURST_COLUMNS = ["Timestamp", "Model", "Request tokens", "Response tokens"]


def read_burstgpt(path, on_bad_line: str = "error", model_filter: str | None = None) -> WorkloadTable:
    """BurstGPT CSV, releases 1 (no sessions) and 3 (``Session ID``, ``Elapsed time``)."""
    import pyarrow as pa

    path = check_file(path)
    bad = BadLines(path, on_bad_line)
    header = read_header(path, BURST_COLUMNS, "BurstGPT")
    has_sessions = "Session ID" in header
    has_elapsed = "Elapsed time" in header
    types = {"Timestamp": pa.float64(), "Model": pa.string(), "Request tokens": pa.int64(),
             "Response tokens": pa.int64()}
    parsers = {"Timestamp": float_field, "Model": str.strip, "Request tokens": int_field,
               "Response tokens": int_field}
    if has_sessions:
        types["Session ID"] = pa.string()
        parsers["Session ID"] = str.strip
    if has_elapsed:
        types["Elapsed time"] = pa.float64()
        parsers["Elapsed time"] = float_field
    t = csv_fast(path, types)
    if t is not None and all(t.column(c).null_count == 0 for c in types if c != "Session ID"):
        cols = {c: t.column(c).to_numpy(zero_copy_only=False) for c in types}
        lines = np.arange(2, t.num_rows + 2, dtype=np.int64)
        if (cols["Request tokens"] < 0).any() or (cols["Response tokens"] < 0).any():
            t = None
    else:
        t = None
    if t is None:
        raw, lines = csv_slow(path, header, parsers, bad)
        cols = {c: np.asarray(v) for c, v in raw.items()}
    if lines.size == 0:
        raise empty_trace(path)
    keep = np.ones(lines.size, dtype=bool)
    notes = []
    if model_filter:
        keep &= cols["Model"].astype(str) == str(model_filter)
        if not keep.any():
            models = sorted(set(cols["Model"].astype(str).tolist()))[:10]
            raise TraceError(f"{path}: workload.model_filter={model_filter!r} matches no row (models: {models})")
    zero = keep & (cols["Response tokens"].astype(np.int64) == 0)
    if zero.any():
        notes.append(f"{int(zero.sum())} rows with 0 response tokens (failed in the trace) dropped")
        keep &= ~zero
    if not keep.any():
        raise empty_trace(path, "requests with a response")
    ts = cols["Timestamp"].astype(np.float64)[keep]
    table = WorkloadTable(arrival_s=ts - ts.min(), input_tokens=cols["Request tokens"].astype(np.int64)[keep],
                          output_tokens=cols["Response tokens"].astype(np.int64)[keep], source="burstgpt",
                          path=path, line=lines[keep], bad_lines=bad.count, notes=notes)
    if has_sessions:
        sid = cols["Session ID"].astype(str)[keep]
        elapsed = cols["Elapsed time"].astype(np.float64)[keep] if has_elapsed else None
        sessions_from_ids(table, sid, elapsed)
    return sorted_by_time(table)
