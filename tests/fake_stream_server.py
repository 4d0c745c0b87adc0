"""A scripted HTTP/1.1 streaming server for the load generator's tests (loopback only).

Each request is answered by ``script(body, n)`` -> list of steps: ``bytes`` (written at
once), a float (sleep that many seconds) or ``CLOSE`` (drop the connection).  The server
runs on its own thread and event loop, so blocking code (worker processes) can use it,
and it records the monotonic time just before every write (ground truth).
"""

from __future__ import annotations

import asyncio
import threading
import time

import orjson

CLOSE = object()
HEAD_CHUNKED = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Transfer-Encoding: chunked\r\nConnection: keep-alive\r\n\r\n")


def chunk(payload: bytes) -> bytes:
    """One HTTP chunk."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def event(obj) -> bytes:
    return b"data: " + (obj if isinstance(obj, bytes) else orjson.dumps(obj)) + b"\n\n"


END = b"0\r\n\r\n"


def completion(rid: str, text: str | None, finish=None, usage=None) -> dict:
    d = {"id": rid, "object": "text_completion", "choices": [] if text is None else
         [{"index": 0, "text": text, "finish_reason": finish}]}
    if usage is not None:
        d["usage"] = usage
    return d


class FakeServer:
    def __init__(self, script, ssl_context=None):
        self.script = script
        self.ssl_context = ssl_context  # serve https
        self.requests: list[dict] = []
        self.connections = 0
        self.writes: list[tuple[int, int]] = []  # (request number, perf_counter_ns before the write)
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> FakeServer:
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)

    @property
    def url(self) -> str:
        return f"{'https' if self.ssl_context else 'http'}://127.0.0.1:{self.port}"

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0,
                                                                   ssl=self.ssl_context))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self.loop.run_forever()
        server.close()
        tasks = asyncio.all_tasks(self.loop)
        for t in tasks:
            t.cancel()
        self.loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        self.loop.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                n = 0
                for line in head.decode().split("\r\n"):
                    if line.lower().startswith("content-length:"):
                        n = int(line.split(":", 1)[1])
                body = orjson.loads(await reader.readexactly(n)) if n else {}
                k = len(self.requests)
                self.requests.append(body)
                for step in self.script(body, k):
                    if step is CLOSE:
                        writer.close()
                        return
                    if isinstance(step, (int, float)):
                        await asyncio.sleep(step)
                        continue
                    self.writes.append((k, time.perf_counter_ns()))
                    writer.write(step)
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()
