"""A fake engine HTTP server for adapter tests: canned answers per (method, path), and
streams replayed from recorded files event by event, with the send time of each event
recorded as ground truth (``sent_ns``, ``time.perf_counter_ns()`` on this host)."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeEngine:
    def __init__(self):
        # (method, path) -> list of (status, body bytes, content type); the last one repeats
        self.routes: dict[tuple[str, str], list] = {}
        self.streams: dict[str, bytes] = {}  # path -> recorded SSE bytes
        self.gap_s = 0.02
        self.calls: list[tuple[str, str, bytes]] = []
        self.headers: list[dict] = []  # each call's request headers, in the order of calls
        self.sent_ns: list[int] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def _answer(self, method):
                n = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(n) if n else b""
                fake.calls.append((method, self.path, body))
                fake.headers.append(dict(self.headers))
                if method == "POST" and self.path in fake.streams:
                    return self._stream(fake.streams[self.path])
                answers = fake.routes.get((method, self.path))
                if not answers:
                    self.send_response(404)
                    self.send_header("Content-Length", "9")
                    self.end_headers()
                    self.wfile.write(b"not found")
                    return
                status, payload, ctype = answers.pop(0) if len(answers) > 1 else answers[0]
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def _stream(self, data: bytes):
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Connection", "close")
                self.end_headers()
                for event in data.split(b"\n\n"):
                    if not event.strip():
                        continue
                    time.sleep(fake.gap_s)
                    fake.sent_ns.append(time.perf_counter_ns())
                    self.wfile.write(event + b"\n\n")
                    self.wfile.flush()
                self.close_connection = True

            def do_GET(self):
                self._answer("GET")

            def do_POST(self):
                self._answer("POST")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def route(self, method: str, path: str, *answers):
        """Answers in order: each ``(status, body)``; str bodies are sent as text, dicts as JSON."""
        import json

        out = []
        for status, body in answers:
            if isinstance(body, (dict, list)):
                out.append((status, json.dumps(body).encode(), "application/json"))
            else:
                out.append((status, body.encode() if isinstance(body, str) else body, "text/plain"))
        self.routes[(method, path)] = out

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()
