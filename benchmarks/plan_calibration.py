"""How well the fleet simulation reproduces the runs it was built from: every measured
operating point of an experiment, re-simulated as a fixed fleet (its deployment size, no
scaling) under Poisson arrivals at its offered rate, with its own request count, prompt
lengths and output lengths; predicted against measured SLO attainment and TTFT p50/p90.

In-sample by construction (the point's own requests are among those sampled, and the slowdown
curve is calibrated on these runs unless ``--raw``), so it checks the processor-sharing model,
not generalisation: that is the validation against a real replay (``protocol.validate``).
Prints one row per point and the mean absolute errors; also the simulation's speed.

    python benchmarks/plan_calibration.py /tmp/real/scaling [--ttft-ms 1000 --tpot-ms 100] [--seeds 5]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from conf.schema import Autoscale
from engines.autoscale_policy import ScalingPolicy
from metrics.fleet import request_metrics
from metrics.slo import SLO
from protocols.plan.capacity import read_experiment
from protocols.plan.fleet import FleetSimulation, calibrate
from protocols.plan.traffic import Traffic


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("experiment")
    ap.add_argument("--ttft-ms", type=float, default=None)
    ap.add_argument("--tpot-ms", type=float, default=None)
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--raw", action="store_true", help="the slowdown curve as measured, without calibrate()")
    a = ap.parse_args()
    caps = read_experiment(a.experiment)
    if not a.raw:
        for cap in caps:
            cap.corrections = calibrate(cap)
    slo = SLO(ttft_ms=a.ttft_ms, tpot_ms=a.tpot_ms) if (a.ttft_ms or a.tpot_ms) else SLO.from_config(caps[0].slo)
    print(f"SLO {slo.limits()} at p{slo.percentile:g}; {a.seeds} simulations a point\n")
    print(f"{'config':>8} {'size':>4} {'blk':>3} {'rate/rep':>8} {'in flight':>9} | {'attain meas':>11} "
          f"{'pred':>6} | {'p50 TTFT meas':>13} {'pred':>7} | {'p90 TTFT meas':>13} {'pred':>7}")
    errs = {"attainment": [], "p50": [], "p90": []}
    simulated, spent = 0, 0.0
    rng = np.random.default_rng(0)
    for cap in caps:
        for size in cap.sizes:
            for p in sorted(cap.points[size], key=lambda p: (p.block, p.rate_rps)):
                n = p.ttft_s.size + p.failed
                if n < 10:
                    continue
                meas = request_metrics(slo, np.r_[np.ones(p.ttft_s.size, bool), np.zeros(p.failed, bool)],
                                       np.r_[p.ttft_s, np.full(p.failed, np.nan)],
                                       np.r_[p.tpot_s, np.full(p.failed, np.nan)],
                                       np.r_[p.output_tokens, np.zeros(p.failed)], 1.0)
                preds = []
                for s in range(a.seeds):
                    gaps = rng.exponential(1 / (p.rate_rps * size), n)
                    arr = np.cumsum(gaps) - gaps[0]
                    idx = rng.integers(0, p.ttft_s.size, n)
                    tr = Traffic(arr, p.prompt_tokens[idx], p.output_tokens[idx], float(arr[-1]) + 1e-9, "poisson")
                    pol = ScalingPolicy(Autoscale(capacity_rps=max(p.rate_rps, 1e-6), min_replicas=size,
                                                  max_replicas=size, cold_start_s=0.0))
                    t0 = time.perf_counter()
                    r = FleetSimulation(tr, cap, pol, slo, initial=size, seed=s).run()
                    spent += time.perf_counter() - t0
                    simulated += n
                    preds.append((r["slo_attainment"], r["p50_ttft_ms"], r["p90_ttft_ms"]))
                pa, p50, p90 = np.mean(preds, axis=0)
                errs["attainment"].append(abs(pa - meas["slo_attainment"]))
                errs["p50"].append(abs(p50 / meas["p50_ttft_ms"] - 1))
                errs["p90"].append(abs(p90 / meas["p90_ttft_ms"] - 1))
                print(f"{cap.name:>8} {size:>4} {p.block:>3} {p.rate_rps:>8.3g} {p.in_flight:>9.3g} | "
                      f"{meas['slo_attainment']:>11.3f} {pa:>6.3f} | {meas['p50_ttft_ms']:>13.0f} {p50:>7.0f} | "
                      f"{meas['p90_ttft_ms']:>13.0f} {p90:>7.0f}")
    print(f"\nmean absolute error over {len(errs['p50'])} points: attainment {np.mean(errs['attainment']):.3f} "
          f"(share), TTFT p50 {np.mean(errs['p50']):.1%}, TTFT p90 {np.mean(errs['p90']):.1%}")
    print(f"simulation speed: {simulated / spent:,.0f} simulated requests/s on this host")
    return 0


if __name__ == "__main__":
    sys.exit(main())
