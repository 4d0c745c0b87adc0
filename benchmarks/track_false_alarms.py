"""The regression gate's false-alarm rate between identical builds: how often ``tokenfactory
track NAME --gate`` fails a build that changed nothing.  It prints figures; it asserts nothing.

    python benchmarks/track_false_alarms.py [--trials 1000] [--seed 0] [--launch-scale 1.0]

Many pairs (and windows) of identical builds are simulated from a noise model of one load
point's summary metrics (the eleven default metrics of ``conf.schema.COMPARED_METRICS``): every
run's value is the build's level x exp(L + R), L ~ N(0, sd_launch) drawn once per engine launch
(placement, warm-up, the host's state), R ~ N(0, sd_repeat) per repeat inside it.  The spreads
are read off the measured track (docs/measured/track.md: builds 2, 3 and 5, the same engine and
flags, five repeats of one launch each): their intervals give the spread between repeats, the
differences between their estimates the spread between launches.  Error rate and SLO
attainment are counts (errors and misses of 40 requests, Poisson); cost is the window's rental
price over the good tokens, a ratio of totals.

Each trial judges the newest against its baseline the way the gate does (``metrics.comparison``:
``launch_replicates``, ``difference``, ``verdict`` with the absolute margin at a zero baseline),
with the family-wise correction (Bonferroni over metrics x load points, the default) and
without it (``--adjust none``), and with the launches or the repeats as the replicates.  A false
alarm: the gate fails (some metric "regressed"); "any change" counts an "improved" too (what
the history would mark).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import pyarrow as pa

from conf.schema import COMPARED_METRICS
from metrics.comparison import (
    absolute_margin,
    comparable,
    difference,
    difference_confidence,
    direction,
    launch_replicates,
)
from metrics.statistics import verdict

# metric -> (level, sd between repeats of one launch, sd between launches), on the log scale
NOISE = {"output_throughput": (159.5, 0.0025, 0.0015), "goodput_rps": (2.5, 0.0025, 0.0015),
         "good_output_throughput": (159.5, 0.0025, 0.0015), "p50_ttft_ms": (24.5, 0.09, 0.06),
         "p99_ttft_ms": (50.0, 0.25, 0.03), "p50_tpot_ms": (5.6, 0.08, 0.04), "p99_tpot_ms": (7.0, 0.10, 0.05),
         "p99_itl_ms": (8.0, 0.10, 0.05)}
REQUESTS, OUT_TOKENS = 40, 64
MISSES, ERRORS = 0.2, 0.05          # mean SLO misses and errors per run of 40 requests (Poisson)
WINDOW_S, PRICE_PER_S = 40 / 3, 2.0 / 3600
WINDOW_SD = (0.005, 0.003)          # the window's spread: repeats, launches (the schedule is seeded)


def experiment(rng: np.random.Generator, launches: int, repeats: int, scale: float) -> list[dict]:
    """One build's runs: ``launches`` engine launches of ``repeats`` repeats each."""
    rows = []
    for b in range(launches):
        shift = {m: rng.normal(0, sd_l * scale) for m, (_, _, sd_l) in NOISE.items()}
        wshift = rng.normal(0, WINDOW_SD[1] * scale)
        for r in range(repeats):
            row = {"label": "rate=3", "block": b, "repeat": r}
            for m, (level, sd_r, _) in NOISE.items():
                row[m] = level * float(np.exp(shift[m] + rng.normal(0, sd_r)))
            misses, errors = rng.poisson(MISSES), rng.poisson(ERRORS)
            row["slo_attainment"] = 1 - misses / REQUESTS
            row["error_rate"] = errors / REQUESTS
            row["good_output_tokens"] = float((REQUESTS - misses - errors) * OUT_TOKENS)
            row["cost_total"] = WINDOW_S * PRICE_PER_S * float(np.exp(wshift + rng.normal(0, WINDOW_SD[0])))
            rows.append(row)
    return rows


def table(experiments: list[list[dict]]) -> pa.Table:
    """Pooled experiments, each launch named by its experiment and block (``launch``)."""
    rows = [{**r, "launch": f"{i}:{r['block']}"} for i, runs in enumerate(experiments) for r in runs]
    return pa.Table.from_pylist(rows)


def gate(base: pa.Table, new: pa.Table, metrics: list[str], adjust: str, launches: bool,
         confidence: float = 0.95, margin: float = 0.02) -> tuple[bool, bool]:
    """(the gate fails: some metric regressed, some metric changed either way)."""
    if launches:
        base, new = launch_replicates(base, metrics)[0], launch_replicates(new, metrics)[0]
    dconf = difference_confidence(confidence, len(metrics), adjust)  # one load point: the family is the metrics
    regressed = changed = False
    for m in metrics:
        higher, _ = direction(m)
        d = difference(base, new, m, paired=False, confidence=dconf, labels=("baseline", "newest"))
        v = verdict(d, margin=margin, higher_is_better=higher, confidence=dconf,
                    absolute_margin=absolute_margin(m, margin, max(abs(d.a.value), abs(d.b.value))))
        regressed |= v.outcome == "a_better"
        changed |= v.outcome in ("a_better", "b_better")
    return regressed, changed


SCENARIOS = [  # name, baseline experiments, launches per experiment, repeats per launch
    ("previous, 1 launch x 5 repeats", 1, 1, 5),
    ("previous, 3 launches x 2 repeats", 1, 3, 2),
    ("window:3, 1 launch x 5 repeats", 3, 1, 5),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--launch-scale", type=float, default=1.0, help="multiply the launch-to-launch spreads")
    a = ap.parse_args()
    rng = np.random.default_rng(a.seed)
    probe = table([experiment(rng, 1, 2, a.launch_scale)])
    metrics = [m for m in COMPARED_METRICS if comparable(m, probe.column_names)]
    print(f"{a.trials} pairs of identical builds per scenario, {len(metrics)} metrics at one load point, "
          f"95 %, margin 2 % (2 points for a rate at 0), launch spread x{a.launch_scale}")
    print(f"{'scenario':<34} {'replicates':<10} {'correction':<26} {'gate fails':>10} {'any change':>11}")
    t0 = time.perf_counter()
    for name, n_base, launches, repeats in SCENARIOS:
        counts = {k: [0, 0] for k in (("repeats", "none"), ("repeats", "bonferroni"),
                                      ("launches", "none"), ("launches", "bonferroni"))}
        for _ in range(a.trials):
            base = table([experiment(rng, launches, repeats, a.launch_scale) for _ in range(n_base)])
            new = table([experiment(rng, launches, repeats, a.launch_scale)])
            for (reps, adjust), c in counts.items():
                fails, changed = gate(base, new, metrics, adjust, launches=reps == "launches")
                c[0] += fails
                c[1] += changed
        for (reps, adjust), (fails, changed) in counts.items():
            if reps == "launches" and launches == 1 and n_base == 1:
                continue  # one launch a side: nothing to collapse, the same as repeats
            corr = f"bonferroni ({len(metrics)} at 99.55 %)" if adjust == "bonferroni" else "none (each at 95 %)"
            print(f"{name:<34} {reps:<10} {corr:<26} {fails / a.trials:>10.1%} {changed / a.trials:>11.1%}")
    print(f"({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
