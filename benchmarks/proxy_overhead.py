"""What the promotion proxy adds to TTFT and to every chunk, against a server that records the truth.

The ground-truth streaming server, the load generator's client and their error arithmetic are
``benchmarks/loadgen_fidelity.py``'s (truth server pinned with ``taskset``: first chunk
``--first-ms`` after the request reached it, one chunk every ``--gap-ms``, the monotonic time of
every write recorded; client: tokenfactory's Dispatcher and StreamingClient, kernel receive
stamps).  Each round runs the same open-loop point (``--rate`` requests/s, Poisson) once per
arm, in a rotating order:

- ``direct``: client -> server;
- ``rollback``: client -> ``tokenfactory proxy`` (pass-through, every row recorded) -> server;
- ``canary``: the same with a candidate server, ``--share`` of the callers on it;
- ``shadow``: every request also copied to the candidate (recorded, discarded).

Placement: client on core 0; proxy and truth servers on core 1, the proxy in ``SCHED_FIFO``
(``proxy.realtime``, as root) so that a read wakes it at once instead of after the server's time
slice: on a 2-core VM that is the nearest thing to a core of its own (``--proxy-realtime 0``
measures it under the default scheduler; ``--server-core 0`` gives the proxy core 1 alone,
where each chunk then pays an idle vCPU's wake-up).

Per arm (all rounds pooled), in ms: the client's TTFT error (measured TTFT - the server's true
TTFT) and chunk delivery delay (client receive - server write) at p50/p99/p99.9, and what the
proxy adds: each arm's p99 minus the direct arm's, and their ratio.  For the proxy arms also
the proxy's own residence, from its rows (``requests.parquet``, the proxy's kernel stamps of
the same chunks, one clock for every process): chunk = client receive - proxy receive, TTFT =
client TTFT - proxy TTFT.  The machine is shared and busy: the arms are interleaved and run in
the same invocation, so a noisy minute falls on all of them.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/proxy_overhead.py                  # 500 req/s, 3 rounds
    PYTHONPATH=$PWD .venv/bin/python benchmarks/proxy_overhead.py --rate 200 --rounds 1 --arms direct,shadow
    PYTHONPATH=$PWD .venv/bin/python benchmarks/proxy_overhead.py --proxy-realtime 0    # the default scheduler
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT))

import loadgen_fidelity as lf  # noqa: E402 - the truth server, the client role, the error arithmetic

from harness import results_io  # noqa: E402 - the repository is on the path now

ARMS = ("direct", "rollback", "canary", "shadow")


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


def start_proxy(arm: str, inc_port: int, cand_port: int | None, out: str, a) -> tuple:
    port = lf._free_port()
    args = [f"proxy.incumbent=http://127.0.0.1:{inc_port}", f"proxy.port={port}", f"output_dir={out}",
            f"proxy.mode={arm if arm != 'direct' else 'rollback'}", f"proxy.canary_share={a.share}",
            "proxy.sticky=none", f"proxy.prewarm={a.prewarm}", f"proxy.cpus={a.proxy_core}"]
    if cand_port:
        args.append(f"proxy.candidate=http://127.0.0.1:{cand_port}")
    if a.proxy_realtime:
        args.append(f"proxy.realtime={a.proxy_realtime}")
    # the proxy pins itself (proxy.cpus); only --nice, the load's own, goes on the command line
    cmd = lf._pin(a.proxy_core) + [sys.executable, "-m", "harness.cli", "proxy", *args]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env(), cwd=ROOT)
    line = ""
    while "proxy on" not in line:
        line = proc.stdout.readline()
        if not line:
            raise SystemExit(f"the proxy did not start: {proc.wait()}")
    return proc, port


def stop_proxy(proc) -> str:
    proc.send_signal(signal.SIGINT)
    try:
        rest, _ = proc.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        rest, _ = proc.communicate()
    return rest


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far (``/proc/PID/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run_client(port: int, p, a, out: str) -> dict:
    cmd = lf._pin(a.client_core) + [sys.executable, lf.__file__, "client", "--port", str(port), "--kind", "poisson",
                                    "--rate", str(p.rate), "--num", str(p.num), "--tokens", str(p.tokens),
                                    "--out", out]
    r = subprocess.run(cmd, capture_output=True, text=True, env=_env(), timeout=900)
    if r.returncode != 0:
        raise SystemExit(f"client failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def residence(client_path: str, proxy_path: str) -> dict:
    """The proxy's own share, per matched request: client - proxy, chunk by chunk and on TTFT."""
    import pyarrow.parquet as pq

    c = pq.read_table(client_path, columns=["response_id", "sent_ns", "first_token_ns", "chunk_ns"]).to_pydict()
    p = pq.read_table(proxy_path, columns=["response_id", "sent_ns", "first_token_ns", "chunk_ns", "shadow",
                                           "scheduled_ns"]).to_pydict()
    prox = {rid: (s, f, ch, sch) for rid, s, f, ch, sh, sch in zip(p["response_id"], p["sent_ns"],
                                                                   p["first_token_ns"], p["chunk_ns"], p["shadow"],
                                                                   p["scheduled_ns"]) if not sh and rid}
    chunk, ttft, inbound = [], [], []
    for rid, s, f, ch in zip(c["response_id"], c["sent_ns"], c["first_token_ns"], c["chunk_ns"]):
        m = prox.get(rid)
        if m is None or f is None or m[1] is None:
            continue
        ps, pf, pch, psch = m
        k = min(len(ch), len(pch))
        chunk.append((np.asarray(ch[:k]) - np.asarray(pch[:k])) / 1e6)
        ttft.append(((f - s) - (pf - ps)) / 1e6)
        inbound.append((ps - psch) / 1e6)  # caller's request reached the proxy -> sent upstream
    cat = np.concatenate(chunk) if chunk else np.empty(0)
    return {"chunk": cat, "ttft": np.asarray(ttft), "inbound": np.asarray(inbound), "matched": len(ttft)}


def run_arm(arm: str, p, a, tmp: str, rnd: int) -> dict:
    tag = f"{arm}-{rnd}"
    truth = os.path.join(tmp, f"truth-{tag}.json")
    inc_port = lf._free_port()
    procs = lf._start_server(p, inc_port, truth, a.server_core)
    cand_port = None
    if arm in ("canary", "shadow"):
        cand_port = lf._free_port()
        procs += lf._start_server(p, cand_port, os.path.join(tmp, f"truth-cand-{tag}.json"),
                                  a.candidate_core or a.server_core, tag="c")
    proxy = None
    out = os.path.join(tmp, f"client-{tag}.parquet")
    try:
        port = inc_port
        if arm != "direct":
            proxy, port = start_proxy(arm, inc_port, cand_port, os.path.join(tmp, f"proxy-{tag}"), a)
            cpu0 = _cpu_s(proxy.pid)
        cstats = run_client(port, p, a, out)
        if proxy is not None:
            proxy_cpu = (_cpu_s(proxy.pid) - cpu0) / cstats["load_s"]
    finally:
        if proxy is not None:
            tail = stop_proxy(proxy)
            if "rows in" not in tail:
                print(f"  proxy output: {tail[-1500:]}", flush=True)
        lf._stop(procs)
    import pyarrow.parquet as pq

    t = pq.read_table(out, columns=["response_id", "sent_ns", "chunk_ns", "scheduled_ns", "status"]).to_pydict()
    streams, late, rlag, srv_runq = lf._truth(truth)
    if cand_port:
        cs, *_ = lf._truth(os.path.join(tmp, f"truth-cand-{tag}.json"))
        streams.update(cs)
    e = lf._errors(zip(t["response_id"], t["sent_ns"], t["chunk_ns"], t["scheduled_ns"]), streams)
    e["failed"] = sum(s != "ok" for s in t["status"])
    e["cpu"] = cstats["cpu_s"] / cstats["load_s"]
    e["req_per_s"] = len(t["status"]) / cstats["load_s"]
    if arm != "direct":
        e["res"] = residence(out, os.path.join(tmp, f"proxy-{tag}", results_io.REQUESTS))
        e["proxy_cpu"] = proxy_cpu
    return e


def _cat(es: list[dict], key: str, sub: str | None = None) -> np.ndarray:
    parts = [(e[sub][key] if sub else e[key]) for e in es if (not sub or sub in e)]
    return np.concatenate(parts) if parts else np.empty(0)


def report(results: dict[str, list[dict]]) -> None:
    pct = lf._pct
    print("\nper arm, all rounds pooled (ms): TTFT error = measured - true TTFT; chunk delay = client receive - "
          "server write")
    print(f"{'arm':<9} {'req/s':>6} {'failed':>6} {'TTFT err p50':>12} {'p99':>7} {'p99.9':>7} | "
          f"{'chunk p50':>9} {'p99':>7} {'p99.9':>7} | {'client CPU':>10}")
    rows = {}
    for arm, es in results.items():
        terr = _cat(es, "ttft_meas") - _cat(es, "ttft_true")
        ch = _cat(es, "chunk_err")
        rows[arm] = (terr, ch)
        print(f"{arm:<9} {np.mean([e['req_per_s'] for e in es]):6.0f} {sum(e['failed'] for e in es):6d} "
              f"{pct(terr, 50):12.3f} {pct(terr, 99):7.3f} {pct(terr, 99.9):7.3f} | {pct(ch, 50):9.3f} "
              f"{pct(ch, 99):7.3f} {pct(ch, 99.9):7.3f} | {np.mean([e['cpu'] for e in es]) * 100:9.0f}%")
    if "direct" in rows:
        d_t, d_c = rows["direct"]
        print("\nadded by the proxy: arm p99 - direct p99 (ms), and arm p99 / direct p99")
        for arm, (terr, ch) in rows.items():
            if arm == "direct":
                continue
            print(f"{arm:<9} TTFT +{pct(terr, 99) - pct(d_t, 99):.3f} ms ({pct(terr, 99) / pct(d_t, 99):.2f}x)   "
                  f"chunk +{pct(ch, 99) - pct(d_c, 99):.3f} ms ({pct(ch, 99) / pct(d_c, 99):.2f}x)")
    print("\nthe proxy's residence from its own kernel stamps (ms): chunk = client receive - proxy receive; "
          "TTFT = client TTFT - proxy TTFT; inbound = request at the proxy -> sent upstream")
    for arm, es in results.items():
        if arm == "direct":
            continue
        c, t, i = _cat(es, "chunk", "res"), _cat(es, "ttft", "res"), _cat(es, "inbound", "res")
        print(f"{arm:<9} chunk p50/p99/p99.9 {pct(c, 50):.3f}/{pct(c, 99):.3f}/{pct(c, 99.9):.3f}   "
              f"TTFT p50/p99/p99.9 {pct(t, 50):.3f}/{pct(t, 99):.3f}/{pct(t, 99.9):.3f}   "
              f"inbound p50/p99 {pct(i, 50):.3f}/{pct(i, 99):.3f}   proxy CPU "
              f"{np.mean([e['proxy_cpu'] for e in es]) * 100:.0f}%   ({sum(e['res']['matched'] for e in es)} requests)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=500.0, help="requests/s (Poisson)")
    ap.add_argument("--seconds", type=float, default=6.0, help="offered-load seconds per arm and round")
    ap.add_argument("--tokens", type=int, default=16, help="chunks per response")
    ap.add_argument("--first-ms", type=float, default=50.0)
    ap.add_argument("--gap-ms", type=float, default=20.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--arms", default=",".join(ARMS))
    ap.add_argument("--share", type=float, default=0.05, help="canary: the candidate's share")
    ap.add_argument("--client-core", default="0")
    ap.add_argument("--server-core", default="1")
    ap.add_argument("--proxy-core", default="1", help="the proxy's CPUs (proxy.cpus)")
    ap.add_argument("--prewarm", type=int, default=256,
                    help="proxy.prewarm: upstream connections opened before the load (at 500 req/s about 175 "
                         "streams are open at once; fewer, and the pool grows by connects mid-load)")
    ap.add_argument("--candidate-core", default=None, help="the candidate's truth server (default: --server-core)")
    ap.add_argument("--proxy-realtime", type=int, default=10 if os.geteuid() == 0 else 0, metavar="PRIO",
                    help="proxy.realtime=PRIO: the proxy in SCHED_FIFO, so it never waits out the server's time "
                         "slice on their shared core (default 10 as root; 0: the default scheduler)")
    ap.add_argument("--nice", type=int, default=0, help="nice value of client and servers (lower: less noise from "
                                                        "other tenants; root)")
    ap.add_argument("--keep", action="store_true")
    a = ap.parse_args()
    if not shutil.which("taskset"):
        raise SystemExit("taskset not found (util-linux): it pins client, proxy and server to their cores")
    arms = [x for x in a.arms.split(",") if x]
    unknown = set(arms) - set(ARMS)
    if unknown:
        raise SystemExit(f"--arms: unknown {sorted(unknown)}; known: {', '.join(ARMS)}")
    lf.NICE = a.nice
    p = lf.Point("proxy", "poisson", a.rate, None, int(a.rate * a.seconds), a.tokens, a.first_ms, a.gap_ms)
    tmp = tempfile.mkdtemp(prefix="tf-proxy-overhead-")
    print(f"{a.rate:g} req/s Poisson, {p.num} requests x {a.tokens} chunks (first {a.first_ms:g} ms, every "
          f"{a.gap_ms:g} ms) per arm and round; {a.rounds} round(s); client core {a.client_core}, proxy core "
          f"{a.proxy_core}{' SCHED_FIFO ' + str(a.proxy_realtime) if a.proxy_realtime else ''}, server core "
          f"{a.server_core}, candidate core {a.candidate_core or a.server_core}; load average "
          f"{os.getloadavg()[0]:.1f}", flush=True)
    results: dict[str, list[dict]] = {arm: [] for arm in arms}
    try:
        for r in range(a.rounds):
            order = arms[r % len(arms):] + arms[:r % len(arms)]  # a rotating order: no arm always first
            for arm in order:
                t0 = time.time()
                e = run_arm(arm, p, a, tmp, r)
                results[arm].append(e)
                terr = e["ttft_meas"] - e["ttft_true"]
                print(f"  round {r} {arm:<9} {e['matched']} matched, {e['failed']} failed, TTFT err p99 "
                      f"{lf._pct(terr, 99):.3f} ms, chunk p99 {lf._pct(e['chunk_err'], 99):.3f} ms "
                      f"({time.time() - t0:.0f} s)", flush=True)
        report(results)
    finally:
        if a.keep:
            print(f"kept: {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
