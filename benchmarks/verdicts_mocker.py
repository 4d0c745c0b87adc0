"""How often the SLO search is wrong on NVIDIA Dynamo's mocker, whose truth is its offline replay.

    TOKENFACTORY_DYNAMO_PYTHON=/path/to/dynamo-venv/bin/python \\
    python benchmarks/verdicts_mocker.py [--trials N] [--budget-s S] [--seed 0] [--check-s 40] [--capacity-s 0]
        [--capacity-after] [--no-replay] [--json OUT]   (docs/measured/verdicts-mocker.md)

The mocker row of ``benchmarks/verdicts.py``'s ``slo_search`` (whose helpers, the interval and
the table's line, this imports): ``protocol.search=slo`` (bisection over constant rates, tolerance
10 %, probes of a few seconds) for p99 TTFT <= ``SLO_MS`` on ``engine=dynamo``, one mocker worker
of ``MAX_NUM_SEQS`` slots at speedup 1 (Dynamo's polynomial timing), launched fresh by every search.

The truth is Dynamo's own offline replay of the mocker (``dynamo.replay.run_synthetic_trace_replay``,
the same scheduler and timing model, no HTTP, no host): constant arrivals of requests of the
search's shape, its p99 TTFT bisected over the rate to 0.01 req/s, at large N (the steady state:
the rate a long run sustains) and at the probe's own N (what a probe of ``PROBE_S`` s sees).
``--capacity-s`` first runs one live run overloaded at 1.3x the truth and measures the
engine's own pace (the requests it completes per second once its queue has formed): the live
truth, where the host slows the mocker below its model.  ``--check-s`` then runs one long live
constant-rate run on each side of the truth (0.95x and 1.05x): the live p99 TTFT against the replay's.
A search is right when its answer is within one probe step (the tolerance x the truth) of the truth.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.verdicts import HEADER, Row, free_port, probe_figures, run_experiment  # noqa: E402
from harness import results_io  # noqa: E402

# the mocker and the search: 1 worker of 2 slots, requests of 32 prompt and 16 output tokens
MAX_NUM_SEQS, INPUT_TOKENS, OUTPUT_TOKENS, SPEEDUP = 2, 32, 16, 1.0
SLO_MS, PROBE_S, TOLERANCE, LOW, HIGH = 100.0, 3.0, 0.1, 4.0, 40.0
LARGE_N = 20_000
OVERLOAD_RPS = 20.6  # 1.3x the replay's knee (15.88 req/s, ai-dynamo 1.4.2): --no-replay's overload

# run by the Dynamo venv's interpreter: the replay's p99 TTFT bisected over the constant rate
TRUTH_SCRIPT = """
import json, sys
from dynamo.mocker import MockEngineArgs
from dynamo.replay import run_synthetic_trace_replay
q = json.loads(sys.argv[1])
args = MockEngineArgs.from_json(json.dumps({"max_num_seqs": q["slots"]}))
def p99(rate, n):
    r = run_synthetic_trace_replay(q["input"], q["output"], n, extra_engine_args=args,
                                   arrival_interval_ms=1000.0 / rate)
    return r["p99_ttft_ms"], r["median_ttft_ms"], r["request_throughput_rps"]
out = {}
for name, n_of in (("large_n", lambda r: q["large_n"]), ("probe_n", lambda r: max(int(round(r * q["probe_s"])), 1))):
    lo, hi = q["low"], q["high"]
    while hi - lo > 0.01:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if p99(mid, n_of(mid))[0] <= q["slo"] else (lo, mid)
    out[name] = lo
out["at"] = {f"{f:g}": p99(out["large_n"] * f, q["large_n"]) for f in (0.95, 1.0, 1.05)}
print(json.dumps(out))
"""


def dynamo_python() -> str:
    py = os.environ.get("TOKENFACTORY_DYNAMO_PYTHON")
    if not py or not Path(py).exists():
        sys.exit("TOKENFACTORY_DYNAMO_PYTHON is unset or missing: build the Dynamo venv with .ci/dynamo_venv.sh")
    return py


def replay_truth(py: str) -> dict:
    """The highest constant rate whose replayed p99 TTFT meets the SLO, at large N and at a probe's N."""
    q = {"slots": MAX_NUM_SEQS, "input": INPUT_TOKENS, "output": OUTPUT_TOKENS, "slo": SLO_MS,
         "probe_s": PROBE_S, "large_n": LARGE_N, "low": 1.0, "high": 100.0}
    done = subprocess.run([py, "-c", TRUTH_SCRIPT, json.dumps(q)], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def base(py: str, out: Path, seed: int) -> list[str]:
    return ["engine=dynamo", f"engine.python={py}", "engine.workers=1", f"engine.port={free_port()}",
            f"engine.mocker.speedup_ratio={SPEEDUP:g}", f"engine.features.max_num_seqs={MAX_NUM_SEQS}",
            f"workload.input_tokens={INPUT_TOKENS}", f"workload.output_tokens={OUTPUT_TOKENS}",
            "load=constant", "load.warmup_requests=0", "mlflow.enabled=false", "report.enabled=false",
            "progress=false", "telemetry.idle_baseline_s=0", f"workload.seed={seed}", f"output_dir={out}"]


def live_check(py: str, tmp: Path, rate: float, seconds: float) -> dict:
    """One long live run at a constant ``rate``: its p99 and p50 TTFT (ms) and requests."""
    out = tmp / "check"
    run_experiment([*base(py, out, 0), "load.num_requests=null", f"load.duration_s={seconds:g}",
                    f"protocol.load_points=[{rate:.3f}]"])
    d = next(p for p in out.rglob(results_io.SUMMARY))
    s = json.loads(d.read_text())
    shutil.rmtree(out)
    return {k: s.get(k) for k in ("p99_ttft_ms", "p50_ttft_ms", "completed", "num_requests", "error_rate")}


def live_capacity(py: str, tmp: Path, rate: float, seconds: float) -> dict:
    """One long live run overloaded at ``rate``: the engine's own pace (req/s), the requests it
    completed per second once its queue had formed (after the run's first fifth), against the
    replay's capacity; and the prompt tokens the engine said it served (the replay's shape or not)."""
    import numpy as np
    import pyarrow.parquet as pq
    out = tmp / "capacity"
    run_experiment([*base(py, out, 0), "load.num_requests=null", f"load.duration_s={seconds:g}",
                    f"protocol.load_points=[{rate:.3f}]"])
    t = pq.read_table(next(out.rglob(results_io.REQUESTS)), columns=["end_ns", "prompt_tokens", "status"]).to_pydict()
    ends = np.sort(np.array([e for e, st in zip(t["end_ns"], t["status"]) if st == "ok" and e is not None]))
    ends = ends[len(ends) // 5:]
    shutil.rmtree(out)
    return {"rate": rate, "seconds": seconds, "completed_per_s": (len(ends) - 1) / ((ends[-1] - ends[0]) / 1e9),
            "prompt_tokens": sorted(set(t["prompt_tokens"]))}


def search_trial(py: str, tmp: Path, seed: int) -> dict:
    out = tmp / "search"
    run_experiment([*base(py, out, seed), "load.num_requests=null", f"load.duration_s={PROBE_S:g}",
                    "protocol.load_points=[]", "protocol.search=slo", f"protocol.search_low={LOW:g}",
                    f"protocol.search_high={HIGH:g}", f"protocol.search_tolerance={TOLERANCE}",
                    f"slo.ttft_ms={SLO_MS:g}", "slo.tpot_ms=null"])
    found = json.loads((out / "search.json").read_text())
    found["probe_figures"] = probe_figures(out, found["probes"])  # the log a miss is traced from
    shutil.rmtree(out)
    return found


def search_row(found: list[dict], truth: float) -> Row:
    step = TOLERANCE * truth
    wrong = [f for f in found if abs(f["max_load_under_slo"] - truth) > step + 1e-9]
    answers = sorted(round(f["max_load_under_slo"], 2) for f in found)
    # protocol.search_recheck: misses re-measured, those that met the SLO when re-measured, probes a search
    rechecks = sum(len(f.get("rechecked", [])) for f in found)
    overturned = sorted(r["load"] for f in found for r in f.get("rechecked", []) if not r["confirmed"])
    probes = sum(len(f.get("probes", [])) for f in found) / max(len(found), 1)
    return Row("SLO search on the mocker: answer beyond one step", 0.05, len(found), len(wrong),
               f"truth {truth:.2f} req/s, step {step:.2f}; answers {answers}; {rechecks} misses re-measured, "
               f"{len(overturned)} met the SLO when re-measured {overturned}; probes a search {probes:.1f}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trials", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget-s", type=float, default=None, help="start no search after this many seconds")
    ap.add_argument("--check-s", type=float, default=40.0, help="each live check run's length (0: none)")
    ap.add_argument("--capacity-s", type=float, default=0.0,
                    help="first one live run this long at 1.3x the truth: the live engine's own capacity (0: none)")
    ap.add_argument("--capacity-after", action="store_true",
                    help="measure the live capacity again after the searches (the host's load moves)")
    ap.add_argument("--no-replay", action="store_true",
                    help="no replay truth (about a minute): the live capacity's rows only, its overload at "
                         f"{OVERLOAD_RPS:g} req/s (1.3x the replay's knee)")
    ap.add_argument("--json", type=Path, default=None, help="also write the truth, checks and searches here")
    a = ap.parse_args(argv)
    if a.no_replay and (a.check_s > 0 or a.capacity_s <= 0):
        ap.error("--no-replay judges against the live capacity only: give --capacity-s and --check-s 0")
    py = dynamo_python()
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    load = os.getloadavg()
    t0 = time.perf_counter()
    truth = None if a.no_replay else replay_truth(py)
    print(f"replay truth: {truth}", flush=True)
    overload = OVERLOAD_RPS if truth is None else truth["large_n"] * 1.3
    record: dict = {"truth": truth, "checks": {}, "searches": [], "load_start": load}
    with tempfile.TemporaryDirectory(prefix="verdicts-mocker-") as d:
        tmp = Path(d)
        if a.capacity_s > 0:
            record["capacity"] = live_capacity(py, tmp, overload, a.capacity_s)
            print(f"live capacity: {record['capacity']}", flush=True)
        if a.check_s > 0:
            for f in (0.95, 1.05):
                rate = truth["large_n"] * f
                record["checks"][f"{rate:.2f}"] = live_check(py, tmp, rate, a.check_s)
                print(f"live check at {rate:.2f} req/s ({f:g} x truth), {a.check_s:g} s: "
                      f"{record['checks'][f'{rate:.2f}']}", flush=True)
        t1 = time.perf_counter()
        for i in range(a.trials):
            if a.budget_s is not None and time.perf_counter() - t1 > a.budget_s:
                print(f"  the budget of {a.budget_s:g} s is spent: {i} searches", flush=True)
                break
            found = search_trial(py, tmp, a.seed * 100_000 + i)
            record["searches"].append(found)
            print(f"  search {i + 1}/{a.trials} ({time.perf_counter() - t1:.0f} s, load {os.getloadavg()[0]:.1f}): "
                  f"{found['max_load_under_slo']:.3f} {found.get('bracket')} {found['probe_figures']} "
                  f"{found.get('note', '')}", flush=True)
        if a.capacity_s > 0 and a.capacity_after:
            record["capacity_after"] = live_capacity(py, tmp, overload, a.capacity_s)
            print(f"live capacity after the searches: {record['capacity_after']}", flush=True)
    record["load_end"] = os.getloadavg()
    rows = []
    if truth is not None:
        rows += [search_row(record["searches"], truth["large_n"]), search_row(record["searches"], truth["probe_n"])]
        rows[1].name = "  the same, truth at the probe's N"
    if "capacity" in record:
        rows.append(search_row(record["searches"], record["capacity"]["completed_per_s"]))
        if truth is not None:
            rows[-1].name = "  the same, truth the live engine's capacity"
    if "capacity_after" in record:
        rows.append(search_row(record["searches"], record["capacity_after"]["completed_per_s"]))
        rows[-1].name = "  the same, truth the capacity after"
    print(f"\nmocker slo_search: seed {a.seed}, {time.perf_counter() - t0:.0f} s; load average "
          f"{load[0]:.1f} at start, {record['load_end'][0]:.1f} at end, on {os.cpu_count()} CPUs")
    print(HEADER)
    for r in rows:
        print(r.line())
    if a.json:
        record["rows"] = [{**r.__dict__, **dict(zip(("rate", "low", "high", "holds"), r.judged()))} for r in rows]
        a.json.write_text(json.dumps(record, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
