"""Azure LLM inference traces, 2023 and 2024: CSV ``TIMESTAMP,ContextTokens,GeneratedTokens``.

Timestamps look like ``2023-11-16 18:17:03.9799600`` (up to 9 fractional digits, or none),
with or without a ``+00:00``/``Z`` zone.
"""

from __future__ import annotations

import re

import numpy as np

from loadgen.workloads.table import WorkloadTable
from loadgen.workloads.traces.common import BadLines, check_file, empty_trace, sorted_by_time
from loadgen.workloads.traces.csv_fields import csv_fast, csv_slow, int_field, read_header

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


AZURE_COLUMNS = ["TIMESTAMP", "ContextTokens", "GeneratedTokens"]


def read_azure(path, on_bad_line: str = "error") -> WorkloadTable:
    """Azure LLM inference trace (2023 or 2024 format)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    path = check_file(path)
    bad = BadLines(path, on_bad_line)
    header = read_header(path, AZURE_COLUMNS, "Azure (TIMESTAMP,ContextTokens,GeneratedTokens)")
    t = csv_fast(path, {"TIMESTAMP": pa.string(), "ContextTokens": pa.int64(), "GeneratedTokens": pa.int64()})
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
        cols, lines = csv_slow(path, header, {"TIMESTAMP": parse_timestamp_ns, "ContextTokens": int_field,
                                               "GeneratedTokens": int_field}, bad)
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
