"""Worker processes: one shared schedule, one merged record in the usual format."""

from __future__ import annotations

import numpy as np
import pyarrow.parquet as pq
import pytest

from loadgen.arrivals import arrival_offsets
from loadgen.client import ClientConfig
from loadgen.dispatch import LoadSpec
from loadgen.records import SCHEMA, RecordWriter
from loadgen.workers import run_workers, split_load
from loadgen.workloads.item import WorkItem
from tests.fake_server import END, HEAD_CHUNKED, FakeServer, chunk, completion, event


def _script(req, k):
    return [HEAD_CHUNKED, 0.01, chunk(event(completion(f"s-{k}", "a")) + event(completion(f"s-{k}", "b", "length")) +
                                      event(b"[DONE]")) + END]


def _items(n):
    return [WorkItem(f"r{i}", "p", 1, 2) for i in range(n)]


def test_split_load_deals_out_one_schedule():
    spec = LoadSpec.of(kind="poisson", rate=100.0, requests_to_send=10, seed=1, warmup_requests=2)
    shares = split_load(_items(10), spec, 3)
    idx = sorted(i for _, _, plan in shares for i, _, _ in plan)
    assert idx == list(range(10))
    offs = {i: off for _, _, plan in shares for i, _, off in plan}
    want = (arrival_offsets("poisson", 100.0, 10, 1.0, 1) * 1e9).astype(np.int64)
    assert all(abs(offs[i] - want[i]) <= 1 for i in range(10))
    closed = split_load(_items(10), LoadSpec.of(kind="concurrency", concurrency=5, requests_to_send=10,
                                             warmup_requests=3), 2)
    assert [s.load.concurrency for s, _, _ in closed] == [3, 2]
    assert [s.load.warmup_requests for s, _, _ in closed] == [2, 1]
    assert sum(len(its) for _, its, _ in closed) == 10
    with pytest.raises(ValueError, match="client.workers=3 is more than load.concurrency=2"):
        split_load(_items(4), LoadSpec.of(kind="concurrency", concurrency=2, requests_to_send=4), 3)


def test_two_workers_one_consistent_record(tmp_path):
    n = 30
    spec = LoadSpec.of(kind="poisson", rate=150.0, requests_to_send=n, seed=7, warmup_requests=4)
    writer = RecordWriter(tmp_path / "requests.parquet")
    seen = []

    def finalize(rec):  # runs in the worker: proves the callback travelled
        rec.ttft_s = (rec.first_token_ns - rec.sent_ns) / 1e9 if rec.first_token_ns else None

    with FakeServer(_script) as srv:
        cfg = ClientConfig(base_url=srv.url, model="m")
        stats = run_workers(2, cfg, iter(_items(n)), spec, writer, finalize=finalize,
                            on_done=lambda r: seen.append(r.status))
        conns = srv.connections
    writer.close()
    t = pq.read_table(tmp_path / "requests.parquet")
    assert t.schema == SCHEMA
    d = t.to_pydict()
    assert stats["sent"] == n and stats["workers"] == 2 and stats["cpu_s"] > stats["workers_cpu_s"] > 0
    assert sorted(d["request_id"], key=lambda r: int(r[1:])) == [f"r{i}" for i in range(n)]
    assert len(set(d["response_id"])) == n and set(d["status"]) == {"ok"}
    assert sorted(seen) == ["ok"] * n
    assert conns >= 2  # each worker has its own pool
    # The merged schedule is the single-process one: t0 + the Poisson offsets, per request index.
    order = np.argsort([int(r[1:]) for r in d["request_id"]])
    sched = np.asarray(d["scheduled_ns"])[order]
    want = stats["start_ns"] + (arrival_offsets("poisson", 150.0, n, 1.0, 7) * 1e9).astype(np.int64)
    assert np.abs(sched - want).max() <= 1
    assert (np.asarray(d["sent_ns"])[order] >= sched).all()
    assert list(np.asarray(d["warmup"])[order]) == [True] * 4 + [False] * (n - 4)
    assert all(v is not None and v > 0 for v in d["ttft_s"])
    assert not list(tmp_path.glob("*.worker*"))  # parts merged and removed


def test_duration_bound_open_loop_takes_only_what_the_duration_holds():
    import itertools

    endless = (WorkItem(f"r{i}", "p", 1, 2) for i in itertools.count())
    spec = LoadSpec.of(kind="constant", rate=100.0, duration_s=0.5)
    shares = split_load(endless, spec, 2)
    assert sum(len(plan) for _, _, plan in shares) == 51  # offsets 0, 10, ..., 500 ms
    assert all(s.requests_to_send is None and s.load.duration_s == 0.5 for s, _, _ in shares)
    with pytest.raises(ValueError, match="needs load.num_requests"):
        run_workers(2, ClientConfig(base_url="http://127.0.0.1:9", model="m"), iter([]),
                    LoadSpec.of(kind="concurrency", concurrency=2, duration_s=1.0), None)
