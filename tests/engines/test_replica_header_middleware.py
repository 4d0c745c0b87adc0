"""The engine-side middleware that names the replica in each response head."""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path

import pytest

PATH = Path(__file__).resolve().parents[2] / "engines" / "replica_header" / "tokenfactory_replica_header.py"


def _module():
    spec = importlib.util.spec_from_file_location("tokenfactory_replica_header", PATH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


async def _app(scope, receive, send):  # a streamed response: head, two body pieces
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
    await send({"type": "http.response.body", "body": b"data: 1\n\n", "more_body": True})
    await send({"type": "http.response.body", "body": b"data: [DONE]\n\n"})


def _run(mw, scope_type="http") -> list[dict]:
    sent = []

    async def send(m):
        sent.append(m)

    async def receive():
        return {"type": "http.request"}

    asyncio.run(mw({"type": scope_type}, receive, send))
    return sent


def test_head_names_the_replica_and_body_passes(monkeypatch):
    monkeypatch.setenv("TOKENFACTORY_REPLICA", "r1")
    sent = _run(_module().ReplicaHeader(_app))
    assert sent[0]["headers"] == [(b"content-type", b"text/event-stream"), (b"x-tokenfactory-replica", b"r1")]
    assert [m.get("body") for m in sent[1:]] == [b"data: 1\n\n", b"data: [DONE]\n\n"]


def test_other_scopes_untouched_and_unset_name_is_an_error(monkeypatch):
    mod = _module()
    assert "x-tokenfactory-replica" not in str(_run(mod.ReplicaHeader(_app, "r0"), "lifespan_like_http"))
    monkeypatch.delenv("TOKENFACTORY_REPLICA", raising=False)
    with pytest.raises(RuntimeError, match="TOKENFACTORY_REPLICA"):
        mod.ReplicaHeader(_app)


def test_streaming_client_reads_the_replica_through_starlette_and_uvicorn(monkeypatch):
    # vLLM adds a middleware class with app.add_middleware(cls), as here; served by uvicorn as vLLM is
    starlette = pytest.importorskip("starlette.applications")
    uvicorn = pytest.importorskip("uvicorn")
    import socket
    import threading
    import time

    from starlette.responses import StreamingResponse
    from starlette.routing import Route

    from loadgen.client import ClientConfig, StreamingClient
    from loadgen.records import RequestRecord

    async def completions(request):
        async def events():
            yield b'data: {"id": "x", "choices": [{"index": 0, "text": "hi", "finish_reason": "length"}]}\n\n'
            yield b"data: [DONE]\n\n"
        return StreamingResponse(events(), media_type="text/event-stream")

    monkeypatch.setenv("TOKENFACTORY_REPLICA", "r1")
    app = starlette.Starlette(routes=[Route("/v1/completions", completions, methods=["POST"])])
    app.add_middleware(_module().ReplicaHeader)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    t = threading.Thread(target=server.run, daemon=True)
    t.start()
    try:
        deadline = time.monotonic() + 10
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.02)

        async def go():
            async with StreamingClient(ClientConfig(base_url=f"http://127.0.0.1:{port}", model="m")) as c:
                return await c.send(RequestRecord(request_id="a", scheduled_ns=0), c.body("hi", 1))

        rec = asyncio.run(go())
    finally:
        server.should_exit = True
        t.join(10)
    assert rec.status == "ok", rec.error
    assert rec.replica == "r1"
