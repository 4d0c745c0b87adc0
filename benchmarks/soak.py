"""A long run: does the client stay flat (memory, file descriptors, tasks, send lag)?

A real trace (by default the Azure code trace of ``../shared/traces``), time-compressed to
``--rate`` requests/s and replayed pass after pass for ``--minutes``, through tokenfactory's
own path (prompt builder under the tiny model's tokenizer, requests prepared by the
streaming producer as a long run needs, dispatcher, streaming client, ``requests.parquet``
writer) against a fast streaming server (``loadgen_fidelity.py``'s truth server in its own
process: first chunk after 20 ms, then one every 5 ms, outputs capped at ``--max-output``
tokens).  Every ``--every`` minutes it prints, from inside the client's process and event
loop:

- RSS (MiB), open file descriptors (now, and the most seen in the interval), the client's
  pooled connections (now, and the most in the interval), threads, asyncio tasks alive,
  requests in flight;
- requests finished in the interval, those not ``ok``, and their send lag p50/p99/max (ms):
  ``sent_ns - max(scheduled_ns, slot_ns)``, the client's own delay;
- the client's CPU (share of one core) and the share of the interval its threads were
  runnable but waiting for a CPU (other tenants of a shared machine: that shows up as lag).

At the end: the table in Markdown, and the growth of RSS and of the lag p99 from the first
row after warm-up (``--warmup`` minutes) to the last.

With ``--burst-every M``, bursts ride on the trace: ``--burst-size`` more requests (trace
requests, re-timed) within ``--burst-span`` seconds, halfway through every M minutes; each
opens connections past the prewarmed pool, which ``client.idle_close_s`` (``--idle-close-s``)
must give back before the next row.

    python benchmarks/soak.py --minutes 60                # the README's table
    python benchmarks/soak.py --minutes 60 --burst-every 5  # a bursty hour: does the pool shrink?
    python benchmarks/soak.py --minutes 2 --every 0.5     # a quick look
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness import results_io  # noqa: E402 - the repository is on the path now

TRACE = ROOT.parent / "shared" / "traces" / "azure_llm_2023" / "AzureLLMInferenceTrace_code.csv"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_RUNQ_NS: dict[str, int] = {}  # per thread, its last reading: a thread that ended keeps its share


def _runq_wait_s() -> float:
    """Seconds this process's threads spent runnable but waiting for a CPU (other tenants' noise)."""
    for d in Path(f"/proc/{os.getpid()}/task").glob("*/schedstat"):
        try:
            _RUNQ_NS[d.parent.name] = int(d.read_text().split()[1])
        except (OSError, IndexError, ValueError):
            pass
    return sum(_RUNQ_NS.values()) / 1e9


def _pin(core: str | None) -> list[str]:
    return ["taskset", "-c", core] if core and shutil.which("taskset") else []


def passes(wcfg, builder, end_s: float):
    """The trace's requests, pass after pass (each shifted by the previous passes' length,
    request ids made unique), until ``end_s`` seconds of arrivals."""
    from loadgen.workloads.traces.replay import TraceWorkload

    shift, p = 0.0, 0
    while shift < end_s:
        tw = TraceWorkload(wcfg, builder)
        arr = tw.table.arrival_s
        length = float(arr.max()) + float(arr.max() - arr.min()) / max(len(arr) - 1, 1)
        for item in tw:
            item.arrival_s += shift
            if item.arrival_s > end_s:
                return
            item.request_id = f"p{p}-{item.request_id}"
            yield item
        shift += length
        p += 1


def bursts(wcfg, builder, end_s: float, every_s: float, size: int, span_s: float):
    """``size`` trace requests re-timed into ``span_s`` seconds, at ``every_s * (j + 1/2)``."""
    from loadgen.workloads.traces.replay import TraceWorkload

    j, src = 0, iter(())
    while every_s * (j + 0.5) < end_s:
        at = every_s * (j + 0.5)
        for i in range(size):
            item = next(src, None)
            if item is None:
                src = iter(TraceWorkload(wcfg, builder))
                item = next(src)
            item.arrival_s = at + span_s * i / size
            item.request_id = f"b{j}-{i}-{item.request_id}"
            yield item
        j += 1


def schedule(a, wcfg, builder, end_s: float):
    """The trace's passes, with the bursts (if any) merged in arrival order."""
    import heapq

    base = passes(wcfg, builder, end_s)
    if not a.burst_every:
        return base
    extra = bursts(wcfg, builder, end_s, a.burst_every * 60, a.burst_size, a.burst_span)
    return heapq.merge(base, extra, key=lambda item: item.arrival_s)


class Monitor:
    """Samples the client's own process and loop; lags arrive from the dispatcher's on_done."""

    def __init__(self):
        import psutil

        self.proc = psutil.Process()
        self.lags: list[float] = []
        self.not_ok = 0
        self.rows: list[dict] = []
        self.at = (time.perf_counter(), time.process_time(), _runq_wait_s())
        self.stalls = 0  # sends that found their request not built yet (the producer behind), so far
        self.peak_fds = self.peak_pool = 0  # the most seen in the interval (``peek``, once a second)

    @staticmethod
    def fds() -> int:
        return len(os.listdir("/proc/self/fd"))

    def peek(self, pool: int) -> None:
        self.peak_fds = max(self.peak_fds, self.fds())
        self.peak_pool = max(self.peak_pool, pool)

    def on_done(self, rec) -> None:
        self.lags.append((rec.sent_ns - max(rec.scheduled_ns, rec.slot_ns or rec.scheduled_ns)) / 1e6)
        if rec.status != "ok":
            self.not_ok += 1

    def sample(self, t_min: float, in_flight: int, stalls: int = 0, pool: int = 0) -> dict:
        import numpy as np

        lags, self.lags = np.array(self.lags or [np.nan]), []
        not_ok, self.not_ok = self.not_ok, 0
        now = (time.perf_counter(), time.process_time(), _runq_wait_s())
        wall = max(now[0] - self.at[0], 1e-9)
        cpu, runq = (now[1] - self.at[1]) / wall, (now[2] - self.at[2]) / wall
        self.at = now
        stalls, self.stalls = stalls - self.stalls, stalls
        fds = self.fds()
        row = {"min": t_min, "rss_mib": self.proc.memory_info().rss / 2**20,
               "fds": fds, "fds_peak": max(self.peak_fds, fds), "pool": pool, "pool_peak": max(self.peak_pool, pool),
               "threads": threading.active_count(),
               "tasks": len(asyncio.all_tasks()), "in_flight": in_flight,
               "cpu": cpu, "runq": runq, "stalls": stalls, "done": int(np.isfinite(lags).sum()), "not_ok": not_ok,
               "lag_p50": float(np.nanpercentile(lags, 50)) if np.isfinite(lags).any() else float("nan"),
               "lag_p99": float(np.nanpercentile(lags, 99)) if np.isfinite(lags).any() else float("nan"),
               "lag_max": float(np.nanmax(lags)) if np.isfinite(lags).any() else float("nan")}
        self.peak_fds = self.peak_pool = 0
        self.rows.append(row)
        return row


HEADER = ("| minute | RSS MiB | fds (most) | pool (most) | threads | tasks | in flight | requests | not ok | "
          "send lag p50 / p99 / max (ms) | sends waiting for their build | client CPU | waiting for a CPU |")
RULE = "|---" * 13 + "|"


def fmt(r: dict) -> str:
    return (f"| {r['min']:6.1f} | {r['rss_mib']:7.1f} | {r['fds']:4d} ({r['fds_peak']:4d}) | "
            f"{r['pool']:4d} ({r['pool_peak']:4d}) | {r['threads']:3d} | {r['tasks']:3d} | "
            f"{r['in_flight']:4d} | {r['done']:6d} | {r['not_ok']:3d} | "
            f"{r['lag_p50']:.3f} / {r['lag_p99']:.3f} / {r['lag_max']:.2f} | {r['stalls']:4d} | "
            f"{r['cpu'] * 100:5.1f} % | {r['runq'] * 100:5.1f} % |")


def client(a, port: int, out: str) -> list[dict]:
    from omegaconf import OmegaConf

    from conf.schema import TraceWorkload as TraceSchema
    from engines.tiny_model import ensure_tiny_model
    from loadgen.client import ClientConfig, StreamingClient
    from loadgen.dispatch import Dispatcher, LoadSpec
    from loadgen.records import RecordWriter
    from loadgen.workloads.prompts import PromptBuilder, load_tokenizer
    from metrics.request_metrics import complete_record

    try:
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass
    wcfg = OmegaConf.merge(OmegaConf.structured(TraceSchema), {
        "name": a.format, "path": str(a.trace), "target_rate": a.rate, "max_output_tokens": a.max_output})
    builder = PromptBuilder(load_tokenizer(str(ensure_tiny_model())), seed=0)
    end_s = a.minutes * 60
    spec = LoadSpec.of(kind="trace", duration_s=end_s, drain_timeout_s=30, prewarm_connections=int(a.rate) + 16)
    mon = Monitor()
    writer = RecordWriter(out)
    cfg = ClientConfig(base_url=f"http://127.0.0.1:{port}", model="truth", idle_close_s=a.idle_close_s or None)

    async def watch(d: Dispatcher, t0: int) -> None:
        every = a.every * 60
        k = 0
        while True:
            k += 1
            await asyncio.sleep(max(t0 + k * every * 1e9 - time.perf_counter_ns(), 0) / 1e9)
            stalls = d.source.stats.stalls if d.source is not None else 0
            print(fmt(mon.sample(k * a.every, len(d.pending), stalls, c.open_connections)), flush=True)

    async def peek() -> None:
        while True:
            await asyncio.sleep(1.0)
            mon.peek(c.open_connections)

    c = StreamingClient(cfg)

    async def go():
        async with c:
            d = Dispatcher(c, writer, finalize=complete_record, on_done=mon.on_done, prepare="stream")
            t0 = time.perf_counter_ns()
            print(fmt(mon.sample(0.0, 0)), flush=True)
            w = asyncio.ensure_future(watch(d, t0))
            pk = asyncio.ensure_future(peek())
            try:
                await d.run(schedule(a, wcfg, builder, end_s), spec)
            except asyncio.CancelledError:
                print("stopped early: the rows so far", flush=True)
            finally:
                w.cancel()
                pk.cancel()
            mon.sample((time.perf_counter_ns() - t0) / 60e9, len(d.pending), d.source.stats.stalls,
                       c.open_connections)
            print(fmt(mon.rows[-1]), flush=True)

    print(HEADER + "\n" + RULE, flush=True)

    def stop(*_):  # Ctrl-C or SIGTERM: stop the load, keep the table so far
        loop.call_soon_threadsafe(main.cancel)

    loop = asyncio.new_event_loop()
    main = loop.create_task(go())
    signal.signal(signal.SIGINT, stop)  # (also where a background start left SIGINT ignored)
    signal.signal(signal.SIGTERM, stop)
    try:
        loop.run_until_complete(main)
    except asyncio.CancelledError:
        pass
    loop.close()
    writer.close()
    return mon.rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=60.0)
    ap.add_argument("--every", type=float, default=5.0, help="minutes between rows")
    ap.add_argument("--warmup", type=float, default=5.0, help="minutes before the baseline row of the growth figures")
    ap.add_argument("--rate", type=float, default=40.0, help="requests/s the trace is rescaled to")
    ap.add_argument("--trace", default=str(TRACE))
    ap.add_argument("--format", default="azure", help="the trace's reader (workload=NAME)")
    ap.add_argument("--max-output", type=int, default=16, help="output tokens per request at most")
    ap.add_argument("--server-core", default=None, help="taskset core for the server (default: none)")
    ap.add_argument("--burst-every", type=float, default=0.0, help="minutes between bursts (0: none)")
    ap.add_argument("--burst-size", type=int, default=600, help="requests per burst")
    ap.add_argument("--burst-span", type=float, default=0.5, help="seconds each burst's requests arrive over")
    ap.add_argument("--idle-close-s", type=float, default=30.0,
                    help="client.idle_close_s: pooled connections idle this long, above the prewarmed, close (0: keep)")
    a = ap.parse_args()
    if not Path(a.trace).exists():
        print(f"skipped: {a.trace} is not here (the public traces live in ../shared/traces)")
        return
    port = _free_port()
    fidelity = ROOT / "benchmarks" / "loadgen_fidelity.py"
    srv = subprocess.Popen(_pin(a.server_core) + [sys.executable, str(fidelity), "server", "--port", str(port),
                                                  "--first-ms", "20", "--gap-ms", "5", "--no-truth"],
                           stdout=subprocess.PIPE, text=True)
    try:
        assert srv.stdout.readline().strip() == "ready"
        burst = (f", bursts of {a.burst_size} in {a.burst_span:g} s every {a.burst_every:g} min"
                 if a.burst_every else "")
        print(f"soak: {Path(a.trace).name} at {a.rate:g} req/s (passes repeated) for {a.minutes:g} min{burst}, "
              f"<= {a.max_output} output tokens, a row every {a.every:g} min, idle_close_s {a.idle_close_s:g}; "
              f"pid {os.getpid()}", flush=True)
        with tempfile.TemporaryDirectory() as tmp:
            rows = client(a, port, os.path.join(tmp, results_io.REQUESTS))
    finally:
        srv.terminate()
        srv.wait(10)
    base = next((r for r in rows if r["min"] >= a.warmup), rows[0])
    # the last full interval (the final row covers only the drain after the load's end)
    full = [r for r in rows if r["done"] >= 0.5 * a.rate * a.every * 60]
    last = full[-1] if full else rows[-1]
    print("\n" + HEADER + "\n" + RULE)
    for r in rows:
        print(fmt(r))
    total = sum(r["done"] for r in rows)
    bad = sum(r["not_ok"] for r in rows)
    print(f"\n{total} requests, {bad} not ok; from minute {base['min']:.1f} to {last['min']:.1f}: "
          f"RSS {base['rss_mib']:.1f} -> {last['rss_mib']:.1f} MiB ({last['rss_mib'] - base['rss_mib']:+.1f}), "
          f"fds {base['fds']} -> {last['fds']} (most {max(r['fds_peak'] for r in rows)}), "
          f"pool {base['pool']} -> {last['pool']} (most {max(r['pool_peak'] for r in rows)}), "
          f"tasks {base['tasks']} -> {last['tasks']}, "
          f"lag p99 {base['lag_p99']:.3f} -> {last['lag_p99']:.3f} ms")


if __name__ == "__main__":
    main()
