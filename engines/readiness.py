"""How an engine becomes ready for load: its health waited for, one warm-up request, the times
stamped (``healthy_ns``, ``ready_ns``); an engine that fails on the way is stopped, so no process
is left behind by a start that raised.  Shared by one engine's adapter, Dynamo's frontend and
workers, and a deployment behind its router."""

from __future__ import annotations

import time
from collections.abc import Callable

from engines.errors import EngineError
from engines.http import http_post, retry_until


def become_ready(engine, come_up: Callable[[], None], warm_up: bool) -> None:
    """``come_up()`` (returns once the engine answers its health checks, starting what it must),
    then one warm-up request unless ``warm_up`` is False (a cold start: the first request of
    the load pays for it).  Any failure stops the engine (``engine.stop()``) and is raised."""
    try:
        come_up()
        engine.healthy_ns = time.perf_counter_ns()
        if warm_up:
            warm_up_request(engine)
    except BaseException:
        engine.stop()
        raise
    engine.ready_ns = time.perf_counter_ns()


def wait_healthy(engine, timeout_s: float) -> None:
    """Until ``engine.health_ok()``; a process of its own that exits first, or no answer within
    ``timeout_s``, raises with the command and the last lines of its log."""
    def healthy() -> bool:
        if engine.process is not None and engine.process.poll() is not None:
            raise EngineError(
                f"engine={engine.name} exited with code {engine.process.poll()} before it was healthy.\n"
                f"command: {' '.join(engine.process.argv)}\nlast lines of {engine.process.log_path}:\n"
                f"{engine.process.tail()}")
        return engine.health_ok()

    def never() -> EngineError:
        tail = f"\nlast lines of {engine.process.log_path}:\n{engine.process.tail()}" if engine.process else ""
        where = "did not become healthy" if engine.process else "is unreachable"
        return EngineError(f"engine={engine.name} at {engine.base_url} {where} within {timeout_s:g} s "
                           f"(GET {engine.health_path}){tail}")

    # the start-up is timed by the first healthy answer: polled to 2 % of the wait (the cost window's start)
    retry_until(healthy, timeout_s, 0.5, on_timeout=never, resolution=0.02)


def warm_up_request(engine, base_url: str | None = None) -> None:
    """One short request (to ``base_url``, default the engine's own; a deployment's router)
    before any load: engines that load or compile lazily on the first request
    (transformers serve does) would otherwise charge it to the first load point's TTFT.
    The time stays inside the cost window."""
    d = engine.dialect()
    body = {"model": engine.served_model, "max_tokens": 4, "stream": False}
    if d["api"] == "chat":
        body["messages"] = [{"role": "user", "content": "warm up"}]
    else:
        body["prompt"] = "warm up"
    path = "/v1/chat/completions" if d["api"] == "chat" else "/v1/completions"
    try:
        status, text = http_post((base_url or engine.base_url) + path, body, timeout=engine.cfg.startup_timeout_s,
                                 headers=engine.auth())
    except OSError as e:
        raise EngineError(f"engine={engine.name}: the warm-up request to {path} failed: {e}") from None
    if status != 200:
        raise EngineError(f"engine={engine.name}: the warm-up request to {path} got HTTP {status}: "
                          f"{text[:500].decode('utf-8', 'replace')}")
