"""What a session's telemetry process costs to start and to stop: forked by multiprocessing's fork
server (``metrics.telemetry.process``, now) against a spawned interpreter of its own (before),
interleaved in one run, from a script that imports scipy at its top as ``benchmarks/verdicts.py``
does.

    python benchmarks/telemetry_start.py [--sessions 10]

Start: from the constructor's call until the child says it is ready (its samplers built, pyarrow's
writer warmed up); stop: from ``stop`` until the child has exited.  The fork server's own start,
once per process, is in its method's first start, reported apart.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import scipy.stats  # noqa: F401 - a script's heavy import, as benchmarks/verdicts.py has

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from metrics.telemetry import process

TCFG = {"interval_s": 0.5, "nvml": {"enabled": False}}


def one(method: str) -> tuple[float, float]:
    process.START_METHOD = method
    t = time.perf_counter()
    tel = process.TelemetryProcess(TCFG, {})
    started = time.perf_counter() - t
    tel.start(periodic=False)
    tel.sample_now()
    t = time.perf_counter()
    tel.stop()
    return started, time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sessions", type=int, default=10)
    args = ap.parse_args()
    first = {m: one(m)[0] for m in ("forkserver", "spawn")}
    got: dict[str, list[tuple[float, float]]] = {"spawn": [], "forkserver": []}
    for _ in range(args.sessions):
        for m in got:
            got[m].append(one(m))
    print(f"{args.sessions} sessions a method, interleaved; load average {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} CPUs; the fork server's first start {first['forkserver']:.2f} s")
    med = {m: (statistics.median(s for s, _ in v), statistics.median(e for _, e in v)) for m, v in got.items()}
    for m, (s, e) in med.items():
        print(f"  {m:10s} start {s:.3f} s, stop {e:.3f} s (medians)")
    print(f"  forkserver / spawn: start {med['forkserver'][0] / med['spawn'][0]:.3f}, "
          f"stop {med['forkserver'][1] / med['spawn'][1]:.3f}")


if __name__ == "__main__":
    main()
