"""Live autoscaling of a real deployment (``deployment.autoscale.enabled``): while a load runs,
``LiveScaler`` reads the policy's signal every ``interval_s``, asks ``Autoscaler.decide``
(``engines.autoscaling``: the same policy the fleet plan simulates) how many replicas to
have, and starts or stops real replicas of the ``Deployment`` (``engines.deployment``).

Signals, read as an HPA or KEDA on Prometheus reads them:

- ``utilisation``: arrivals per second over the trailing ``window_s``, from the router's own
  counter of the requests it routed (``Router.requests_total``: ``vllm_router_requests_total``
  or ``smg_router_requests_total`` summed over their label sets), differenced over the window
  (``CounterWindow``; while the window is not yet full, over the time since the load began);
- ``queue``: requests in flight, the sum over the replicas serving of their engine's
  ``running + waiting`` (``vllm:num_requests_running`` + ``vllm:num_requests_waiting``, or
  SGLang's, from their ``/metrics``).

Replicas counted as ``current`` are those serving plus those starting, from the decision
that asked for them on (a replica on its way is not asked for twice); a replica being taken
out or drained is neither.  Scale-up, each replica in its
own thread so the loop keeps deciding: ``provision_s``, then its process starts (``engine-
r<k>.log``, its own port and placement entry), is healthy and warmed up, and is added to the
router.  Scale-down, the newest serving replica first, never the last one serving: removed
from the router, then drained (its ``running + waiting`` at 0, at most ``drain_timeout_s``),
then stopped.  Names are never reused: ``r2`` is the replica started after ``r0`` and ``r1``,
whichever placement entry it takes.

Every decision, replica start and stop is kept (``record()``), with times in perf_counter_ns;
the harness writes them as ``autoscale.json`` and as the ``deployment`` series of
``telemetry.parquet`` (``harness.autoscale``).
"""

from __future__ import annotations

import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict

from engines.autoscaling import Autoscaler, ScalingPolicy
from engines.base import EngineError

perf_ns = time.perf_counter_ns


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


def routed_requests(deployment) -> float | None:
    """The router's count of requests routed so far (None: its metrics page did not answer)."""
    return deployment.router.requests_total()


def in_flight(deployment) -> float:
    """Requests running or waiting, summed over the replicas serving (their engines' ``/metrics``)."""
    total = 0.0
    for r in list(deployment.replicas):
        values = r.server_metrics() if r.server_metric_map else {}
        total += values.get("running", 0.0) + values.get("waiting", 0.0)
    return total


class LiveScaler:
    """Scales ``deployment`` by ``policy`` from ``start()`` to ``stop()`` (see module doc).

    ``on_serving(eng)``: a replica was added to the router (the harness samples its telemetry
    and watches its process); ``on_leaving(eng)``: one is about to be taken out (stop watching
    it: its process is about to end on purpose); ``on_count(t_ns, serving, wanted)``: at every
    decision and every change of the serving count."""

    def __init__(self, deployment, policy: ScalingPolicy, drain_timeout_s: float = 60.0,
                 on_serving: Callable | None = None, on_leaving: Callable | None = None,
                 on_count: Callable | None = None, arrivals: Callable[[], float | None] | None = None,
                 queue: Callable[[], float] | None = None):
        self.deployment = deployment
        self.policy = policy
        self.autoscaler = Autoscaler(policy)
        self.drain_timeout_s = float(drain_timeout_s)
        self.on_serving = on_serving or (lambda eng: None)
        self.on_leaving = on_leaving or (lambda eng: None)
        self.on_count = on_count or (lambda t_ns, serving, wanted: None)
        self.arrivals = arrivals or (lambda: routed_requests(deployment))
        self.queue = queue or (lambda: in_flight(deployment))
        self.window = CounterWindow(policy.window_s)
        self.origin_ns: int | None = None
        self.wanted = len(deployment.replicas)
        self.decisions: list[dict] = []   # every decision: t_ns, from, to, value
        self.starts: list[dict] = []      # every replica start: requested/process/healthy/ready/added ns
        self.stops: list[dict] = []       # every replica stop: requested/removed/drained/stopped ns
        self.errors: list[str] = []
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
        self._read(t0)
        self.on_count(t0, len(self.deployment.replicas), self.wanted)
        due = t0 / 1e9 + self.policy.interval_s
        while not self._stop.wait(max(due - perf_ns() / 1e9, 0.0)):
            due += self.policy.interval_s
            try:
                self.tick(perf_ns())
            except Exception as e:  # noqa: BLE001 - one bad reading must not end the scaling
                self.errors.append(f"{type(e).__name__}: {e}")
                print(f"autoscale: {e}", file=sys.stderr, flush=True)

    def _read(self, now_ns: int) -> float:
        """The policy's signal now (requests/s over the window, or requests in flight)."""
        if self.policy.signal == "queue":
            return float(self.queue())
        count = self.arrivals()
        if count is not None:
            self.window.add(now_ns / 1e9, float(count))
        return self.window.rate()

    def tick(self, now_ns: int) -> int:
        """One decision: read the signal, decide, start or stop replicas (in their own threads)."""
        value = self._read(now_ns)
        with self._lock:
            staying = [r for r in self.deployment.replicas if r.replica not in self._leaving]
            serving, starting = len(staying), len(self.deployment.starting) + self._asked
            current = serving + starting
            to = self.autoscaler.decide((now_ns - (self.origin_ns or now_ns)) / 1e9, value, current)
            self.wanted = to
            self.decisions.append({"t_ns": now_ns, "from": current, "to": to, "value": value,
                                   "serving": serving, "starting": starting, "leaving": len(self._leaving)})
            if to != current:
                unit = " req/s" if self.policy.signal == "utilisation" else " in flight"
                print(f"autoscale: {current} -> {to} replicas ({self.policy.signal} signal {value:.3g}{unit}, "
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
            try:
                eng = dep.new_replica()
            except EngineError as e:
                event["error"] = str(e)
                self.errors.append(str(e))
                return
        event["replica"] = eng.replica
        event["slot"] = asdict(dep.slot(eng.replica))
        if self.policy.provision_s > 0 and self._stop.wait(self.policy.provision_s):
            event["cancelled"] = "the load ended before provision_s was over: never started"
            dep.cancel(eng)
            return
        try:
            dep.start_replica(eng)
            event.update(process_started_ns=eng.started_ns, healthy_ns=eng.healthy_ns, ready_ns=eng.ready_ns)
            dep.join(eng)
        except (EngineError, OSError) as e:
            event["error"] = str(e).splitlines()[0]
            self.errors.append(f"replica {eng.replica} did not start: {e}")
            print(f"autoscale: replica {eng.replica} did not start: {e}", file=sys.stderr, flush=True)
            if eng in dep.starting:  # started but not taken by the router
                dep.cancel(eng)
            return
        event["added_ns"] = perf_ns()
        self.on_serving(eng)
        self.on_count(event["added_ns"], len(dep.replicas), self.wanted)
        print(f"autoscale: replica {eng.replica} serving ({len(dep.replicas)} serving)", flush=True)

    def _scale_down(self, requested_ns: int, eng) -> None:
        dep = self.deployment
        event = {"replica": eng.replica, "requested_ns": requested_ns}
        self.stops.append(event)
        try:
            self.on_leaving(eng)
            dep.leave(eng)
            event["removed_ns"] = perf_ns()
            self.on_count(event["removed_ns"], len(dep.replicas), self.wanted)
            event["drained"] = dep.drain(eng, self.drain_timeout_s)
            event["drained_ns"] = perf_ns()
            dep.retire(eng)
            event["stopped_ns"] = perf_ns()
            print(f"autoscale: replica {eng.replica} stopped ({len(dep.replicas)} serving)", flush=True)
        except (EngineError, OSError) as e:
            event["error"] = str(e).splitlines()[0]
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

    def record(self) -> dict:
        """What happened, times in perf_counter_ns (``harness.autoscale`` makes them relative)."""
        return {"policy": asdict(self.policy), "drain_timeout_s": self.drain_timeout_s,
                "origin_ns": self.origin_ns, "decisions": list(self.decisions), "starts": list(self.starts),
                "stops": list(self.stops), "errors": list(self.errors)}


def _newest_first(eng) -> int:
    return -int(eng.replica.lstrip("r") or 0)
