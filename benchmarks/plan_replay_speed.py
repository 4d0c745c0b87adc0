"""How fast the plan's scheduler replica model serves a day of traffic: N requests (Poisson at
RATE req/s, prompts 128..2048 tokens, outputs 16..512) split round robin over 1..8 replicas,
each replica's stream replayed by Dynamo's replay (``protocols.plan.scheduler``: long-lived
worker processes, WORKERS of them side by side, 0 = one per core), timed by a profile of
GPU-like times (prefill 20 ms + 0.02 ms/token, decode step 8 ms + 0.05 ms/sequence); then
RESAMPLES simulations that route as the full plan did (a fixed replica count routes the same
whatever a resample's capacity: its streams are read back from the cache), cycling over the
counts.  A fresh cache, so nothing of an earlier run is read back.

Prints, per replica count, the wall seconds of the round trip (traces written, the replays,
the records read back), then the total wall seconds, the resamples' seconds, and the CPU
seconds of this process and of its replay workers (the machine is shared: CPU seconds are
what the work costs, wall seconds what it took beside everything else).

    TOKENFACTORY_DYNAMO_PYTHON=... python benchmarks/plan_replay_speed.py [N] [RATE] [RESAMPLES] [WORKERS]
"""

import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from metrics.profile import mocker_tables
from protocols.plan import scheduler as sched


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 430_000
    rate = float(sys.argv[2]) if len(sys.argv) > 2 else 5.0
    resamples = int(sys.argv[3]) if len(sys.argv) > 3 else 200
    workers = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    rng = np.random.default_rng(0)
    arr = np.cumsum(rng.exponential(1 / rate, n))
    prompt = rng.integers(128, 2049, n)
    out = rng.integers(16, 513, n)
    tmp = Path(tempfile.mkdtemp(prefix="plan-replay-speed-"))
    npz = tmp / "perf_data.npz"
    np.savez(npz, **mocker_tables({"a_ms": 20.0, "b_ms_per_token": 0.02, "c_ms_per_token2": 0.0},
                                  {"alpha_ms": 8.0, "beta_ms_per_seq": 0.05, "gamma_ms_per_kv_token": 0.0},
                                  isl_range=(64, 4096), kv_max=400_000, ctx_max=8192, batch_max=256))
    model = sched.SchedulerModel(sched.dynamo_python(None), npz, {"max_num_seqs": 256, "block_size": 16},
                                 cache_dir=tmp / "cache", workers=workers)
    print(f"{n} requests over {arr[-1] / 3600:.1f} h, {model.workers or os.cpu_count()} replay workers, "
          f"load average {os.getloadavg()[0]:.1f}", flush=True)
    t_start, c_start = time.perf_counter(), os.times()
    for k in range(1, 9):
        t0 = time.perf_counter()
        got = model.serve([(arr[i::k], prompt[i::k], out[i::k]) for i in range(k)])
        ttft = np.concatenate([g[0] for g in got])
        print(f"{k} replicas: {time.perf_counter() - t0:.1f} s, p50 TTFT {np.nanmedian(ttft) * 1e3:.1f} ms, "
              f"completed {np.isfinite(ttft).sum()}", flush=True)
    replays = time.perf_counter() - t_start
    t0 = time.perf_counter()
    for r in range(resamples):
        k = r % 8 + 1
        model.serve([(arr[i::k], prompt[i::k], out[i::k]) for i in range(k)])
    again = time.perf_counter() - t0
    sched.close_workers()          # the workers' CPU time is counted once they are waited for
    c = os.times()
    own = (c.user - c_start.user) + (c.system - c_start.system)
    kids = (c.children_user - c_start.children_user) + (c.children_system - c_start.children_system)
    print(f"1..8 replicas: {replays:.1f} s; {resamples} resamples read back: {again:.1f} s; "
          f"in all {time.perf_counter() - t_start:.1f} s (CPU: {own:.1f} s here, {kids:.1f} s in the replay "
          f"workers); load average {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main()
