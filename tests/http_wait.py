"""Waiting for a launched test server to answer HTTP (placement tests)."""

from __future__ import annotations

import time

from engines.http import http_get


def wait_http(url: str, proc, timeout_s: float = 30.0) -> bytes:
    """The body of the first 200 from ``url``; fails with the process's log tail if it ended or
    never answered."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            status, body = http_get(url, timeout=2)
            if status == 200:
                return body
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"{url} never answered (exit {proc.poll()}):\n{proc.tail()}")
        time.sleep(0.1)
