"""Scenarios beside steady state (``scenario.*``, ``engine.cache_state=primed``).

- failure recovery (``scenario.kill_at_s=T``): ``KillInjector`` sends ``scenario.kill_signal``
  to the engine's process group T seconds after the point's load started; the watchdog
  notices, the harness restarts the engine on the same port (``harness.engine_faults``) and
  the load goes on.  The point is not failed: its summary holds the recovery figures
  (``metrics.recovery``).
- cold start (``scenario.cold_start=true``): the session's engine gets no warm-up request and
  no idle baseline, and its first point's summary holds ``metrics.cold_start``'s figures.
- cache miss: ``engine.cache_state=cold`` (emptied before each point) against ``primed``
  (emptied, then one request per shared prefix of ``workload.prefix_groups``, so every
  prefix is cached and nothing else); the engine's counters give each point's
  ``engine_prefix_cache_hit_rate`` (``metrics.engine_counters``).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time

from engines.http import http_post

perf_ns = time.perf_counter_ns


class KillInjector:
    """Signals the engine's process group ``at_s`` after the dispatcher's t0 (once armed)."""

    def __init__(self, engine, at_s: float, sig: str = "SIGKILL", who: str = "engine"):
        self.engine = engine
        self.who = who  # what the message calls it: the engine, or one replica of a deployment
        self.at_s = float(at_s)
        self.sig = getattr(signal, sig)
        self.sig_name = sig
        self.kill_ns: int | None = None
        self.load_start_ns: int | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def arm(self, dispatcher) -> None:
        self._thread = threading.Thread(target=self._run, args=(dispatcher,), name="tokenfactory-kill",
                                        daemon=True)
        self._thread.start()

    def _run(self, dispatcher) -> None:
        while dispatcher.t0 is None:  # the load's origin is fixed once requests are ready to go
            if self._stop.wait(0.005):
                return
        self.load_start_ns = dispatcher.t0
        target = dispatcher.t0 + int(self.at_s * 1e9)
        while (left := target - perf_ns()) > 0:
            if self._stop.wait(min(left / 1e9, 0.05)):
                return
        proc = self.engine.process
        if proc is None or proc.poll() is not None:
            return
        try:
            send = getattr(proc, "send_signal", None)  # a replica on another node signals there
            if send is not None:
                send(self.sig)
            else:
                os.killpg(proc.pid, self.sig)
        except ProcessLookupError:
            return
        self.kill_ns = perf_ns()
        print(f"scenario: {self.who} sent {self.sig_name} {self.at_s:g} s into the load", flush=True)

    def disarm(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


def prime_prefixes(s) -> int:
    """``engine.cache_state=primed``: one request per prefix group of a synthetic workload
    (its shared prefix and one token of its own, one output token), so the engine's prefix
    cache holds every shared prefix before the load.  The prompt builder's random state is
    put back: the load's prompts are those of an unprimed run.  Returns the requests sent."""
    from loadgen.client.dialect import RequestDialect
    from loadgen.workloads.synthetic import group_prefix_ids, prefix_group_spec, workload_config

    if s.cfg.workload.name != "synthetic":
        raise ValueError(f"engine.cache_state=primed primes the shared prefixes of workload=synthetic "
                         f"(workload.prefix_groups), not of workload={s.cfg.workload.name}")
    wl = workload_config(s.cfg.workload)
    count, plen, _ = prefix_group_spec(wl)
    if not count:
        raise ValueError("engine.cache_state=primed needs shared prefixes: set workload.prefix_groups.count "
                         "and workload.prefix_groups.prefix_tokens")
    builder = s.builder
    state = builder.rng.bit_generator.state
    dialect = RequestDialect(s.client_cfg)
    path = "/v1/chat/completions" if s.client_cfg.api == "chat" else "/v1/completions"
    try:
        for g in range(count):
            prefix = group_prefix_ids(builder, wl.seed, g, plen)
            body = json.loads(dialect.body(builder.prompt(plen + builder.overhead + 1, prefix_ids=prefix), 1))
            body["stream"] = False
            body.pop("stream_options", None)
            status, text = http_post(s.engine.base_url + path, body, timeout=float(s.cfg.engine.startup_timeout_s),
                                     headers=s.engine.auth())
            if status != 200:
                raise ValueError(f"engine.cache_state=primed: priming request {g} got HTTP {status}: "
                                 f"{text[:300].decode('utf-8', 'replace')}")
    finally:
        builder.rng.bit_generator.state = state
    return count
