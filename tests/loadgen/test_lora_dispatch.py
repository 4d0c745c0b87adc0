"""workload.lora end to end on the fake engine: each request is sent with its adapter's name as
``model`` (the engine echoes it), the row keeps it in ``lora``, and summary.json's
``per_adapter`` measures each adapter apart (the fake server's adapters differ in TTFT and output
length by their names)."""

from __future__ import annotations

import asyncio
import collections

import pyarrow.parquet as pq
import pytest

from conf.schema import LoraMix
from loadgen.client import ClientConfig, StreamingClient
from loadgen.dispatch import Dispatcher, LoadSpec
from loadgen.records import RecordWriter
from loadgen.workloads.item import WorkItem
from loadgen.workloads.lora import AdapterMix, WithAdapters
from metrics.request_metrics import complete_record
from metrics.slo import SLO
from metrics.summary import summarize
from tests.fake_server import FakeServer

FAST, SLOW = "fast-ttft_ms:5-n:4", "slow-ttft_ms:120-n:8"  # the fake engine reads its behaviour from the name
N = 24


def test_adapter_sent_echoed_recorded_and_measured_apart(tmp_path):
    mix = AdapterMix.from_config(LoraMix(adapters=[FAST, SLOW], shares=[2, 1]), seed=0)
    items = WithAdapters((WorkItem(f"r{i}", "p", 1, 8) for i in range(N)), mix)
    writer = RecordWriter(tmp_path / "requests.parquet")

    async def go(url):
        async with StreamingClient(ClientConfig(base_url=url, model="base")) as c:
            return await Dispatcher(c, writer, finalize=complete_record).run(
                items, LoadSpec.of(kind="concurrency", concurrency=4, requests_to_send=N))

    with FakeServer() as srv:
        asyncio.run(go(srv.url))
        bodies = srv.requests
        echoed = sorted(t["model"] for t in srv.truth.values())
    writer.close()
    t = pq.read_table(tmp_path / "requests.parquet")
    d = t.to_pydict()
    want = {f"r{i}": mix.pick(f"r{i}") for i in range(N)}
    assert dict(zip(d["request_id"], d["lora"])) == want
    assert sorted(b["model"] for b in bodies) == sorted(want.values()) == echoed
    n = collections.Counter(want.values())
    assert n[FAST] > 0 and n[SLOW] > 0 and n[FAST] + n[SLOW] == N

    s = summarize(t, SLO(ttft_ms=60.0), 0, 1)
    per = s["per_adapter"]
    assert set(per) == {FAST, SLOW}
    fast, slow = per[FAST], per[SLOW]
    assert (fast["num_requests"], slow["num_requests"]) == (n[FAST], n[SLOW])
    assert (fast["completed"], slow["completed"]) == (n[FAST], n[SLOW])
    assert (fast["total_output_tokens"], slow["total_output_tokens"]) == (4 * n[FAST], 8 * n[SLOW])
    assert fast["p99_ttft_ms"] < 60 <= 120 <= slow["p50_ttft_ms"]
    assert (fast["slo_attainment"], slow["slo_attainment"]) == (1.0, 0.0)
    assert (fast["good_requests"], slow["goodput_rps"]) == (n[FAST], 0.0)
    # the adapters share the run's window: their throughputs add up to the run's
    assert fast["request_throughput"] + slow["request_throughput"] == pytest.approx(s["request_throughput"])
    assert fast["output_throughput"] + slow["output_throughput"] == pytest.approx(s["output_throughput"])
    assert fast["goodput_rps"] == pytest.approx(s["goodput_rps"])
    assert fast["n_ttft"] == n[FAST] and fast["n_tpot"] == n[FAST]


def test_no_adapter_no_per_adapter_key(tmp_path):
    writer = RecordWriter(tmp_path / "requests.parquet")

    async def go(url):
        async with StreamingClient(ClientConfig(base_url=url, model="base")) as c:
            return await Dispatcher(c, writer, finalize=complete_record).run(
                (WorkItem(f"r{i}", "p", 1, 4) for i in range(3)), LoadSpec.of(kind="concurrency", concurrency=1,
                                                                            requests_to_send=3))

    with FakeServer() as srv:
        asyncio.run(go(srv.url))
        assert [b["model"] for b in srv.requests] == ["base"] * 3
    writer.close()
    t = pq.read_table(tmp_path / "requests.parquet")
    assert t.column("lora").to_pylist() == [None] * 3
    assert "per_adapter" not in summarize(t, SLO(), 0, 1)


def test_prepared_cache_keeps_each_requests_adapter(tmp_path):
    from loadgen.prepare import PrepareCache, Prepared

    cache = PrepareCache(tmp_path, {"k": 1}, end_state=lambda: None, on_hit=lambda s: None)
    cache.store([Prepared(i, WorkItem(f"r{i}", "", 1, 2, model=m), None, b"{}") for i, m in enumerate([FAST, None])])
    assert [p.item.model for p in cache.load()] == [FAST, None]
