"""The over-saturation rule's false stops and stop times, on simulated servers over many seeds.

    python benchmarks/saturation_rule.py [--seeds 100] [--min-achieved 0.85] [--window-s 2]

Each scenario is a simulated server (tests/loadgen/saturation_streams.py: no capacity limit, fixed
slots, continuous batchers stepped at an H200's pace) fed to the rule as the dispatcher feeds it.
For a server within its capacity it prints how many seeds were stopped (false stops); for one
past it, how many were stopped and the median time to the stop and requests sent by then.
Simulated clocks: the figures do not depend on the host.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadgen.saturation import SaturationRule
from tests.loadgen.saturation_streams import (
    H200_STEP,
    batcher,
    feed,
    poisson,
    slotted,
    unlimited,
    workers,
)


def scenarios(seed: int):
    """(name, within capacity, stream) for one seed."""
    rng = np.random.default_rng(seed + 1000)
    s = poisson(2.0, 60, seed)
    yield "10.2 s requests, no limit, 2 req/s", True, unlimited(s, 0.2, 500 * 0.020)
    s = poisson(4.0, 400, seed)
    yield "500-2,000 tokens at 20 ms, no limit, 4 req/s", True, unlimited(s, 0.2, rng.integers(500, 2001, 400) * 0.020)
    s = poisson(8.0, 400, seed)
    yield "16 slots x 1 s, 8 req/s (50 %)", True, slotted(s, 16, 1.0)
    s = poisson(3.6, 600, seed)
    yield "4 slots x 1 s, 3.6 req/s (90 %)", True, slotted(s, 4, 1.0)
    s = poisson(3.8, 600, seed)
    yield "4 slots x 1 s, 3.8 req/s (95 %)", True, slotted(s, 4, 1.0)
    s = poisson(26.0, 1300, seed)
    yield "4 H200 batchers, 26 req/s (93 %)", True, workers(s, 4, **H200_STEP)
    s = poisson(6.0, 1200, seed)
    yield "1 H200 batcher, 6 req/s (86 %), 1,000 tok", True, batcher(s, 1000, **H200_STEP)
    s = poisson(6.0, 1200, seed)
    yield "1 H200 batcher, 6 req/s, 100-1,900 tok", True, batcher(s, rng.integers(100, 1901, 1200), **H200_STEP)
    s = poisson(8.0, 2000, seed)
    yield "4 slots x 1 s, 8 req/s (2x)", False, slotted(s, 4, 1.0)
    s = poisson(4.8, 2000, seed)
    yield "4 slots x 1 s, 4.8 req/s (1.2x)", False, slotted(s, 4, 1.0)
    s = poisson(40.0, 6000, seed)
    yield "4 H200 batchers, 40 req/s (1.43x)", False, workers(s, 4, **H200_STEP)
    s = poisson(4.0, 800, seed)
    yield "1 batcher held to 16 seqs, 4 req/s (1.7x)", False, batcher(s, 1000, 4.71e-3, 0.124e-3, max_seqs=16)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=100)
    ap.add_argument("--min-achieved", type=float, default=SaturationRule.min_achieved)
    ap.add_argument("--window-s", type=float, default=SaturationRule.window_s)
    args = ap.parse_args()
    rule = SaturationRule(min_achieved=args.min_achieved, window_s=args.window_s)
    rows: dict[str, dict] = {}
    for seed in range(args.seeds):
        for name, stable, (sends, firsts, ends) in scenarios(seed):
            reason, at = feed((sends, firsts, ends), rule)
            r = rows.setdefault(name, {"stable": stable, "stops": 0, "at": [], "sent": [], "n": len(sends)})
            if reason is not None:
                r["stops"] += 1
                r["at"].append(at)
                r["sent"].append(int((sends <= at).sum()))
    print(f"rule: min_achieved={rule.min_achieved} window_s={rule.window_s} windows={rule.windows} z={rule.z}; "
          f"{args.seeds} seeds")
    print("| scenario | capacity | stopped | median stop s | median sent at the stop |")
    print("|---|---|---|---|---|")
    for name, r in rows.items():
        at = f"{np.median(r['at']):.0f}" if r["at"] else "–"
        sent = f"{np.median(r['sent']):.0f} of {r['n']}" if r["sent"] else "–"
        print(f"| {name} | {'within' if r['stable'] else 'past'} | {r['stops']}/{args.seeds} | {at} | {sent} |")


if __name__ == "__main__":
    main()
