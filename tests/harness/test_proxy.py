"""The promotion proxy against scripted fake endpoints: shadow never changes what the caller
gets, canary shares are sticky, a failing candidate never fails the caller."""

from __future__ import annotations

import asyncio
import threading
import time

import aiohttp
import numpy as np
import orjson
import pyarrow.parquet as pq
import pytest

from conf.schema import ClientTimeouts
from harness.proxy.routing import Router, bucket, sticky_key
from harness.proxy.server import ProxyServer, Recorder, SideConfig
from metrics.slo import SLO
from tests.fake_server import CLOSE, END, HEAD_CHUNKED, FakeServer, chunk, completion, event

WORDS = ["alpha ", "beta ", "gamma ", "delta "]


def stream(rid: str, words=WORDS, gap: float = 0.0, close_after: int | None = None, first: float = 0.0):
    steps = [HEAD_CHUNKED, first] if first else [HEAD_CHUNKED]
    for i, w in enumerate(words):
        if close_after is not None and i == close_after:
            return steps + [CLOSE]
        steps.append(chunk(event(completion(rid, w))))
        if gap:
            steps.append(gap)
    steps.append(chunk(event(completion(rid, None, usage={"prompt_tokens": 3, "completion_tokens": len(words)}))
                       + b"data: [DONE]\n\n"))
    return steps + [END]


def ok_script(tag: str, gap: float = 0.0, first: float = 0.0):
    return lambda body, n: stream(f"{tag}{n}", gap=gap, first=first)


class ProxyThread:
    """The proxy on its own thread and loop, like the fake servers (the test is the caller)."""

    def __init__(self, inc_url: str, cand_url: str | None, mode: str = "shadow", share: float = 0.0,
                 mirror: float = 0.0, path=None, sticky: str = "session"):
        self.rows = []
        t = ClientTimeouts(connect_s=2, ttft_s=5, idle_s=5, total_s=10)
        self.server = ProxyServer(SideConfig("incumbent", inc_url, timeouts=t),
                                  SideConfig("candidate", cand_url, timeouts=t) if cand_url else None,
                                  Router(mode, share, mirror, has_candidate=cand_url is not None),
                                  Recorder(path, SLO(), self.rows.append), prewarm=2)
        self.server.sticky = sticky
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        asyncio.set_event_loop(self.loop)
        self.port = self.loop.run_until_complete(self.server.start())
        self._ready.set()
        self.loop.run_forever()
        self.loop.run_until_complete(self.server.stop())
        self.loop.close()

    def call(self, fn, *a):
        return asyncio.run_coroutine_threadsafe(_call(fn, *a), self.loop).result(10)

    def __enter__(self):
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *exc):
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.server.recorder.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_rows(self, n: int, timeout: float = 10.0) -> list:
        end = time.monotonic() + timeout
        while len(self.rows) < n and time.monotonic() < end:
            time.sleep(0.01)
        return list(self.rows)


async def _call(fn, *a):
    return fn(*a)


async def _stream_one(session, url, headers=None, prompt="hi", temperature=0.0):
    body = {"model": "m", "prompt": prompt, "max_tokens": 4, "stream": True, "temperature": temperature}
    t0 = time.perf_counter()
    async with session.post(url + "/v1/completions", json=body, headers=headers or {}) as r:
        raw = await r.read()
        status = r.status
    text, done = "", False
    for ev in raw.split(b"\n\n"):
        if ev.startswith(b"data: "):
            if ev[6:] == b"[DONE]":
                done = True
                continue
            obj = orjson.loads(ev[6:])
            for c in obj.get("choices") or []:
                text += c.get("text") or ""
    return status, text, done, time.perf_counter() - t0


def call_many(url, n, headers_fn=lambda i: None, concurrent=True):
    async def go():
        async with aiohttp.ClientSession() as s:
            if concurrent:
                return await asyncio.gather(*(_stream_one(s, url, headers_fn(i)) for i in range(n)))
            return [await _stream_one(s, url, headers_fn(i)) for i in range(n)]
    return asyncio.run(go())


# ------------------------------------------------------------------------------------ routing
def test_canary_share_and_stickiness():
    r = Router("canary", 0.05, salt="s")
    keys = [f"user{i}" for i in range(20000)]
    on = np.array([r.route(k).primary == "candidate" for k in keys])
    assert abs(on.mean() - 0.05) < 0.006  # binomial sd 0.0015: well inside 4 sd
    # sticky: the same key, the same side, every time
    assert all(r.route(k).primary == ("candidate" if o else "incumbent") for k, o in zip(keys[:500], on[:500]))
    # raising the share keeps every caller already on the candidate there
    r.set("canary", 0.25)
    on25 = np.array([r.route(k).primary == "candidate" for k in keys])
    assert on25[on].all() and abs(on25.mean() - 0.25) < 0.015
    # another salt, another split
    assert bucket("user1", "s") != bucket("user1", "t")


def test_sticky_keys_and_modes():
    h = {"X-Session-Id": "abc", "Authorization": "Bearer k1"}
    assert sticky_key("session", h, {}) == "s:abc"
    assert sticky_key("session", {"Authorization": "Bearer k1"}, {"user": "u9"}) == "u:u9"
    assert sticky_key("session", {"Authorization": "Bearer k1"}, {}) == "k:Bearer k1"
    assert sticky_key("api_key", h, {"user": "u9"}) == "k:Bearer k1"
    assert sticky_key("none", h, {}) is None
    assert Router("shadow").route("x").primary == "incumbent" and Router("shadow").route("x").copy
    assert not Router("rollback").route("x").copy
    with pytest.raises(ValueError, match="proxy.candidate"):
        Router("canary", 0.5, has_candidate=False)
    r = Router("canary", 1.0, mirror=1.0)
    assert r.route("a").primary == "candidate" and r.route("a").copy


# ------------------------------------------------------------------------------------ shadow
def test_shadow_caller_gets_incumbent_and_a_slow_or_failing_candidate_changes_nothing(tmp_path):
    cand_script = lambda body, n: [HEAD_CHUNKED, 1.0, CLOSE] if n % 2 else stream(f"c{n}", gap=0.3)  # noqa: E731
    with FakeServer(ok_script("i")) as inc, FakeServer(cand_script) as cand, \
            ProxyThread(inc.url, cand.url, "shadow", path=tmp_path / "requests.parquet") as px:
        res = call_many(px.url, 6)
        assert all(s == 200 and t == "".join(WORDS) and d for s, t, d, _ in res)
        assert max(el for *_, el in res) < 0.8  # the candidate's 0.9 s of gaps or 1 s stall never reached the caller
        rows = px.wait_rows(12)
    by = {(r.side, r.shadow) for r in rows}
    assert by == {("incumbent", False), ("candidate", True)}
    inc_rows = [r for r in rows if r.side == "incumbent"]
    cand_rows = [r for r in rows if r.side == "candidate"]
    assert len(inc_rows) == 6 and all(r.status == "ok" for r in inc_rows)
    assert sorted(r.status for r in cand_rows).count("ok") == 3  # half the copies failed, none of the callers
    assert {r.request_id for r in inc_rows} == {r.request_id for r in cand_rows}  # paired by request id
    t = pq.read_table(tmp_path / "requests.parquet").to_pydict()
    assert sorted(set(t["side"])) == ["candidate", "incumbent"] and sum(t["shadow"]) == 6
    ok = [i for i, s in enumerate(t["status"]) if s == "ok"]
    assert all(t["output_tokens"][i] == 4 and len(t["chunk_ns"][i]) == 4 for i in ok)
    assert all(t["sent_ns"][i] >= t["scheduled_ns"][i] for i in ok)
    # greedy outputs of both sides travel with the rows for the agreement
    assert all(r.compare and r.text == "".join(WORDS) for r in rows if r.status == "ok")


# ------------------------------------------------------------------------------------ canary
def test_canary_sessions_stay_on_their_side():
    with FakeServer(ok_script("i")) as inc, FakeServer(ok_script("c")) as cand, \
            ProxyThread(inc.url, cand.url, "canary", share=0.5) as px:
        res = call_many(px.url, 60, headers_fn=lambda i: {"X-Session-Id": f"s{i % 12}"})
        assert all(s == 200 and t == "".join(WORDS) for s, t, *_ in res)
        rows = px.wait_rows(60)
    sides: dict[str, set] = {}
    for r in rows:
        assert not r.shadow
        sides.setdefault(r.request_id, set()).add(r.side)
    assert len(rows) == 60
    r = Router("canary", 0.5)
    expect = {f"s{i}": r.route(f"s:s{i}").primary for i in range(12)}
    n_cand = sum(v == "candidate" for v in expect.values())
    assert 0 < n_cand < 12 and sum(x.side == "candidate" for x in rows) == 5 * n_cand


# ------------------------------------------------------------------------------------ failures
@pytest.mark.parametrize("failure", ["refused", "http500", "close_before_first", "close_mid_stream"])
def test_candidate_failure_never_fails_the_caller(failure):
    scripts = {
        "http500": lambda body, n: [b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 4\r\n\r\noops"],
        "close_before_first": lambda body, n: [HEAD_CHUNKED, 0.05, CLOSE],
        "close_mid_stream": lambda body, n: stream(f"c{n}", close_after=2, gap=0.02),
    }
    with FakeServer(ok_script("i", gap=0.01)) as inc, FakeServer(scripts.get(failure, ok_script("c"))) as cand:
        cand_url = cand.url
        if failure == "refused":
            cand_url = "http://127.0.0.1:9"  # nothing listens there
        with ProxyThread(inc.url, cand_url, "canary", share=1.0) as px:
            res = call_many(px.url, 4, concurrent=False)
            rows = px.wait_rows(8)
    for status, text, done, _ in res:
        assert status == 200 and text == "".join(WORDS) and done  # whole, in order, nothing twice
    cand_rows = [r for r in rows if r.side == "candidate"]
    inc_rows = [r for r in rows if r.side == "incumbent"]
    assert len(cand_rows) == 4 and all(r.status != "ok" for r in cand_rows)  # recorded as the candidate's errors
    assert len(inc_rows) == 4 and all(r.status == "ok" and not r.shadow for r in inc_rows)
    key = "mid_stream" if failure == "close_mid_stream" else "before_first_event"
    assert px.server.failovers[key] == 4


def test_rollback_cancels_candidate_requests_in_flight_and_callers_finish():
    hung = lambda body, n: [HEAD_CHUNKED, 30.0, END]  # noqa: E731 - a candidate that never answers
    with FakeServer(ok_script("i")) as inc, FakeServer(hung) as cand, \
            ProxyThread(inc.url, cand.url, "canary", share=1.0) as px:
        async def go():
            async with aiohttp.ClientSession() as s:
                tasks = [asyncio.create_task(_stream_one(s, px.url)) for _ in range(3)]
                await asyncio.sleep(0.5)
                assert not any(t.done() for t in tasks)
                at = px.call(px.server.set_mode, "rollback")
                return at, await asyncio.gather(*tasks)
        t0 = time.perf_counter()
        at, res = asyncio.run(go())
        assert time.perf_counter() - t0 < 3
        assert all(s == 200 and t == "".join(WORDS) for s, t, *_ in res)
        assert px.server.failovers["before_first_event"] == 3
        res2 = call_many(px.url, 3)  # after the rollback: the incumbent only
        assert all(s == 200 for s, *_ in res2)
        rows = px.wait_rows(9)
    assert sum(r.side == "candidate" for r in rows) == 3 and isinstance(at, int)


def test_incumbent_failure_reaches_the_caller_as_it_is():
    bad = lambda body, n: [b"HTTP/1.1 429 Too Many Requests\r\nContent-Length: 4\r\n\r\nbusy"]  # noqa: E731
    with FakeServer(bad) as inc, ProxyThread(inc.url, None, "rollback") as px:
        (status, text, done, _), = call_many(px.url, 1)
    assert status == 429 and text == ""


def test_non_streaming_and_other_routes_pass_through():
    def script(body, n):
        if body.get("stream"):
            return stream(f"i{n}")
        js = orjson.dumps({"id": "x", "choices": [{"text": "whole", "finish_reason": "length"}],
                           "usage": {"prompt_tokens": 2, "completion_tokens": 1}})
        return [b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(js), js)]

    with FakeServer(script) as inc, ProxyThread(inc.url, None, "rollback") as px:
        async def go():
            async with aiohttp.ClientSession() as s:
                async with s.post(px.url + "/v1/completions", json={"model": "m", "prompt": "p"}) as r:
                    return r.status, await r.json()
        status, obj = asyncio.run(go())
        rows = px.wait_rows(1)
    assert status == 200 and obj["choices"][0]["text"] == "whole"
    assert rows[0].status == "ok" and rows[0].output_tokens == 1 and rows[0].side == "incumbent"


def test_a_caller_that_leaves_mid_stream_cancels_its_upstream_request_and_nothing_else():
    with FakeServer(ok_script("i", gap=0.2)) as inc, ProxyThread(inc.url, None, "rollback") as px:
        async def leave():
            async with aiohttp.ClientSession() as s:
                body = {"model": "m", "prompt": "p", "max_tokens": 4, "stream": True}
                async with s.post(px.url + "/v1/completions", json=body) as r:
                    await r.content.readuntil(b"\n\n")  # the first event, then away
                    r.close()
        asyncio.run(leave())
        rows = px.wait_rows(1)
        (status, text, done, _), = call_many(px.url, 1)  # the proxy goes on serving
        rows = px.wait_rows(2)
    assert rows[0].status == "cancelled" and status == 200 and text == "".join(WORDS) and rows[1].status == "ok"


def test_a_caller_that_leaves_before_its_first_event_is_recorded_and_not_logged_as_an_error(caplog):
    # the caller is gone when the first event arrives: writing the headers meets a closed transport
    with FakeServer(ok_script("i", first=0.5, gap=0.2)) as inc, ProxyThread(inc.url, None, "rollback") as px:
        async def leave():
            async with aiohttp.ClientSession() as s:
                body = {"model": "m", "prompt": "p", "max_tokens": 4, "stream": True}
                with pytest.raises(TimeoutError):
                    await asyncio.wait_for(s.post(px.url + "/v1/completions", json=body), 0.1)
        with caplog.at_level("DEBUG", logger="aiohttp.server"):
            asyncio.run(leave())
            rows = px.wait_rows(1, timeout=5)
            (status, text, _, _), = call_many(px.url, 1)  # the proxy goes on serving
            rows = px.wait_rows(2)
    assert [r.status for r in rows] == ["cancelled", "ok"] and status == 200 and text == "".join(WORDS)
    assert not [r for r in caplog.records if r.levelname == "ERROR"], [r.getMessage() for r in caplog.records]
