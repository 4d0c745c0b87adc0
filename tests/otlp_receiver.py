"""An OTLP/HTTP metrics receiver for the tests (loopback only): ``POST /v1/metrics`` bodies
decoded with ``opentelemetry-proto``'s ``ExportMetricsServiceRequest``, as a Collector's OTLP
receiver decodes them, and kept with the request's headers.  ``delay_s`` holds each answer
back (a slow receiver); ``status`` answers with that HTTP status instead of 200."""

from __future__ import annotations

import gzip
import sys
import threading
import time
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)


class OtlpReceiver:
    def __init__(self, delay_s: float = 0.0, status: int = 200):
        self.requests: list[ExportMetricsServiceRequest] = []
        self.headers: list[dict] = []
        self.delay_s = delay_s
        self.status = status
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path != "/v1/metrics":
                    return self._answer(404, b"not found", "text/plain")
                enc = (self.headers.get("Content-Encoding") or "").lower()
                if enc == "gzip":
                    body = gzip.decompress(body)
                elif enc == "deflate":
                    body = zlib.decompress(body)
                if self.headers.get("Content-Type") != "application/x-protobuf":
                    return self._answer(415, b"OTLP/HTTP protobuf only", "text/plain")
                req = ExportMetricsServiceRequest()
                req.ParseFromString(body)
                if receiver.delay_s:
                    time.sleep(receiver.delay_s)
                if receiver.status != 200:
                    return self._answer(receiver.status, b"refused", "text/plain")
                receiver.requests.append(req)
                receiver.headers.append(dict(self.headers))
                self._answer(200, ExportMetricsServiceResponse().SerializeToString(), "application/x-protobuf")

            def _answer(self, status, payload, ctype):
                self.send_response(status)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.server = _Server(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self) -> OtlpReceiver:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def points(self) -> list[dict]:
        """Every data point received: name, unit, value, its attributes and its resource's."""
        out = []
        for req in self.requests:
            for rm in req.resource_metrics:
                resource = {a.key: _value(a.value) for a in rm.resource.attributes}
                for sm in rm.scope_metrics:
                    for m in sm.metrics:
                        kind = m.WhichOneof("data")
                        for dp in getattr(m, kind).data_points:
                            out.append({"name": m.name, "unit": m.unit, "kind": kind,
                                        "value": getattr(dp, dp.WhichOneof("value")),
                                        "attributes": {a.key: _value(a.value) for a in dp.attributes},
                                        "resource": resource, "scope": sm.scope.name})
        return out


class _Server(ThreadingHTTPServer):
    def handle_error(self, request, client_address):
        if not isinstance(sys.exc_info()[1], ConnectionError):  # a client that gave up on a slow answer
            super().handle_error(request, client_address)


def _value(any_value):
    return getattr(any_value, any_value.WhichOneof("value"))
