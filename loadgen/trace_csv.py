"""CSV traces: Azure LLM inference (2023, 2024) and BurstGPT (releases 1 and 3).

Large files are read by pyarrow in one pass; when that fails, the file is re-read line by
line to name the first bad line (or to skip and count them).
"""

from __future__ import annotations

import csv
import io
import re

import numpy as np

from loadgen.trace_input import (BadLines, TraceError, check_file, empty_trace, first_line, sessions_from_ids,
                                 sorted_by_time)
from loadgen.trace_table import WorkloadTable


# ---------------------------------------------------------------------------- timestamps
_TS = re.compile(r"^(\d{4}-\d\d-\d\d)[ T](\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:?\d\d)?$")


def parse_timestamp_ns(text: str) -> int:
    """One Azure-style timestamp -> ns since the epoch (UTC); ValueError when malformed."""
    m = _TS.match(text.strip())
    if not m:
        raise ValueError("not a timestamp like 2023-11-16 18:17:03.9799600[+00:00]")
    base = np.datetime64(f"{m.group(1)}T{m.group(2)}", "ns").astype(np.int64)
    frac = int((m.group(3) or "0").ljust(9, "0"))
    zone = m.group(4)
    off = 0
    if zone and zone != "Z":
        sign = -1 if zone[0] == "-" else 1
        hh, mm = int(zone[1:3]), int(zone[-2:])
        off = sign * (hh * 3600 + mm * 60) * 1_000_000_000
    return int(base) + frac - off


def _timestamps_fast(col):
    """A pyarrow string column of timestamps -> int64 ns (UTC); raises on anything odd."""
    import pyarrow as pa
    import pyarrow.compute as pc

    # A zero zone is dropped; any other zone is left in and makes the cast fail (slow path).
    naive = pc.replace_substring_regex(col, r"(Z|[+-]00:?00)$", "")
    return naive.cast(pa.timestamp("ns")).cast(pa.int64()).to_numpy(zero_copy_only=False)


def _relative(ns: np.ndarray) -> np.ndarray:
    return (ns - ns.min()).astype(np.float64) / 1e9 if ns.size else ns.astype(np.float64)


# ---------------------------------------------------------------------------- CSV
def _int_field(v: str) -> int:
    x = int(v.strip())
    if x < 0:
        raise ValueError("negative")
    return x


def _float_field(v: str) -> float:
    x = float(v.strip())
    if not np.isfinite(x):
        raise ValueError("not finite")
    return x


def _csv_slow(path: str, header: list[str], parsers: dict, bad: BadLines) -> tuple[dict, np.ndarray]:
    """Line-by-line CSV: every column named in ``parsers`` parsed by its function."""
    idx = {name: header.index(name) for name in parsers}
    out = {name: [] for name in parsers}
    lines = []
    with open(path, "r", encoding="utf-8", errors="replace", newline="") as f:
        f.readline()
        for lineno, raw in enumerate(f, start=2):
            if not raw.strip():
                continue
            try:
                fields_ = next(csv.reader(io.StringIO(raw)))
            except (csv.Error, StopIteration) as e:
                bad(lineno, raw, f"unreadable CSV ({e})")
                continue
            if len(fields_) != len(header):
                bad(lineno, raw, f"expected {len(header)} fields ({','.join(header)}), got {len(fields_)}")
                continue
            row = {}
            for name, parse in parsers.items():
                try:
                    row[name] = parse(fields_[idx[name]])
                except (ValueError, OverflowError) as e:
                    bad(lineno, raw, f"bad {name} {fields_[idx[name]]!r} ({e})")
                    break
            else:
                for name, v in row.items():
                    out[name].append(v)
                lines.append(lineno)
    return out, np.asarray(lines, dtype=np.int64)


def _csv_fast(path: str, types: dict):
    """pyarrow's CSV reader; returns None when the file is not clean (then the slow path names the line)."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    try:
        return pcsv.read_csv(path, read_options=pcsv.ReadOptions(block_size=1 << 24),
                             convert_options=pcsv.ConvertOptions(column_types=types, include_columns=list(types)))
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError):
        return None


def _check_header(path: str, header: list[str], needed: list[str], fmt: str) -> None:
    missing = [c for c in needed if c not in header]
    if missing:
        raise TraceError(f"{path}: not a {fmt} trace: the header {','.join(header)!r} lacks {', '.join(missing)} "
                         f"(expected {','.join(needed)})")


AZURE_COLUMNS = ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]


def read_azure(path, on_bad_line: str = "error") -> WorkloadTable:
    """Azure LLM inference trace (2023 or 2024 format)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    path = check_file(path)
    bad = BadLines(path, on_bad_line)
    header = [h.strip() for h in first_line(path).split(",")]
    if header == [""]:
        raise empty_trace(path)
    _check_header(path, header, AZURE_COLUMNS, "Azure (TIMESTAMP,ContextTokens,GeneratedTokens)")
    t = _csv_fast(path, {"TIMESTAMP": pa.string(), "ContextTokens": pa.int64(), "GeneratedTokens": pa.int64()})
    ns = None
    if t is not None and t.num_rows:
        try:
            # chunk by chunk: the zone-stripped copy of the text is never whole in memory
            ns = np.concatenate([_timestamps_fast(c) for c in t.column("TIMESTAMP").chunks])
            ins = t.column("ContextTokens").to_numpy(zero_copy_only=False)
            outs = t.column("GeneratedTokens").to_numpy(zero_copy_only=False)
            # Nulls (empty fields) or negatives: let the slow path name the line.
            if t.column("ContextTokens").null_count or t.column("GeneratedTokens").null_count \
                    or pc.any(pc.is_null(t.column("TIMESTAMP"))).as_py() or (ins < 0).any() or (outs < 0).any():
                ns = None
        except (pa.ArrowInvalid, pa.ArrowTypeError):
            ns = None
        lines = None  # clean file: row i is line i + 2 (header, then one row per line)
    if ns is None:
        cols, lines = _csv_slow(path, header, {"TIMESTAMP": parse_timestamp_ns, "ContextTokens": _int_field,
                                               "GeneratedTokens": _int_field}, bad)
        ns = np.asarray(cols["TIMESTAMP"], dtype=np.int64)
        ins = np.asarray(cols["ContextTokens"], dtype=np.int64)
        outs = np.asarray(cols["GeneratedTokens"], dtype=np.int64)
    del t
    if ns.size == 0:
        raise empty_trace(path)
    if lines is None:
        lines = np.arange(2, ns.size + 2, dtype=np.int64)
    table = WorkloadTable(arrival_s=_relative(ns), input_tokens=ins.astype(np.int64, copy=False),
                          output_tokens=outs.astype(np.int64, copy=False), source="azure", path=path, line=lines,
                          bad_lines=bad.count)
    return sorted_by_time(table)


BURST_COLUMNS = ["Timestamp", "Model", "Request tokens", "Response tokens"]


def read_burstgpt(path, on_bad_line: str = "error", model_filter: str | None = None) -> WorkloadTable:
    """BurstGPT CSV, releases 1 (no sessions) and 3 (``Session ID``, ``Elapsed time``)."""
    import pyarrow as pa

    path = check_file(path)
    bad = BadLines(path, on_bad_line)
    header = [h.strip() for h in first_line(path).split(",")]
    if header == [""]:
        raise empty_trace(path)
    _check_header(path, header, BURST_COLUMNS, "BurstGPT")
    has_sessions = "Session ID" in header
    has_elapsed = "Elapsed time" in header
    types = {"Timestamp": pa.float64(), "Model": pa.string(), "Request tokens": pa.int64(),
             "Response tokens": pa.int64()}
    parsers = {"Timestamp": _float_field, "Model": str.strip, "Request tokens": _int_field,
               "Response tokens": _int_field}
    if has_sessions:
        types["Session ID"] = pa.string()
        parsers["Session ID"] = str.strip
    if has_elapsed:
        types["Elapsed time"] = pa.float64()
        parsers["Elapsed time"] = _float_field
    t = _csv_fast(path, types)
    if t is not None and all(t.column(c).null_count == 0 for c in types if c != "Session ID"):
        cols = {c: t.column(c).to_numpy(zero_copy_only=False) for c in types}
        lines = np.arange(2, t.num_rows + 2, dtype=np.int64)
        if (cols["Request tokens"] < 0).any() or (cols["Response tokens"] < 0).any():
            t = None
    else:
        t = None
    if t is None:
        raw, lines = _csv_slow(path, header, parsers, bad)
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
