"""Live autoscaling of a real deployment (``deployment.autoscale.enabled``): while a load runs,
``LiveScaler`` reads the policy's signal every ``interval_s``, asks ``Autoscaler.decide``
(``engines.autoscale_policy``: the same policy the fleet plan simulates) how many replicas to
have, and starts or stops real replicas of the ``Deployment`` (``engines.deployment``).

Signals, read as an HPA or KEDA on Prometheus reads them:

- ``utilisation``: arrivals per second over the trailing ``window_s``, from the router's own
  counter of the requests it routed (``Router.requests_total``: ``vllm_router_requests_total``
  or ``smg_router_requests_total`` summed over their label sets), differenced over the window
  (``CounterWindow``; while the window is not yet full, over the time since the load began);
- ``queue``: requests in flight, the sum over the replicas serving of their engine's
  ``running + waiting`` (``vllm:num_requests_running`` + ``vllm:num_requests_waiting``, or
  SGLang's, from their ``/metrics``).

A failed read is not a reading: a metrics page that did not answer, a replica's page
without its running count, a router page without its request counter (after the first
reading: before the load a router that has routed nothing has no such series) is recorded
(``failed_reads``), the decision is held (no scale-up, no scale-down: ``held`` in the
decision) and the next read backs off: the k-th failure in a row waits ``interval_s x 2^k``
(at most ``MAX_BACKOFF`` intervals) instead of one interval.

Replicas counted as ``current`` are those serving plus those starting, from the decision
that asked for them on (a replica on its way is not asked for twice); a replica being taken
out or drained is neither.  Scale-up, each replica in its
own thread so the loop keeps deciding: ``provision_s``, then its process starts (``engine-
r<k>.log``, its own port and placement entry), is healthy and warmed up, and is added to the
router.  A scale-up that fails is retried under the same name (it served nothing, so no
request row names it) once its back-off is over, ``interval_s x 2^k`` after the k-th failure
in a row (at most ``MAX_BACKOFF`` intervals); until then scale-ups are held.  Scale-down, the
newest serving replica first, never the last one serving: removed from the router, then
drained (its ``running + waiting`` at 0, at most ``drain_timeout_s``), then stopped.  Names of
replicas that served are never reused: ``r2`` is the replica started after ``r0`` and
``r1``, whichever placement entry it takes.

Every decision, failed read, replica start and stop is kept (``record()``), with times in
perf_counter_ns; ``paid_intervals()`` gives what each start and stop was paid for (a start
from its decision to its joining the router, or to its failure; a drain from its leaving the
router to its stop), which ``metrics.autoscale_bill`` bills.  The harness writes them as
``autoscale.json`` and as the ``deployment`` series of ``telemetry.parquet``
(``harness.autoscale_record``).
"""

from __future__ import annotations

import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict

from engines.autoscale_policy import Autoscaler, ScalingPolicy
from engines.base import EngineError

perf_ns = time.perf_counter_ns
MAX_BACKOFF = 8  # intervals: the longest wait after failed reads or failed scale-ups


class ReadFailed(Exception):
    """The policy's signal could not be read (the reason is the message)."""


def backoff_s(policy: ScalingPolicy, failures: int) -> float:
    """The wait after the ``failures``-th failure in a row: interval_s x 2^failures, capped."""
    return policy.autoscale.interval_s * min(2 ** failures, MAX_BACKOFF)


class CounterWindow:
    """A cumulative counter's increase per second over the trailing ``window_s``: from the
    last reading at or before ``now - window_s`` (the first reading while the window is not
    yet full) to the latest.  A counter that went down (its process restarted) counts from 0."""

    def __init__(self, window_s: float):
        self.window_s = float(window_s)
        self.readings: deque[tuple[float, float]] = deque()
        self.base = 0.0  # what a reset lost, so the series stays cumulative

    def add(self, t_s: float, value: float) -> None:
        if self.readings and value + self.base < self.readings[-1][1]:
            self.base = self.readings[-1][1]
        self.readings.append((t_s, value + self.base))
        while len(self.readings) > 2 and self.readings[1][0] <= t_s - self.window_s:
            self.readings.popleft()

    def rate(self) -> float:
        if len(self.readings) < 2:
            return 0.0
        (t0, v0), (t1, v1) = self.readings[0], self.readings[-1]
        return (v1 - v0) / (t1 - t0) if t1 > t0 else 0.0


def routed_requests(deployment) -> tuple[float | None, str | None]:
    """The router's count of requests routed so far, ``(value, None)``; ``(None, why)`` where its
    metrics page did not answer; ``(0.0, why)`` where it answered without the counter
    (``Router.requests_read``)."""
    return deployment.router.requests_read()


def in_flight(deployment) -> float:
    """Requests running or waiting, summed over the replicas serving (their engines' ``/metrics``);
    ReadFailed naming the replica whose page did not answer or has no running count."""
    total = 0.0
    for r in list(deployment.replicas):
        values = r.server_metrics() if r.server_metric_map else {}
        if "running" not in values:
            raise ReadFailed(f"replica {r.replica}: no running count from its /metrics (the page did not answer, "
                             "or lacks the engine's running-requests gauge)")
        total += values["running"] + values.get("waiting", 0.0)
    return total


class LiveScaler:
    """Scales ``deployment`` by ``policy`` from ``start()`` to ``stop()`` (see module doc).

    ``on_serving(eng)``: a replica was added to the router (the harness samples its telemetry
    and watches its process); ``on_leaving(eng)``: one is about to be taken out (stop watching
    it: its process is about to end on purpose); ``on_count(t_ns, serving, wanted)``: at every
    decision and every change of the serving count."""

    def __init__(self, deployment, policy: ScalingPolicy,
                 on_serving: Callable | None = None, on_leaving: Callable | None = None,
                 on_count: Callable | None = None,
                 arrivals: Callable[[], float | tuple[float | None, str | None] | None] | None = None,
                 queue: Callable[[], float] | None = None):
        self.deployment = deployment
        self.policy = policy
        self.autoscale = policy.autoscale  # deployment.autoscale, typed
        self.autoscaler = Autoscaler(policy)
        self.drain_timeout_s = float(self.autoscale.drain_timeout_s)
        self.on_serving = on_serving or (lambda eng: None)
        self.on_leaving = on_leaving or (lambda eng: None)
        self.on_count = on_count or (lambda t_ns, serving, wanted: None)
        self.arrivals = arrivals or (lambda: routed_requests(deployment))
        self.queue = queue or (lambda: in_flight(deployment))
        self.window = CounterWindow(self.autoscale.window_s)
        self.origin_ns: int | None = None
        self.wanted = len(deployment.replicas)
        self.decisions: list[dict] = []   # every decision: t_ns, from, to, value
        self.starts: list[dict] = []      # every replica start: requested/process/healthy/ready/added ns
        self.stops: list[dict] = []       # every replica stop: requested/removed/drained/stopped ns
        self.errors: list[str] = []
        self.failed_reads: list[dict] = []  # every read that failed: t_ns, signal, error, retry_in_s
        self.read_failures = 0            # failed reads in a row
        self.read_at_ns = 0               # no read before (the back-off after failed reads)
        self.up_failures = 0              # failed scale-ups in a row
        self.up_at_ns = 0                 # no scale-up before (the back-off after a failed one)
        self._retry: list[str] = []       # names of replicas whose start failed, to retry under
        self._stop = threading.Event()
        self._loop: threading.Thread | None = None
        self._workers: list[threading.Thread] = []
        self._leaving: set[str] = set()   # replicas being taken out (not counted as current)
        self._asked = 0                   # scale-ups decided whose replica is not made yet (counted)
        self._lock = threading.Lock()

    # --- the loop ------------------------------------------------------------------------
    def start(self, origin: Callable[[], int | None] | None = None) -> LiveScaler:
        """Decide from the load's start: ``origin()`` is its perf_counter_ns once known (the
        dispatcher's t0), None until then; without it, from now."""
        self._loop = threading.Thread(target=self._run, args=(origin,), name="tokenfactory-autoscale", daemon=True)
        self._loop.start()
        return self

    def _run(self, origin) -> None:
        if origin is not None:
            while (t0 := origin()) is None:
                if self._stop.wait(0.01):
                    return
        else:
            t0 = perf_ns()
        self.origin_ns = t0
        try:
            self._read(t0)
        except Exception as e:  # noqa: BLE001 - the window's base is read again at the next decision
            self._failed_read(t0, _why(e))
        self.on_count(t0, len(self.deployment.replicas), self.wanted)
        due = max(t0 / 1e9 + self.autoscale.interval_s, self.read_at_ns / 1e9)
        while not self._stop.wait(max(due - perf_ns() / 1e9, 0.0)):
            try:
                self.tick(perf_ns())
            except Exception as e:  # noqa: BLE001 - one bad reading must not end the scaling
                self.errors.append(f"{type(e).__name__}: {e}")
                print(f"autoscale: {e}", file=sys.stderr, flush=True)
            due = max(due + self.autoscale.interval_s, self.read_at_ns / 1e9)

    def _read(self, now_ns: int) -> float:
        """The policy's signal now (requests/s over the window, or requests in flight); ReadFailed
        where it could not be read."""
        if self.autoscale.signal == "queue":
            value = self.queue()
            if value is None:
                raise ReadFailed("requests in flight: no reading")
            return float(value)
        got = self.arrivals()
        count, why = got if isinstance(got, tuple) else (got, None)
        if count is None:
            raise ReadFailed(why or "the router's request counter: no reading")
        if why is not None and self.window.readings:
            # the page answered without the counter after the first reading: renamed or gone,
            # not "nothing routed" (a zero here would read as no arrivals and never scale up)
            raise ReadFailed(why)
        self.window.add(now_ns / 1e9, float(count))
        return self.window.rate()

    def _failed_read(self, now_ns: int, why: str) -> float:
        self.read_failures += 1
        wait = backoff_s(self.policy, self.read_failures)
        self.read_at_ns = now_ns + int(wait * 1e9)
        self.failed_reads.append({"t_ns": now_ns, "signal": self.autoscale.signal, "error": why, "retry_in_s": wait})
        print(f"autoscale: the {self.autoscale.signal} signal could not be read ({why}); decision held, next read in "
              f"{wait:g} s", file=sys.stderr, flush=True)
        return wait

    def tick(self, now_ns: int) -> int:
        """One decision: read the signal, decide, start or stop replicas (in their own threads).
        A failed read holds the decision (module doc)."""
        try:
            value, held = self._read(now_ns), None
            self.read_failures = 0
        except Exception as e:  # noqa: BLE001 - any failed read holds the decision, none ends the scaling
            value, held = None, _why(e)
            self._failed_read(now_ns, held)
        with self._lock:
            staying = [r for r in self.deployment.replicas if r.replica not in self._leaving]
            serving, starting = len(staying), len(self.deployment.starting) + self._asked
            current = serving + starting
            if held is not None:
                to = current
            else:
                to = self.autoscaler.decide((now_ns - (self.origin_ns or now_ns)) / 1e9, value, current)
                self.wanted = to
                if to > current and now_ns < self.up_at_ns:
                    held = (f"scale-up to {to} held: backing off after {self.up_failures} failed start(s), "
                            f"until {(self.up_at_ns - now_ns) / 1e9:.3g} s from now")
                    to = current
            decision = {"t_ns": now_ns, "from": current, "to": to, "value": value,
                        "serving": serving, "starting": starting, "leaving": len(self._leaving)}
            if held is not None:
                decision.update(held=held, wanted=self.wanted)
            self.decisions.append(decision)
            if to != current:
                unit = " req/s" if self.autoscale.signal == "utilisation" else " in flight"
                print(f"autoscale: {current} -> {to} replicas ({self.autoscale.signal} signal {value:.3g}{unit}, "
                      f"{(now_ns - (self.origin_ns or now_ns)) / 1e9:.1f} s into the load)", flush=True)
            if to > current:
                for _ in range(to - current):
                    self._asked += 1  # on its way from now: the next decision counts it, made or not
                    self._spawn(self._scale_up, now_ns)
            elif to < current:
                # only replicas serving can go (one starting is taken at a later decision); never the last
                for eng in sorted(staying, key=_newest_first)[:max(0, min(current - to, serving - 1))]:
                    self._leaving.add(eng.replica)  # out of the count at once: no later decision takes it again
                    self._spawn(self._scale_down, now_ns, eng)
        self.on_count(now_ns, serving, to)
        return to

    def _spawn(self, fn, *args) -> None:
        t = threading.Thread(target=fn, args=args, name=f"tokenfactory-{fn.__name__}", daemon=True)
        self._workers = [w for w in self._workers if w.is_alive()] + [t]
        t.start()

    # --- one replica ---------------------------------------------------------------------
    def _scale_up(self, requested_ns: int) -> None:
        dep = self.deployment
        event = {"replica": None, "requested_ns": requested_ns}
        self.starts.append(event)
        with self._lock:  # from asked to starting in one step: no decision counts it twice, nor misses it
            self._asked -= 1
            name = self._retry.pop(0) if self._retry else None
            try:
                eng = dep.new_replica(name) if name is not None else dep.new_replica()
            except EngineError as e:
                event["error"] = str(e)
                self.errors.append(str(e))
                self._start_failed(event, name)
                return
        event["replica"] = eng.replica
        if name is not None:
            event["retry"] = self.up_failures  # the failed starts before this one, in a row
        event["slot"] = asdict(dep.slot(eng.replica))
        if self.autoscale.provision_s > 0 and self._stop.wait(self.autoscale.provision_s):
            event["cancelled"] = "the load ended before provision_s was over: never started"
            dep.cancel(eng)
            event["cancelled_ns"] = perf_ns()
            return
        try:
            dep.start_replica(eng)
            event.update(process_started_ns=eng.started_ns, healthy_ns=eng.healthy_ns, ready_ns=eng.ready_ns)
            added = dep.join(eng)
        except (EngineError, OSError) as e:
            event["error"] = str(e).splitlines()[0]
            self.errors.append(f"replica {eng.replica} did not start: {e}")
            print(f"autoscale: replica {eng.replica} did not start: {e}", file=sys.stderr, flush=True)
            if eng in dep.starting:  # started but not taken by the router
                dep.cancel(eng)
            with self._lock:
                self._start_failed(event, eng.replica)
            return
        # the serving log's own time (Deployment.join), so the start ends where serving begins
        event["added_ns"] = added if isinstance(added, int) else perf_ns()
        with self._lock:
            self.up_failures, self.up_at_ns = 0, 0
        self.on_serving(eng)
        self.on_count(event["added_ns"], len(dep.replicas), self.wanted)
        print(f"autoscale: replica {eng.replica} serving ({len(dep.replicas)} serving)", flush=True)

    def _start_failed(self, event: dict, name: str | None) -> None:
        """A start failed (under the lock): paid until now, retried under its name after the back-off."""
        now = perf_ns()
        event["failed_ns"] = now
        self.up_failures += 1
        wait = backoff_s(self.policy, self.up_failures)
        self.up_at_ns = now + int(wait * 1e9)
        event["retry_in_s"] = wait
        if name is not None:
            self._retry.append(name)

    def _scale_down(self, requested_ns: int, eng) -> None:
        dep = self.deployment
        event = {"replica": eng.replica, "requested_ns": requested_ns}
        self.stops.append(event)
        try:
            self.on_leaving(eng)
            removed = dep.leave(eng)
            # the serving log's own time (Deployment.leave), so the drain begins where serving ends
            event["removed_ns"] = removed if isinstance(removed, int) else perf_ns()
            self.on_count(event["removed_ns"], len(dep.replicas), self.wanted)
            event["drained"] = dep.drain(eng, self.drain_timeout_s)
            event["drained_ns"] = perf_ns()
            dep.retire(eng)
            event["stopped_ns"] = perf_ns()
            print(f"autoscale: replica {eng.replica} stopped ({len(dep.replicas)} serving)", flush=True)
        except (EngineError, OSError) as e:
            event["error"] = str(e).splitlines()[0]
            event["failed_ns"] = perf_ns()
            self.errors.append(f"replica {eng.replica} was not scaled down: {e}")
            print(f"autoscale: replica {eng.replica} was not scaled down: {e}", file=sys.stderr, flush=True)
        finally:
            with self._lock:
                self._leaving.discard(eng.replica)

    def stop(self) -> None:
        """No more decisions; waits for replicas being started or stopped (a replica half
        started is neither left running outside the deployment nor counted as serving)."""
        self._stop.set()
        if self._loop is not None:
            self._loop.join()
        for t in list(self._workers):
            t.join()

    def paid_intervals(self, end_ns: int | None = None) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
        """``(starting, draining)``: ``(from_ns, to_ns)`` of every replica start (its decision to
        its joining the router, its failure or its cancellation) and every drain (its leaving
        the router to its stop, or the stop's failure); one still open ends at ``end_ns`` (now)."""
        end = end_ns if end_ns is not None else perf_ns()

        def first(e: dict, keys) -> int:
            return next((e[k] for k in keys if e.get(k) is not None), end)

        starting = [(e["requested_ns"], first(e, ("added_ns", "failed_ns", "cancelled_ns")))
                    for e in list(self.starts)]
        draining = [(e["removed_ns"], first(e, ("stopped_ns", "failed_ns")))
                    for e in list(self.stops) if e.get("removed_ns") is not None]
        return starting, draining

    def record(self) -> dict:
        """What happened, times in perf_counter_ns (``harness.autoscale_record`` makes them relative)."""
        return {"policy": self.policy.record(), "drain_timeout_s": self.drain_timeout_s,
                "origin_ns": self.origin_ns, "decisions": list(self.decisions), "starts": list(self.starts),
                "stops": list(self.stops), "errors": list(self.errors), "failed_reads": list(self.failed_reads),
                "backoff": f"after the k-th failure in a row (a read, or a scale-up): interval_s x 2^k, at most "
                           f"{MAX_BACKOFF} x interval_s = {MAX_BACKOFF * self.autoscale.interval_s:g} s"}


def _why(e: Exception) -> str:
    return str(e) if isinstance(e, ReadFailed) else f"{type(e).__name__}: {e}"


def _newest_first(eng) -> int:
    return -int(eng.replica.lstrip("r") or 0)
