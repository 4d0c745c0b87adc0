"""Load shapes through the real dispatcher and client against the fake server (no timing asserts
beyond generous bounds): closed-loop concurrency, request counts, warm-up flags, duration limit."""

from __future__ import annotations

import asyncio

import numpy as np
import pyarrow.parquet as pq
import pytest

from loadgen.arrivals import arrival_offsets
from loadgen.client import ClientConfig, StreamingClient
from loadgen.dispatch import Dispatcher, LoadSpec
from loadgen.records import RecordWriter
from loadgen.workloads.item import WorkItem
from tests.fake_server import FakeServer


def items(prompt="mode:ok n=4 gap_ms=10"):
    i = 0
    while True:
        yield WorkItem(request_id=f"r{i}", prompt=prompt, prompt_tokens=7, max_tokens=4)
        i += 1


def run(srv, spec, tmp_path, prompt="mode:ok n=4 gap_ms=10"):
    path = tmp_path / "requests.parquet"
    w = RecordWriter(path)

    async def go():
        async with StreamingClient(ClientConfig(base_url=srv.base_url, model="fake", continuous_usage=True)) as c:
            return await Dispatcher(c, w).run(items(prompt), spec)

    stats = asyncio.run(go())
    w.close()
    return stats, pq.read_table(path)


@pytest.fixture()
def srv():
    with FakeServer() as s:
        yield s


def test_closed_loop_keeps_exactly_c_in_flight(srv, tmp_path):
    spec = LoadSpec.of(kind="concurrency", concurrency=3, requests_to_send=12, warmup_requests=2)
    stats, t = run(srv, spec, tmp_path)
    assert t.num_rows == 12 and stats["sent"] == 12
    assert srv.max_in_flight == 3
    assert t.column("warmup").to_pylist().count(True) == 2
    assert set(t.column("status").to_pylist()) == {"ok"}
    # each user's next request is scheduled when its previous one ended
    sched = np.sort(t.column("scheduled_ns").to_numpy())
    assert (sched[:3] == sched[0]).all() and (sched[3:] > sched[0]).all()


def test_open_loop_follows_the_arrival_schedule(srv, tmp_path):
    spec = LoadSpec.of(kind="poisson", rate=50, requests_to_send=20, seed=7)
    stats, t = run(srv, spec, tmp_path)
    sched = np.sort(t.column("scheduled_ns").to_numpy())
    offsets = (sched - stats["start_ns"]) / 1e9
    np.testing.assert_allclose(offsets, arrival_offsets("poisson", 50, 20, seed=7), atol=1e-6)
    lag_ms = (t.column("sent_ns").to_numpy() - t.column("scheduled_ns").to_numpy()) / 1e6
    assert (lag_ms >= 0).all() and np.median(lag_ms) < 20


def test_max_concurrency_caps_open_loop(srv, tmp_path):
    run(srv, LoadSpec.of(kind="constant", rate=500, requests_to_send=12, max_concurrency=2), tmp_path,
        prompt="mode:ok n=3 gap_ms=30")
    assert srv.max_in_flight == 2


def test_duration_limits_sending(srv, tmp_path):
    stats, t = run(srv, LoadSpec.of(kind="constant", rate=20, duration_s=0.5), tmp_path)
    # arrivals at 0, 50, ..., 500 ms: 11 requests fit in the half second
    assert t.num_rows == 11 and stats["sent"] == 11


def test_gamma_burstiness_keeps_mean_rate():
    off = arrival_offsets("gamma", 10.0, 20000, burstiness=0.25, seed=1)
    gaps = np.diff(off)
    assert gaps.mean() == pytest.approx(0.1, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(2.0, rel=0.05)  # CV = 1/sqrt(shape)


def test_bad_load_specs_name_the_field():
    with pytest.raises(ValueError, match="load.rate"):
        LoadSpec.of(kind="poisson", rate=0, requests_to_send=3).validate()
    with pytest.raises(ValueError, match="load.concurrency"):
        LoadSpec.of(kind="concurrency", requests_to_send=3).validate()
    with pytest.raises(ValueError, match="num_requests or load.duration_s"):
        LoadSpec.of(kind="poisson", rate=1).validate()
