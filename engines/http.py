"""Small HTTP helpers every adapter shares: GET/POST with the API key, and one retry loop.

The ``Authorization`` header is built here only (``auth_headers``), for the adapters' own
calls (health, ``/v1/models``, ``/metrics``, cache resets) and for the load generator's
requests alike.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable


def auth_headers(api_key: str | None) -> dict[str, str]:
    """The bearer-token header an OpenAI-compatible server expects; empty without a key."""
    return {"Authorization": f"Bearer {api_key}"} if api_key else {}


def _check_scheme(url: str) -> str:
    # urllib would also open file:// and ftp:// URLs; an engine is only ever http(s).
    if not url.startswith(("http://", "https://")):
        raise ValueError(f"not an http(s) URL: {url!r}")
    return url


def http_get(url: str, timeout: float = 5.0, headers: dict | None = None) -> tuple[int, bytes]:
    req = urllib.request.Request(_check_scheme(url), headers=headers or {})  # noqa: S310 - scheme checked
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:  # noqa: S310 - scheme checked
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def http_post(url: str, body: dict | None = None, timeout: float = 30.0,
              headers: dict | None = None) -> tuple[int, bytes]:
    data = json.dumps(body or {}).encode()
    req = urllib.request.Request(_check_scheme(url), data=data, method="POST",  # noqa: S310 - scheme checked
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:  # noqa: S310 - scheme checked
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def http_request(method: str, url: str, timeout: float = 30.0, headers: dict | None = None) -> tuple[int, bytes]:
    """A request without a body (DELETE, say)."""
    req = urllib.request.Request(_check_scheme(url), method=method, headers=headers or {})  # noqa: S310 - checked
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:  # noqa: S310 - scheme checked
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


MIN_POLL_S = 0.02


def retry_until(attempt: Callable[[], bool], timeout_s: float, interval_s: float = 0.5,
                on_timeout: Callable[[], Exception] | None = None, resolution: float | None = None) -> bool:
    """Call ``attempt`` until it returns True or ``timeout_s`` has passed (then raise
    ``on_timeout()`` if given, else return False).  ``attempt`` raises to stop at once.
    ``resolution``: sleep that share of the time waited so far (at least ``MIN_POLL_S``, at most
    ``interval_s``), so a wait timed by the first success is known to that share: an engine's
    start-up on a fixed 0.5 s poll read 0.55, 1.05 or 1.62 s and nothing between
    (docs/measured/verdicts.md), a step a comparison of identical engines' costs took for a
    difference."""
    start = time.monotonic()
    deadline = start + timeout_s
    while True:
        if attempt():
            return True
        now = time.monotonic()
        if now >= deadline:
            if on_timeout is not None:
                raise on_timeout()
            return False
        pause = interval_s if resolution is None else min(interval_s, max(MIN_POLL_S, resolution * (now - start)))
        time.sleep(pause)
