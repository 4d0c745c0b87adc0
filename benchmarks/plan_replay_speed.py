"""How fast the plan's scheduler replica model serves a day of traffic: N requests (Poisson at
RATE req/s, prompts 128..2048 tokens, outputs 16..512) split round robin over 1..8 replicas,
each replica's stream replayed by Dynamo's replay (``protocols.plan.scheduler``), timed by a
profile of GPU-like times (prefill 20 ms + 0.02 ms/token, decode step 8 ms + 0.05 ms/sequence).
Prints, per replica count, the seconds for the whole round trip (trace files, the replay, the
records read back) and the replay's own seconds.

    TOKENFACTORY_DYNAMO_PYTHON=... python benchmarks/plan_replay_speed.py [N] [RATE]
"""

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
    rng = np.random.default_rng(0)
    arr = np.cumsum(rng.exponential(1 / rate, n))
    prompt = rng.integers(128, 2049, n)
    out = rng.integers(16, 513, n)
    npz = Path(tempfile.mkdtemp()) / "perf_data.npz"
    np.savez(npz, **mocker_tables({"a_ms": 20.0, "b_ms_per_token": 0.02, "c_ms_per_token2": 0.0},
                                  {"alpha_ms": 8.0, "beta_ms_per_seq": 0.05, "gamma_ms_per_kv_token": 0.0},
                                  isl_range=(64, 4096), kv_max=400_000, ctx_max=8192, batch_max=256))
    model = sched.SchedulerModel(sched.dynamo_python(None), npz, {"max_num_seqs": 256, "block_size": 16})
    total = 0.0
    for k in range(1, 9):
        t0 = time.perf_counter()
        got = model.serve([(arr[i::k], prompt[i::k], out[i::k]) for i in range(k)])
        dt = time.perf_counter() - t0
        total += dt
        ttft = np.concatenate([g[0] for g in got])
        print(f"{k} replicas: {dt:.1f} s ({n} requests over {arr[-1] / 3600:.1f} h), "
              f"p50 TTFT {np.nanmedian(ttft) * 1e3:.1f} ms, completed {np.isfinite(ttft).sum()}", flush=True)
    print(f"1..8 replicas: {total:.1f} s", flush=True)


if __name__ == "__main__":
    main()
