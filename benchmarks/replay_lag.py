"""The load generator's own send delay when it replays real prompts: long ones, fast.

A fast streaming server (``loadgen_fidelity.py``'s truth server, first chunk after 20 ms,
one chunk every 5 ms, pinned to ``--server-core``) answers; the client (pinned to
``--client-core``) replays a workload through tokenfactory's own path (prompt builder under
the tiny model's tokenizer, dispatcher, streaming client) for ``--seconds`` of arrivals, and
prints per point:

- send lag p50/p99/max (ms): ``sent_ns - max(scheduled_ns, slot_ns)``, the client's own delay;
- client CPU (share of one core from the first send to the last answer: building ahead is
  not in it) and runnable-waiting (the share of that time the client waited for a CPU:
  noise from other tenants, which shows up as lag);
- prompt tokens built and the builder's throughput (prompt tokens per second of building);
- how long preparation took before the first send, and whether it came from the cache.

Points (``--only`` picks some): the Azure code trace of ``../shared/traces`` rescaled to 30
and 200 requests/s (prompts up to 7.4k tokens), and synthetic prompts with lognormal lengths
(median 2k tokens) capped at 8k and at 32k tokens, at 30 and 200 requests/s.

    python benchmarks/replay_lag.py                       # every point, 10 s each
    python benchmarks/replay_lag.py --only azure@200 --seconds 5
    python benchmarks/replay_lag.py --prepare stream      # the streaming producer instead of all-ahead

Keep the machine quiet; the table the README shows was measured with ``--nice -10``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TRACE = ROOT.parent / "shared" / "traces" / "azure_llm_2023" / "AzureLLMInferenceTrace_code.csv"
POINTS = {  # name -> (workload overrides, rate)
    "azure@30": ("azure", 30.0), "azure@200": ("azure", 200.0),
    "lognormal8k@30": ("lognormal8k", 30.0), "lognormal8k@200": ("lognormal8k", 200.0),
    "lognormal32k@30": ("lognormal32k", 30.0), "lognormal32k@200": ("lognormal32k", 200.0),
}
OUTPUT_TOKENS = 16


def _runq_wait_s() -> float:
    """Seconds this process's threads spent runnable but waiting for a CPU (other tenants' noise)."""
    total = 0
    for d in Path(f"/proc/{os.getpid()}/task").glob("*/schedstat"):
        try:
            total += int(d.read_text().split()[1])
        except (OSError, IndexError, ValueError):
            pass
    return total / 1e9


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pin(core: str | None) -> list[str]:
    return ["taskset", "-c", core] if core and shutil.which("taskset") else []


def workload_cfg(kind: str, rate: float, seconds: float):
    """The workload config (conf/schema/'s types) and the load of one point."""
    from omegaconf import OmegaConf

    from conf.schema import Load, SyntheticWorkload, TraceWorkload

    if kind == "azure":
        w = OmegaConf.merge(OmegaConf.structured(TraceWorkload), {
            "name": "azure", "path": str(TRACE), "target_rate": rate, "max_requests": int(rate * seconds),
            "max_output_tokens": OUTPUT_TOKENS})
        load = {"kind": "trace", "num_requests": None}
    else:
        cap = 8192 if kind == "lognormal8k" else 32768
        w = OmegaConf.merge(OmegaConf.structured(SyntheticWorkload), {
            "input_tokens": 2048, "output_tokens": OUTPUT_TOKENS,
            "input_dist": {"kind": "lognormal", "sigma": 1.0, "min": 16, "max": cap}})
        load = {"kind": "poisson", "rate": rate, "num_requests": int(rate * seconds)}
    load = OmegaConf.to_container(OmegaConf.merge(OmegaConf.structured(Load), {**load, "warmup_requests": 0}))
    return w, load


def client_main(a) -> None:
    """One point, in this (pinned) process; prints a JSON line of figures."""
    sys.path.insert(0, str(ROOT))
    import asyncio

    import numpy as np
    import pyarrow.parquet as pq

    from engines.tiny_model import ensure_tiny_model
    from loadgen.client import ClientConfig, StreamingClient
    from loadgen.dispatch import Dispatcher, LoadSpec
    from loadgen.records import RecordWriter
    from loadgen.workloads.build import make_workload
    from loadgen.workloads.prompts import PromptBuilder, load_tokenizer
    from metrics.request_metrics import complete_record, schedule_lag_s

    try:
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass
    kind, rate = POINTS[a.point]
    wcfg, load = workload_cfg(kind, rate, a.seconds)
    spec = LoadSpec.from_load(load)
    builder = PromptBuilder(load_tokenizer(str(ensure_tiny_model())), seed=0)
    items = make_workload(wcfg, builder, spec.requests_to_send, None)
    cfg = ClientConfig(base_url=f"http://127.0.0.1:{a.port}", model="truth")
    writer = RecordWriter(a.out)
    options = {} if a.prepare == "default" else {"prepare": a.prepare}

    async def go():
        async with StreamingClient(cfg) as c:
            d = Dispatcher(c, writer, finalize=complete_record, **options)
            return await d.run(items, spec)

    rq0 = _runq_wait_s()
    stats = asyncio.run(go())
    writer.close()
    t = pq.read_table(a.out, columns=["scheduled_ns", "slot_ns", "sent_ns", "status", "expected_prompt_tokens"])
    d = {k: np.asarray(v.to_numpy(zero_copy_only=False), dtype=np.float64) for k, v in zip(t.column_names, t.columns)
         if k != "status"}
    lag = schedule_lag_s(d["scheduled_ns"], d["slot_ns"], d["sent_ns"]) * 1e3
    load_s = (stats["end_ns"] - stats["start_ns"]) / 1e9
    prep = stats.get("prepare", {})
    print(json.dumps({
        "n": t.num_rows, "ok": int(sum(s == "ok" for s in t.column("status").to_pylist())),
        "lag_p50": float(np.percentile(lag, 50)), "lag_p99": float(np.percentile(lag, 99)),
        "lag_max": float(lag.max()), "cpu_load": stats["cpu_s"] / load_s, "runq": (_runq_wait_s() - rq0) / load_s,
        "load_s": load_s, "prompt_tokens": int(np.nansum(d["expected_prompt_tokens"])),
        "prepare": prep}), flush=True)


def run_point(name: str, a, tmp: str) -> dict:
    port = _free_port()
    fidelity = ROOT / "benchmarks" / "loadgen_fidelity.py"
    srv = subprocess.Popen(_pin(a.server_core) + [sys.executable, str(fidelity), "server", "--port", str(port),
                                                  "--first-ms", "20", "--gap-ms", "5", "--no-truth"],
                           stdout=subprocess.PIPE, text=True, preexec_fn=_renice(a.nice))
    try:
        assert srv.stdout.readline().strip() == "ready"
        out = os.path.join(tmp, f"{name}.parquet")
        cmd = _pin(a.client_core) + [sys.executable, __file__, "client", "--point", name, "--port", str(port),
                                     "--seconds", str(a.seconds), "--out", out, "--prepare", a.prepare]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800, preexec_fn=_renice(a.nice))
        if r.returncode != 0:
            raise SystemExit(f"{name}: client failed:\n{r.stderr[-3000:]}")
        return json.loads(r.stdout.strip().splitlines()[-1])
    finally:
        srv.terminate()
        srv.wait(10)


def _renice(n: int):
    def f():
        if n:
            try:
                os.nice(n)
            except PermissionError:
                pass
    return f


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="role")
    c = sub.add_parser("client")
    c.add_argument("--point", required=True, choices=list(POINTS))
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--seconds", type=float, required=True)
    c.add_argument("--out", required=True)
    c.add_argument("--prepare", default="default")
    ap.add_argument("--only", help="comma-separated points: " + ",".join(POINTS))
    ap.add_argument("--seconds", type=float, default=10.0, help="seconds of arrivals per point")
    ap.add_argument("--client-core", default="0")
    ap.add_argument("--server-core", default="1")
    ap.add_argument("--prepare", default="default",
                    help="the dispatcher's request preparation (auto, all, stream); default: the dispatcher's own")
    ap.add_argument("--nice", type=int, default=0, help="nice value for client and server (negative needs root)")
    a = ap.parse_args()
    if a.role == "client":
        client_main(a)
        return
    names = a.only.split(",") if a.only else list(POINTS)
    if any(POINTS[n][0] == "azure" for n in names) and not TRACE.exists():
        print(f"skipping the Azure points: {TRACE} is not here")
        names = [n for n in names if POINTS[n][0] != "azure"]
    print(f"client on core {a.client_core}, server on core {a.server_core}, {a.seconds:g} s of arrivals a point, "
          f"{OUTPUT_TOKENS} output tokens a request; prepare={a.prepare}")
    print(f"{'point':>18} | {'req':>5} | lag p50 / p99 / max ms | client CPU | waiting | prompt tok | "
          f"builder tok/s | prep s")
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            r = run_point(name, a, tmp)
            p = r.get("prepare") or {}
            rate = p.get("tokens_per_s", float("nan"))
            print(f"{name:>18} | {r['n']:>5} | {r['lag_p50']:7.3f} / {r['lag_p99']:7.3f} / {r['lag_max']:7.2f} | "
                  f"{r['cpu_load'] * 100:9.0f}% | {r['runq'] * 100:6.1f}% | {r['prompt_tokens']:>10} | "
                  f"{rate:>13,.0f} | "
                  f"{p.get('seconds', float('nan')):6.1f}{' (cache)' if p.get('cached') else ''}", flush=True)
            if r["ok"] != r["n"]:
                print(f"{'':>18}   {r['n'] - r['ok']} requests not ok")


if __name__ == "__main__":
    main()
