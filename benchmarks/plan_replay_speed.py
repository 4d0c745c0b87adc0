"""How fast the plan's scheduler replica model serves a day of traffic: N requests (Poisson at
RATE req/s, or with ``--diurnal`` a Poisson stream whose rate follows conf.schema's DIURNAL_CURVE
over the stream's span at a mean of RATE, peak/trough 4; prompts 128..2048 tokens, outputs
16..512) split round robin over 1..8 replicas, each replica's stream replayed by Dynamo's replay
(``protocols.plan.scheduler``: long-lived worker processes, WORKERS of them side by side, 0 = one
per core), timed by a profile of GPU-like times (prefill 20 ms + 0.02 ms/token, decode step
8 ms + 0.05 ms/sequence); then RESAMPLES simulations that route as the full plan did (a fixed
replica count routes the same whatever a resample's capacity: its streams are read back from
the cache), cycling over the counts.  A fresh cache, so nothing of an earlier run is read back.

``--fraction F`` below 1: the approximation (``protocol.replay_sample``: a stratified sample of
each replica's ``--stretch-s`` stretches replayed after ``--lead-s`` lead-ins, and again after
twice that for the lead-in check, ``protocols.plan.stretches``), labelled so in what it prints,
with the check's largest move of the stretches' mean latencies.  ``--compare``: afterwards (not
timed) the same counts replayed exactly (cached in ``--exact-cache`` where given, so a second
fraction reuses them) and, per count, the approximation's error against exact
(``metrics.prediction_error.error``: latencies and goodput relative, attainment in points) on
TTFT and TPOT p50/p90/p99, attainment and goodput at the SLO ``--ttft-ms``/``--tpot-ms``.

Prints, per replica count, the wall seconds of the round trip (traces written, the replays,
the records read back), then the total wall seconds, the resamples' seconds, and the CPU
seconds of this process and of its replay workers (the machine is shared: CPU seconds are
what the work costs, wall seconds what it took beside everything else).

    TOKENFACTORY_DYNAMO_PYTHON=... python benchmarks/plan_replay_speed.py [N] [RATE] [RESAMPLES] [WORKERS]
        [--fraction F] [--stretch-s S] [--lead-s L] [--diurnal] [--counts 1,2,4,8] [--compare]
        [--exact-cache DIR] [--ttft-ms 100] [--tpot-ms 12] [--json FILE]
"""

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from conf.schema import DIURNAL_CURVE
from metrics.fleet import request_metrics
from metrics.prediction_error import error
from metrics.profile import mocker_tables
from metrics.slo import SLO
from protocols.plan import scheduler as sched
from protocols.plan.stretches import StretchSample

COMPARED = ("p50_ttft_ms", "p90_ttft_ms", "p99_ttft_ms", "p50_tpot_ms", "p90_tpot_ms", "p99_tpot_ms",
            "slo_attainment", "goodput_rps")


def arrivals(n: int, rate: float, diurnal: bool, rng) -> np.ndarray:
    """Poisson arrivals at ``rate``; diurnal: the unit-rate arrivals warped so that the rate of
    slice k of the span n / rate is rate x curve[k] / mean(curve)."""
    unit = np.cumsum(rng.exponential(1.0, n))
    if not diurnal:
        return unit / rate
    curve = np.asarray(DIURNAL_CURVE) / np.mean(DIURNAL_CURVE)
    span = n / rate
    edges = np.linspace(0.0, span, curve.size + 1)
    cum = np.concatenate([[0.0], np.cumsum(rate * curve * np.diff(edges))])   # expected arrivals by each edge
    return np.interp(unit, cum, edges, right=span)


def metrics_of(got, k: int, arr, out, slo: SLO, window_s: float) -> dict:
    ttft, tpot = np.full(arr.size, np.nan), np.full(arr.size, np.nan)
    for i, (a, b) in enumerate(got):
        ttft[i::k], tpot[i::k] = a, b
    return request_metrics(slo, np.isfinite(ttft), ttft, tpot, out, window_s)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("n", nargs="?", type=int, default=430_000)
    ap.add_argument("rate", nargs="?", type=float, default=5.0)
    ap.add_argument("resamples", nargs="?", type=int, default=200)
    ap.add_argument("workers", nargs="?", type=int, default=0)
    ap.add_argument("--fraction", type=float, default=1.0)
    ap.add_argument("--stretch-s", type=float, default=StretchSample.stretch_s)
    ap.add_argument("--lead-s", type=float, default=StretchSample.lead_s)
    ap.add_argument("--diurnal", action="store_true")
    ap.add_argument("--counts", default="1,2,3,4,5,6,7,8")
    ap.add_argument("--compare", action="store_true")
    ap.add_argument("--exact-cache", default=None)
    ap.add_argument("--ttft-ms", type=float, default=100.0)
    ap.add_argument("--tpot-ms", type=float, default=12.0)
    ap.add_argument("--json", default=None, help="write the comparison here")
    a = ap.parse_args()
    counts = [int(x) for x in a.counts.split(",")]
    rng = np.random.default_rng(0)
    arr = arrivals(a.n, a.rate, a.diurnal, rng)
    prompt = rng.integers(128, 2049, a.n)
    out = rng.integers(16, 513, a.n)
    tmp = Path(tempfile.mkdtemp(prefix="plan-replay-speed-"))
    # the profile's bytes are in the replay cache's key and a zip's carry its time: with
    # --exact-cache, one profile kept there, so that a later run reads the exact replays back
    npz = Path(a.exact_cache) / sched.PROFILE_NPZ if a.exact_cache else tmp / sched.PROFILE_NPZ
    npz.parent.mkdir(parents=True, exist_ok=True)
    if not npz.is_file():
        np.savez(npz, **mocker_tables({"a_ms": 20.0, "b_ms_per_token": 0.02, "c_ms_per_token2": 0.0},
                                      {"alpha_ms": 8.0, "beta_ms_per_seq": 0.05, "gamma_ms_per_kv_token": 0.0},
                                      isl_range=(64, 4096), kv_max=400_000, ctx_max=8192, batch_max=256))
    sample = StretchSample(a.fraction, a.stretch_s, a.lead_s)
    model = sched.SchedulerModel(sched.dynamo_python(None), npz, {"max_num_seqs": 256, "block_size": 16},
                                 cache_dir=tmp / "cache", workers=a.workers, sample=sample)
    label = "exact replay" if sample.exact else sample.text()
    print(f"{a.n} requests over {arr[-1] / 3600:.1f} h ({'diurnal' if a.diurnal else 'Poisson'}, mean "
          f"{a.rate:g} req/s), {model.workers or os.cpu_count()} replay workers, load average "
          f"{os.getloadavg()[0]:.1f}\n{label}", flush=True)
    t_start, c_start = time.perf_counter(), os.times()
    approx = {}
    for k in counts:
        t0 = time.perf_counter()
        approx[k], note = model.serve_noted([(arr[i::k], prompt[i::k], out[i::k]) for i in range(k)])
        ttft = np.concatenate([g[0] for g in approx[k]])
        print(f"{k} replicas: {time.perf_counter() - t0:.1f} s, p50 TTFT {np.nanmedian(ttft) * 1e3:.1f} ms, "
              f"completed {np.isfinite(ttft).sum()}" + (f"; {note['text']}; lead-in check: the stretches' means "
                                                          f"moved {note['lead_in_shift']:.3%} with "
                                                          f"{sample.check().lead_s:g} s" if note else ""), flush=True)
    replays = time.perf_counter() - t_start
    t0 = time.perf_counter()
    for r in range(a.resamples):
        k = counts[r % len(counts)]
        model.serve([(arr[i::k], prompt[i::k], out[i::k]) for i in range(k)])
    again = time.perf_counter() - t0
    sched.close_workers()          # the workers' CPU time is counted once they are waited for
    c = os.times()
    own = (c.user - c_start.user) + (c.system - c_start.system)
    kids = (c.children_user - c_start.children_user) + (c.children_system - c_start.children_system)
    print(f"{','.join(map(str, counts))} replicas: {replays:.1f} s; {a.resamples} resamples read back: "
          f"{again:.1f} s; in all {time.perf_counter() - t_start:.1f} s (CPU: {own:.1f} s here, {kids:.1f} s "
          f"in the replay workers); load average {os.getloadavg()[0]:.1f}; {label}", flush=True)
    if not a.compare:
        return
    exact = sched.SchedulerModel(model.python, npz, model.knobs, workers=a.workers,
                                 cache_dir=Path(a.exact_cache) if a.exact_cache else tmp / "exact")
    slo = SLO(ttft_ms=a.ttft_ms, tpot_ms=a.tpot_ms)
    window = float(arr[-1])
    rows = []
    print(f"\nthe approximation against exact replay, SLO TTFT <= {a.ttft_ms:g} ms, TPOT <= {a.tpot_ms:g} ms "
          "(latencies and goodput: approximate / exact - 1; attainment: points)")
    print("replicas | " + " | ".join(COMPARED))
    for k in counts:
        t0 = time.perf_counter()
        ex = exact.serve([(arr[i::k], prompt[i::k], out[i::k]) for i in range(k)])
        m_ex = metrics_of(ex, k, arr, out, slo, window)
        m_ap = metrics_of(approx[k], k, arr, out, slo, window)
        errs = {m: error(m, m_ap[m], m_ex[m]) for m in COMPARED}
        rows.append({"replicas": k, "exact": {m: m_ex[m] for m in COMPARED},
                     "approximate": {m: m_ap[m] for m in COMPARED}, "error": errs,
                     "exact_wall_s": time.perf_counter() - t0})
        print(f"{k} | " + " | ".join(f"{m_ex[m]:.4g} -> {m_ap[m]:.4g} ({errs[m]:+.1f} pt)" if m == "slo_attainment"
                                     else f"{m_ex[m]:.4g} -> {m_ap[m]:.4g} ({errs[m]:+.1%})" for m in COMPARED),
              flush=True)
    sched.close_workers()
    if a.json:
        Path(a.json).write_text(json.dumps({"n": a.n, "rate": a.rate, "diurnal": a.diurnal,
                                            "sample": sample.describe(), "slo": [a.ttft_ms, a.tpot_ms],
                                            "timing": {"wall_s": replays + again, "cpu_here_s": own,
                                                       "cpu_workers_s": kids}, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
