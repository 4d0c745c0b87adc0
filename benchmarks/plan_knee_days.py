"""Where the plan's chance that its pick is wrong comes from near a config's knee: its model's SLO
check on days like the plan's against the mocker's on the same days and its long run (issue 43,
the plan's row; docs/measured/plan-reliability.md, "The high bin").

    python benchmarks/plan_knee_days.py --json S0.json --seed 0 [--min-stated 0.5] [--near-knee 0.85] [--days 10]
        [--long] [--out LINES.json]

For each decision of a ``benchmarks/plan_reliability.py --json`` run (``--seed``: that run's seed)
whose plan stated ``pick_wrong`` at ``--min-stated`` or more (or, ``--near-knee``, with a config at
that share of its knee or more): its configs measured again as that run measured them (the same
draws), then ``--days`` fresh days of the plan's length at the
decision's rate (new arrival seeds, never the plan's day), each

- replayed on each config by the mocker (``dynamo.replay``): its run-level SLO check, attainment
  and p90 TTFT, what a real day of that traffic does;
- planned on each config by the plan's model (``protocol=plan``, processor sharing, the point
  estimate on every block's runs: ``protocol.resamples=0``): the same check, attainment and p90
  TTFT predicted;

and with ``--long`` the long run the truth replayed (the same stream) planned by the model the same
way: its check against the truth's.

Printed per decision and config: the long run's truth (the 20 000-request replay the JSON
recorded), the share of the fresh days meeting the SLO by the mocker and by the model, their
mean attainments and p90 TTFT (median over the days), and the share of resamples meeting the SLO
on redrawn days that the plan stated (``pick_wrong.meets_slo_share``).  A model biased near the
knee shows as its share of days below the mocker's on the same days; days that miss where the
long run meets, by both, show that the plan's redrawn days answer for a day, not the long run.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("plan_reliability_bench", HERE / "plan_reliability.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def measured_again(k: int, row: dict, args, replay, root: Path) -> dict:
    """Decision ``k``'s configs, measured into ``root`` with the draws its run used
    (``plan_reliability.decision``'s order of draws); returns the configs."""
    rng = np.random.default_rng([args.seed, k])
    while True:
        a, b = bench.draw_config(rng), bench.draw_config(rng)
        if bench.config_name(a) != bench.config_name(b):
            break
    configs = {bench.config_name(a): a, bench.config_name(b): b}
    if set(configs) != set(row["configs"]):
        raise SystemExit(f"decision {k}: the JSON's configs {sorted(row['configs'])} are not seed {args.seed}'s "
                         f"{sorted(configs)}: give the --seed of the run that wrote it")
    rate = float(rng.uniform(*args.rate_share)) * min(row["knees"].values())
    if abs(rate / row["rate"] - 1) > 1e-9:
        raise SystemExit(f"decision {k}: rate {rate} redrawn, {row['rate']} recorded: give that run's --rate-share")
    rng.uniform(-args.max_delta, args.max_delta)          # the delta's draw
    bench.write_experiment(root, replay, configs, row["knees"], row["prices"], args.requests, rng)
    return configs


def day_checks(k: int, row: dict, args, replay, tmp: Path) -> dict:
    """Per config: the mocker's and the model's SLO check, attainment and p90 TTFT on each fresh day."""
    root = tmp / f"exp{k}"
    configs = measured_again(k, row, args, replay, root)
    out = {n: {"mocker": [], "model": [], "long": {}} for n in configs}
    if args.long:
        # the long run the truth replayed (the same stream), planned by the model
        run = bench.stream(np.random.default_rng([args.seed, k, 1]), args.truth_requests, row["rate"])
        for n, c in configs.items():
            r = replay(c, [run])[0]
            out[n]["long"]["mocker_p90_ttft_ms"] = float(np.percentile(r["ttft_s"], 90) * 1e3)
        trace = tmp / f"long{k}.jsonl"
        bench.write_trace(trace, run)
        doc = bench.run_plan(root, trace, tmp / f"plan{k}-long", ("protocol.resamples=0",))
        for n, e in doc["plans"][0]["configs"].items():
            m = e["metrics"]
            out[n]["long"] |= {"model_meets": bool(e["meets_slo"]), "model_attainment": m["slo_attainment"]["value"],
                               "model_p90_ttft_ms": m["p90_ttft_ms"]["value"]}
    for j in range(args.days):
        day = bench.stream(np.random.default_rng([args.seed, k, 300 + j]), int(row["rate"] * args.day_s), row["rate"])
        for n, c in configs.items():
            r = replay(c, [day])[0]
            _, meets, att = bench.good_tokens(r)
            out[n]["mocker"].append((meets, att, float(np.percentile(r["ttft_s"], 90) * 1e3)))
        trace = tmp / f"day{k}-{j}.jsonl"
        bench.write_trace(trace, day)
        doc = bench.run_plan(root, trace, tmp / f"plan{k}-{j}", ("protocol.resamples=0",))
        for n, e in doc["plans"][0]["configs"].items():
            m = e["metrics"]
            out[n]["model"].append((bool(e["meets_slo"]), m["slo_attainment"]["value"], m["p90_ttft_ms"]["value"]))
    return out


def summary(row: dict, checks: dict) -> list[dict]:
    lines = []
    for n, c in checks.items():
        line = {"decision": row["decision"], "config": n, "pick": n == row["pick"], "right": n == row["right"],
                "load_share_of_knee": row["rate"] / row["knees"][n],
                "long_run_meets": row["true_meets"][n], "long_run_attainment": row["true_attainment"][n],
                "redrawn_days_meet": (row.get("meets_slo_share") or {}).get(n),
                "given_day_model_attainment": row["plan"][n]["slo_attainment"]}
        for who in ("mocker", "model"):
            v = np.array(c[who], dtype=float).reshape(-1, 3)
            line |= ({f"{who}_days_meet": float(v[:, 0].mean()), f"{who}_attainment": float(v[:, 1].mean()),
                      f"{who}_p90_ttft_ms": float(np.median(v[:, 2]))} if v.size else {})
        line |= {f"long_run_{m}": v for m, v in c["long"].items()}
        lines.append(line)
    return lines


def options(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--json", required=True, help="a plan_reliability.py --json run's decisions")
    ap.add_argument("--seed", type=int, required=True, help="that run's --seed")
    ap.add_argument("--min-stated", type=float, default=0.5, help="the decisions whose pick_wrong is at least this")
    ap.add_argument("--near-knee", type=float,
                    help="also the decisions with a config at this share of its knee or more")
    ap.add_argument("--days", type=int, default=10, help="fresh days per decision")
    ap.add_argument("--day-s", type=float, default=120.0, help="a day's length (s): the plan's")
    ap.add_argument("--requests", type=int, default=150, help="that run's --requests")
    ap.add_argument("--rate-share", type=float, nargs=2, default=(0.7, 1.05), help="that run's --rate-share")
    ap.add_argument("--max-delta", type=float, default=0.08, help="that run's --max-delta")
    ap.add_argument("--long", action="store_true", help="also the long run the truth replayed, planned by the model")
    ap.add_argument("--truth-requests", type=int, default=20_000, help="that run's --truth-requests")
    ap.add_argument("--out", help="write the lines here as JSON")
    return ap.parse_args(argv)


def main() -> None:
    args = options()
    t0 = time.time()
    rows = [r for r in json.loads(Path(args.json).read_text())
            if (r.get("pick_wrong") is not None and r["pick_wrong"] >= args.min_stated)
            or (args.near_knee is not None and max(r["rate"] / v for v in r["knees"].values()) >= args.near_knee)]
    lines = []
    with tempfile.TemporaryDirectory(prefix="plan-knee-days-") as d:
        replay = bench.Replayer(bench.dynamo_python(), Path(d))
        try:
            for row in rows:
                got = summary(row, day_checks(row["decision"], row, args, replay, Path(d)))
                for line in got:
                    print(json.dumps(line), flush=True)
                lines += got
                if args.out:
                    Path(args.out).write_text(json.dumps(lines, indent=1))
        finally:
            replay.close()
    print(f"\n{'decision':>8} {'config':>28} {'pick':>5} {'load/knee':>9} {'long run':>12} {'model long':>12}"
          f" {'redrawn':>8} {'mocker days':>12} {'model days':>11} {'p90 TTFT long mocker/model':>27}"
          f" {'p90 TTFT days mocker/model':>27}")
    for x in lines:
        long_run = f"{'meets' if x['long_run_meets'] else 'misses'} {x['long_run_attainment']:.3f}"
        model_long = (f"{'meets' if x['long_run_model_meets'] else 'misses'} {x['long_run_model_attainment']:.3f}"
                      if "long_run_model_meets" in x else "-")
        redrawn = "n/a" if x["redrawn_days_meet"] is None else f"{x['redrawn_days_meet']:.0%}"
        days = (f" {x['mocker_days_meet']:>12.0%} {x['model_days_meet']:>11.0%}" if "mocker_days_meet" in x
                else f" {'-':>12} {'-':>11}")
        p90_long = (f"{x['long_run_mocker_p90_ttft_ms']:.0f}/{x['long_run_model_p90_ttft_ms']:.0f}"
                    if "long_run_model_meets" in x else "-")
        p90_days = f"{x['mocker_p90_ttft_ms']:.0f}/{x['model_p90_ttft_ms']:.0f}" if "mocker_days_meet" in x else "-"
        print(f"{x['decision']:>8} {x['config']:>28} {'yes' if x['pick'] else '':>5} {x['load_share_of_knee']:>9.2f} "
              f"{long_run:>12} {model_long:>12} {redrawn:>8}{days} {p90_long:>27} {p90_days:>27}")
    print(f"\n{len(rows)} decisions x {args.days} days, {time.time() - t0:.0f} s; load average "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
