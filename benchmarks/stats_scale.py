"""Aggregates 100 runs x 10,000 requests with bootstrap intervals and prints the wall time and
the intervals (target: <= 10 s on a 2-core machine).  It prints figures; it asserts nothing.

    python benchmarks/stats_scale.py [--runs 100] [--requests 10000] [--resamples 10000] [--seed 0]

Each run's TTFTs are lognormal around a median that drifts from run to run (a slow trend plus
noise), so requests within a run are correlated and the run is the replicate.  Timed: the
per-run summaries from the request records, ``aggregate_runs`` (mean TTFT and throughput by
Student-t, cost per million good tokens by BCa), and the pooled p50/p99 of all requests with
cluster-bootstrap intervals.  Afterwards (untimed) a few resamples of the pooled percentile are
checked against the brute-force pooled sample.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from metrics.statistics import PooledQuantile, aggregate_runs, pooled_percentile_ci

SLO_TTFT_S = 0.5
PRICE_PER_S = 2.0 / 3600  # one GPU at 2 $/h


def generate(runs: int, requests: int, seed: int) -> list[dict]:
    """Per run: TTFTs (s), output tokens per request, the run's duration."""
    rng = np.random.default_rng(seed)
    out = []
    for k in range(runs):
        median = 0.2 * (1 + 0.1 * k / runs) * rng.lognormal(0, 0.1)  # trend + run-to-run drift
        out.append({"ttft": rng.lognormal(np.log(median), 0.5, requests),
                    "tokens": rng.integers(50, 400, requests),
                    "duration_s": requests / 20.0 * rng.lognormal(0, 0.03)})
    return out


def summarize(runs: list[dict]) -> dict:
    """One row a run, as ``runs.parquet`` has them."""
    cols: dict = {"config": [], "load_point": [], "mean_ttft_ms": [], "output_throughput": [],
                  "cost_total": [], "good_output_tokens": []}
    for r in runs:
        good = r["ttft"] <= SLO_TTFT_S
        cols["config"].append("A")
        cols["load_point"].append(20.0)
        cols["mean_ttft_ms"].append(float(r["ttft"].mean() * 1e3))
        cols["output_throughput"].append(float(r["tokens"].sum() / r["duration_s"]))
        cols["cost_total"].append(r["duration_s"] * PRICE_PER_S)
        cols["good_output_tokens"].append(float(r["tokens"][good].sum()))
    return cols


def show(name: str, e) -> None:
    print(f"  {name:<22} {e.value:12.5g}  [{e.low:.5g}, {e.high:.5g}]  ±{e.rel_half_width:.2%}  "
          f"n={e.n}  {e.method}{'  (' + e.note + ')' if e.note else ''}")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--requests", type=int, default=10_000)
    ap.add_argument("--resamples", type=int, default=10_000)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    t0 = time.perf_counter()
    runs = generate(args.runs, args.requests, args.seed)
    t_gen = time.perf_counter() - t0
    print(f"generated {args.runs} runs x {args.requests} requests in {t_gen:.2f} s")

    t0 = time.perf_counter()
    table = summarize(runs)
    t1 = time.perf_counter()
    agg = aggregate_runs(table, ["mean_ttft_ms", "output_throughput"],
                         ratios={"cost_per_mtok_good": ("cost_total", "good_output_tokens", 1e6)},
                         n_resamples=args.resamples, seed=args.seed)
    t2 = time.perf_counter()
    ttfts = [r["ttft"] * 1e3 for r in runs]
    p50, p99 = pooled_percentile_ci(ttfts, [50, 99], n_resamples=args.resamples, seed=args.seed)
    t3 = time.perf_counter()

    print(f"\nintervals (95%, {args.resamples} resamples where bootstrapped):")
    for key, ests in agg.items():
        print(f" group {key}:")
        for name, e in ests.items():
            show(name, e)
    show("pooled p50_ttft_ms", p50)
    show("pooled p99_ttft_ms", p99)

    print(f"\nper-run summaries {t1 - t0:.3f} s, aggregate_runs {t2 - t1:.3f} s, "
          f"pooled p50+p99 {t3 - t2:.3f} s")
    print(f"wall time (aggregation, {args.runs * args.requests:,} requests): {t3 - t0:.2f} s  (target <= 10 s)")

    # untimed: the fast pooled percentile against the materialised pooled sample
    rng = np.random.default_rng(args.seed + 1)
    idx = rng.integers(0, args.runs, (5, args.runs))
    fast = PooledQuantile(ttfts, [50, 99])(idx)
    brute = np.array([[np.percentile(np.concatenate([ttfts[k] for k in row]), q) for row in idx] for q in (50, 99)])
    print(f"pooled percentile vs brute force over 5 resamples: max |difference| = {np.abs(fast - brute).max():.3g} ms")


if __name__ == "__main__":
    main()
