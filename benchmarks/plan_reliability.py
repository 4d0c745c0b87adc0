"""How often the fleet plan's pick is wrong against the probability it states (issue 43, the
plan's row): a reliability table over decisions between Dynamo mocker configs whose truth is
known.

    python benchmarks/plan_reliability.py --decisions 40 [--seed 0] [--rate-share 0.7 1.05] [--json OUT.json]
        [--keep DIR]                        # keep each decision's experiment and day
    python benchmarks/plan_reliability.py --replan OUT.json --seed 0 --json NEW.json   # the plan step again
        [--reuse DIR]                       # the measured runs and day of that run's --keep DIR, not measured again
    python benchmarks/plan_reliability.py --tables A.json B.json ...   # the tables of several runs pooled

Each decision is between two mocker configs drawn from a pool that differ in timing
(``speedup_ratio``) and knobs (``max_num_seqs``, ``max_num_batched_tokens``, ``block_size``); no
model was fitted on any of them.  Per decision:

1. **The truth.**  Each config's single replica replayed offline (``dynamo.replay``, the
   mocker's scheduler) on a long Poisson stream (``--truth-requests``, 20 000) at the decision's
   rate (``--rate-share``: 0.7 to 1.05 x the lower config's knee, where a 2000-request replay last
   meets the SLO): its good output tokens (of requests completed with TTFT and TPOT within the
   SLO) and whether it meets the SLO at the run level (p90 TTFT and TPOT).  Cost per million
   good tokens = price x window / good tokens (one replica serving the whole window).  The
   prices are set so the true costs differ by a drawn ``delta`` (``--max-delta``, 8 %): close
   decisions, so the stated probabilities land away from 0.  The truly cheapest among those
   meeting the SLO is the right pick.
2. **The plan, as a user runs it.**  Each config "measured" as a sweep would: 3 blocks (fresh
   arrival seeds) x 6 Poisson rates around its knee x ``--requests`` (150) requests, each run an
   offline replay, written in the experiment layout the plan reads (``runs.parquet``, each run's
   ``requests.parquet``, ``summary.json``, ``config.yaml`` with the config's price); then
   ``protocol=plan`` over a small day (``--day-s``, 120 s of the decision's traffic: a fixed
   fleet of one replica, ``replica_model=processor_sharing``, the default residuals), in process
   (``protocols.registry.run_protocol``).  Its pick and the stated chance the pick is wrong are
   read from ``plan.json``: ``pick_wrong.probability`` (over every config, those whose plan misses
   the SLO counted by their resamples meeting it, each resample judged on a redrawn day:
   ``protocols.plan.day_draws``) and ``runner_up_cheaper.probability`` (the
   runner-up's among the configs meeting it), and beside it the figure with the model's error
   taken as independent or shared (``model_error_between``).
3. **Scored.**  Wrong = the plan's pick is not the true cheapest.  Decisions whose plan has no
   probability (the runner-up's: one config meets its SLO, or none; ``pick_wrong``: none meets it)
   are counted apart.

Prints the reliability table (bins of stated probability: count, mean stated, observed share
wrong with its Clopper-Pearson 95 % interval, and whether a bin of 5 or more decisions is within
10 points) and the Brier score, for the runner-up's figure, each reading of the model's error, and
``pick_wrong``.  Replays run in the Dynamo venv's Python (``protocols.plan.scheduler.dynamo_python``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import results_io
from metrics.reliability import reliability_table
from protocols.plan import scheduler as sched

WORKER = Path(__file__).resolve().parents[1] / "protocols" / "plan" / "replay_worker.py"
PROMPTS = (200, 1200)            # prompt tokens drawn uniformly in [lo, hi)
OUTPUTS = (20, 200)              # output tokens likewise
SLO = {"ttft_ms": 300.0, "tpot_ms": 40.0, "percentile": 90.0}
POOL = {"speedup_ratio": (0.8, 1.0, 1.25, 1.5, 2.0), "max_num_seqs": (12, 16, 24, 32, 48, 256),
        "max_num_batched_tokens": (1024, 2048, 8192), "block_size": (16, 32, 64)}
GRID = (0.3, 0.5, 0.7, 0.85, 1.0, 1.2)  # the measured rates, as shares of the config's knee
COLD_START_S = 30.0


def dynamo_python() -> str:
    py = sched.dynamo_python(None)
    if py is None:
        sys.exit("no Dynamo venv Python (build it with .ci/dynamo_venv.sh or set TOKENFACTORY_DYNAMO_PYTHON)")
    return str(py)


def draw_config(rng) -> dict:
    return {k: (float(v) if k == "speedup_ratio" else int(v))
            for k, v in ((k, rng.choice(vals)) for k, vals in POOL.items())}


def config_name(c: dict) -> str:
    return f"x{c['speedup_ratio']:g}-seqs{c['max_num_seqs']}-mbt{c['max_num_batched_tokens']}-bs{c['block_size']}"


def stream(rng, n: int, rate: float) -> dict:
    return {"arrival_s": np.cumsum(rng.exponential(1.0 / rate, n)),
            "prompt": rng.integers(*PROMPTS, n), "output": rng.integers(*OUTPUTS, n)}


def write_trace(path: Path, s: dict) -> None:
    """Mooncake jsonl; each request's KV blocks its own (no shared prefix)."""
    with open(path, "w") as f:
        for i, (t, p, o) in enumerate(zip(s["arrival_s"], s["prompt"], s["output"])):
            ids = ",".join(str(i * 1000 + k) for k in range((int(p) + 15) // 16))
            f.write(f'{{"timestamp": {t * 1000:.3f}, "input_length": {int(p)}, "output_length": {int(o)}, '
                    f'"hash_ids": [{ids}]}}\n')


class Replayer:
    """One long-lived ``replay_worker.py --serve`` in the Dynamo venv: a replay a line."""

    def __init__(self, py: str, tmp: Path):
        self.tmp, self.n = tmp, 0
        self.proc = subprocess.Popen([py, str(WORKER), "--serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=60)

    def __call__(self, config: dict, streams: list[dict]) -> list[dict]:
        """Each stream replayed on one replica of ``config``: per request TTFT, TPOT and E2EL (s)
        and whether it completed, in arrival order."""
        out = []
        for s in streams:
            self.n += 1
            trace, report, records = (self.tmp / f"s{self.n}{ext}" for ext in (".jsonl", ".report.jsonl", ".npy"))
            write_trace(trace, s)
            self.proc.stdin.write(json.dumps({"engine_args": config, "router_mode": "round_robin",
                                              "trace": str(trace), "report": str(report), "records": str(records),
                                              "trace_block_size": 16}) + "\n")
            self.proc.stdin.flush()
            answer = json.loads(self.proc.stdout.readline() or '{"ok": false, "error": "the worker ended"}')
            if not answer.get("ok"):
                raise RuntimeError(f"replay of {config}: {answer.get('error')}")
            rec = np.load(records)
            for f in (trace, report, records):
                f.unlink()
            rec = rec[np.argsort(rec[:, 0], kind="stable")]
            ttft, e2el = rec[:, 3] / 1e3, rec[:, 4] / 1e3
            out.append({**s, "ttft_s": ttft, "tpot_s": (e2el - ttft) / np.maximum(rec[:, 2] - 1, 1), "e2el_s": e2el,
                        "completed": rec[:, 5] > 0})
        return out


def good_tokens(r: dict) -> tuple[float, bool, float]:
    """(good output tokens, meets the SLO at the run level: p90 TTFT and TPOT within limits,
    the share of requests within the SLO)."""
    ok = r["completed"] & (r["ttft_s"] * 1e3 <= SLO["ttft_ms"]) & (r["tpot_s"] * 1e3 <= SLO["tpot_ms"])
    q = SLO["percentile"]
    meets = bool(r["completed"].mean() >= q / 100 and np.percentile(r["ttft_s"], q) * 1e3 <= SLO["ttft_ms"]
                 and np.percentile(r["tpot_s"], q) * 1e3 <= SLO["tpot_ms"])
    return float(r["output"][ok].sum()), meets, float(ok.mean())


def knee(replay: Replayer, config: dict, requests: int = 2000) -> float:
    """The highest rate (within 5 %) at which a replay of ``requests`` meets the SLO."""
    lo, hi = 0.5, 200.0
    for _ in range(12):
        mid = math.sqrt(lo * hi)
        r = replay(config, [stream(np.random.default_rng(7), requests, mid)])[0]
        lo, hi = (mid, hi) if good_tokens(r)[1] else (lo, mid)
        if hi / lo < 1.05:
            break
    return lo


def write_experiment(root: Path, replay: Replayer, configs: dict[str, dict], knees: dict[str, float],
                     prices: dict[str, float], requests: int, rng) -> None:
    """Each config measured as a sweep would (module doc) in the layout ``read_experiment`` reads."""
    rows = []
    for name, c in configs.items():
        for b in range(3):
            streams = [stream(rng, requests, g * knees[name]) for g in GRID]
            for i, (g, r) in enumerate(zip(GRID, replay(c, streams))):
                rate = g * knees[name]
                d = root / name / f"block{b}" / f"{i:02d}-rate{rate:.3g}"
                d.mkdir(parents=True, exist_ok=True)
                n = r["arrival_s"].size
                ok = r["completed"]
                sched = np.round(r["arrival_s"] * 1e9).astype(np.int64)
                pq.write_table(pa.table({
                    "scheduled_ns": sched, "prompt_tokens": r["prompt"].astype(np.int64),
                    "output_tokens": pa.array(r["output"].astype(np.int64), mask=~ok),
                    "ttft_s": pa.array(r["ttft_s"], mask=~ok), "tpot_s": pa.array(r["tpot_s"], mask=~ok),
                    "status": np.where(ok, "ok", "http_error"), "warmup": np.zeros(n, bool)}), d / results_io.REQUESTS)
                span = float(np.nanmax(r["arrival_s"] + np.nan_to_num(r["e2el_s"])) - r["arrival_s"][0])
                grid = np.linspace(r["arrival_s"][0], r["arrival_s"][-1], 400)
                ends = r["arrival_s"] + np.nan_to_num(r["e2el_s"])
                inflight = (np.searchsorted(np.sort(r["arrival_s"]), grid) - np.searchsorted(np.sort(ends), grid))
                results_io.write_json(d / results_io.SUMMARY, {
                    "offered_load": rate, "load_kind": "poisson", "saturated": False, "engine_startup_s": COLD_START_S,
                    "mean_in_flight": float(np.nansum(r["e2el_s"]) / span),
                    "in_flight_second_quarter": float(inflight[100:200].mean()),
                    "in_flight_last_quarter": float(inflight[300:].mean()),
                    "emulated": True, "timing_source": "dynamo mocker (offline replay)"})
                results_io.write_yaml(d / results_io.CONFIG, {
                    "deployment": {"kind": "replicas", "replicas": 1},
                    "cost": {"model": "rental", "currency": "USD", "num_gpus": 1, "hourly_per_gpu": prices[name],
                             "num_hosts": 0, "hourly_per_host": 0.0, "extra_hourly": {}},
                    "workload": {"name": "mooncake"}})
                rows.append({"run_dir": str(d.relative_to(root)), "config": name, "block": b, "role": "point",
                             "load_kind": "poisson", "offered_load": rate})
    pq.write_table(pa.Table.from_pylist(rows), root / results_io.RUNS_TABLE)
    results_io.write_json(root / results_io.EXPERIMENT, {
        "configs": {n: [f"engine.mocker.{k}={v}" for k, v in c.items()] for n, c in configs.items()},
        "slo": {**SLO, "e2el_ms": None, "min_attainment": None}})


def run_plan(root: Path, trace: Path, out: Path, extra: tuple[str, ...] = ()) -> dict:
    """``protocol=plan`` on the experiment ``root`` over the day ``trace`` (module doc), ``extra``
    overrides after the benchmark's own; plan.json read back."""
    from conf.compose import compose_config
    from protocols.registry import Invocation, run_protocol

    over = ["protocol=plan", f"protocol.experiments=[{root}]", "workload=mooncake", f"workload.path={trace}",
            "workload.on_too_long=clip", "deployment=replicas", "deployment.replicas=1", "router=vllm",
            "deployment.autoscale.min_replicas=1", "deployment.autoscale.max_replicas=1",
            "protocol.workers=1", "protocol.replica_model=processor_sharing",
            f"slo.ttft_ms={SLO['ttft_ms']}", f"slo.tpot_ms={SLO['tpot_ms']}", f"slo.percentile={SLO['percentile']}",
            f"output_dir={out}", *extra]
    done = run_protocol(compose_config(over), Invocation(explicit=frozenset()))
    return json.loads((done / results_io.PLAN).read_text())


def decision(k: int, args, replay: Replayer, tmp: Path, known: dict | None = None) -> dict:
    """Decision ``k`` (module doc); ``known``: its row as an earlier run recorded it, whose knees and truth
    are taken as they were (the same draws otherwise, so the measured runs and the day are the same)."""
    rng = np.random.default_rng([args.seed, k])
    while True:
        a, b = draw_config(rng), draw_config(rng)
        if config_name(a) != config_name(b):
            break
    configs = {config_name(a): a, config_name(b): b}
    if known is not None and set(known["configs"]) != set(configs):
        raise SystemExit(f"--replan: decision {k} of the JSON is between {sorted(known['configs'])}, seed "
                         f"{args.seed} draws {sorted(configs)}: give the --seed that run had")
    knees = known["knees"] if known else {n: knee(replay, c, args.knee_requests) for n, c in configs.items()}
    rate = float(rng.uniform(*args.rate_share)) * min(knees.values())
    t0 = time.time()
    if known is None:
        # the truth: a long replay of the decision's traffic on each config (the same arrivals)
        truth_stream = stream(np.random.default_rng([args.seed, k, 1]), args.truth_requests, rate)
        truth = {n: good_tokens(replay(c, [truth_stream])[0]) for n, c in configs.items()}
    delta = float(rng.uniform(-args.max_delta, args.max_delta))
    if known is None:
        na, nb = configs
        # prices so that the true cost per good token of b is (1 + delta) x a's
        prices = {na: 1.0, nb: (1 + delta) * truth[nb][0] / truth[na][0] if truth[na][0] > 0 else 1.0}
        window = float(truth_stream["arrival_s"][-1])
        true_cost = {n: (prices[n] * window / truth[n][0] * 1e6 if truth[n][0] > 0 else math.inf) for n in configs}
        meeting = [n for n in configs if truth[n][1]]
        right = min(meeting, key=lambda n: true_cost[n]) if meeting else None
        row = {"decision": k, "configs": configs, "knees": knees, "rate": rate, "delta": delta, "prices": prices,
               "true_cost": true_cost, "true_meets": {n: truth[n][1] for n in configs},
               "true_attainment": {n: truth[n][2] for n in configs}, "right": right}
    else:
        row = {f: known[f] for f in ("decision", "configs", "knees", "rate", "delta", "prices", "true_cost",
                                     "true_meets", "true_attainment", "right")}
    root, trace = tmp / f"exp{k}", tmp / f"day{k}.jsonl"
    kept = Path(args.reuse) if known is not None and args.reuse else None
    if kept is not None and (kept / f"exp{k}").is_dir() and (kept / f"day{k}.jsonl").is_file():
        root, trace = kept / f"exp{k}", kept / f"day{k}.jsonl"     # that run's measured runs and day, as they were
    else:
        write_experiment(root, replay, configs, knees, row["prices"], args.requests, rng)
        day = stream(np.random.default_rng([args.seed, k, 2]), int(rate * args.day_s), rate)
        write_trace(trace, day)
    t1 = time.time()
    doc = run_plan(root, trace, tmp / f"plan{k}")
    t2 = time.time()
    seconds = {"truth_and_runs": t1 - t0, "plan": t2 - t1}
    if known is not None:
        seconds["truth_and_runs_recorded"] = known["seconds"]["truth_and_runs"]
    return row | {"seconds": seconds} | scored_plan(doc, row["right"])


def scored_plan(doc: dict, right: str | None) -> dict:
    """A decision's plan.json read: the pick, each stated probability, and whether the pick is wrong."""
    ch = doc["plans"][0]["cheapest"]
    r = ch.get("runner_up_cheaper") or {}
    between = ch.get("model_error_between") or {}
    taken_as = between.get("taken_as")
    figure = {how: r.get("probability") if taken_as == how else (between.get(how) or {}).get("probability")
              for how in ("independent", "shared")}
    pick = r.get("pick") or ch.get("config")
    pw = ch.get("pick_wrong") or {}
    return {"pick": pick,
            "plan": {n: {m: e["metrics"][m]["value"] for m in ("slo_attainment", "cost_per_mtok_good")}
                     | {"meets_slo": e["meets_slo"], "interval": e["metrics"]["cost_per_mtok_good"]["interval"],
                        "meets_slo_resamples": e.get("meets_slo_resamples")}
                     for n, e in doc["plans"][0]["configs"].items()},
            "stated": r.get("probability"), "standard_error": r.get("standard_error"), "taken_as": taken_as,
            "independent": figure["independent"], "shared": figure["shared"],
            "pick_wrong": pw.get("probability"), "pick_misses_slo": pw.get("pick_misses_slo"),
            "meets_slo_share": pw.get("meets_slo_share"),
            "why": r.get("why"), "wrong": (pick != right) if pick is not None else None, "verdict": ch.get("verdict")}


def share(p) -> str:
    return "n/a" if p is None else f"{p:.1%}"


def print_table(title: str, stated: list[float], wrong: list[bool]) -> None:
    t = reliability_table(stated, wrong)
    print(f"\n{title}: {len(stated)} decisions, Brier score {t['brier']:.3f}")
    print(f"{'bin of stated P(wrong)':>24} {'n':>4} {'mean stated':>12} {'observed wrong':>15} {'95 % interval':>16}"
          f" {'within 10 pts':>14}")
    for row in t["bins"]:
        iv = row["interval"]
        held = ("n/a (< 5)" if row["verdict"] == "too few" else row["verdict"])
        obs = f"{row['wrong']}/{row['count']} = {row['observed']:.1%}" if row["count"] else "-"
        ms = f"{row['mean_stated']:.1%}" if row["count"] else "-"
        ivs = f"[{iv[0]:.1%}, {iv[1]:.1%}]" if row["count"] else "-"
        print(f"{row['bin']:>24} {row['count']:>4} {ms:>12} {obs:>15} {ivs:>16} {held:>14}")


def options(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--decisions", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--requests", type=int, default=150, help="requests per measured run")
    ap.add_argument("--truth-requests", type=int, default=20_000)
    ap.add_argument("--knee-requests", type=int, default=2000, help="requests per replay of the knee's search")
    ap.add_argument("--day-s", type=float, default=120.0, help="the plan's window of traffic (s)")
    ap.add_argument("--rate-share", type=float, nargs=2, default=(0.7, 1.05), metavar=("LO", "HI"),
                    help="the decision's rate drawn in [LO, HI) x the lower knee")
    ap.add_argument("--max-delta", type=float, default=0.08, help="true cost differences drawn in +-this")
    ap.add_argument("--json", help="write every decision here (rewritten as each decision ends)")
    ap.add_argument("--keep", metavar="DIR", help="keep each decision's experiment, day and plan here")
    ap.add_argument("--replan", metavar="JSON", help="the decisions of an earlier run's --json, their knees and truth "
                    "as recorded there: only the measured runs (the same draws) and the plan step rerun; give "
                    "that run's --seed and options")
    ap.add_argument("--reuse", metavar="DIR", help="with --replan: the --keep folder of the run that wrote the JSON; "
                    "each decision's measured runs and day read from there instead of measured again")
    ap.add_argument("--tables", metavar="JSON", nargs="+", help="no run: the tables of these --json files pooled")
    return ap.parse_args(argv)


def run_decisions(args: argparse.Namespace, say=print) -> list[dict]:
    """Every decision of ``args`` (module doc), each reported by ``say`` as it ends."""
    t0 = time.time()
    rows = []

    def done(r: dict) -> None:
        rows.append(r)
        if args.json:
            Path(args.json).write_text(json.dumps(rows, indent=1, default=str))
        say(f"decision {r['decision']}: {' vs '.join(r['configs'])} at {r['rate']:.3g} req/s, delta "
            f"{r['delta']:+.1%}: pick {r['pick']} (right: {r['right']}), P(wrong) {share(r['pick_wrong'])} over "
            f"every config, runner-up's {share(r['stated'])} (model error taken as {r['taken_as']}; independent "
            f"{share(r['independent'])}, shared {share(r['shared'])}); {time.time() - t0:.0f} s")

    with tempfile.TemporaryDirectory(prefix="plan-reliability-") as d:
        where = Path(args.keep) if args.keep else Path(d)
        where.mkdir(parents=True, exist_ok=True)
        replay = Replayer(dynamo_python(), Path(d))
        try:
            if args.replan:
                for known in json.loads(Path(args.replan).read_text())[:args.decisions]:
                    done(decision(known["decision"], args, replay, where, known))
            else:
                for k in range(args.decisions):
                    done(decision(k, args, replay, where))
        finally:
            replay.close()
    return rows


def scored(rows: list[dict], figure: str = "stated") -> list[dict]:
    """The decisions with a pick to score and a probability ``figure`` (``stated``: the runner-up's;
    ``pick_wrong``: over every config)."""
    return [r for r in rows if r[figure] is not None and r["wrong"] is not None]


def print_meets(rows: list[dict]) -> None:
    """Each config's share of resamples meeting the SLO (``pick_wrong.meets_slo_share``, the plan's chance that
    it meets it) against its long run, by the decision's rate over the config's knee."""
    got = [(r["rate"] / r["knees"][n], s, r["true_meets"][n]) for r in rows
           for n, s in (r.get("meets_slo_share") or {}).items() if s is not None]
    print(f"\nP(config meets the SLO) against its long run, {len(got)} configs: by rate / knee")
    print(f"{'rate / knee':>12} {'configs':>8} {'mean stated':>12} {'long runs meeting':>18}")
    for lo, hi in ((0.0, 0.85), (0.85, 0.95), (0.95, 1.0), (1.0, math.inf)):
        sel = [(s, t) for x, s, t in got if lo <= x < hi]
        if sel:
            stated, met = zip(*sel)
            print(f"{f'[{lo:g}, {hi:g})':>12} {len(sel):>8} {np.mean(stated):>12.1%} "
                  f"{f'{sum(met)}/{len(met)} = {np.mean(met):.1%}':>18}")


def print_tables(rows: list[dict]) -> None:
    done = scored(rows)
    print(f"\n{len(done)} of {len(rows)} decisions with a stated probability "
          f"({len(rows) - len(done)} without: {sorted({str(r['why']) for r in rows if r['stated'] is None})})")
    print_table("stated (the verdict's figure)", [r["stated"] for r in done], [r["wrong"] for r in done])
    for how in ("independent", "shared"):
        sel = [r for r in done if r[how] is not None]
        if sel:
            print_table(f"the model's error taken as {how}", [r[how] for r in sel], [r["wrong"] for r in sel])
    every = scored(rows, "pick_wrong")
    print(f"\n{len(every)} of {len(rows)} decisions with P(pick wrong) over every config (pick_wrong)")
    print_table("P(pick wrong) over every config, those missing the SLO in their plan included",
                [r["pick_wrong"] for r in every], [r["wrong"] for r in every])
    print_meets(rows)


def main() -> None:
    args = options()
    if args.tables:
        print_tables([r for f in args.tables for r in json.loads(Path(f).read_text())])
        return
    t0 = time.time()
    rows = run_decisions(args, say=lambda line: print(line, flush=True))
    print_tables(rows)
    print(f"\n{time.time() - t0:.0f} s; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
