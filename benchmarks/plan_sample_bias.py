"""The stretch sample's bias on cost per million good tokens, within and past a replica's
capacity: a cheap replica with memory (``tests/protocols/plan/slot_replay.py``: SLOTS requests at
once, first come first served) serves a diurnal day (``DIURNAL_CURVE``, peak/trough 4) peaking at
PEAK x its capacity; the day is replayed exactly once and under ``protocol.replay_sample``
FRACTION (``protocols.plan.stretches.serve_sampled``) with SEEDS sample seeds.

Prints, per peak, the exact replay's attainment and cost per million good tokens (one replica
at 1 a replica-hour over the day: ``metrics.cost``), then over the seeds the sample's cost error
(sampled / exact - 1, ``metrics.prediction_error.error``): mean, its standard error, min and
max, how many seeds read below exact, the mean attainment, and how many seeds' streams the
lead-in check replayed whole.  ``--no-check``: the lead-in check off (its tolerance infinite):
the sample as it was before the check.

    python benchmarks/plan_sample_bias.py [--peaks 0.8,1.11] [--slots 4] [--fraction 0.1] [--seeds 40]
        [--ttft-ms 2000] [--no-check]
"""

import argparse
import math
import time

import numpy as np

from metrics.cost import fleet_cost, per_million
from metrics.fleet import request_metrics
from metrics.prediction_error import error
from metrics.slo import SLO
from protocols.plan import stretches as st
from tests.protocols.plan import slot_replay

ONE_REPLICA = {"model": "rental", "num_gpus": 1, "hourly_per_gpu": 1.0}


def cost_and_attainment(ttft, tpot, out, arr, slo: SLO) -> tuple[float, float]:
    window = float(arr[-1])
    m = request_metrics(slo, np.isfinite(ttft), ttft, tpot, out, window)
    bill = fleet_cost(ONE_REPLICA, window, window)["cost_total"]
    return per_million(bill, m["output_tokens_good"]), m["slo_attainment"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--peaks", default="0.8,1.11")
    ap.add_argument("--slots", type=int, default=4)
    ap.add_argument("--fraction", type=float, default=0.1)
    ap.add_argument("--seeds", type=int, default=40)
    ap.add_argument("--ttft-ms", type=float, default=2000.0)
    ap.add_argument("--no-check", action="store_true")
    a = ap.parse_args()
    if a.no_check:
        st.LEAD_IN_TOLERANCE = math.inf
    slo = SLO(ttft_ms=a.ttft_ms)
    sample = st.StretchSample(a.fraction)
    replay = slot_replay.replay(a.slots)
    print(f"{a.slots}-slot replica (capacity {slot_replay.capacity_rps(a.slots):.3f} req/s), a diurnal day, "
          f"SLO TTFT <= {a.ttft_ms:g} ms; {sample.text()}; lead-in check "
          f"{'off' if a.no_check else f'at {sample.check().lead_s:g} s, tolerance {st.LEAD_IN_TOLERANCE:.0%}'}")
    for peak in (float(x) for x in a.peaks.split(",")):
        t0 = time.perf_counter()
        arr, prompt, out = slot_replay.diurnal_day(peak, a.slots)
        exact = replay([(arr, prompt, out)])[0]
        c_ex, att_ex = cost_and_attainment(*exact, out, arr, slo)
        errs, atts, whole = [], [], 0
        for seed in range(a.seeds):
            got, notes = st.serve_sampled([(arr, prompt, out)], replay, sample, [seed])
            c, att = cost_and_attainment(*got[0], out, arr, slo)
            errs.append(error("cost_per_mtok_good", c, c_ex))
            atts.append(att)
            whole += (notes[0] or {}).get("replayed_whole", 0)
        e = np.asarray(errs)
        se = e.std(ddof=1) / math.sqrt(e.size)
        print(f"peak {peak:g}x capacity: {arr.size} requests; exact attainment {att_ex:.3f}, cost {c_ex:.4g} / M good "
              f"tok; sampled over {a.seeds} seeds: cost error mean {e.mean():+.2%} +- {se:.2%}"
              f" (min {e.min():+.2%}, max {e.max():+.2%}, {int((e < 0).sum())} of {e.size} below exact), attainment "
              f"{np.mean(atts):.3f}; streams replayed whole by the lead-in check: {whole} of {a.seeds}; "
              f"{time.perf_counter() - t0:.1f} s", flush=True)


if __name__ == "__main__":
    main()
