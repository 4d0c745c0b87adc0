"""The fleet over a whole window, as a discrete-event simulation (SimPy): requests arrive as
the traffic says, a router spreads them over the serving replicas, each replica serves them
as its measured operating points say, and the autoscaling policy (``engines.autoscale_policy``,
the one the harness scales real replicas by) starts and stops replicas.

A replica's model (``ReplicaModel``): processor sharing driven by the measured per-replica
behaviour, which is what continuous batching is (every request in flight advances each step,
each more slowly the more there are):

- A request brings its work at low load: a TTFT and a TPOT of a measured request of the
  replica's lightest operating points (mean in flight per replica <= 1, else the lightest),
  with about its prompt length (drawn among those within 10 % of it, else the nearest few);
  its decode work is TPOT x (output tokens - 1).
- While n requests are in flight on the replica, each advances its prefill at 1 / g_ttft(n)
  and its decode at 1 / g_tpot(n) of its low-load speed.  g(n) is the measured slowdown: at
  each operating point (mean in flight per replica L_i) its mean TTFT (TPOT) over the light
  points' mean, at n = L_i + 1 (a Poisson arrival sees L_i others on average, PASTA, besides
  itself), fitted non-decreasing (isotonic) and interpolated linearly between points, then
  calibrated (``calibrate``) so that simulating each measured run gives back its means.  Beyond the highest
  measured count the replica is saturated: g grows as n / n_max (it completes no more
  requests per second than it did there, and every request waits longer the more there are).
- The points are those of the measured deployment size closest below the replicas serving
  (``ConfigCapacity.model_size``): two serving replicas behave as each replica of the
  measured two-replica deployment did.

How well it fits the runs it was built from: ``benchmarks/plan_calibration.py``; how well it
predicts a real replay: ``protocol.validate`` (docs/measured/plan.md).

A new replica is paid for from the policy's decision, serves after ``provision_s`` plus its
cold start (the measured ``engine_startup_s`` unless ``deployment.autoscale.cold_start_s``),
and is stopped after draining when the policy scales down (the newest first).  The bill names
the three apart, as a live run's does: ``starting_replica_seconds`` (decision to serving),
``serving_replica_seconds``, ``draining_replica_seconds`` (taken out to stopped) and their sum
``paid_replica_seconds`` (``metrics.fleet.replica_metrics``).

Every request also says whether it was served outside the measurements: more in flight on
its replica when it arrived than any measured run held on average, its replica's arrival rate
(over the policy's window) above every measured rate, more replicas serving than any measured
deployment, or a prompt longer than any measured one.  The plan never extrapolates silently.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import simpy

from conf.schema import Autoscale
from engines.autoscale_policy import ArrivalWindow, Autoscaler, ScalingPolicy
from metrics.fleet import needed_replicas, replica_metrics, request_metrics
from metrics.slo import SLO
from protocols.plan.capacity import ConfigCapacity, OperatingPoint
from protocols.plan.traffic import Traffic

ROUTINGS = ("round_robin", "least_loaded")


def isotonic(y) -> np.ndarray:
    """The non-decreasing sequence closest to ``y`` in squared error (pool adjacent violators)."""
    blocks: list[list[float]] = []            # [sum, count] of each pooled run
    for v in np.asarray(y, dtype=np.float64):
        blocks.append([v, 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            s, c = blocks.pop()
            blocks[-1][0] += s
            blocks[-1][1] += c
    return np.concatenate([np.full(int(c), s / c) for s, c in blocks]) if blocks else np.zeros(0)


class ReplicaModel:
    """One deployment size's operating points as a replica's service (module doc)."""

    def __init__(self, points: list[OperatingPoint], correction: tuple | None = None):
        pts = [p for p in points if p.ttft_s.size]
        if not pts:
            raise ValueError("no operating point with a completed request")
        pts.sort(key=lambda p: p.in_flight)
        self.points = pts
        L = np.array([p.in_flight for p in pts])
        light = [p for p in pts if p.in_flight <= 1.0] or [pts[0]]
        self.prompt = np.concatenate([p.prompt_tokens for p in light])
        order = np.argsort(self.prompt, kind="stable")
        self.prompt = self.prompt[order]
        self.ttft0 = np.concatenate([p.ttft_s for p in light])[order]
        tpot = np.concatenate([p.tpot_s for p in light])[order]
        fill = float(np.nanmean(tpot)) if np.isfinite(tpot).any() else 0.0
        self.tpot0 = np.where(np.isfinite(tpot), tpot, fill)
        base_ttft, base_tpot = float(np.mean(self.ttft0)), float(np.mean(self.tpot0))
        g_ttft = np.array([np.mean(p.ttft_s) / base_ttft for p in pts])
        g_tpot = np.array([(np.nanmean(p.tpot_s) if np.isfinite(p.tpot_s).any() else base_tpot) / base_tpot
                           if base_tpot > 0 else 1.0 for p in pts])
        # latency does not fall as load rises: the curve is the closest non-decreasing one to the
        # points (isotonic regression), so one noisy point moves its neighbours, not all above it.
        # A request of a point saw on average L others in flight (PASTA) besides itself, so
        # the slowdown measured at L is the slowdown at a count of L + 1 in the batch.
        # (An estimated point's in flight is a fixed concurrency: it already counts the request.)
        self.L = L + np.array([0.0 if p.estimated else 1.0 for p in pts])
        if correction is not None:      # (counts, TTFT factors, TPOT factors): see ``calibrate``
            n, f_ttft, f_tpot = correction
            g_ttft = g_ttft * np.interp(self.L, n, f_ttft)
            g_tpot = g_tpot * np.interp(self.L, n, f_tpot)
        self.g_ttft = np.maximum(isotonic(g_ttft), 1.0)
        self.g_tpot = np.maximum(isotonic(g_tpot), 1.0)
        self.max_in_flight = float(self.L.max())
        self.max_rate = max(p.rate_rps for p in pts)
        self.max_prompt = max(int(p.prompt_tokens.max()) for p in pts)
        self.cache: dict[int, tuple[float, float]] = {}

    def work(self, prompt: int, rng: np.random.Generator) -> tuple[float, float]:
        """(TTFT, TPOT) at low load of a request of ``prompt`` tokens (module doc)."""
        n = self.prompt.size
        lo = int(np.searchsorted(self.prompt, 0.9 * prompt, side="left"))
        hi = int(np.searchsorted(self.prompt, 1.1 * prompt, side="right"))
        few = min(n, max(3, n // 20))
        if hi - lo < few:
            k = min(int(np.searchsorted(self.prompt, prompt)), n - 1)
            lo = max(0, min(k - few // 2, n - few))
            hi = lo + few
        r = int(rng.integers(lo, hi))
        return float(self.ttft0[r]), float(self.tpot0[r])

    def slowdown(self, n: int) -> tuple[float, float]:
        """(g_ttft, g_tpot) with ``n`` requests in flight (module doc)."""
        got = self.cache.get(n)
        if got is None:
            got = self.cache[n] = self._slowdown(n)
        return got

    def _slowdown(self, n: int) -> tuple[float, float]:
        if n <= self.L[0]:
            return float(self.g_ttft[0]), float(self.g_tpot[0])
        if n >= self.max_in_flight:
            k = n / self.max_in_flight
            return float(self.g_ttft[-1] * k), float(self.g_tpot[-1] * k)
        return float(np.interp(n, self.L, self.g_ttft)), float(np.interp(n, self.L, self.g_tpot))


@dataclass
class Replica:
    index: int
    paid_from: float
    ready_at: float
    model: ReplicaModel | None = None
    # request index -> [phase (0 prefill, 1 decode), work left in that phase, decode work]
    active: dict = field(default_factory=dict)
    wake: object = None              # the event that tells its service loop something changed
    routed: bool = False             # taking new requests
    stopped_at: float | None = None
    idle_since: float | None = None
    idle_s: float = 0.0
    last: float = 0.0                # when its batch last advanced

    @property
    def busy(self) -> int:
        return len(self.active)


class FleetSimulation:
    """One simulated window of one config under one policy (module doc); ``run()`` returns
    the fleet metrics, per-request arrays and the timeline."""

    def __init__(self, traffic: Traffic, capacity: ConfigCapacity, policy: ScalingPolicy, slo: SLO,
                 routing: str = "round_robin", initial: int = 1, seed: int = 0, timeline_s: float | None = None,
                 models: dict[int, ReplicaModel] | None = None, scheduler=None):
        if routing not in ROUTINGS:
            raise ValueError(f"protocol.routing={routing!r}: expected one of {', '.join(ROUTINGS)}")
        self.traffic, self.capacity, self.policy, self.slo = traffic, capacity, policy, slo
        self.routing = routing
        # a protocols.plan.scheduler.SchedulerModel: each replica's requests served by the engine's
        # scheduler (Dynamo's replay) instead of processor sharing; the policy and router as here
        self.scheduler = scheduler
        self.replay_sample: dict | None = None   # what the scheduler's approximation replayed (reserve)
        self.initial = max(policy.autoscale.min_replicas, min(policy.autoscale.max_replicas, int(initial)))
        self.rng = np.random.default_rng(seed)
        corr = capacity.corrections or {}
        self.models = models or {s: ReplicaModel(capacity.points[s], corr.get(s)) for s in capacity.sizes}
        self.model_by_serving: dict[int, ReplicaModel] = {}
        self.n_serving = 0
        cold = policy.cold_start_s if policy.cold_start_s is not None else capacity.cold_start()
        if cold is None:
            raise ValueError(f"config {capacity.name!r}: no measured cold start (engine_startup_s) to scale up by; "
                             "set deployment.autoscale.cold_start_s")
        self.start_delay = float(policy.autoscale.provision_s) + float(cold)
        self.timeline_s = timeline_s or max(1.0, traffic.duration_s / 1440)

    # ------------------------------------------------------------------ the simulation
    def run(self) -> dict:
        env = self.env = simpy.Environment()
        n = len(self.traffic)
        self.ttft = np.full(n, np.nan)
        self.tpot = np.full(n, np.nan)
        self.arrived = np.full(n, np.nan)
        self.served_by = np.full(n, -1, dtype=np.int64)
        self.outside = np.zeros(n, dtype=bool)
        self.replicas: list[Replica] = []
        self.changes: list[tuple[float, int, int, int]] = []   # (time, starting, serving, draining)
        self.needed: list[tuple[float, int]] = []
        self.arrivals = ArrivalWindow(self.policy.autoscale.window_s)
        self.per_replica_arrivals: dict[int, ArrivalWindow] = {}
        self.autoscaler = Autoscaler(self.policy)
        self.rr = 0
        for _ in range(self.initial):
            self.add_replica(ready=True)
        env.process(self.arrive())
        env.process(self.control())
        env.run()
        if self.scheduler is not None:
            self.reserve()
        return self.result()

    def reserve(self) -> None:
        """Each replica's requests (as the router sent them) served again by the scheduler model:
        their TTFT and TPOT are the replay's (``protocols.plan.scheduler``)."""
        t = self.traffic
        which = [np.flatnonzero(self.served_by == r.index) for r in self.replicas]
        got, self.replay_sample = self.scheduler.serve_noted(
            [(self.arrived[i], t.prompt_tokens[i], t.output_tokens[i]) for i in which])
        for i, (ttft, tpot) in zip(which, got):
            self.ttft[i], self.tpot[i] = ttft, tpot

    def add_replica(self, ready: bool = False) -> Replica:
        env = self.env
        r = Replica(index=len(self.replicas), paid_from=env.now,
                    ready_at=env.now if ready else env.now + self.start_delay, last=env.now)
        r.wake = env.event()
        self.replicas.append(r)
        env.process(self.service(r))
        self.per_replica_arrivals[r.index] = ArrivalWindow(self.policy.autoscale.window_s, origin_s=r.ready_at)
        if ready:
            r.routed, r.idle_since = True, env.now
        else:
            env.process(self.come_up(r))
        self.note_change()
        return r

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
        now = self.env.now
        live = [r for r in self.replicas if r.stopped_at is None and not r.routed]
        starting = sum(1 for r in live if r.ready_at > now)   # not up yet
        self.n_serving = len(self.serving())
        # up but taken out: finishing its requests (a start cancelled is stopped at once)
        self.changes.append((now, starting, self.n_serving, len(live) - starting))

    def arrive(self):
        env, t = self.env, self.traffic
        for i in range(len(t)):
            dt = t.arrival_s[i] - env.now
            if dt > 0:
                yield env.timeout(dt)
            self.arrivals.add(env.now)
            self.admit(i, self.route())

    def route(self) -> Replica:
        up = self.serving()
        self.rr += 1
        if self.routing == "least_loaded":   # ties go round the replicas, as a router's would
            return min(up, key=lambda r: (r.busy, (r.index - self.rr) % len(self.replicas)))
        return up[(self.rr - 1) % len(up)]

    def admit(self, i: int, r: Replica) -> None:
        """Request ``i`` joins replica ``r``'s batch with its low-load work (module doc)."""
        now = self.env.now
        win = self.per_replica_arrivals[r.index]
        win.add(now)
        if r.idle_since is not None:
            r.idle_s += now - r.idle_since
            r.idle_since = None
        size, beyond_size = self.capacity.model_size(max(1, len(self.serving())))
        model = self.models[size]
        prompt = int(self.traffic.prompt_tokens[i])
        ttft0, tpot0 = model.work(prompt, self.rng)
        out = int(self.traffic.output_tokens[i])
        self.outside[i] = (beyond_size or r.busy + 1 > model.max_in_flight * 1.05 or prompt > model.max_prompt
                           or win.rate(now) > model.max_rate * 1.05)
        self.tpot[i] = np.nan if out <= 1 else 0.0
        self.served_by[i] = r.index
        self.arrived[i] = now
        self.advance(r)
        r.active[i] = [0, ttft0, tpot0 * max(out - 1, 0)]
        if not r.wake.triggered:
            r.wake.succeed()

    def speeds(self, r: Replica) -> tuple[float, float]:
        return self.model_for(self.n_serving).slowdown(len(r.active))

    def model_for(self, serving: int) -> ReplicaModel:
        m = self.model_by_serving.get(serving)
        if m is None:
            size, _ = self.capacity.model_size(max(1, serving))
            m = self.model_by_serving[serving] = self.models[size]
        return m

    def advance(self, r: Replica) -> None:
        """Every request in flight on ``r`` advances by the time since the last change, at the
        speed of the count that held over it."""
        now = self.env.now
        dt, r.last = now - r.last, now
        if dt <= 0 or not r.active:
            return
        g_pre, g_dec = self.speeds(r)
        for a in r.active.values():
            a[1] -= dt / (g_pre if a[0] == 0 else g_dec)

    def service(self, r: Replica):
        """The replica's batch over time: the loop wakes at the next phase end, or when a
        request joins (``admit`` advances the batch first, so each stretch runs at its count)."""
        env = self.env
        while r.stopped_at is None:
            self.advance(r)
            done = []
            for i, a in r.active.items():
                if a[0] == 0 and a[1] <= 1e-9:
                    self.ttft[i] = env.now - self.arrived[i]
                    a[0], a[1] = 1, a[2]
                if a[0] == 1 and a[1] <= 1e-9:
                    done.append(i)
            for i in done:
                del r.active[i]
                out = int(self.traffic.output_tokens[i])
                if out > 1:
                    self.tpot[i] = (env.now - self.arrived[i] - self.ttft[i]) / (out - 1)
            if done and not r.active:
                r.idle_since = env.now
                if not r.routed:
                    self.stop(r)
                    return
            if r.wake.triggered:
                r.wake = env.event()
            if not r.active:
                yield r.wake
                continue
            g_pre, g_dec = self.speeds(r)
            nxt = min(a[1] * (g_pre if a[0] == 0 else g_dec) for a in r.active.values())
            yield env.timeout(max(nxt, 0.0)) | r.wake

    def stop(self, r: Replica) -> None:
        if r.idle_since is not None and r.ready_at <= self.env.now:
            r.idle_s += self.env.now - r.idle_since
        r.idle_since = None
        r.stopped_at = self.env.now
        self.note_change()

    def control(self):
        env, p = self.env, self.policy.autoscale
        end = self.traffic.duration_s
        cap = self.policy.capacity_rps
        while env.now + p.interval_s <= end:
            yield env.timeout(p.interval_s)
            rate = self.arrivals.rate(env.now)
            if cap:
                self.needed.append((env.now, int(needed_replicas(np.array([rate]), cap)[0])))
            value = rate if p.signal == "utilisation" else float(sum(r.busy for r in self.replicas
                                                                     if r.stopped_at is None))
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
        if r.busy == 0:
            self.stop(r)
            if not r.wake.triggered:
                r.wake.succeed()

    # ------------------------------------------------------------------ what it gives
    def result(self) -> dict:
        t, end = self.traffic, self.traffic.duration_s
        done = ~np.isnan(self.ttft)
        req = request_metrics(self.slo, done, self.ttft, self.tpot, t.output_tokens, end)
        times = np.array([c[0] for c in self.changes])
        starting = np.array([c[1] for c in self.changes])
        serving = np.array([c[2] for c in self.changes])
        draining = np.array([c[3] for c in self.changes])
        # several changes at one instant: the last one holds
        last = np.append(times[1:] != times[:-1], True)
        times, starting, serving, draining = times[last], starting[last], serving[last], draining[last]
        paid = starting + serving + draining
        for r in self.replicas:      # a replica still idle at the end was idle until then
            if r.idle_since is not None and r.stopped_at is None:
                r.idle_s += max(0.0, end - r.idle_since)
                r.idle_since = None
        nt = np.array([0.0] + [x[0] for x in self.needed])
        nn = np.array([self.initial] + [x[1] for x in self.needed])
        idle = sum(r.idle_s for r in self.replicas)
        rep = replica_metrics(times, starting, serving, draining, end, idle_replica_seconds=idle,
                              needed_t=nt if self.policy.capacity_rps else None,
                              needed_n=nn if self.policy.capacity_rps else None)
        out = {**req, **rep,
               "outside_measurements_share": float(self.outside.mean()) if self.outside.size else 0.0,
               "scale_ups": sum(1 for d in self.autoscaler.decisions if d["to"] > d["from"]),
               "scale_downs": sum(1 for d in self.autoscaler.decisions if d["to"] < d["from"]),
               "start_delay_s": self.start_delay, "initial_replicas": self.initial,
               # the scheduler model's approximation, where it sampled (protocols.plan.stretches)
               "replay_sample": self.replay_sample}
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


def calibrate(capacity: ConfigCapacity, iterations: int = 4, seeds: int = 2, seed: int = 0) -> dict:
    """Correction factors of the slowdown curve, per deployment size, so that simulating each
    measured run (Poisson arrivals at its offered rate per replica, its own request count and
    prompts, one replica of its size's model) reproduces its mean TTFT and mean TPOT: the raw
    curve maps a point's mean latency to its mean count in flight, but a request lives through
    a spread of counts and a short probe through a ramp, so the raw curve is too flat where the
    counts spread most (near and past saturation).  Each iteration multiplies a point's factor
    by (measured mean / simulated mean)^0.7, within [1/2, 2] a step, for TTFT and TPOT apart.
    Returns {size: (counts, TTFT factors, TPOT factors)} for ``ConfigCapacity.corrections``;
    estimated points (a model's means at a fixed concurrency) are left as they are."""
    from dataclasses import replace as _replace

    out = {}
    rng = np.random.default_rng(seed)
    for size in capacity.sizes:
        pts = sorted([p for p in capacity.points[size] if p.ttft_s.size], key=lambda p: p.in_flight)
        base = ReplicaModel(pts)
        n = base.L.copy()
        f_ttft, f_tpot = np.ones(n.size), np.ones(n.size)
        one = _replace(capacity, points={1: pts}, corrections=None)
        draws = []
        for p in pts:     # the same arrivals and requests in every iteration
            k = p.ttft_s.size + p.failed
            per = []
            for _ in range(seeds):
                gaps = rng.exponential(1 / max(p.rate_rps, 1e-9), max(k, 1))
                idx = rng.integers(0, p.ttft_s.size, max(k, 1))
                per.append((np.cumsum(gaps) - gaps[0], idx))
            draws.append(per)
        for _ in range(iterations):
            model = ReplicaModel(pts, (n, f_ttft, f_tpot))
            for i, p in enumerate(pts):
                if p.estimated or p.ttft_s.size < 10:
                    continue
                sim_ttft, sim_tpot = [], []
                for j, (arr, idx) in enumerate(draws[i]):
                    tr = Traffic(arr, p.prompt_tokens[idx], p.output_tokens[idx], float(arr[-1]) + 1e-9, "calibration")
                    pol = ScalingPolicy(Autoscale(capacity_rps=max(p.rate_rps, 1e-9), min_replicas=1, max_replicas=1,
                                                  cold_start_s=0.0))
                    sim = FleetSimulation(tr, one, pol, SLO(), seed=j, models={1: model})
                    sim.run()
                    sim_ttft.append(np.nanmean(sim.ttft))
                    sim_tpot.append(np.nanmean(sim.tpot))
                meas_tpot = np.nanmean(p.tpot_s) if np.isfinite(p.tpot_s).any() else np.nan
                for f, meas, got in ((f_ttft, float(np.mean(p.ttft_s)), float(np.mean(sim_ttft))),
                                     (f_tpot, float(meas_tpot), float(np.nanmean(sim_tpot)))):
                    if np.isfinite(meas) and np.isfinite(got) and got > 0:
                        f[i] *= float(np.clip(meas / got, 0.5, 2.0)) ** 0.7
        out[size] = (n, f_ttft, f_tpot)
    return out
