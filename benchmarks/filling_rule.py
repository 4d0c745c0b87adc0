"""The still-filling rule (metrics/filling.py) on simulated servers over many seeds: how often it
flags a run, by the run's length.

    python benchmarks/filling_rule.py [--seeds 100]

Each scenario is a simulated server (tests/loadgen/saturation_streams.py: no capacity limit, fixed
slots, continuous batchers stepped at an H200's pace) under Poisson (or gamma) arrivals; the rule
reads the sends and ends as summarize does.  A short run of a batcher measures its fill-up and
should be flagged; a steady one should not.  Simulated clocks: the figures do not depend on the host.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from metrics.filling import quarter_in_flight, still_filling
from tests.loadgen.saturation_streams import H200_STEP, batcher, poisson, slotted, unlimited, workers


def gamma(rate: float, n: int, cv: float, seed: int) -> np.ndarray:
    shape = 1 / cv ** 2
    return np.cumsum(np.random.default_rng(seed).gamma(shape, 1 / (rate * shape), n))


def scenarios(seed: int):
    """(name, stream) for one seed."""
    for n in (30, 60, 200):
        yield f"10.2 s requests, no limit, 2 req/s, {n} requests", unlimited(poisson(2.0, n, seed), 0.2, 500 * 0.020)
    for n in (60, 400):
        yield (f"10.2 s requests, no limit, 2 req/s gamma CV 2, {n} requests",
               unlimited(gamma(2.0, n, 2.0, seed), 0.2, 500 * 0.020))
    yield "16 slots x 1 s, 8 req/s (50 %), 400 requests", slotted(poisson(8.0, 400, seed), 16, 1.0)
    for n in (100, 200, 400, 1200):
        yield (f"1 H200 batcher, 6 req/s (86 %), 1,000 tok, {n} requests",
               batcher(poisson(6.0, n, seed), 1000, **H200_STEP))
    for rate, n in ((4.0, 400), (10.0, 400), (16.0, 400), (10.0, 2000)):
        yield (f"2 H200 batchers, {rate:g} req/s, 1,000 tok, {n} requests",
               workers(poisson(rate, n, seed), 2, **H200_STEP))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=100)
    args = ap.parse_args()
    rows: dict[str, list] = {}
    for seed in range(args.seeds):
        for name, (sends, _firsts, ends) in scenarios(seed):
            second, last = quarter_in_flight(sends * 1e9, ends * 1e9)
            rows.setdefault(name, []).append((second, last, still_filling(second, last)))
    print(f"{args.seeds} seeds")
    print("| scenario | flagged | median in flight, second quarter | last quarter |")
    print("|---|---|---|---|")
    for name, r in rows.items():
        a = np.array([(s, t) for s, t, _ in r])
        print(f"| {name} | {sum(f for *_, f in r)}/{len(r)} | {np.median(a[:, 0]):.1f} | {np.median(a[:, 1]):.1f} |")


if __name__ == "__main__":
    main()
