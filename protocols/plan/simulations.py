"""The plan's simulations (``protocols.plan.run``, step 3 of its module doc): one ``Job`` per
candidate in a plan, on every block's runs or a resample of its blocks, each a fleet simulation
(``protocols.plan.fleet``), run in parallel processes."""

from __future__ import annotations

import dataclasses
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

import numpy as np

from engines.autoscale_policy import ScalingPolicy
from metrics.slo import SLO
from protocols.plan import scheduler as sched
from protocols.plan.capacity import ConfigCapacity
from protocols.plan.day_draws import redrawn_day
from protocols.plan.fleet import FleetSimulation
from protocols.plan.traffic import Traffic

_STATE: dict = {}


def _init(traffic: Traffic, routing: str, initial: int, seed: int) -> None:
    _STATE.update(traffic=traffic, routing=routing, initial=initial, seed=seed)


@dataclass(frozen=True)
class Job:
    """One simulation: a candidate (on every block's runs, or on a resample of its blocks) in
    one plan (an SLO and a policy)."""
    plan: int
    name: str
    blocks: tuple[int, ...] | None      # None: every block once
    weight: float
    capacity: ConfigCapacity
    policy: ScalingPolicy
    slo: SLO
    slo_cfg: dict
    sized: bool                         # the policy's capacity_rps is the measured one
    scheduler: sched.SchedulerModel | None = None   # None: processor sharing
    day: int | None = None              # a redrawn day's index (protocols.plan.day_draws); None: the day given


def _simulate(job: Job) -> dict:
    cap, policy = job.capacity, job.policy
    if job.blocks is not None:
        cap = cap.with_blocks(list(job.blocks))
        if job.sized:
            size = cap.sizes[0]
            measured = cap.max_load(job.slo, size, job.slo_cfg.get("min_attainment"))["mean"]
            if measured > 0:
                policy = dataclasses.replace(policy, measured_capacity_rps=measured)
    traffic, seed = _STATE["traffic"], _STATE["seed"]
    if job.day is not None:
        # another draw of the day and of the simulation's own draws, the same for every candidate
        traffic = redrawn_day(traffic, np.random.default_rng([seed, 1, job.day]))
        seed = [seed, 2, job.day]
    sim = FleetSimulation(traffic, cap, policy, job.slo, _STATE["routing"], _STATE["initial"],
                          seed, scheduler=job.scheduler)
    return {**sim.run(), "output_tokens_offered": float(np.sum(traffic.output_tokens))}


def simulate_all(jobs, traffic: Traffic, routing: str, initial: int, seed: int, workers: int) -> list[dict]:
    """Every job's simulation, in the jobs' order.  In parallel processes, the point estimates
    on the engine's scheduler run first, by themselves: a resample that routes as its point
    estimate did then reads the replays back from the cache (``scheduler.SchedulerModel.serve``)
    instead of replaying the same streams beside it."""
    n = workers or os.cpu_count() or 1
    if n <= 1 or len(jobs) <= 1:
        _init(traffic, routing, initial, seed)
        return [_report(i, len(jobs), _simulate(j)) for i, j in enumerate(jobs)]
    procs = min(n, len(jobs))
    # each process's replays share the cores with the others' (a day's replay holds GBs)
    per = max(1, (os.cpu_count() or 1) // procs)
    jobs = [dataclasses.replace(j, scheduler=dataclasses.replace(j.scheduler, workers=per))
            if j.scheduler is not None and not j.scheduler.workers else j for j in jobs]
    first = [i for i, j in enumerate(jobs) if j.scheduler is not None and j.blocks is None]
    rest = [i for i in range(len(jobs)) if i not in set(first)]
    phases = [first, rest] if first else [rest]
    out: list = [None] * len(jobs)
    done = 0
    with ProcessPoolExecutor(max_workers=procs, initializer=_init,
                             initargs=(traffic, routing, initial, seed)) as ex:
        for phase in phases:
            for i, r in zip(phase, ex.map(_simulate, [jobs[i] for i in phase])):
                out[i] = _report(done, len(jobs), r)
                done += 1
    return out


def _report(i: int, n: int, res: dict) -> dict:
    if sys.stderr.isatty() or (i + 1) % max(1, n // 10) == 0 or i + 1 == n:
        print(f"  simulated {i + 1}/{n}", flush=True)
    return res
