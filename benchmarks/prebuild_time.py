"""How long a trace sweep's points take to build before the engine starts (``EngineSession.build_ahead``:
each point's workload built, described, its requests prepared; ``harness.point.prebuild``).

    python benchmarks/prebuild_time.py [--trials 5] [--requests 4000] [--points 1000,2000,4000]

A Mooncake trace of ``--requests`` lines (lengths drawn with a fixed seed), swept with ``load=trace``
at the given request caps, against an endpoint that is never called (nothing before the start calls it);
the tiny model's tokenizer.  Each trial builds in a fresh prepare cache (a hit would skip the building)
and a fresh session, in this process; the trace's read is cached after the first trial, as it is after
the harness's check before a run.  Prints each trial's seconds, the median and the host's load average
(1 min) before and after.  Issue 42: the points' workloads were built twice (``prebuild`` and
``describe_ahead``), now once.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def write_trace(path: Path, n: int) -> None:
    import numpy as np

    rng = np.random.default_rng(0)
    ins, outs = rng.integers(50, 2000, n), rng.integers(4, 400, n)
    lines = []
    for i in range(n):  # a block of 512 tokens shared by one request in 50, the others its own
        blocks = [int(i % 50)] + [100 + 8 * i + k for k in range(-(-int(ins[i]) // 512) - 1)]
        lines.append(json.dumps({"timestamp": 25 * i, "input_length": int(ins[i]), "output_length": int(outs[i]),
                                 "hash_ids": blocks}) + "\n")
    path.write_text("".join(lines))


def one_trial(trace: Path, points: str, folder: Path) -> tuple[float, int, float]:
    """Seconds of ``build_ahead``; the workload builds in it and their seconds."""
    import importlib

    from hydra import compose, initialize_config_module

    from engines.tiny_model import ensure_tiny_model
    from harness.engine_session import EngineSession
    from protocols.sweep.load_points import plan_runs

    os.environ["TOKENFACTORY_CACHE"] = str(folder / "cache")
    caps = ", ".join(f"{{num_requests: {int(x)}}}" for x in points.split(","))
    with initialize_config_module("conf", version_base="1.3"):
        cfg = compose("config", overrides=[
            "engine=openai", "engine.base_url=http://127.0.0.1:9", "engine.model=fake",
            f"engine.tokenizer={ensure_tiny_model()}", "workload=mooncake", f"workload.path={trace}", "load=trace",
            f"protocol.load_points=[{caps}]", f"output_dir={folder / 'out'}", "mlflow.enabled=false",
            "report.enabled=false", "progress=false"])
    session = EngineSession(cfg, folder / "out", total_points=len(points.split(",")))
    specs = plan_runs(cfg)
    prebuild_module = importlib.import_module("harness.point.prebuild")  # (the package's name is the function)
    builds: list[float] = []
    build = prebuild_module.build_workload

    def timed_build(s, p) -> None:
        t = time.perf_counter()
        build(s, p)
        builds.append(time.perf_counter() - t)

    prebuild_module.build_workload = timed_build
    try:
        t0 = time.perf_counter()
        if session.build_ahead(specs) is not None:
            raise SystemExit("the tokenizer is not on disk")
        return time.perf_counter() - t0, len(builds), sum(builds)
    finally:
        prebuild_module.build_workload = build


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--requests", type=int, default=4000, help="lines of the trace")
    ap.add_argument("--points", default="1000,2000,4000", help="the sweep's request caps (load=trace)")
    a = ap.parse_args()
    load_before = os.getloadavg()[0]
    print(f"code: {REPO}; load average (1 min) before: {load_before:.2f}")
    secs = []
    with tempfile.TemporaryDirectory(prefix="prebuild-time-") as d:
        trace = Path(d) / "trace.jsonl"
        write_trace(trace, a.requests)
        for i in range(a.trials):
            total, n, building = one_trial(trace, a.points, Path(d) / f"t{i}")
            secs.append((total, building))
            print(f"trial {i}: {total:.3f} s, of which {n} workload builds {building:.3f} s", flush=True)
    print(f"median of {a.trials}: {statistics.median(t for t, _ in secs):.3f} s, workload builds "
          f"{statistics.median(b for _, b in secs):.3f} s (points {a.points} of a {a.requests}-line trace)")
    print(f"load average (1 min): before {load_before:.2f}, after {os.getloadavg()[0]:.2f}; cores {os.cpu_count()}")


if __name__ == "__main__":
    main()
