"""Plain-TCP connections whose reads carry the kernel's receive time.

Under load a Python client reads a socket some time after its bytes arrived: the event
loop was busy with other connections, the process was descheduled.  The read time then
holds that delay, and it lands in TTFT and ITL.  Linux stamps every received segment as it
enters the network stack (``SO_TIMESTAMPNS``); reading through ``recvmsg`` hands the stamp
over with the bytes, so a chunk's time is when it reached this host whatever the loop was
doing.  A read that drains several segments gets the stamp of the last one (the kernel
reports the newest): events coalesced in one read share it, as they share a read time.

The stamp is CLOCK_REALTIME; it is moved onto ``time.perf_counter_ns()``'s clock
(CLOCK_MONOTONIC) with an offset re-measured every second, so a clock step costs at most a
second of stamps, and a stamp later than the read itself is never used.

``StampedTransport`` offers what ``loadgen.client._Conn`` uses of an asyncio transport
(``write``, ``close``, ``is_closing``) and calls the protocol's ``data_received_at(data,
ns)``, ``eof_received()`` and ``connection_lost(exc)``.  TLS (``https``) runs in memory
over the same socket (``ssl.SSLObject``): the stamp is when the encrypted bytes arrived,
and the plaintext they decrypt to carries it.
"""

from __future__ import annotations

import socket
import ssl
import struct
import sys
import time

perf_ns = time.perf_counter_ns
SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35)  # 35 on Linux; not exposed by Python
_CMSG_SPACE = socket.CMSG_SPACE(16)  # struct timespec
_BUF = 256 * 1024
_unpack = struct.Struct("qq").unpack_from


def kernel_stamps_supported() -> bool:
    return sys.platform.startswith("linux")


class ReadClock:
    """What one client's connections share: CLOCK_REALTIME - CLOCK_MONOTONIC in ns
    (re-measured at most once a second) and the read buffer (one event loop, one reader
    at a time)."""

    __slots__ = ("value", "at", "buf", "view")

    def __init__(self) -> None:
        self.at = 0
        self.value = 0
        self.buf = bytearray(_BUF)
        self.view = memoryview(self.buf)
        self.refresh()

    def refresh(self) -> int:
        best = None
        for _ in range(8):  # the tightest bracket wins
            a = perf_ns()
            r = time.time_ns()
            b = perf_ns()
            if best is None or b - a < best[0]:
                best = (b - a, r - (a + b) // 2)
        self.value, self.at = best[1], perf_ns()
        return self.value

    def get(self, now: int) -> int:
        return self.value if now - self.at < 1_000_000_000 else self.refresh()


async def resolve(loop, host: str, port: int) -> list:
    """``getaddrinfo`` for TCP, once per client (it goes through a thread pool)."""
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    if not infos:
        raise OSError(f"could not resolve {host!r}")
    return infos


async def open_stamped(loop, infos: list, protocol_factory, clock: ReadClock,
                       ssl_context: ssl.SSLContext | None = None, server_hostname: str | None = None):
    """Connect (non-blocking, every resolved address of ``resolve`` in turn), run the TLS
    handshake when ``ssl_context`` is given, and wrap the socket."""
    err: OSError | None = None
    for family, type_, proto, _, addr in infos:
        sock = socket.socket(family, type_, proto)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await loop.sock_connect(sock, addr)
        except OSError as e:
            sock.close()
            err = e
            continue
        except BaseException:
            sock.close()
            raise
        tls = None
        if ssl_context is not None:
            try:
                tls = await _handshake(loop, sock, ssl_context, server_hostname)
            except BaseException:
                sock.close()
                raise
        proto_obj = protocol_factory()
        return StampedTransport(loop, sock, proto_obj, clock, tls), proto_obj
    raise err


class _TLS:
    __slots__ = ("obj", "incoming", "outgoing")

    def __init__(self, obj: ssl.SSLObject, incoming: ssl.MemoryBIO, outgoing: ssl.MemoryBIO):
        self.obj, self.incoming, self.outgoing = obj, incoming, outgoing


async def _handshake(loop, sock: socket.socket, ctx: ssl.SSLContext, server_hostname: str | None) -> _TLS:
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(incoming, outgoing, server_side=False, server_hostname=server_hostname)
    while True:
        try:
            obj.do_handshake()
            done = True
        except ssl.SSLWantReadError:
            done = False
        pending = outgoing.read()
        if pending:
            await loop.sock_sendall(sock, pending)
        if done:
            return _TLS(obj, incoming, outgoing)
        data = await loop.sock_recv(sock, 65536)
        if not data:
            raise ConnectionResetError("connection closed during the TLS handshake")
        incoming.write(data)


class StampedTransport:
    __slots__ = ("loop", "sock", "fd", "proto", "out", "closing", "clock", "stamps", "tls")

    def __init__(self, loop, sock: socket.socket, proto, clock: ReadClock, tls: _TLS | None = None):
        self.loop, self.sock, self.fd, self.proto, self.clock = loop, sock, sock.fileno(), proto, clock
        self.tls = tls
        self.out = b""
        self.closing = False
        try:
            sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
            self.stamps = True
        except OSError:
            self.stamps = False  # read times then
        proto.connection_made(self)
        loop.add_reader(self.fd, self._on_readable)

    def is_closing(self) -> bool:
        return self.closing

    def write(self, data: bytes) -> None:
        if self.closing:
            return
        if self.tls is not None:
            try:
                self.tls.obj.write(data)
            except ssl.SSLError as e:
                self._lost(e)
                return
            data = self.tls.outgoing.read()
        self._send(data)

    def _send(self, data: bytes) -> None:
        if not data:
            return
        if self.out:  # earlier bytes still queued: keep the order
            self.out += data
            return
        try:
            n = self.sock.send(data)
        except (BlockingIOError, InterruptedError):
            n = 0
        except OSError as e:
            self._lost(e)
            return
        if n < len(data):
            self.out = data[n:]
            self.loop.add_writer(self.fd, self._on_writable)

    def _on_writable(self) -> None:
        try:
            n = self.sock.send(self.out)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self._lost(e)
            return
        self.out = self.out[n:]
        if not self.out:
            self.loop.remove_writer(self.fd)

    def _on_readable(self) -> None:
        try:
            n, anc, _, _ = self.sock.recvmsg_into((self.clock.buf,), _CMSG_SPACE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as e:
            self._lost(e)
            return
        now = perf_ns()
        if n == 0:
            self.proto.eof_received()
            self._lost(None)
            return
        ns = now
        for level, kind, raw in anc:
            if kind == SO_TIMESTAMPNS and level == socket.SOL_SOCKET and len(raw) >= 16:
                sec, nsec = _unpack(raw)
                k = sec * 1_000_000_000 + nsec - self.clock.get(now)
                if k <= now:
                    ns = k
        data = bytes(self.clock.view[:n])
        # A full buffer means more may be queued; level-triggered polling calls again.
        if self.tls is None:
            self.proto.data_received_at(data, ns)
            return
        self.tls.incoming.write(data)
        plain = []
        try:
            while True:
                piece = self.tls.obj.read(65536)
                if not piece:
                    break
                plain.append(piece)
            eof = False
        except ssl.SSLWantReadError:
            eof = False
        except ssl.SSLZeroReturnError:  # the server's close_notify
            eof = True
        except ssl.SSLError as e:
            self._lost(e)
            return
        pending = self.tls.outgoing.read()  # e.g. a key update's answer
        if pending:
            self._send(pending)
        if plain:
            self.proto.data_received_at(b"".join(plain), ns)
        if eof:
            self.proto.eof_received()
            self._lost(None)

    def close(self) -> None:
        if self.closing:
            return
        self._lost(None)

    def _lost(self, exc) -> None:
        if self.closing:
            return
        self.closing = True
        self.loop.remove_reader(self.fd)
        if self.out:
            self.loop.remove_writer(self.fd)
        self.sock.close()
        self.loop.call_soon(self.proto.connection_lost, exc)
