"""Where the scheduler replica model's time goes, per part, for one replica's stream of N
requests (Poisson at RATE req/s, prompts 128..2048 tokens, outputs 16..512; the profile of
``plan_replay_speed.py``), in CPU seconds (the machine is shared: wall seconds say more of the
neighbours than of the work):

- starting the Dynamo venv's Python with what the worker imports: ``dynamo.replay.main`` (the
  replay CLI's argument parser, as every simulation's worker did) against ``dynamo.replay`` and
  ``dynamo.mocker`` alone (what a worker imports now, once);
- the trace written by ``json.dumps`` per request against ``scheduler.write_trace``;
- Dynamo's replay of it (``run_trace_replay``, its report written);
- the report read by ``json.loads`` into dicts (before) against into an array of the fields
  the plan reads (``replay_worker.save_records``) matched by ``scheduler.match_records``;
- the SimPy fleet simulation of the same requests (processor sharing, one replica, a capacity
  of three operating points), which every plan simulation runs before the replay.

    TOKENFACTORY_DYNAMO_PYTHON=... python benchmarks/plan_replay_profile.py [N] [RATE]
"""

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from conf.schema import Autoscale
from engines.autoscale_policy import ScalingPolicy
from metrics.profile import mocker_tables
from metrics.slo import SLO
from protocols.plan import replay_worker
from protocols.plan import scheduler as sched
from protocols.plan.capacity import ConfigCapacity, OperatingPoint
from protocols.plan.fleet import FleetSimulation
from protocols.plan.traffic import Traffic

IN_VENV = """
import json, sys, time
t = time.process_time()
{imports}
print(json.dumps({{"cpu_s": time.process_time() - t}}))
"""

REPLAY = """
import json, sys, time
sys.path.insert(0, {here!r})
import replay_worker
from dynamo.replay import run_trace_replay
args = replay_worker.engine_args({args!r})
t = time.process_time()
run_trace_replay({trace!r}, extra_engine_args=args, num_workers=1, router_mode="round_robin",
                 report_jsonl_path={report!r})
replay = time.process_time() - t
t = time.process_time()
replay_worker.save_records({report!r}, {records!r})
print(json.dumps({{"replay_cpu_s": replay, "save_records_cpu_s": time.process_time() - t}}))
"""


def in_venv(python: Path, code: str) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.setdefault("RUST_LOG", "warn")
    t0, c0 = time.perf_counter(), os.times()
    p = subprocess.run([str(python), "-c", code], capture_output=True, text=True, env=env, check=True)
    c = os.times()
    out = json.loads(p.stdout.strip().splitlines()[-1])
    out["process_cpu_s"] = (c.children_user - c0.children_user) + (c.children_system - c0.children_system)
    out["wall_s"] = time.perf_counter() - t0
    return out


def cpu(fn):
    t = time.process_time()
    r = fn()
    return time.process_time() - t, r


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 18_000
    rate = float(sys.argv[2]) if len(sys.argv) > 2 else 5.0
    python = sched.dynamo_python(None)
    if python is None:
        sys.exit("no Dynamo venv: set TOKENFACTORY_DYNAMO_PYTHON (.ci/dynamo_venv.sh builds it)")
    rng = np.random.default_rng(0)
    arr = np.cumsum(rng.exponential(1 / rate, n))
    prompt = rng.integers(128, 2049, n)
    out = rng.integers(16, 513, n)
    tmp = Path(tempfile.mkdtemp(prefix="plan-replay-profile-"))
    table = tmp / sched.PROFILE_NPZ
    np.savez(table, **sched.first_token_table(mocker_tables(
        {"a_ms": 20.0, "b_ms_per_token": 0.02, "c_ms_per_token2": 0.0},
        {"alpha_ms": 8.0, "beta_ms_per_seq": 0.05, "gamma_ms_per_kv_token": 0.0},
        isl_range=(64, 4096), kv_max=400_000, ctx_max=8192, batch_max=256)))
    print(f"{n} requests over {arr[-1] / 3600:.2f} h on one replica; load average {os.getloadavg()[0]:.1f}")
    for what, imports in (("start + import dynamo.replay.main (before: every simulation)",
                           "from dynamo.replay import run_trace_replay\nfrom dynamo.replay.main import "
                           "_load_engine_args"),
                          ("start + import dynamo.replay, dynamo.mocker (now: once per worker)",
                           "from dynamo.replay import run_trace_replay\nfrom dynamo.mocker import MockEngineArgs")):
        r = in_venv(python, IN_VENV.format(imports=imports))
        print(f"  {what}: {r['process_cpu_s']:.2f} s CPU ({r['wall_s']:.2f} s wall)")

    def dumps_trace():
        nxt = 0
        with open(tmp / "old.jsonl", "w", encoding="utf-8") as f:
            for t, p, o in zip(arr, prompt, out):
                p, o = max(int(p), 1), max(int(o), 1)
                nb = -(-p // 16)
                f.write(json.dumps({"timestamp": round(float(t) * 1e3, 3), "input_length": p, "output_length": o,
                                    "hash_ids": list(range(nxt, nxt + nb))}) + "\n")
                nxt += nb

    before, _ = cpu(dumps_trace)
    now, _ = cpu(lambda: sched.write_trace(tmp / "trace.jsonl", arr, prompt, out, 16))
    same = (tmp / "old.jsonl").read_bytes() == (tmp / "trace.jsonl").read_bytes()
    print(f"  trace written: json.dumps {before:.2f} s, write_trace {now:.2f} s CPU (the same bytes: {same})")
    report, records = tmp / "report.jsonl", tmp / "records.npy"
    r = in_venv(python, REPLAY.format(here=str(Path(replay_worker.__file__).parent),
                                      args={"max_num_seqs": 256, "block_size": 16, "planner_profile_data": str(table)},
                                      trace=str(tmp / "trace.jsonl"), report=str(report), records=str(records)))
    print(f"  the replay: {r['replay_cpu_s']:.2f} s CPU")

    def loads_records():
        with open(report, encoding="utf-8") as f:
            return [json.loads(x) for x in f if x.strip()]

    before, _ = cpu(loads_records)
    now, _ = cpu(lambda: sched.match_records(np.load(records), arr, prompt, out))
    print(f"  records read: json.loads into dicts {before:.2f} s, into an array {r['save_records_cpu_s']:.2f} s "
          f"+ match_records {now:.2f} s CPU")

    # three points consistent with Little's law (in flight = rate x (TTFT + 263 TPOT)), the
    # traffic's 5 req/s between the second and the third
    pts = [OperatingPoint(rate_rps=x, in_flight=x * (ttft + 263 * tpot), prompt_tokens=np.full(40, 1000),
                          ttft_s=np.full(40, ttft), tpot_s=np.full(40, tpot), output_tokens=np.full(40, 264),
                          block=0) for x, ttft, tpot in ((1.0, 0.05, 0.009), (4.0, 0.1, 0.018), (8.0, 0.15, 0.027))]
    cap = ConfigCapacity(name="c", source="measured", origin="profile", points={1: pts}, cold_start_s=[30.0])
    pol = ScalingPolicy(Autoscale(capacity_rps=1e6, min_replicas=1, max_replicas=1, cold_start_s=30.0))
    sim = FleetSimulation(Traffic(arr, prompt, out, float(arr[-1]) + 1, "profile"), cap, pol, SLO())
    took, _ = cpu(sim.run)
    print(f"  SimPy fleet simulation (processor sharing, one replica): {took:.2f} s CPU")


if __name__ == "__main__":
    main()
