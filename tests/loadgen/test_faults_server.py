"""Misbehaving servers (issue 17, item 1): every fault of ``tests/faulty_server.py`` at once,
beside healthy streams, through the dispatcher, the streaming client and the record writer.

For each fault: its row is in ``requests.parquet`` with the right status, HTTP status and
error; a timeout fires at its configured value (``client.timeouts``); the output chunks that
arrived before the fault are kept.  The healthy streams running at the same time keep their
timing: each chunk's receive time against the server's ground-truth write time (the server
runs in a process of its own, so its write times are not disturbed by the client).
"""

from __future__ import annotations

import asyncio
import os

import numpy as np
import pyarrow.parquet as pq
import pytest

from conf.schema import ClientTimeouts
from loadgen.client import ClientConfig, StreamingClient
from loadgen.dispatch import Dispatcher, LoadSpec
from loadgen.records import RecordWriter
from loadgen.workloads.item import WorkItem
from metrics.request_metrics import complete_record
from tests.fake_server import FakeServer
from tests.faulty_server import FAULTS, HEALTHY_CHUNKS, STORM, TIMEOUTS, fault_script
from tests.machine_noise import attempts

pytestmark = pytest.mark.faults

HEALTHY = 8
# The README's fidelity table (a quiet machine): chunk error p50 0.003-0.004 ms, p99 0.007-0.017 ms.
# This suite runs on a shared 2-core machine beside other work: the bounds leave room for that
# (a descheduled server or softirq shows as a few late chunks), not for a client stalled by a fault.
CHUNK_ERROR_P50_MS = 0.5
CHUNK_ERROR_P99_MS = 2.0
TIMER_SLACK_S = 0.5  # a timeout fires no earlier than its value and at most this much later


def _items() -> list[WorkItem]:
    items = [WorkItem(request_id=f"healthy#{i}", prompt="fault=healthy", prompt_tokens=3, max_tokens=64,
                      arrival_s=0.3 * i) for i in range(HEALTHY)]
    t = 0.05
    for name in FAULTS:
        if name == "healthy":
            continue
        for i in range(STORM if name == "http500" else 1):
            items.append(WorkItem(request_id=f"{name}#{i}", prompt=f"fault={name}", prompt_tokens=3, max_tokens=16,
                                  arrival_s=t))
        t += 0.02
    return sorted(items, key=lambda it: it.arrival_s)


def _sockets() -> int:
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            n += os.readlink(f"/proc/self/fd/{fd}").startswith("socket:")
        except OSError:
            pass
    return n


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("faults")
    tries = iter(range(10))
    result, noise = attempts(lambda: _run_once(folder / f"requests{next(tries)}.parquet"))
    print(f"machine noise (a probe's worst oversleep) in the run kept: {noise:.1f} ms")
    return result


def _run_once(path):
    items = _items()
    before = _sockets()
    with FakeServer(fault_script(), process=True) as srv:
        cfg = ClientConfig(base_url=srv.url, model="m", timeouts=ClientTimeouts(**TIMEOUTS))
        writer = RecordWriter(path)

        async def go():
            async with StreamingClient(cfg) as c:
                d = Dispatcher(c, writer, finalize=complete_record)
                return await d.run(iter(items), LoadSpec.of(kind="trace", prewarm_connections=16))

        asyncio.run(go())
        writer.close()
        writes = srv.writes
    leaked = _sockets() - before
    rows = {r["request_id"]: r for r in pq.read_table(path).to_pylist()}
    return items, rows, writes, leaked


def test_every_request_is_in_requests_parquet(run):
    items, rows, _, _ = run
    assert sorted(rows) == sorted(it.request_id for it in items)


@pytest.mark.parametrize("name", [n for n in FAULTS if n != "healthy"])
def test_fault_status_error_and_timeout(run, name):
    _, rows, _, _ = run
    f = FAULTS[name]
    for i in range(STORM if name == "http500" else 1):
        r = rows[f"{name}#{i}"]
        assert r["status"] == f.status, (name, r["status"], r["error"])
        assert r["http_status"] == f.http_status, (name, r["http_status"], r["error"])
        if f.needle is None:
            assert r["error"] is None, (name, r["error"])
        else:
            assert f.needle in (r["error"] or ""), (name, r["error"])
        if f.chunks is not None:
            assert len(r["chunk_ns"]) == f.chunks, (name, len(r["chunk_ns"]))
        if f.status == "ok":
            assert r["output_tokens"] == f.chunks and r["first_token_ns"] is not None
        if f.timeout is not None:
            limit = TIMEOUTS[f"{f.timeout}_s"]
            start = r["end_ns"] if f.timeout == "idle" else r["sent_ns"]
            took = (r["done_ns"] - start) / 1e9
            assert limit - 0.002 <= took <= limit + TIMER_SLACK_S, (name, took)


def test_failed_rows_keep_their_timestamps(run):
    _, rows, _, _ = run
    for rid, r in rows.items():
        assert r["sent_ns"] is not None and r["done_ns"] is not None and r["done_ns"] >= r["sent_ns"], rid
        assert r["chunk_ns"] == sorted(r["chunk_ns"]) and len(r["chunk_tokens"]) == len(r["chunk_ns"]), rid


def test_healthy_streams_keep_their_timing(run):
    """Each healthy chunk's time against the server's write of it.  A read that drains several
    chunks of a stream carries the kernel's stamp of the newest (stamped_socket.py): on this
    busy machine the client is sometimes descheduled for longer than the 20 ms gap, and the
    earlier chunks of such a read are then late by up to the gap (the README's p99.9 of one
    gap).  So the stamp of every read is checked against the write of the newest chunk it
    carried, and those coalesced chunks are counted and printed."""
    _, rows, writes, _ = run
    own, raw, coalesced = [], [], 0
    for i in range(HEALTHY):
        r = rows[f"healthy#{i}"]
        assert r["status"] == "ok", (r["error"], len(r["chunk_ns"]), (r["done_ns"] - r["sent_ns"]) / 1e9)
        assert r["output_tokens"] == HEALTHY_CHUNKS and len(r["chunk_ns"]) == HEALTHY_CHUNKS
        k = int(r["response_id"].rsplit("-", 1)[1])
        truth = np.array([ns for kk, ns in writes if kk == k][1:1 + HEALTHY_CHUNKS])  # write 0 is the head
        got = np.array(r["chunk_ns"])
        newest = np.searchsorted(got, got, side="right") - 1  # the last chunk that shares this one's read
        coalesced += int((newest != np.arange(len(got))).sum())
        own.extend(((got - truth[newest]) / 1e6).tolist())
        raw.extend(((got - truth) / 1e6).tolist())
    own, raw = np.array(own), np.array(raw)
    p50, p99 = np.percentile(own, 50), np.percentile(own, 99)
    print(f"healthy chunks beside the faults: error p50 {p50:.3f} ms, p99 {p99:.3f} ms (per read); "
          f"{coalesced} of {len(raw)} shared a read, raw p99 {np.percentile(raw, 99):.3f} max {raw.max():.3f} ms")
    assert (own >= -0.05).all(), own.min()  # never before it was written (a clock read's granularity)
    assert p50 <= CHUNK_ERROR_P50_MS and p99 <= CHUNK_ERROR_P99_MS, (p50, p99)


def test_no_socket_is_left_open(run):
    """Broken connections are closed, and the client closes the rest when it ends."""
    assert run[3] <= 0
