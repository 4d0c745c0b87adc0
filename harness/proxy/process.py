"""The proxy in a child process of its own, driven by the promotion (``protocols.promote.run``).

The child runs the proxy's event loop alone (its own interpreter and GIL: the promotion's
gate arithmetic cannot stall a caller's stream) and talks to the parent over a pipe:

- parent -> child: ``("mode", mode, share, mirror)``, ``("rotate", path)`` (the next rows go
  to another ``requests.parquet``), ``("stop",)``;
- child -> parent: ``("ready", port, placement)`` (or ``("error", why)``), ``("ack", what,
  perf_counter_ns when it took effect)``, every 100 ms ``("rows", [Row, ...], status)``
  (status: per side, requests in flight and the longest wait for a first event), and
  ``("stopped", failovers)``.

A reader thread in the parent drains the pipe as it fills, so the child never blocks on it.
"""

from __future__ import annotations

import asyncio
import queue
import socket
import subprocess
import sys
import threading
import time
from multiprocessing.connection import Connection

import orjson

FLUSH_S = 0.1


def _child(pcfg: dict, slo: dict, first_path: str, conn, tag: str) -> None:
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    from conf.schema import Proxy, typed
    from harness.proxy.build import build_server
    from harness.proxy.runtime import place, quiet_gc

    rows: list = []
    try:
        p = typed(pcfg, Proxy)  # the parent's plain mapping, typed once
        placed = place(p)  # before the recorder opens a file: a refusal leaves nothing behind
        server = build_server(p, slo, first_path, on_row=rows.append, tag=tag)
    except (ValueError, OSError) as e:
        conn.send(("error", str(e)))
        return

    async def main() -> None:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        port = await server.start()
        quiet_gc()
        conn.send(("ready", port, placed))

        def on_control() -> None:
            while conn.poll():
                try:
                    msg = conn.recv()
                except EOFError:  # the parent is gone
                    stop.set()
                    return
                if msg[0] == "mode":
                    conn.send(("ack", "mode", server.set_mode(msg[1], msg[2], msg[3])))
                elif msg[0] == "rotate":
                    server.recorder.rotate(msg[1])
                    conn.send(("ack", "rotate", time.perf_counter_ns()))
                elif msg[0] == "stop":
                    stop.set()

        loop.add_reader(conn.fileno(), on_control)
        while not stop.is_set():
            try:
                await asyncio.wait_for(stop.wait(), FLUSH_S)
            except TimeoutError:
                pass
            if rows:
                batch, rows[:] = list(rows), []
                conn.send(("rows", batch, server.status()))
            else:
                conn.send(("rows", [], server.status()))
        loop.remove_reader(conn.fileno())
        await server.stop()

    try:
        asyncio.run(main())
    finally:
        server.recorder.close()
        try:
            if rows:
                conn.send(("rows", list(rows), {}))
            conn.send(("stopped", server.failovers))
            conn.close()
        except OSError:
            pass  # the parent is gone


class ProxyProcess:
    """The child is ``python -m harness.proxy.process FD`` (a fresh interpreter that imports
    nothing of its parent's main module) with one end of a socket pair as its pipe."""

    def __init__(self, pcfg: dict, slo: dict, first_path: str, tag: str = "p"):
        self.args = (pcfg, slo, str(first_path), tag)
        self.proc: subprocess.Popen | None = None
        self.conn = None
        self.inbox: queue.Queue = queue.Queue()
        self.port: int | None = None
        self.placed: list[str] = []    # what harness.proxy.runtime.place applied in the child
        self.failovers: dict = {}
        self._acks: queue.Queue = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True, name="proxy-pipe")

    def start(self, timeout: float = 60.0) -> int:
        ours, theirs = socket.socketpair()
        self.conn = Connection(ours.detach())
        fd = theirs.fileno()
        self.proc = subprocess.Popen([sys.executable, "-m", "harness.proxy.process", str(fd)], pass_fds=(fd,),
                                     stdin=subprocess.PIPE)
        theirs.close()
        self.proc.stdin.write(orjson.dumps(self.args))
        self.proc.stdin.close()
        if not self.conn.poll(timeout):
            self.proc.kill()
            raise RuntimeError(f"the proxy process did not start within {timeout:g} s")
        try:
            msg = self.conn.recv()
        except EOFError:
            raise RuntimeError(f"the proxy process ended (exit {self.proc.wait(10)})") from None
        if msg[0] == "error":
            self.proc.wait(10)
            raise RuntimeError(f"the proxy process did not start: {msg[1]}")
        if msg[0] != "ready":
            raise RuntimeError(f"the proxy process said {msg!r}")
        self.port, self.placed = msg[1], msg[2]
        self._reader.start()
        return self.port

    def _read(self) -> None:
        while True:
            try:
                msg = self.conn.recv()
            except (EOFError, OSError):
                self.inbox.put(("gone",))
                return
            if msg[0] == "ack":
                self._acks.put(msg)
            elif msg[0] == "stopped":
                self.failovers = msg[1]
                self.inbox.put(msg)
                return
            else:
                self.inbox.put(msg)

    def set_mode(self, mode: str, share: float, mirror: float, timeout: float = 10.0) -> int:
        """Returns when the proxy applied it (perf_counter_ns)."""
        self.conn.send(("mode", mode, float(share), float(mirror)))
        return self._acks.get(timeout=timeout)[2]

    def rotate(self, path, timeout: float = 30.0) -> int:
        self.conn.send(("rotate", str(path)))
        return self._acks.get(timeout=timeout)[2]

    def drain(self) -> tuple[list, dict | None, bool]:
        """Rows received so far, the latest status, and whether the child is gone."""
        rows, status, gone = [], None, False
        while True:
            try:
                msg = self.inbox.get_nowait()
            except queue.Empty:
                return rows, status, gone
            if msg[0] == "rows":
                rows.extend(msg[1])
                status = msg[2] or status
            elif msg[0] in ("gone", "stopped"):
                gone = True

    def stop(self, timeout: float = 30.0) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            try:
                self.conn.send(("stop",))
            except OSError:
                pass
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        if self._reader.is_alive():
            self._reader.join(5)


def main() -> None:
    pcfg, slo, first_path, tag = orjson.loads(sys.stdin.buffer.read())
    _child(pcfg, slo, first_path, Connection(int(sys.argv[1])), tag)


if __name__ == "__main__":
    main()
