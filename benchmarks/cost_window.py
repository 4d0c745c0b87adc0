"""What a load point's cost window holds, in parts: a sweep against the fake engine of the tests.

    python benchmarks/cost_window.py [--trials 5] [--points 16,32] [--seed 0] [--json OUT]

Each trial is one ``protocol=sweep`` run end to end in this process against
``tests/fake_engine_process.py`` launched by the harness as ``engine=vllm engine.command=[...]``
(``benchmarks/verdicts.py``'s engine and load: TTFT 20 ms, 5 ms between 8 tokens, 16 requests a
point).  For each point it prints its window's parts (the first point's window opens when the engine
is started, a later one's where the previous closed): ``startup_s`` (the engine's start-up, first
point only), ``prepare_s`` (from then to the first request sent: the harness's own work inside the
window), ``load_s`` (first request sent to last done), ``after_s`` (to the window's close), and
``open_to_first_s`` (window open to the first request sent); then the medians over the trials and the
host's load average (1 min) before and after.  Issue 43: the workload's description was computed in
that ``prepare_s``; it now is before the engine starts (``harness.point.prebuild``).  A later point's
``prepare_s`` held the previous point's telemetry write (0.5 to 0.8 s: the telemetry process's first
conversion imported pandas and pyarrow.parquet); the process now warms up before the engine starts and
writes a closed window's file off the next window (``TelemetryCollector.close_window``): later points'
``open_to_first_s`` 0.765 -> 0.174 s (load 7.4-7.8) and 0.763 -> 0.274 s (load 8.9-13.0), medians of 5,
before and after in one sitting each, on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from verdicts import ENGINE, LOAD, engine_overrides, free_port, run_experiment  # noqa: E402

from harness import results_io  # noqa: E402

PARTS = ("window_s", "startup_s", "prepare_s", "open_to_first_s", "load_s", "after_s")


def point_parts(out: Path) -> list[dict]:
    """Each point of the sweep in ``out``, in run order: its window's parts in seconds."""
    import pyarrow.parquet as pq
    rows = []
    for k, f in enumerate(sorted(out.glob("*/summary.json"))):
        d = json.loads(f.read_text())
        req = pq.read_table(f.with_name(results_io.REQUESTS), columns=["sent_ns", "done_ns"])
        w0 = d["window_start_ns"]
        first = (min(req.column("sent_ns").to_pylist()) - w0) / 1e9
        last = (max(req.column("done_ns").to_pylist()) - w0) / 1e9
        startup = (d.get("engine_startup_s") or 0.0) if k == 0 else 0.0  # a later window opens after it
        rows.append({"point": f.parent.name, "window_s": d["window_s"], "startup_s": startup,
                     "prepare_s": first - startup, "open_to_first_s": first, "load_s": last - first,
                     "after_s": d["window_s"] - last})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--points", default="16,32", help="the sweep's constant rates")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write every point's parts here")
    a = ap.parse_args()
    # python -m tests.fake_engine_process, from any folder
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    load = [x for x in LOAD if not x.startswith("protocol.load_points=")] + [f"protocol.load_points=[{a.points}]"]
    load_before = os.getloadavg()[0]
    print(f"code: {REPO}; load average (1 min) before: {load_before:.2f}")
    print(f"{'trial':>5} {'point':<22} " + " ".join(f"{p:>15}" for p in PARTS))
    rows = []
    with tempfile.TemporaryDirectory(prefix="cost-window-") as d:
        for i in range(a.trials):
            out, seed = Path(d) / "sweep", a.seed * 100_000 + i
            run_experiment(["protocol=sweep", *engine_overrides(free_port(), out, ENGINE), *load,
                            "mlflow.enabled=false", f"seed={seed}", f"workload.seed={seed}"])
            for k, r in enumerate(point_parts(out)):
                rows.append({"trial": i, "first": k == 0, **r})
                print(f"{i:>5} {r['point']:<22} " + " ".join(f"{r[p]:>15.3f}" for p in PARTS), flush=True)
            shutil.rmtree(out)
    load_after = os.getloadavg()[0]
    for which, sel in (("first points", [r for r in rows if r["first"]]), ("later points",
                                                                            [r for r in rows if not r["first"]])):
        if sel:
            print(f"median, {which} ({len(sel)}): " + ", ".join(
                f"{p} {statistics.median(r[p] for r in sel):.3f}" for p in PARTS))
    print(f"load average (1 min): before {load_before:.2f}, after {load_after:.2f}; cores {os.cpu_count()}")
    if a.json:
        Path(a.json).write_text(json.dumps({"rows": rows, "load_before": load_before, "load_after": load_after},
                                           indent=2) + "\n")


if __name__ == "__main__":
    main()
