"""Mooncake JSON lines: ``{"timestamp": ms, "input_length", "output_length", "hash_ids"}``;
each hash id is one block of 512 tokens."""

from __future__ import annotations

import numpy as np

from loadgen.workloads.table import WorkloadTable
from loadgen.workloads.traces.common import BadLines, check_file, empty_trace, sorted_by_time
from loadgen.workloads.traces.json_fields import json_lines, nonneg_int, number


def read_mooncake(path, on_bad_line: str = "error") -> WorkloadTable:
    """Mooncake JSON lines: ``timestamp`` (ms), ``input_length``, ``output_length``, ``hash_ids``."""
    path = check_file(path)
    bad = BadLines(path, on_bad_line)
    ts, ins, outs, lines, offs, vals = [], [], [], [], [0], []
    for lineno, raw, obj in json_lines(path, bad):
        try:
            t = number(obj, "timestamp")
            a = nonneg_int(obj, "input_length")
            b = nonneg_int(obj, "output_length")
            h = obj.get("hash_ids", [])
            if not isinstance(h, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in h):
                raise ValueError("'hash_ids' must be a list of integers")
            if len(h) * 512 < a:
                raise ValueError(f"{len(h)} hash_ids of 512 tokens cannot cover input_length={a}")
        except ValueError as e:
            bad(lineno, raw.decode("utf-8", "replace"), str(e))
            continue
        ts.append(t)
        ins.append(a)
        outs.append(b)
        lines.append(lineno)
        vals.extend(h)
        offs.append(len(vals))
    if not ts:
        raise empty_trace(path)
    ts = np.asarray(ts, dtype=np.float64) / 1e3
    return sorted_by_time(WorkloadTable(arrival_s=ts - ts.min(), input_tokens=np.asarray(ins, dtype=np.int64),
                                 output_tokens=np.asarray(outs, dtype=np.int64), source="mooncake", path=path,
                                 hash_offsets=np.asarray(offs, dtype=np.int64),
                                 hash_values=np.asarray(vals, dtype=np.int64), line=np.asarray(lines, dtype=np.int64),
                                 bad_lines=bad.count))
