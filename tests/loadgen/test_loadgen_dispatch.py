"""Dispatch with the real client: schedule lag recorded per request, cancellation recorded."""

from __future__ import annotations

import asyncio

import numpy as np
import pyarrow.parquet as pq
import pytest

from conf.schema import ClientTimeouts
from loadgen.arrivals import arrival_offsets
from loadgen.client import ClientConfig, StreamingClient
from loadgen.dispatch import Dispatcher, LoadSpec
from loadgen.records import RecordWriter, RequestRecord
from loadgen.saturation import SaturationRule
from loadgen.workloads.item import WorkItem
from tests.fake_server import END, HEAD_CHUNKED, FakeServer, chunk, completion, event


def short_script(delay=0.0):
    def script(req, k):
        steps = [HEAD_CHUNKED]
        if delay:
            steps.append(delay)
        return steps + [chunk(event(completion(f"s-{k}", "a")) + event(completion(f"s-{k}", "b", "length")) +
                              event(b"[DONE]")) + END]
    return script


def _items(n):
    return (WorkItem(f"r{i}", "p", 1, 2) for i in range(n))


def _run(url, spec, path, items):
    writer = RecordWriter(path)

    async def go():
        async with StreamingClient(ClientConfig(base_url=url, model="m")) as c:
            return await Dispatcher(c, writer).run(items, spec)

    stats = asyncio.run(go())
    writer.close()
    return stats, pq.read_table(path).to_pydict()


def test_open_loop_records_schedule_and_send_per_request(tmp_path):
    spec = LoadSpec.of(kind="poisson", rate=200.0, requests_to_send=40, seed=3, warmup_requests=5)
    with FakeServer(short_script()) as srv:
        stats, t = _run(srv.url, spec, tmp_path / "r.parquet", _items(40))
    assert stats["sent"] == 40 and len(t["request_id"]) == 40
    assert set(t["status"]) == {"ok"}
    order = np.argsort([int(r[1:]) for r in t["request_id"]])
    sched = np.asarray(t["scheduled_ns"])[order]
    sent = np.asarray(t["sent_ns"])[order]
    # scheduled_ns is exactly t0 + the Poisson offsets; the send never precedes it.
    want = stats["start_ns"] + (arrival_offsets("poisson", 200.0, 40, 1.0, 3) * 1e9).astype(np.int64)
    assert np.abs(sched - want).max() <= 1
    assert (sent >= sched).all()
    assert sum(np.asarray(t["warmup"])[order][:5]) == 5 and not any(np.asarray(t["warmup"])[order][5:])
    assert sorted(t["response_id"]) == sorted(f"s-{k}" for k in range(40))


def test_closed_loop_keeps_concurrency_and_prewarms(tmp_path):
    spec = LoadSpec.of(kind="concurrency", concurrency=4, requests_to_send=12)
    with FakeServer(short_script(0.02)) as srv:
        stats, t = _run(srv.url, spec, tmp_path / "r.parquet", _items(12))
        conns = srv.connections
    assert stats["sent"] == 12 and set(t["status"]) == {"ok"}
    assert conns == 5  # the pool (4 users and a spare) was opened before the window and reused
    # Never more than 4 in flight: at any send, at most 3 others are open.
    spans = sorted(zip(t["sent_ns"], t["done_ns"]))
    for s0, _ in spans:
        assert sum(1 for s, d in spans if s <= s0 < d) <= 4


def held_tail_script(tail_s: float):
    """60 ms of output (a first token after 20 ms, four more 10 ms apart), then the last token, the
    usage chunk and [DONE] in one write; the body's end ``tail_s`` later: a server descheduled
    between its last two writes, or a proxy that holds the terminating chunk back."""
    def script(req, k):
        steps = [HEAD_CHUNKED, 0.02]
        for _ in range(5):
            steps += [chunk(event(completion(f"s-{k}", "a"))), 0.01]
        last = chunk(event(completion(f"s-{k}", "b", "length"))) + chunk(event(
            {"id": f"s-{k}", "choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": 6}}))
        if not tail_s:  # the body ends in the same write
            return steps + [last + chunk(event(b"[DONE]")) + END]
        return steps + [last + chunk(event(b"[DONE]")), tail_s, END]
    return script


@pytest.mark.parametrize("tail_s", [0.0, 0.15])
def test_closed_loop_user_goes_on_when_the_stream_is_over(tmp_path, tail_s):
    # A user's request is over when its last event ([DONE]) arrives: the record ends there and the
    # user sends its next request at once, whether or not the body's terminating chunk came with it
    # (the connection takes it in the background, then goes back to the pool).  The old client
    # waited for the body's end, up to a 1 s grace: 150 ms held per 60 ms request, 4 users in
    # flight 0.3 of the time.  Occupancy: the requests' own time (send -> [DONE]) over 4 x the window.
    n, users = 40, 4
    spec = LoadSpec.of(kind="concurrency", concurrency=users, requests_to_send=n)
    with FakeServer(held_tail_script(tail_s), process=True) as srv:
        stats, t = _run(srv.url, spec, tmp_path / "r.parquet", _items(n))
        conns = srv.connections
    assert stats["sent"] == n and set(t["status"]) == {"ok"} and set(map(len, t["chunk_ns"])) == {6}
    assert set(t["finish_reason"]) == {"length"}
    sent, end, done = (np.asarray(t[c], dtype=np.int64) for c in ("sent_ns", "end_ns", "done_ns"))
    window = done.max() - sent.min()
    occupancy = (end - sent).sum() / (users * window)
    assert occupancy >= 0.95, occupancy
    held = (done - end) / 1e6  # ms the record (and the user) waited past the last event
    assert np.median(held) < 2.0 and held.max() < 50.0, held
    # the prewarmed pool (4 users and a spare) when the body ends with [DONE]; a connection still
    # taking its tail is not given a request: the pool grows by what is draining (here ~3.5 per
    # user: 150 ms of tail per 60 ms request), and each is reused once its body ended
    assert conns == users + 1 if tail_s == 0 else users + 1 < conns <= 5 * users, conns


def test_duration_bound_run_cancels_and_records_unfinished(tmp_path):
    spec = LoadSpec.of(kind="constant", rate=50.0, duration_s=0.2, drain_timeout_s=0.05)
    with FakeServer(short_script(5.0)) as srv:  # responses take far longer than the drain allows
        stats, t = _run(srv.url, spec, tmp_path / "r.parquet", _items(1000))
    assert 9 <= stats["sent"] <= 12
    assert len(t["request_id"]) == stats["sent"]
    assert set(t["status"]) == {"cancelled"}
    assert all(d is not None for d in t["done_ns"])



def test_open_loop_session_turns_count_against_max_concurrency(tmp_path):
    # Every first turn has a second turn with no think time; with max_concurrency=2 no more
    # than 2 requests may be between send and end at any moment, second turns included.
    def followup(rec):
        if rec.turn == 0:
            return WorkItem(rec.request_id + "-t1", "p", 1, 2, session_id=rec.session_id, turn=1), 0.0
        return None

    spec = LoadSpec.of(kind="poisson", rate=500.0, requests_to_send=12, seed=1, max_concurrency=2)
    items = (WorkItem(f"r{i}", "p", 1, 2, session_id=f"r{i}", turn=0) for i in range(12))
    writer = RecordWriter(tmp_path / "r.parquet")

    async def go(url):
        async with StreamingClient(ClientConfig(base_url=url, model="m")) as c:
            return await Dispatcher(c, writer, followup=followup).run(items, spec)

    with FakeServer(short_script(delay=0.02)) as srv:
        stats = asyncio.run(go(srv.url))
    writer.close()
    t = pq.read_table(tmp_path / "r.parquet").to_pydict()
    assert stats["sent"] == 24 and sorted(t["turn"]) == [0] * 12 + [1] * 12
    assert set(t["status"]) == {"ok"}
    edges = sorted([(s, 1) for s in t["sent_ns"]] + [(d, -1) for d in t["done_ns"]], key=lambda e: (e[0], e[1]))
    assert max(np.cumsum([e[1] for e in edges])) == 2


def test_waiting_for_a_concurrency_slot_is_queueing_not_client_lag(tmp_path):
    # 20 requests at 400/s into max_concurrency=2 against a 50 ms server: most wait for a slot.
    # The wait is queue_wait (slot_ns - scheduled_ns); the client's own lag stays small, and the
    # run is not flagged client-limited although sends happen up to ~0.45 s after their time.
    from metrics.request_metrics import complete_record
    from metrics.slo import SLO
    from metrics.summary import summarize

    spec = LoadSpec.of(kind="constant", rate=400.0, requests_to_send=20, max_concurrency=2)
    writer = RecordWriter(tmp_path / "r.parquet")

    async def go(url):
        async with StreamingClient(ClientConfig(base_url=url, model="m")) as c:
            return await Dispatcher(c, writer, finalize=complete_record).run(_items(20), spec)

    with FakeServer(short_script(0.05)) as srv:
        asyncio.run(go(srv.url))
    writer.close()
    t = pq.read_table(tmp_path / "r.parquet")
    d = t.to_pydict()
    sched, slot, sent = (np.asarray(d[k], dtype=np.int64) for k in ("scheduled_ns", "slot_ns", "sent_ns"))
    assert (slot >= sched).all() and (sent >= slot).all()
    queued = slot > sched
    assert queued.sum() >= 15                                    # all but the first few waited
    assert (slot - sched).max() / 1e6 > 300                      # ~9 rounds of 50 ms
    assert ((sent - np.maximum(sched, slot)) / 1e6).max() < 100  # the client's own delay (noisy CI: loose)
    s = summarize(t, SLO(), 0, 1, max_schedule_lag_ms=100)
    assert s["num_queued"] == int(queued.sum()) and s["queue_wait_max_ms"] > 300
    assert s["schedule_lag_p99_ms"] < 100 and s["client_limited"] is False
    assert s["num_connects"] == 0  # the pool was opened before the first send


def test_a_send_that_opens_a_connection_records_how_long(tmp_path):
    spec = LoadSpec.of(kind="constant", rate=200.0, requests_to_send=6, prewarm_connections=0)
    with FakeServer(short_script()) as srv:
        _, t = _run(srv.url, spec, tmp_path / "r.parquet", _items(6))
    connect = [c for c in t["connect_s"] if c is not None]
    assert 1 <= len(connect) <= 6 and all(0 < c < 1 for c in connect)


def test_an_over_saturated_open_loop_is_stopped_early(tmp_path):
    # A server that streams at most 2 requests at a time, 50 ms each (40 req/s), offered 120 req/s:
    # the backlog grows every window, so the point stops long before its 600 requests are sent,
    # and what was in flight is cancelled after the drain.
    import threading

    from aiohttp import web

    sem_box = {}

    async def handle(request):
        await request.read()
        async with sem_box["sem"]:
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            await asyncio.sleep(0.05)
            await resp.write(event(completion("s", "a", "length")) + event(b"[DONE]"))
            return resp

    loop = asyncio.new_event_loop()
    started = threading.Event()
    box = {}

    def serve():
        asyncio.set_event_loop(loop)
        sem_box["sem"] = asyncio.Semaphore(2)
        app = web.Application()
        app.router.add_post("/v1/completions", handle)
        runner = web.AppRunner(app)
        loop.run_until_complete(runner.setup())
        site = web.TCPSite(runner, "127.0.0.1", 0)
        loop.run_until_complete(site.start())
        box["port"], box["runner"] = site._server.sockets[0].getsockname()[1], runner
        started.set()
        loop.run_forever()

    threading.Thread(target=serve, daemon=True).start()
    started.wait(10)
    spec = LoadSpec.of(kind="constant", rate=120.0, requests_to_send=600, stop_when_saturated=True)
    writer = RecordWriter(tmp_path / "r.parquet")

    async def go():
        async with StreamingClient(ClientConfig(base_url=f"http://127.0.0.1:{box['port']}", model="m")) as c:
            d = Dispatcher(c, writer)
            d.saturation_rule = SaturationRule(window_s=0.5, windows=3, drain_s=0.5)
            return await d.run(_items(600), spec)

    stats = asyncio.run(go())
    asyncio.run_coroutine_threadsafe(box["runner"].cleanup(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    writer.close()
    t = pq.read_table(tmp_path / "r.parquet").to_pydict()
    assert stats["saturated"] and "over-saturated" in stats["saturated"]
    assert 100 < stats["sent"] < 600 and len(t["status"]) == stats["sent"]  # every send recorded
    assert "cancelled" in t["status"] and "ok" in t["status"]


def _run_watched(url, spec, path, items, rule):
    writer = RecordWriter(path)

    async def go():
        async with StreamingClient(ClientConfig(base_url=url, model="m")) as c:
            d = Dispatcher(c, writer)
            d.saturation_rule = rule
            return await d.run(items, spec)

    stats = asyncio.run(go())
    writer.close()
    return stats, pq.read_table(path).to_pydict()


# A real model's time scales compressed 10x: windows of 0.2 s for the default 2 s.
FAST_RULE = SaturationRule(window_s=0.2, windows=3, drain_s=1.0)


@pytest.mark.slow
def test_long_requests_without_a_capacity_limit_are_not_stopped(tmp_path):
    # 200 ms to the first token then 500 tokens at 20 ms (10.2 s), Poisson 2 req/s, 60 requests,
    # compressed 10x: 20 ms, 50 chunks of 10 tokens 20 ms apart (1.0 s), 20 req/s.  Little's law:
    # 20 in flight, nothing queues; the old rule stopped it after 0.8 s.
    spec = LoadSpec.of(kind="poisson", rate=20.0, requests_to_send=60, seed=1, stop_when_saturated=True)
    items = (WorkItem(f"r{i}", "ttft_ms:20 n=50 k=10 gap_ms:20", 1, 500) for i in range(60))
    with FakeServer(process=True) as srv:
        stats, t = _run_watched(srv.url, spec, tmp_path / "r.parquet", items, FAST_RULE)
        assert srv.max_in_flight >= 15  # the fake's own count: the ramp the old rule read as a backlog
    assert stats["saturated"] is None and stats["saturated_after_s"] is None
    assert stats["sent"] == 60 and t["status"].count("ok") == 60


@pytest.mark.slow
def test_a_server_with_fixed_slots_past_its_capacity_is_still_stopped(tmp_path):
    # 4 slots of ~0.1 s (40 req/s) offered 80 req/s: its queue grows by 40 a second
    spec = LoadSpec.of(kind="constant", rate=80.0, requests_to_send=400, stop_when_saturated=True)
    items = (WorkItem(f"r{i}", "ttft_ms:20 n=5 gap_ms:20", 1, 5) for i in range(400))
    with FakeServer(process=True, slots=4) as srv:
        stats, t = _run_watched(srv.url, spec, tmp_path / "r.parquet", items, FAST_RULE)
        queued = srv.max_queued
    assert stats["saturated"] and stats["saturated"].startswith("over-saturated")
    # stopped before the end, and not before three checks 0.2 s apart could see a queue (0.6 s, 48
    # sent at 80 req/s); a loaded host slows the fake's slots and the stop comes sooner (97 sent once)
    assert 48 < stats["sent"] < 400 and len(t["status"]) == stats["sent"]  # every send recorded
    assert queued >= 40  # the fake's own count of requests waiting for a slot
    assert 0.6 < stats["saturated_after_s"] < 5.0


def test_a_request_ended_with_no_token_by_an_error_is_not_served_evidence():
    # what the dispatcher tells the saturation rule: an end with no token and an error status (the
    # client's timeout, a refused connection) is counted apart from those served; an ok end with no
    # token (an empty answer) was served
    class Kept(list):
        append = list.append

    d = Dispatcher(client=None, writer=Kept())
    for status, first in (("ok", 5), ("timeout", None), ("connection_error", None), ("ok", None), ("timeout", 7)):
        d._store(RequestRecord(request_id="r", status=status, first_token_ns=first))
    assert d.completed == 5 and d.failed_untokened == 2


@pytest.mark.slow
def test_a_server_that_never_answers_is_stopped_once_the_clients_timeouts_end_its_requests(tmp_path):
    # every request's first token 60 s away, the client's timeout 0.5 s, 40 req/s for 10 s: the
    # timeouts end the requests at the send rate; counted as served they kept pace and the point
    # ran its 10 s; not served, the point is stopped a few checks (0.2 s) after the first of them
    spec = LoadSpec.of(kind="constant", rate=40.0, requests_to_send=400, stop_when_saturated=True)
    items = (WorkItem(f"r{i}", "ttft_ms:60000 n=1", 1, 5) for i in range(400))
    writer = RecordWriter(tmp_path / "r.parquet")
    with FakeServer(process=True) as srv:
        async def go():
            cfg = ClientConfig(base_url=srv.url, model="m", timeouts=ClientTimeouts(ttft_s=0.5))
            async with StreamingClient(cfg) as c:
                d = Dispatcher(c, writer)
                d.saturation_rule = FAST_RULE
                return await d.run(items, spec)

        stats = asyncio.run(go())
    writer.close()
    t = pq.read_table(tmp_path / "r.parquet").to_pydict()
    assert stats["saturated"] and "ended with none" in stats["saturated"]
    assert 0.5 < stats["saturated_after_s"] < 3.0 and stats["sent"] < 200
    assert "ok" not in t["status"] and "timeout" in t["status"]
