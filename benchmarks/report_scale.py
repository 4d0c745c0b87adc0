"""The report at scale: an experiment of RUNS runs and REQUESTS requests in all, written
synthetically in the real layout (``tests/synthetic_experiment.py``: requests.parquet with every
chunk's time, summary.json by metrics.summary, telemetry.parquet, the experiment's record), then
``harness.report.build.render`` on it.  Prints the report's size and build time (the page alone, and
the static exports with ``--static``).

    python benchmarks/report_scale.py                      # 100 runs, 1M requests (2 configs x 10 points x 5 blocks)
    python benchmarks/report_scale.py --runs 20 --requests 100000 --keep /tmp/scale
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import results_io
from harness.report.build import render
from tests.synthetic_experiment import write_experiment


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=100, help="runs in all (configs x points x blocks)")
    ap.add_argument("--requests", type=int, default=1_000_000, help="requests in all")
    ap.add_argument("--configs", type=int, default=2)
    ap.add_argument("--blocks", type=int, default=5)
    ap.add_argument("--output-tokens", type=int, default=64, help="median output tokens (one chunk each)")
    ap.add_argument("--static", action="store_true", help="also export every figure (kaleido + Chromium)")
    ap.add_argument("--keep", help="write the experiment here and keep it (default: a temporary folder)")
    ap.add_argument("--reuse", action="store_true", help="with --keep: render an experiment already there")
    a = ap.parse_args()
    points = max(1, a.runs // (a.configs * a.blocks))
    runs = points * a.configs * a.blocks
    per_run = a.requests // runs
    out = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="report-scale-")) / "experiment"
    try:
        if not (a.reuse and (out / results_io.EXPERIMENT).exists()):
            if out.exists():
                shutil.rmtree(out)
            names = [f"config{i}" for i in range(a.configs)]
            configs = {n: {"ttft_ms": 40.0 + 25 * i, "tpot_ms": 8.0 + 3 * i, "capacity": 200.0 - 30 * i,
                           "power_w": 600.0} for i, n in enumerate(names)}
            rates = [10.0 * (k + 1) for k in range(points)]
            t = time.perf_counter()
            write_experiment(out, configs=configs, rates=rates, blocks=a.blocks, requests=per_run,
                             output_tokens=a.output_tokens, slo={"ttft_ms": 500.0, "tpot_ms": 30.0})
            data = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
            print(f"wrote {runs} runs x {per_run} requests ({runs * per_run:,} requests, {data / 2**20:.0f} MiB on "
                  f"disk) in {time.perf_counter() - t:.1f} s: {out}", flush=True)
        t = time.perf_counter()
        path = render(out, static_figures=False, log=lambda m: print("  " + m, flush=True))
        build = time.perf_counter() - t
        size = path.stat().st_size
        print(f"report.html: {size / 2**20:.2f} MiB ({size:,} bytes), built in {build:.1f} s "
              f"(limits: 20 MB, 30 s)", flush=True)
        if a.static:
            t = time.perf_counter()
            render(out, static_figures=True, log=lambda m: print("  " + m, flush=True))
            figs = out / "figures"
            total = sum(p.stat().st_size for p in figs.iterdir())
            print(f"with static figures: {time.perf_counter() - t:.1f} s, {len(list(figs.iterdir()))} files, "
                  f"{total / 2**20:.1f} MiB in {figs}", flush=True)
        return 0 if size <= 20e6 and build <= 30 else 1
    finally:
        if not a.keep:
            shutil.rmtree(out.parent, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
