"""Print aiconfigurator's estimated operating points beside their roofline bounds, as the tables
of docs/plan-estimates.md ("Measured figures"), through the same path a plan takes
(``protocols.plan.estimates.estimated_capacity``):

    python benchmarks/aiconfigurator_estimates.py [--python PATH] [--isl 1024] [--osl 256]

Needs aiconfigurator's venv (``bash .ci/aiconfigurator_venv.sh``; ``--python`` another
interpreter that has it).  No GPU: aiconfigurator models the GPUs from its own data.
Columns: requests/s is Little's law, concurrency / (TTFT + TPOT x (osl - 1)); output tok/s is
requests/s x osl; the bounds are ``metrics.roofline``'s on conf/hardware's datasheet peaks.
"""

from __future__ import annotations

import argparse

from conf.schema import PlanEstimate
from protocols.plan.estimates import estimated_capacity

HEADER = ("| concurrency | TTFT ms | TPOT ms | requests/s | output tok/s | prefill bound ms | decode batch | "
          "decode step bound ms | TTFT / bound | TPOT / bound | faster than roofline |")


def cases(isl: int, osl: int) -> list[PlanEstimate]:
    llama = dict(model="meta-llama/Meta-Llama-3.1-8B", isl=isl, osl=osl, concurrencies=[1, 8, 32, 128],
                 cold_start_s=60.0)
    return [PlanEstimate(name="llama8b_h200_vllm", system="h200_sxm", backend="vllm", **llama),
            PlanEstimate(name="llama8b_h100_vllm", system="h100_sxm", backend="vllm", **llama),
            PlanEstimate(name="llama8b_b200_sglang", system="b200_sxm", backend="sglang", **llama),
            PlanEstimate(name="qwen3_8b_h200_pd", model="Qwen/Qwen3-8B", system="h200_sxm", backend="vllm",
                         isl=isl, osl=osl, disaggregated=True, prefill_workers=1, decode_workers=1,
                         concurrencies=[8, 32, 128], cold_start_s=60.0)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--python", default=None, help="aiconfigurator's interpreter (default: its venv)")
    ap.add_argument("--isl", type=int, default=1024)
    ap.add_argument("--osl", type=int, default=256)
    args = ap.parse_args()
    for spec in cases(args.isl, args.osl):
        cap = estimated_capacity(spec, python=args.python, key=spec.name)
        print(f"\n{cap.origin}")
        for note in cap.notes[1:2] + cap.notes[4:]:
            print(f"  note: {note}")
        print(HEADER)
        print("|---" * 11 + "|")
        for p in cap.points[1]:
            r = p.roofline
            print(f"| {p.in_flight:g} | {p.ttft_s[0] * 1e3:.1f} | {p.tpot_s[0] * 1e3:.2f} | {p.rate_rps:.2f} | "
                  f"{p.rate_rps * spec.osl:.0f} | {r['prefill_s'] * 1e3:.2f} ({r['prefill_limit']}) | "
                  f"{r['decode_batch']} | {r['decode_step_s'] * 1e3:.2f} ({r['decode_limit']}) | "
                  f"{r['ttft_over_bound']:.2f} | {r['tpot_over_bound']:.2f} | "
                  f"{'yes' if r['faster_than_roofline'] else 'no'} |")


if __name__ == "__main__":
    main()
