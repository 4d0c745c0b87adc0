"""A scripted HTTP/1.1 streaming server for the load generator's tests (loopback only).

Each request is answered by ``script(body, n)`` -> list of steps: ``bytes`` (written at
once), a float (sleep that many seconds), ``CLOSE`` (drop the connection) or ``RESET``
(drop it with a TCP reset).  GET requests (an engine's health and model probes) get a
small JSON answer without reaching the script.  The server runs on its own thread and
event loop, so blocking code (worker processes) can use it, and it records the monotonic
time just before every write (ground truth).  With ``process=True`` it runs in a forked
child instead, so that its write times are not disturbed by the client under test sharing
its interpreter; ``requests``, ``writes`` and ``connections`` are then fetched from it.
``open_connections`` counts the connections open now; with ``idle_close_s`` the server
closes a keep-alive connection idle that long between requests, as a real server does.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import socket
import struct
import threading
import time

import orjson

CLOSE = object()
RESET = object()
MODELS = orjson.dumps({"object": "list", "data": [{"id": "fake", "object": "model", "max_model_len": 4096}]})
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
    def __init__(self, script, ssl_context=None, process: bool = False, idle_close_s: float | None = None):
        self.script = script
        self.idle_close_s = idle_close_s
        self._open = 0
        self.ssl_context = ssl_context  # serve https
        self.process = process
        self._requests: list[dict] = []
        self._connections = 0
        self._writes: list[tuple[int, int]] = []  # (request number, perf_counter_ns before the write)
        self._proc = None
        self._pipe = None
        if not process:
            self.loop = asyncio.new_event_loop()
            self._ready = threading.Event()
            self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> FakeServer:
        if self.process:
            ctx = multiprocessing.get_context("fork")
            self._pipe, child = ctx.Pipe()
            self._proc = ctx.Process(target=self._child, args=(child,), daemon=True)
            self._proc.start()
            if not self._pipe.poll(10):
                raise RuntimeError("the fake server's process did not start")
            self.port = self._pipe.recv()
            return self
        self._thread.start()
        self._ready.wait(10)
        return self

    def __exit__(self, *exc) -> None:
        if self._proc is not None:
            self._sync("stop")
            self._proc.join(10)
            if self._proc.is_alive():
                self._proc.kill()
            self._pipe.close()
            return
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)

    # What the server saw; in process mode, fetched from the child at each access.
    @property
    def requests(self) -> list[dict]:
        self._sync()
        return self._requests

    @property
    def writes(self) -> list[tuple[int, int]]:
        self._sync()
        return self._writes

    @property
    def connections(self) -> int:
        self._sync()
        return self._connections

    @property
    def open_connections(self) -> int:
        self._sync()
        return self._open

    def _sync(self, cmd: str = "state") -> None:
        if self._proc is None or not self._proc.is_alive():
            return
        self._pipe.send(cmd)
        if self._pipe.poll(10):
            self._requests, self._writes, self._connections, self._open = self._pipe.recv()

    def _child(self, conn) -> None:
        self.loop = asyncio.new_event_loop()
        self._ready = threading.Event()

        def command() -> None:
            cmd = conn.recv()
            conn.send((self._requests, self._writes, self._connections, self._open))
            if cmd == "stop":
                self.loop.stop()

        self.loop.add_reader(conn.fileno(), command)
        self._ready_hook = lambda: conn.send(self.port)
        self._run()

    @property
    def url(self) -> str:
        return f"{'https' if self.ssl_context else 'http'}://127.0.0.1:{self.port}"

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        server = self.loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0,
                                                                   ssl=self.ssl_context))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        hook = getattr(self, "_ready_hook", None)
        if hook is not None:
            hook()
        self.loop.run_forever()
        server.close()
        self.loop.set_exception_handler(lambda loop, ctx: None)  # handlers cancelled mid-sleep are expected
        tasks = asyncio.all_tasks(self.loop)
        for t in tasks:
            t.cancel()
        self.loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        self.loop.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._connections += 1
        self._open += 1
        try:
            while True:
                try:
                    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), self.idle_close_s)
                except TimeoutError:  # idle between requests: a real server's keep-alive timeout
                    writer.close()
                    return
                n = 0
                for line in head.decode().split("\r\n"):
                    if line.lower().startswith("content-length:"):
                        n = int(line.split(":", 1)[1])
                if head.startswith(b"GET "):
                    body = b"ok" if b" /health" in head[:20] else MODELS
                    writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                                 % (len(body), body))
                    continue
                body = orjson.loads(await reader.readexactly(n)) if n else {}
                k = len(self._requests)
                self._requests.append(body)
                for step in self.script(body, k):
                    if step is CLOSE:
                        writer.close()
                        return
                    if step is RESET:  # SO_LINGER 0: close() sends RST instead of FIN
                        writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                                                   struct.pack("ii", 1, 0))
                        writer.transport.abort()
                        return
                    if isinstance(step, (int, float)):
                        await asyncio.sleep(step)
                        continue
                    self._writes.append((k, time.perf_counter_ns()))
                    writer.write(step)
                    await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()
        finally:
            self._open -= 1
