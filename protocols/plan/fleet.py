"""The fleet over a whole window, as a discrete-event simulation (SimPy): requests arrive as
the traffic says, a router spreads them over the serving replicas, each replica serves them
as its measured operating points say, and the autoscaling policy (``engines.autoscaling``,
the one the harness scales real replicas by) starts and stops replicas.

A replica's model (``ReplicaModel``), driven by the measured per-replica behaviour:

- It has ``slots``: as many requests in service at once as its runs ever held on average
  (the highest mean in flight of its operating points, rounded up); a request beyond them
  waits in the replica's queue, and that wait is part of its TTFT.
- A request that gets a slot while ``m`` others are in service is served like a request of
  the operating point whose mean in flight per replica is ``m`` (between two points, one of
  the two, with probability by distance: a mixture, not an average): its TTFT and TPOT are
  those of a measured request of that point with about its prompt length (among the
  nearest by prompt tokens), and it holds its slot for TTFT + TPOT x (output tokens - 1).
  A Poisson arrival sees the time-average in flight (PASTA), which is what the point's mean
  in flight is, so the mapping is unbiased at the measured loads.
- The points are those of the measured deployment size closest below the replicas serving
  (``ConfigCapacity.model_size``): two serving replicas behave as each replica of the
  measured two-replica deployment did.

A new replica is paid for from the policy's decision, serves after ``provision_s`` plus its
cold start (the measured ``engine_startup_s`` unless ``deployment.autoscale.cold_start_s``),
and is stopped after draining when the policy scales down (the newest first).

Every request also says whether it was served outside the measurements: it queued for a
slot (more in flight than any measured run held on average), its replica's arrival rate (over the policy's
window) above every measured rate, more replicas serving than any measured deployment, or a
prompt longer than any measured one.  The plan never extrapolates silently.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import simpy

from engines.autoscaling import ArrivalWindow, Autoscaler, ScalingPolicy
from metrics.fleet import needed_replicas, replica_metrics, request_metrics
from metrics.slo import SLO
from protocols.plan.capacity import ConfigCapacity, OperatingPoint
from protocols.plan.traffic import Traffic

ROUTINGS = ("round_robin", "least_loaded")


class ReplicaModel:
    """One deployment size's operating points as a replica's service (module doc)."""

    def __init__(self, points: list[OperatingPoint]):
        pts = [p for p in points if p.ttft_s.size]
        if not pts:
            raise ValueError("no operating point with a completed request")
        pts.sort(key=lambda p: p.in_flight)
        self.points = pts
        self.in_flight = np.array([p.in_flight for p in pts])
        self.slots = max(1, math.ceil(self.in_flight.max()))
        self.max_rate = max(p.rate_rps for p in pts)
        self.max_prompt = max(int(p.prompt_tokens.max()) for p in pts)
        self.tpot_fill = [float(np.nanmedian(p.tpot_s)) if np.isfinite(p.tpot_s).any() else 0.0 for p in pts]

    def sample(self, others: int, prompt: int, rng: np.random.Generator) -> tuple[float, float]:
        """(TTFT, TPOT) of a request served beside ``others`` requests (module doc)."""
        L = self.in_flight
        if others <= L[0]:
            i = 0
        elif others >= L[-1]:
            i = len(L) - 1
        else:
            j = int(np.searchsorted(L, others))          # L[j-1] < others <= L[j]
            gap = L[j] - L[j - 1]
            i = j if gap <= 0 or rng.random() < (others - L[j - 1]) / gap else j - 1
        p = self.points[i]
        n = p.prompt_tokens.size
        k = int(np.searchsorted(p.prompt_tokens, prompt))
        half = max(2, n // 20)
        lo, hi = max(0, k - half), min(n, k + half)
        if hi <= lo:
            lo, hi = max(0, n - 2 * half), n
        r = int(rng.integers(lo, hi))
        tpot = float(p.tpot_s[r])
        return float(p.ttft_s[r]), (tpot if math.isfinite(tpot) else self.tpot_fill[i])


@dataclass
class Replica:
    index: int
    paid_from: float
    ready_at: float
    slots: simpy.Resource
    busy: int = 0
    routed: bool = False             # taking new requests
    stopped_at: float | None = None
    idle_since: float | None = None
    idle_s: float = 0.0


class FleetSimulation:
    """One simulated window of one config under one policy (module doc); ``run()`` returns
    the fleet metrics, per-request arrays and the timeline."""

    def __init__(self, traffic: Traffic, capacity: ConfigCapacity, policy: ScalingPolicy, slo: SLO,
                 routing: str = "round_robin", initial: int = 1, seed: int = 0, timeline_s: float | None = None):
        if routing not in ROUTINGS:
            raise ValueError(f"protocol.routing={routing!r}: expected one of {', '.join(ROUTINGS)}")
        self.traffic, self.capacity, self.policy, self.slo = traffic, capacity, policy, slo
        self.routing = routing
        self.initial = max(policy.min_replicas, min(policy.max_replicas, int(initial)))
        self.rng = np.random.default_rng(seed)
        self.models = {s: ReplicaModel(capacity.points[s]) for s in capacity.sizes}
        cold = policy.cold_start_s if policy.cold_start_s is not None else capacity.cold_start()
        if cold is None:
            raise ValueError(f"config {capacity.name!r}: no measured cold start (engine_startup_s) to scale up by; "
                             "set deployment.autoscale.cold_start_s")
        self.start_delay = float(policy.provision_s) + float(cold)
        self.timeline_s = timeline_s or max(1.0, traffic.duration_s / 1440)

    # ------------------------------------------------------------------ the simulation
    def run(self) -> dict:
        env = self.env = simpy.Environment()
        n = len(self.traffic)
        self.ttft = np.full(n, np.nan)
        self.tpot = np.full(n, np.nan)
        self.wait = np.zeros(n)
        self.served_by = np.full(n, -1, dtype=np.int64)
        self.outside = np.zeros(n, dtype=bool)
        self.replicas: list[Replica] = []
        self.changes: list[tuple[float, int, int]] = []   # (time, paid, serving)
        self.needed: list[tuple[float, int]] = []
        self.arrivals = ArrivalWindow(self.policy.window_s)
        self.per_replica_arrivals: dict[int, ArrivalWindow] = {}
        self.autoscaler = Autoscaler(self.policy)
        self.rr = 0
        for _ in range(self.initial):
            self.add_replica(ready=True)
        env.process(self.arrive())
        env.process(self.control())
        env.run()
        return self.result()

    def add_replica(self, ready: bool = False) -> Replica:
        env = self.env
        r = Replica(index=len(self.replicas), paid_from=env.now,
                    ready_at=env.now if ready else env.now + self.start_delay,
                    slots=simpy.Resource(env, capacity=self.slot_count(len(self.serving()) + 1)))
        self.replicas.append(r)
        self.per_replica_arrivals[r.index] = ArrivalWindow(self.policy.window_s, origin_s=r.ready_at)
        if ready:
            r.routed, r.idle_since = True, env.now
        else:
            env.process(self.come_up(r))
        self.note_change()
        return r

    def slot_count(self, serving: int) -> int:
        size, _ = self.capacity.model_size(max(1, serving))
        return self.models[size].slots

    def come_up(self, r: Replica):
        yield self.env.timeout(r.ready_at - self.env.now)
        if r.stopped_at is None:
            r.routed, r.idle_since = True, self.env.now
            self.note_change()

    def serving(self) -> list[Replica]:
        return [r for r in self.replicas if r.routed]

    def starting(self) -> list[Replica]:
        return [r for r in self.replicas if not r.routed and r.stopped_at is None and r.ready_at > self.env.now]

    def note_change(self) -> None:
        paid = sum(1 for r in self.replicas if r.stopped_at is None)
        self.changes.append((self.env.now, paid, len(self.serving())))

    def arrive(self):
        env, t = self.env, self.traffic
        for i in range(len(t)):
            dt = t.arrival_s[i] - env.now
            if dt > 0:
                yield env.timeout(dt)
            self.arrivals.add(env.now)
            env.process(self.serve(i, self.route()))

    def route(self) -> Replica:
        up = self.serving()
        self.rr += 1
        if self.routing == "least_loaded":   # ties go round the replicas, as a router's would
            return min(up, key=lambda r: (r.busy + len(r.slots.queue), (r.index - self.rr) % len(self.replicas)))
        return up[(self.rr - 1) % len(up)]

    def serve(self, i: int, r: Replica):
        env = self.env
        arrived = env.now
        win = self.per_replica_arrivals[r.index]
        win.add(arrived)
        with r.slots.request() as slot:
            yield slot
            others = r.busy
            r.busy += 1
            if r.idle_since is not None:
                r.idle_s += env.now - r.idle_since
                r.idle_since = None
            serving = max(1, len(self.serving()))
            size, beyond_size = self.capacity.model_size(serving)
            model = self.models[size]
            prompt = int(self.traffic.prompt_tokens[i])
            ttft, tpot = model.sample(others, prompt, self.rng)
            out = int(self.traffic.output_tokens[i])
            self.wait[i] = env.now - arrived
            # queued for a slot: more in flight than any measured run held on average
            self.outside[i] = (beyond_size or self.wait[i] > 0 or prompt > model.max_prompt
                               or win.rate(arrived) > model.max_rate * 1.05)
            self.ttft[i] = self.wait[i] + ttft
            self.tpot[i] = tpot if out > 1 else np.nan
            self.served_by[i] = r.index
            yield env.timeout(ttft + tpot * max(out - 1, 0))
            r.busy -= 1
            if r.busy == 0:
                r.idle_since = env.now
        if not r.routed and r.busy == 0 and not r.slots.queue and r.stopped_at is None:
            self.stop(r)

    def stop(self, r: Replica) -> None:
        if r.idle_since is not None and r.ready_at <= self.env.now:
            r.idle_s += self.env.now - r.idle_since
        r.idle_since = None
        r.stopped_at = self.env.now
        self.note_change()

    def control(self):
        env, p = self.env, self.policy
        end = self.traffic.duration_s
        cap = p.capacity_rps
        while env.now + p.interval_s <= end:
            yield env.timeout(p.interval_s)
            rate = self.arrivals.rate(env.now)
            if cap:
                self.needed.append((env.now, int(needed_replicas(np.array([rate]), cap)[0])))
            value = rate if p.signal == "utilisation" else float(sum(r.busy + len(r.slots.queue)
                                                                     for r in self.replicas if r.stopped_at is None))
            serving, starting = self.serving(), self.starting()
            current = len(serving) + len(starting)
            to = self.autoscaler.decide(env.now, value, current)
            for _ in range(to - current):
                self.add_replica()
            for _ in range(current - to):
                self.remove_one(starting, serving)

    def remove_one(self, starting: list[Replica], serving: list[Replica]) -> None:
        if starting:            # a replica not yet up is cancelled first (paid until now)
            r = starting.pop()
            r.stopped_at = self.env.now
            self.note_change()
            return
        if len(serving) <= 1:
            return
        r = serving.pop()       # the newest serving replica stops taking requests, drains, stops
        r.routed = False
        self.note_change()
        if r.busy == 0 and not r.slots.queue:
            self.stop(r)

    # ------------------------------------------------------------------ what it gives
    def result(self) -> dict:
        t, end = self.traffic, self.traffic.duration_s
        done = ~np.isnan(self.ttft)
        req = request_metrics(self.slo, done, self.ttft, self.tpot, t.output_tokens, end)
        times = np.array([c[0] for c in self.changes])
        paid = np.array([c[1] for c in self.changes])
        serving = np.array([c[2] for c in self.changes])
        # several changes at one instant: the last one holds
        last = np.append(times[1:] != times[:-1], True)
        times, paid, serving = times[last], paid[last], serving[last]
        for r in self.replicas:      # a replica still idle at the end was idle until then
            if r.idle_since is not None and r.stopped_at is None:
                r.idle_s += max(0.0, end - r.idle_since)
                r.idle_since = None
        nt = np.array([0.0] + [x[0] for x in self.needed])
        nn = np.array([self.initial] + [x[1] for x in self.needed])
        idle = sum(r.idle_s for r in self.replicas)
        rep = replica_metrics(times, paid, times, serving, end, idle_replica_seconds=idle,
                              needed_t=nt if self.policy.capacity_rps else None,
                              needed_n=nn if self.policy.capacity_rps else None)
        rep["starting_replica_seconds"] = rep["replica_seconds"] - rep["replica_seconds_serving"]
        out = {**req, **rep,
               "outside_measurements_share": float(self.outside.mean()) if self.outside.size else 0.0,
               "queued_share": float((self.wait > 1e-9).mean()) if self.wait.size else 0.0,
               "scale_ups": sum(1 for d in self.autoscaler.decisions if d["to"] > d["from"]),
               "scale_downs": sum(1 for d in self.autoscaler.decisions if d["to"] < d["from"]),
               "start_delay_s": self.start_delay, "initial_replicas": self.initial}
        out["timeline"] = self.timeline(times, paid, serving)
        out["decisions"] = self.autoscaler.decisions
        return out

    def timeline(self, times, paid, serving) -> dict:
        """Per bucket of ``timeline_s``: arrival rate, replicas paid and serving (at the
        bucket's end), attainment and p90 TTFT of the requests that arrived in it."""
        t, b = self.traffic, self.timeline_s
        edges = np.arange(0.0, t.duration_s + b, b)
        which = np.clip(np.searchsorted(edges, t.arrival_s, side="right") - 1, 0, len(edges) - 2)
        counts = np.bincount(which, minlength=len(edges) - 1)
        e2el = self.ttft + np.nan_to_num(self.tpot) * np.maximum(t.output_tokens - 1, 0)
        from metrics.slo import good_mask
        good = good_mask(self.slo, np.where(np.isnan(self.ttft), "failed", "ok"), self.ttft, self.tpot, e2el)
        good_n = np.bincount(which, weights=good.astype(float), minlength=len(edges) - 1)
        at = np.clip(np.searchsorted(times, edges[1:], side="right") - 1, 0, None)
        p90 = [float(np.percentile(self.ttft[which == k], 90)) * 1e3 if counts[k] else None
               for k in range(len(edges) - 1)] if len(edges) <= 5000 else []
        return {"bucket_s": b, "start_s": edges[:-1].tolist(), "rate_rps": (counts / b).tolist(),
                "replicas_paid": paid[at].tolist(), "replicas_serving": serving[at].tolist(),
                "attainment": np.where(counts > 0, good_n / np.maximum(counts, 1), np.nan).tolist(),
                "p90_ttft_ms": p90}
