"""Reads a 10-million-row trace in the Azure 2024 format into the workload table and prints
the time and the peak memory (target: <= 15 s, <= 2 GB RSS).

    python benchmarks/trace_read.py [--rows 10000000] [--file PATH] [--keep]

The file is generated first (timestamps like ``2024-05-10 00:00:00.009930+00:00``, some
without a fractional part, as in the 2024 week-long traces); the read runs in a fresh
child process so its peak RSS is its own.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np


def generate(path: str, rows: int, seed: int = 0) -> None:
    import pyarrow as pa
    import pyarrow.compute as pc

    rng = np.random.default_rng(seed)
    chunk = 2_000_000
    t0 = np.datetime64("2024-05-10T00:00:00", "ns").astype(np.int64)
    now = 0
    with open(path, "wb") as f:
        f.write(b"TIMESTAMP,ContextTokens,GeneratedTokens\n")
        for start in range(0, rows, chunk):
            k = min(chunk, rows - start)
            gaps = rng.exponential(0.06e9, size=k).astype(np.int64)
            gaps[rng.random(k) < 0.05] //= 1000  # bursts
            ns = t0 + now + np.cumsum(gaps)
            now = int(ns[-1] - t0)
            us = ns // 1000 * 1000
            # some timestamps on a whole second (written without a fraction), time order kept
            whole_s = us // 10**9 * 10**9
            prev = np.r_[us[0], us[:-1]]
            us = np.where((rng.random(k) < 0.1) & (whole_s >= prev), whole_s, us)
            ts = pa.array(us, type=pa.timestamp("ns"))
            whole = pc.strftime(ts, format="%Y-%m-%d %H:%M:%S")  # %S carries the fraction in ns units
            whole = pc.replace_substring_regex(whole, r"\.0+$", "")  # whole seconds: no fraction
            whole = pc.replace_substring_regex(whole, r"(\.\d*?)0+$", r"\1")
            whole = pc.binary_join_element_wise(whole, "+00:00", "")
            ins = pa.array(rng.integers(1, 8000, size=k)).cast(pa.string())
            outs = pa.array(rng.integers(1, 2000, size=k)).cast(pa.string())
            lines = pc.binary_join_element_wise(whole, ins, outs, pa.scalar(","))
            # Write the joined lines with their newlines straight from arrow's buffer.
            lines = pc.binary_join_element_wise(lines, "\n", "")
            offs = np.frombuffer(lines.buffers()[1], dtype=np.int32, count=k + 1, offset=lines.offset * 4)
            data = lines.buffers()[2]
            f.write(memoryview(data)[offs[0]:offs[-1]])


def read_child(path: str) -> None:
    from loadgen.workloads.traces.azure import read_azure

    t = time.perf_counter()
    table = read_azure(path)
    dt = time.perf_counter() - t
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"rows={len(table)} read_s={dt:.2f} peak_rss_mb={peak_mb:.0f} "
          f"span_s={table.arrival_s[-1]:.0f} mean_input={table.input_tokens.mean():.1f}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--file", default=None)
    ap.add_argument("--keep", action="store_true")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        read_child(a.child)
        return 0
    path = a.file or os.path.join(tempfile.gettempdir(), f"azure2024_{a.rows}.csv")
    if not os.path.exists(path):
        t = time.perf_counter()
        generate(path, a.rows)
        print(f"generated {path} ({os.path.getsize(path) / 1e6:.0f} MB) in {time.perf_counter() - t:.1f} s")
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {**os.environ, "PYTHONPATH": repo + os.pathsep + os.environ.get("PYTHONPATH", "")}
    try:
        rc = subprocess.call([sys.executable, os.path.abspath(__file__), "--child", path], env=env)
    finally:
        if not a.keep and not a.file:
            os.unlink(path)
    return rc


if __name__ == "__main__":
    sys.exit(main())
