"""A redrawn day: the same window, rate profile and length mix, its count varying as a Poisson day's."""

from __future__ import annotations

import numpy as np
import pytest

from conf.schema import Autoscale
from engines.autoscale_policy import ScalingPolicy
from metrics.slo import SLO
from protocols.plan.capacity import resamples
from protocols.plan.day_draws import redrawn_day
from protocols.plan.fleet import FleetSimulation
from protocols.plan.record import cheapest, redrawn_day_check
from protocols.plan.run import costs, meets
from protocols.plan.traffic import Traffic
from tests.protocols.plan import capacity_fixtures


def capacity(name, scale=1.0, cost_per_s=0.001):
    """The fixtures' capacity (its knee for a p90 TTFT of 1 s near 6.3 req/s at scale 1) at a price."""
    cap = capacity_fixtures.capacity(name, scale=scale)
    cap.cost = {**cap.cost, "hourly_per_host": cost_per_s * 3600}
    return cap


def poisson(rate, duration, seed) -> Traffic:
    rng = np.random.default_rng(seed)
    t = np.cumsum(rng.exponential(1 / rate, int(rate * duration * 1.5)))
    t = t[t < duration]
    return Traffic(t, np.full(t.size, 100), np.full(t.size, 11), duration, "test")


def poisson_day(seed=0) -> Traffic:
    """5 req/s for 60 s, then 15 req/s for 60 s; prompts of 100 or 900 tokens."""
    rng = np.random.default_rng(seed)
    t = np.concatenate([np.cumsum(rng.exponential(1 / 5, 600)), 60 + np.cumsum(rng.exponential(1 / 15, 1800))])
    t = np.sort(np.concatenate([t[t < 60], t[(t >= 60) & (t < 120)]]))
    return Traffic(t, rng.choice([100, 900], t.size), np.full(t.size, 11), 120.0, "test")


def test_a_redrawn_day_keeps_the_window_the_rate_profile_and_the_length_mix():
    day = poisson_day()
    counts, first, long_share = [], [], []
    for j in range(200):
        d = redrawn_day(day, np.random.default_rng(j))
        assert d.duration_s == 120.0 and np.all(np.diff(d.arrival_s) >= 0)
        assert d.arrival_s[0] >= 0 and d.arrival_s[-1] < 120.0
        counts.append(len(d))
        first.append(int(np.sum(d.arrival_s < 60)))
        long_share.append(float(np.mean(d.prompt_tokens == 900)))
    # the given day: about 300 then 900 requests; redrawn, the same on average, each half its own
    assert abs(np.mean(first) - np.sum(day.arrival_s < 60)) < 0.03 * np.sum(day.arrival_s < 60)
    assert abs(np.mean(counts) - len(day)) < 0.02 * len(day)
    # the count varies as a Poisson count of that mean would (sd sqrt(1200) = 35): not fixed, not wild
    assert 0.6 * np.sqrt(len(day)) < np.std(counts) < 1.5 * np.sqrt(len(day))
    assert abs(np.mean(long_share) - np.mean(day.prompt_tokens == 900)) < 0.01


def test_a_redrawn_day_is_another_day_each_draw_and_the_same_for_the_same_draw():
    day = poisson_day()
    a, b = (redrawn_day(day, np.random.default_rng(s)) for s in (1, 2))
    again = redrawn_day(day, np.random.default_rng(1))
    assert not np.array_equal(a.arrival_s, b.arrival_s)
    assert np.array_equal(a.arrival_s, again.arrival_s)


def test_a_day_of_one_request_is_kept_as_it_is():
    one = Traffic(np.array([3.0]), np.array([100]), np.array([11]), 10.0, "test")
    assert redrawn_day(one, np.random.default_rng(0)) is one


def plan_of(cap, policy, slo_cfg, day: Traffic, redraw: bool) -> tuple[dict, list[tuple[dict, float]]]:
    """A candidate as the plan records it (``protocols.plan.run``): its point estimate's entry and its
    block resamples, each on the given day and, ``redraw``, on its own redrawn day."""
    slo = SLO.from_config(slo_cfg)
    offered = float(np.sum(day.output_tokens))

    def sim(c, traffic, seed):
        res = FleetSimulation(traffic, c, policy, slo, seed=seed).run()
        return {**res, **costs(c, res, policy), "output_tokens_offered": float(np.sum(traffic.output_tokens))}

    point = sim(cap, day, 0)
    entry = {"meets_slo": meets(point, slo_cfg), "metrics": {"cost_per_mtok_good": {"value": point[
        "cost_per_mtok_good"]}}}
    rs = []
    for j, (blocks, w) in enumerate(resamples(cap.blocks, 100, 0)):
        c = cap.with_blocks(list(blocks))
        r = sim(c, day, 0)
        d = sim(c, redrawn_day(day, np.random.default_rng([0, 1, j])), [0, 2, j]) if redraw else None
        rs.append(({"cost_per_mtok_good": r["cost_per_mtok_good"], "cost_total": r["cost_total"],
                    "meets_slo": meets(r, slo_cfg),
                    **redrawn_day_check(r, d, meets(d, slo_cfg) if d else None, offered)}, w))
    return entry, rs


@pytest.mark.slow  # 85 fleet simulations, a 2000 s one among them: 30-40 s on a busy host
def test_a_cheaper_config_missing_the_slo_on_its_days_draw_near_its_knee_counts_by_its_redrawn_days():
    """At 6.2 req/s one replica of the near-knee config meets a p90 TTFT of 1 s over a long run
    (attainment 0.93), but this 60 s day's bursts fail it; a faster config, 20 % dearer, meets it on
    any day.  The plan on that day picks the dearer one, wrong by the long run.  Judged on the given
    day alone, the chance the pick is wrong is stated under 10 % (the resamples miss alike on it);
    judged on redrawn days, as the share of them the near config meets the SLO on (half here)."""
    near = capacity("near", cost_per_s=0.001)
    fast = capacity("fast", scale=0.5, cost_per_s=0.0012)
    policy = ScalingPolicy(Autoscale(min_replicas=1, max_replicas=1, capacity_rps=5.0))
    slo_cfg = {"ttft_ms": 1000.0, "percentile": 90.0}
    # the truth: a 2000 s run of the same traffic meets the SLO on both; near is the cheaper per good token
    long = poisson(6.2, 2000.0, seed=1)
    truth = {c.name: {**(r := FleetSimulation(long, c, policy, SLO.from_config(slo_cfg)).run()), **costs(c, r, policy)}
             for c in (near, fast)}
    assert all(meets(r, slo_cfg) for r in truth.values())
    assert truth["near"]["cost_per_mtok_good"] < truth["fast"]["cost_per_mtok_good"]
    day = poisson(6.2, 60.0, seed=26)
    stated = {}
    for redraw in (False, True):
        entries, resampled = {}, {}
        for c in (near, fast):
            entries[c.name], resampled[c.name] = plan_of(c, policy, slo_cfg, day, redraw)
        assert not entries["near"]["meets_slo"] and entries["fast"]["meets_slo"]
        verdict = cheapest(entries, resampled, 0.95, 0.0)
        assert verdict["config"] == "fast"
        stated[redraw] = verdict["pick_wrong"]["probability"]
    assert stated[False] < 0.1                         # today: the pick said near sure, and wrong
    assert 0.3 <= stated[True] <= 0.7, stated          # redrawn: the near config meets it on about half
