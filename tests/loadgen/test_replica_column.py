"""Each request row names the deployment replica that served it (``replica``): from the
response header the client is told to read, renamed by ``replica_names``; the default when
the response names none; ``unknown`` in files written before the column existed."""

from __future__ import annotations

import asyncio

import pyarrow as pa
import pyarrow.parquet as pq

from loadgen.client import ClientConfig, StreamingClient
from loadgen.dispatch import LoadSpec
from loadgen.records import SCHEMA, RecordWriter, RequestRecord, read_requests
from loadgen.workers import run_workers
from loadgen.workloads.item import WorkItem
from tests.fake_server import FakeServer, openai_script

WORKERS = ["http://10.0.0.1:8000", "http://10.0.0.2:8000", "http://10.0.0.3:8000"]


def _by_worker(k: int) -> dict:
    return {"X-TokenFactory-Replica": WORKERS[k % 3]}


def _naming(headers) -> FakeServer:
    """The OpenAI-compatible fake engine whose response heads also carry ``headers(k)`` (a
    router naming the worker that served request k)."""
    engine = openai_script({})

    def script(body, k):
        steps = engine(body, k)
        status, _, rest = steps[0].partition(b"\r\n")  # the response head
        extra = b"".join(b"%s: %s\r\n" % (n.encode(), v.encode()) for n, v in headers(k).items())
        return [status + b"\r\n" + extra + rest, *steps[1:]]

    return FakeServer(script)


def _send(srv, n: int, **cfg) -> list[RequestRecord]:
    c = ClientConfig(base_url=srv.url, model="m", **cfg)

    async def go():
        async with StreamingClient(c) as client:
            return [await client.send(RequestRecord(request_id=f"q{i}", scheduled_ns=0), client.body("hi", 4))
                    for i in range(n)]

    return asyncio.run(go())


def test_header_mapped_to_replica_names_and_unmapped_value_kept():
    names = {WORKERS[0]: "r0", WORKERS[1]: "r1"}  # the third worker is not in the map
    with _naming(_by_worker) as srv:
        recs = _send(srv, 6, replica_names=names)
    assert [r.status for r in recs] == ["ok"] * 6
    assert [r.replica for r in recs] == ["r0", "r1", WORKERS[2]] * 2


def test_absent_header_gives_the_default_and_single_engine_default():
    with FakeServer() as srv:
        (plain,) = _send(srv, 1)
        (single,) = _send(srv, 1, default_replica="r0")
    assert plain.replica == "unknown" and single.replica == "r0"


def test_other_header_name_and_header_reading_off():
    with _naming(lambda k: {"x-served-by": "pod-7", "x-tokenfactory-replica": "r9"}) as srv:
        (named,) = _send(srv, 1, replica_header="X-Served-By", replica_names={"pod-7": "r1"})
        (off,) = _send(srv, 1, replica_header=None, default_replica="r0")
    assert named.replica == "r1" and off.replica == "r0"


def test_connection_error_row_keeps_the_default():
    async def go():
        c = ClientConfig(base_url="http://127.0.0.1:9", model="m", default_replica="r0")
        async with StreamingClient(c) as client:
            return await client.send(RequestRecord(request_id="x", scheduled_ns=0), client.body("hi", 4))

    rec = asyncio.run(go())
    assert rec.status == "connection_error" and rec.replica == "r0"


def test_worker_processes_keep_the_replica_column(tmp_path):
    n = 9
    writer = RecordWriter(tmp_path / "requests.parquet")
    with _naming(_by_worker) as srv:
        cfg = ClientConfig(base_url=srv.url, model="m", replica_names={w: f"r{i}" for i, w in enumerate(WORKERS)})
        run_workers(2, cfg, iter([WorkItem(f"r{i}", "p", 1, 2) for i in range(n)]),
                    LoadSpec.of(kind="concurrency", concurrency=2, requests_to_send=n), writer)
    writer.close()
    t = read_requests(tmp_path / "requests.parquet")
    assert t.schema == SCHEMA
    got = t.column("replica").to_pylist()
    assert set(got) == {"r0", "r1", "r2"} and len(got) == n


def test_old_file_without_the_column_reads_as_unknown(tmp_path):
    path = tmp_path / "requests.parquet"
    old = pa.table({"request_id": ["a", "b"], "status": ["ok", "ok"]})
    pq.write_table(old, path)
    t = read_requests(path)
    assert t.column("replica").to_pylist() == ["unknown", "unknown"]
