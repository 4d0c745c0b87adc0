"""What the CSV trace readers share: a fast pyarrow pass, a line-by-line pass that names
the first bad line (or skips and counts them), the header's read and check, and field parsers.

Large files are read by pyarrow in one pass; when that fails, the file is re-read line by
line to name the first bad line (or to skip and count them).
"""

from __future__ import annotations

import csv
import io

import numpy as np

from loadgen.workloads.traces.common import BadLines, TraceError, empty_trace, first_line

INT64_MAX = (1 << 63) - 1


def int_field(v: str) -> int:
    """A count: a non-negative integer within int64 (the tables' type; a larger one would overflow there)."""
    x = int(v.strip())
    if x < 0:
        raise ValueError("negative")
    if x > INT64_MAX:
        raise ValueError("too large")
    return x


def float_field(v: str) -> float:
    x = float(v.strip())
    if not np.isfinite(x):
        raise ValueError("not finite")
    return x


def csv_slow(path: str, header: list[str], parsers: dict, bad: BadLines) -> tuple[dict, np.ndarray]:
    """Line-by-line CSV: every column named in ``parsers`` parsed by its function."""
    idx = {name: header.index(name) for name in parsers}
    out = {name: [] for name in parsers}
    lines = []
    with open(path, encoding="utf-8", errors="replace", newline="") as f:
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


def csv_fast(path: str, types: dict):
    """pyarrow's CSV reader; returns None when the file is not clean (then the slow path names the line)."""
    import pyarrow as pa
    import pyarrow.csv as pcsv

    try:
        return pcsv.read_csv(path, read_options=pcsv.ReadOptions(block_size=1 << 24),
                             convert_options=pcsv.ConvertOptions(column_types=types, include_columns=list(types)))
    # ArrowKeyError: a header name with spaces around it (read stripped by ``read_header``, not by pyarrow)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, pa.ArrowKeyError):
        return None


def read_header(path: str, needed: list[str], fmt: str) -> list[str]:
    """The trace's header line, its names stripped; an empty file, or a header without the
    ``needed`` columns (a trace of another ``fmt``), is a ``TraceError`` naming the file."""
    header = [h.strip() for h in first_line(path).split(",")]
    if header == [""]:
        raise empty_trace(path)
    missing = [c for c in needed if c not in header]
    if missing:
        raise TraceError(f"{path}: not a {fmt} trace: the header {','.join(header)!r} lacks {', '.join(missing)} "
                         f"(expected {','.join(needed)})")
    return header
