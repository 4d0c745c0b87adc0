"""The plan's scheduler replica model, held out: each measured run's own requests (their
arrival times, prompt and output lengths) replayed through ``protocols.plan.scheduler`` (Dynamo's
offline replay, the plan's ``protocol.replica_model=scheduler``), timed by a ``tokenfactory
profile`` folder that was fitted on its own runs only, with the engine's knobs read from the
run's ``provenance.json`` (``scheduler.engine_knobs``) and never refitted; predicted against
measured TTFT and TPOT p50/p90, SLO attainment and goodput (``metrics.prediction_error``).

    python benchmarks/plan_heldout.py --profile results/profile \\
        --case light=results/sweep/00-poisson-rate=4 --case seqs8=results/seqs8/00-...:max_num_seqs=8 \\
        [--case on=RUN::mooncake=TRACE] [--emulated light=RUN_OF_THE_MOCKER ...] \\
        [--effect seqs8/knee] [--ttft-ms 1000 --tpot-ms 100] [--json OUT.json] [--fixture DIR]

A case is ``NAME=RUN_DIR[:knob=value,...][::mooncake=TRACE]``: knobs override what the
provenance says (``max_num_seqs``, ``enable_prefix_caching``, ...); ``mooncake=TRACE`` gives
each request the block ids of the Mooncake trace row it was built from (the run replayed the
trace from its first row, in order: request i is row i; each 512-token Mooncake block is
512 / block_size blocks of the replay), so the replay's prefix cache sees the sharing the engine
saw.  ``--emulated NAME=RUN`` puts a live run on Dynamo's mocker beside the case (emulated, not a
prediction of the plan: it is printed, not written to the residuals).

Warm-up requests are replayed (they loaded the engine) and left out of the statistics on both
sides; the window is the run's span of arrivals.  Prints one table a case and, with ``--json``,
writes the residuals as ``{"model": "scheduler", "held_out": true, "source", "residuals": [...]}``,
a list of ``{case, metric, predicted, measured, error, error_kind, within, model, profile, run,
prefill_charged}`` records (the form ``protocol.residuals`` of the plan reads).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harness import results_io
from loadgen.workloads.traces.mooncake import read_mooncake
from metrics.fleet import request_metrics
from metrics.prediction_error import METRICS, error, residuals
from metrics.slo import SLO
from protocols.plan import scheduler as sched

MOONCAKE_BLOCK = 512
OWN_BLOCKS = 10**12     # block ids no trace row uses


def read_run(run: Path) -> dict:
    """The run's requests in arrival order (module doc)."""
    cols = ["request_id", "scheduled_ns", "prompt_tokens", "output_tokens", "ttft_s", "tpot_s", "status", "warmup"]
    t = pq.read_table(run / results_io.REQUESTS, columns=cols).to_pydict()
    order = np.argsort(np.asarray(t["scheduled_ns"], dtype=np.int64), kind="stable")
    sched_ns = np.asarray(t["scheduled_ns"], dtype=np.int64)[order]
    return {"arrival_s": (sched_ns - sched_ns[0]) / 1e9,
            "request_id": [t["request_id"][i] for i in order],
            "prompt": np.asarray(t["prompt_tokens"], dtype=np.int64)[order],
            "output": np.asarray(t["output_tokens"], dtype=np.int64)[order],
            "ttft": np.asarray(t["ttft_s"], dtype=np.float64)[order],
            "tpot": np.asarray(t["tpot_s"], dtype=np.float64)[order],
            "done": (np.asarray(t["status"]) == "ok")[order],
            "warmup": np.asarray(t["warmup"], dtype=bool)[order],
            "provenance": results_io.read_json(run / results_io.PROVENANCE, {}) or {}}


def mooncake_blocks(trace: str, request_ids: list[str], prompt: np.ndarray, block_size: int) -> list[list[int]]:
    """Each request's replay block ids from its trace row (module doc): a trace request's id is
    ``r<row>`` of the trace sorted by time (``loadgen.workloads.sessions.request_id``), so the
    run may hold any rows of it (``workload.max_requests``, a window without sampling)."""
    table = read_mooncake(trace)
    if block_size <= 0 or MOONCAKE_BLOCK % block_size:
        raise SystemExit(f"mooncake=: block_size {block_size} does not divide the trace's {MOONCAKE_BLOCK}")
    per = MOONCAKE_BLOCK // block_size
    out = []
    for rid, p in zip(request_ids, prompt):
        if not (rid.startswith("r") and rid[1:].isdigit()) or int(rid[1:]) >= len(table.input_tokens):
            raise SystemExit(f"mooncake={trace}: request {rid!r} is not a row of the trace")
        ids = [int(h) * per + j for h in table.hashes(int(rid[1:])) for j in range(per)]
        need = -(-max(int(p), 1) // block_size)
        # a prompt a token longer than its blocks (the tokenizer's BOS): one block of its own
        out.append((ids + [OWN_BLOCKS + 1000 * len(out) + k for k in range(need)])[:need])
    return out


def write_fixture(folder: Path, name: str, run: Path, r: dict, knobs: dict, profile: Path,
                  in_step: dict | None) -> None:
    """A case as the CI check reads it: ``case.json`` (the requests in arrival order, the
    engine's knobs), the profile's ``perf_data.npz`` and, where the model charged a step the
    prefill's measured increment, a ``profile.json`` holding that fit alone."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / sched.PROFILE_NPZ).write_bytes(profile.read_bytes())
    rec = folder / sched.PROFILE_JSON
    rec.unlink(missing_ok=True)
    if in_step:
        rec.write_text(json.dumps({"prefill_in_step_fit": {"coefficients": in_step}}, indent=1) + "\n",
                       encoding="utf-8")
    case = {"case": name, "run": str(run), "knobs": knobs,
            "arrival_s": [round(float(x), 6) for x in r["arrival_s"]],
            "prompt_tokens": r["prompt"].tolist(), "output_tokens": r["output"].tolist(),
            "ttft_s": [None if math.isnan(x) else round(float(x), 6) for x in r["ttft"]],
            "tpot_s": [None if math.isnan(x) else round(float(x), 6) for x in r["tpot"]],
            "completed": r["done"].tolist(), "warmup": r["warmup"].tolist()}
    (folder / "case.json").write_text(json.dumps(case) + "\n", encoding="utf-8")


def parse_case(text: str) -> tuple[str, Path, dict, str | None]:
    name, _, rest = text.partition("=")
    rest, _, extra = rest.partition("::")
    path, _, knobs = rest.partition(":")
    over: dict = {}
    for kv in filter(None, knobs.split(",")):
        k, _, v = kv.partition("=")
        if k not in sched.KNOBS:
            raise SystemExit(f"--case {text}: unknown knob {k!r} (one of {', '.join(sched.KNOBS)})")
        over[k] = v.lower() in ("1", "true", "on") if k.startswith("enable_") else int(v)
    trace = extra.partition("=")[2] if extra.startswith("mooncake=") else None
    return name, Path(path), over, trace


def stats(slo: SLO, r: dict, ttft: np.ndarray, tpot: np.ndarray, done: np.ndarray) -> dict:
    keep = ~r["warmup"]
    window = float(r["arrival_s"][keep].max() - r["arrival_s"][keep].min()) or math.nan
    return request_metrics(slo, done[keep], ttft[keep], tpot[keep], r["output"][keep], window)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--profile", required=True, help="a tokenfactory profile folder or its perf_data.npz")
    ap.add_argument("--case", action="append", default=[], required=True)
    ap.add_argument("--emulated", action="append", default=[], help="NAME=RUN of the mocker beside case NAME")
    ap.add_argument("--ttft-ms", type=float, default=1000.0)
    ap.add_argument("--tpot-ms", type=float, default=100.0)
    ap.add_argument("--dynamo-python", default=None)
    ap.add_argument("--json", default=None, help="write the residuals here")
    ap.add_argument("--effect", action="append", default=[],
                    help="A/B: the knob's effect, case A's metrics over case B's, measured and predicted")
    ap.add_argument("--prefill-charge", choices=("auto", "ttft"), default="auto",
                    help="auto: a step carrying a prefill costs the profile's measured increment where its "
                         "mixed ladder ran (the model's default); ttft: the prefill's TTFT less one step")
    ap.add_argument("--fixture", default=None,
                    help="write the first case's requests, knobs and the profile here (the CI check's input)")
    a = ap.parse_args()
    profile = sched.find_profile(a.profile)
    py = sched.dynamo_python(a.dynamo_python)
    if profile is None or py is None:
        raise SystemExit(f"--profile {a.profile}: no perf_data.npz" if profile is None else
                         "no Dynamo venv (--dynamo-python, TOKENFACTORY_DYNAMO_PYTHON)")
    slo = SLO(ttft_ms=a.ttft_ms, tpot_ms=a.tpot_ms)
    emulated = dict(e.split("=", 1) for e in a.emulated)
    out: list[dict] = []
    got: dict = {}
    for text in a.case:
        name, run, over, trace = parse_case(text)
        r = read_run(run)
        knobs = {**sched.engine_knobs(r["provenance"]), **over}
        model = sched.SchedulerModel(py, profile, knobs, in_step={} if a.prefill_charge == "ttft" else None)
        stream = (r["arrival_s"], r["prompt"], r["output"])
        if trace:
            stream += (mooncake_blocks(trace, r["request_id"], r["prompt"], int(knobs.get("block_size", 16))),)
        ttft, tpot = model.serve([stream])[0]
        pred = stats(slo, r, ttft, tpot, ~np.isnan(ttft))
        meas = stats(slo, r, r["ttft"], r["tpot"], r["done"])
        emu = None
        if name in emulated:
            e = read_run(Path(emulated[name]))
            emu = stats(slo, e, e["ttft"], e["tpot"], e["done"])
        rows = [{**row, "model": "scheduler", "profile": str(a.profile), "run": str(run),
                 "prefill_charged": "in_step" if model.in_step else "ttft"}
                for row in residuals(name, pred, meas)]
        got[name] = (pred, meas)
        if a.fixture and not out:
            write_fixture(Path(a.fixture), name, run, r, knobs, profile, model.in_step)
        n = int((~r["warmup"]).sum())
        src = f"; prefix blocks from {trace}" if trace else ""
        print(f"\n{name}: {run} ({n} requests measured; knobs {json.dumps(knobs, sort_keys=True)}{src}; "
              f"prefill charged: {model.describe()['prefill_charged']})")
        print(f"  {'metric':<16}{'measured':>11}{'predicted':>11}{'error':>10}" + (f"{'mocker':>11}{'error':>10}"
                                                                                    if emu else ""))
        for row in rows:
            m = row["metric"]
            unit = " pp" if row["error_kind"] == "points" else " %"
            err = "-" if row["error"] is None else f"{row['error'] * (1 if unit == ' pp' else 100):+.1f}{unit}"
            line = f"  {m:<16}{row['measured']:>11.4g}{row['predicted']:>11.4g}{err:>10}"
            if emu:
                ee = error(m, emu[m], meas[m])
                line += f"{emu[m]:>11.4g}" + ("       -" if ee is None else
                                               f"{ee * (1 if unit == ' pp' else 100):>+8.1f}{unit}")
            print(line)
        for m in ("p50_e2el_ms", "p90_e2el_ms"):    # beside the residuals: a stream's split moves neither
            ee = error(m, pred[m], meas[m])
            err = "         -" if ee is None else f"{ee * 100:>+8.1f} %"
            print(f"  {m:<16}{meas[m]:>11.4g}{pred[m]:>11.4g}{err}")
        out += rows
    for ab in a.effect:
        x, _, y = ab.partition("/")
        if x not in got or y not in got:
            raise SystemExit(f"--effect {ab}: both must be cases ({', '.join(got)})")
        print(f"\neffect {x} / {y} (a ratio of the two cases' figures; 1 = no effect)")
        print(f"  {'metric':<16}{'measured':>11}{'predicted':>11}")
        for m in METRICS:
            (px, mx), (py_, my) = got[x], got[y]
            ratio = [u / v if v else math.nan for u, v in ((mx[m], my[m]), (px[m], py_[m]))]
            print(f"  {m:<16}{ratio[0]:>11.3f}{ratio[1]:>11.3f}")
    if a.json:
        doc = {"model": "scheduler", "held_out": True,
               "source": f"benchmarks/plan_heldout.py: the profile {a.profile}, fitted on its own ladders only; each "
                         "case a measured run the fit never saw, replayed with its own arrivals and lengths",
               "residuals": out}
        Path(a.json).write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
        print(f"\nresiduals: {a.json} ({len(out)} records, metrics {', '.join(METRICS)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
