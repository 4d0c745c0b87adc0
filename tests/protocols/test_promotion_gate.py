"""The promotion gate's statistics and the stage machine (step 7)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from omegaconf import OmegaConf

from conf.schema import GATE_MARGINS, PromoteProtocol
from metrics.promotion_gate import (
    SideSample,
    agreement_check,
    compare_sides,
    gate_outcome,
    guard_trips,
    look_confidence,
    metric_kind,
)
from protocols.promote.plan import StageMachine, plan_stages


def side(rng, n, ttft=0.05, tpot=0.01, err=0.0, scale=1.0, slo_ttft=0.2, tokens=64, t=None):
    t = np.sort(rng.uniform(0, 60e9, n)).astype(np.int64) if t is None else t
    ok = rng.random(n) >= err
    tt = rng.lognormal(np.log(ttft * scale), 0.3, n)
    tp = rng.lognormal(np.log(tpot * scale), 0.2, n)
    tt[~ok] = np.nan
    tp[~ok] = np.nan
    return SideSample(t, ok, ok & (tt <= slo_ttft), tt, tp, np.where(ok, float(tokens), 0.0))


def decisions(res):
    return {k: v["decision"] for k, v in res.items()}


def test_equal_sides_pass_and_numbers_are_the_sides_own():
    rng = np.random.default_rng(0)
    inc, cand = side(rng, 1500), side(rng, 1500)
    res = compare_sides(inc, cand, GATE_MARGINS, paired=False, cost_per_request=2e-4)
    assert set(decisions(res).values()) == {"pass"}
    assert gate_outcome(res, None)[0] == "advance"
    p90 = res["p90_ttft_ms"]
    assert p90["incumbent"] == pytest.approx(np.percentile(inc.ttft_s, 90) * 1e3)
    assert p90["candidate"] == pytest.approx(np.percentile(cand.ttft_s, 90) * 1e3)
    assert p90["low"] < p90["difference"] < p90["high"] and p90["method"].startswith("block ")
    # cost: 1e6 x cost per request x requests / good tokens (all good: 64 tokens each)
    assert res["cost_per_mtok_good"]["incumbent"] == pytest.approx(1e6 * 2e-4 / 64)


def test_slower_candidate_fails_beyond_the_margin_and_rolls_back():
    rng = np.random.default_rng(1)
    res = compare_sides(side(rng, 1500), side(rng, 1500, scale=1.5), GATE_MARGINS, paired=False)
    d = decisions(res)
    assert d["p50_ttft_ms"] == "fail" and d["p50_tpot_ms"] == "fail"
    assert res["p50_ttft_ms"]["low"] > GATE_MARGINS["p50_ttft_ms"]  # worse beyond the margin, with confidence
    outcome, reasons = gate_outcome(res, None)
    assert outcome == "rollback" and any(r.startswith("p50_ttft_ms fail") for r in reasons)


def test_too_few_candidate_requests_is_not_a_pass():
    rng = np.random.default_rng(2)
    res = compare_sides(side(rng, 2000), side(rng, 8, scale=1.3), GATE_MARGINS, paired=False)
    assert "inconclusive" in decisions(res).values()
    assert gate_outcome(res, None)[0] == "extend"
    res0 = compare_sides(side(rng, 100), SideSample(*(np.empty(0),) * 6), GATE_MARGINS, paired=False)
    assert all(math.isnan(v["low"]) for v in res0.values()) and gate_outcome(res0, None)[0] == "extend"


def test_errors_and_attainment_are_absolute_differences():
    rng = np.random.default_rng(3)
    inc, cand = side(rng, 3000), side(rng, 3000, err=0.08)
    res = compare_sides(inc, cand, {"error_rate": 0.01, "slo_attainment": 0.02}, paired=False)
    e = res["error_rate"]
    assert e["difference"] == pytest.approx(np.mean(~cand.ok) - np.mean(~inc.ok))
    assert e["decision"] == "fail" and e["low"] > 0.01
    assert res["slo_attainment"]["decision"] == "fail" and res["slo_attainment"]["high"] < -0.02


def test_paired_shadow_is_tighter_than_unpaired_on_the_same_requests():
    """Shadow: both sides ran the same requests, whose sizes drive both latencies; resampling
    the same blocks for both cancels that common part."""
    rng = np.random.default_rng(4)
    n = 1200
    t = np.sort(rng.uniform(0, 60e9, n)).astype(np.int64)
    size = rng.lognormal(0, 0.8, n)  # a request's own difficulty, shared by both sides
    drift = 1 + 0.5 * np.sin(t / 6e9)  # the load over time, shared too
    mk = lambda noise: SideSample(t, np.ones(n, bool), np.ones(n, bool), 0.05 * size * drift * noise,  # noqa: E731
                                  0.01 * drift * noise, np.full(n, 64.0))
    inc, cand = mk(rng.lognormal(0, 0.05, n)), mk(rng.lognormal(0, 0.05, n))
    paired = compare_sides(inc, cand, {"p50_ttft_ms": 0.1}, paired=True)["p50_ttft_ms"]
    shuffled = SideSample(*(a[rng.permutation(n)] if i else a for i, a in enumerate(
        (cand.arrive_ns, cand.ok, cand.good, cand.ttft_s, cand.tpot_s, cand.output_tokens))))
    unpaired = compare_sides(inc, shuffled, {"p50_ttft_ms": 0.1}, paired=False)["p50_ttft_ms"]
    assert paired["pairing"].startswith("paired") and unpaired["pairing"].startswith("unpaired")
    assert (paired["high"] - paired["low"]) < 0.5 * (unpaired["high"] - unpaired["low"])


def test_better_latency_but_failing_agreement_is_rolled_back():
    rng = np.random.default_rng(5)
    res = compare_sides(side(rng, 1500), side(rng, 1500, scale=0.6), GATE_MARGINS, paired=True, cost_per_request=1e-4)
    assert set(decisions(res).values()) == {"pass"} and res["p50_ttft_ms"]["difference"] < -0.3  # much faster
    same = [list(range(20))] * 40
    diverged = [list(range(5)) + [99] * 15] * 40  # every output diverges after 5 tokens: agreement 0.25
    agree = agreement_check(list(zip(same, diverged)), min_agreement=0.9)
    assert agree["decision"] == "fail" and agree["mean_agreement"] == pytest.approx(0.25)
    assert agree["min_first_divergence"] == 5
    outcome, reasons = gate_outcome(res, agree)
    assert outcome == "rollback" and reasons[0].startswith("token_agreement fail")
    good = agreement_check(list(zip(same, same)), min_agreement=0.9)
    assert good["decision"] == "pass" and gate_outcome(res, good)[0] == "advance"


def test_agreement_needs_pairs_in_shadow_only():
    assert agreement_check([], 0.9, min_pairs=10, required=True)["decision"] == "inconclusive"
    assert agreement_check([], 0.9, min_pairs=10, required=False)["decision"] == "not gated"
    mixed = [([1, 2, 3, 4], [1, 2, 3, 4])] * 30 + [([1, 2, 3, 4], [1, 2, 9, 9])] * 3
    a = agreement_check(mixed, 0.9)
    assert a["mean_agreement"] == pytest.approx((30 + 3 * 0.5) / 33) and a["low"] < a["mean_agreement"] < a["high"]


def test_looks_spend_alpha_and_metric_names_are_checked():
    assert look_confidence(0.95, 1) == pytest.approx(0.975)
    assert look_confidence(0.95, 2) == pytest.approx(0.9875)
    assert sum(1 - look_confidence(0.95, k) for k in range(1, 40)) < 0.05
    assert metric_kind("p90_tpot_ms") == ("quantile", False, "relative")
    with pytest.raises(ValueError, match="protocol.gate.margins.p100_ttft_ms"):
        metric_kind("p100_ttft_ms")


def test_guards():
    rng = np.random.default_rng(6)
    kw = dict(min_requests=5, max_error_rate_increase=0.05, max_attainment_drop=0.1, max_ttft_ratio=3.0,
              stall_s=10.0, ttft_floor_ms=50.0)
    assert guard_trips(side(rng, 50), side(rng, 50), **kw) == []
    trips = {t["guard"] for t in guard_trips(side(rng, 50), side(rng, 50, err=0.5), **kw)}
    assert trips == {"error_rate", "attainment"}
    slow = guard_trips(side(rng, 50, ttft=0.1), side(rng, 50, ttft=0.5, slo_ttft=10), **kw)
    assert [t["guard"] for t in slow] == ["latency"] and slow[0]["value"] > 3 * slow[0]["incumbent"]
    # tiny latencies: 3x of 1 ms is noise, below the floor
    assert guard_trips(side(rng, 50, ttft=0.001), side(rng, 50, ttft=0.005), **kw) == []
    # too few candidate requests: no rate guard, but a stalled request trips at once
    assert guard_trips(side(rng, 50), side(rng, 3, err=1.0), **kw) == []
    stall = guard_trips(side(rng, 50), side(rng, 0), candidate_oldest_wait_s=12.0, **kw)
    assert [t["guard"] for t in stall] == ["stall"]


# ------------------------------------------------------------------------------------ stages
def stages_cfg(stages=None):
    cfg = OmegaConf.structured(PromoteProtocol)
    return cfg if stages is None else OmegaConf.merge(cfg, {"stages": stages})


def test_default_plan_and_checks():
    st = plan_stages(stages_cfg())
    assert [s.name for s in st] == ["shadow", "canary_1", "canary_5", "canary_25", "full"]
    assert [s.share for s in st] == [0.0, 0.01, 0.05, 0.25, 1.0] and st[0].mode == "shadow"
    with pytest.raises(ValueError, match=r"protocol.stages\[1\]: share=1 leaves the incumbent"):
        plan_stages(stages_cfg([{"mode": "shadow"}, {"share": 1.0}]))
    with pytest.raises(ValueError, match=r"protocol.stages\[0\].share=0.0: a canary stage"):
        plan_stages(stages_cfg([{"mode": "canary"}]))
    with pytest.raises(ValueError, match="min_duration_s=9 > max_duration_s=5"):
        plan_stages(stages_cfg([{"mode": "shadow", "min_duration_s": 9, "max_duration_s": 5}]))


def machine():
    return StageMachine(plan_stages(stages_cfg([
        {"mode": "shadow", "min_requests": 10, "min_duration_s": 5, "max_duration_s": 30},
        {"share": 0.1, "min_requests": 10, "min_duration_s": 5, "max_duration_s": 30},
        {"share": 1.0, "mirror": 0.1, "min_requests": 10, "min_duration_s": 5, "max_duration_s": 30}])),
        regate_s=5)


def test_stage_machine_promotes_through_every_stage():
    m = machine()
    m.start(0.0)
    assert not m.gate_due(4.9, 100) and not m.gate_due(6.0, 9) and m.gate_due(6.0, 10)
    t = 6.0
    for _ in range(3):
        assert m.gate_due(t, 10)
        m.on_gate(t, "advance", ["ok"])
        t += 6.0
    assert m.state == "promoted" and m.done and not m.gate_due(t, 100)
    assert [d.action for d in m.decisions] == ["start", "advance", "start", "advance", "start", "promote"]
    assert [d.stage for d in m.decisions if d.action == "start"] == ["shadow", "canary_10", "canary_100"]


def test_undecided_stage_is_gated_again_then_rolled_back_at_max_duration():
    m = machine()
    m.start(0.0)
    d = m.on_gate(6.0, "extend", ["p99 inconclusive"])
    assert d.action == "extend" and m.state == "running"
    assert not m.gate_due(10.0, 50) and m.gate_due(11.0, 50)  # next look after another min_duration_s
    m.on_gate(11.0, "extend", ["still"])
    assert m.gate_due(30.0, 0)  # max_duration_s: gated whatever it has
    d = m.on_gate(30.0, "extend", ["still"])
    assert d.action == "rollback" and m.state == "rolled_back" and "max_duration_s=30" in d.reason
    assert [x.numbers["look"] for x in m.decisions[1:]] == [1, 2, 3]


def test_gate_failure_and_guard_roll_back_at_once():
    m = machine()
    m.start(0.0)
    m.on_gate(6.0, "advance", ["ok"])
    d = m.on_guard(7.5, [{"guard": "error_rate", "reason": "candidate error rate 40%"}])
    assert d.action == "rollback" and d.stage == "canary_10" and m.done and "guard: candidate error rate" in d.reason
    m2 = machine()
    m2.start(0.0)
    assert m2.on_gate(6.0, "rollback", ["p50_ttft_ms fail"]).action == "rollback" and m2.state == "rolled_back"


def test_a_percentile_needs_mlperfs_minimum_of_samples():
    rng = np.random.default_rng(7)
    inc, cand = side(rng, 300), side(rng, 300, scale=3.0)  # much slower, but 300 < 662 values for a p99
    res = compare_sides(inc, cand, {"p99_ttft_ms": 0.25, "p90_ttft_ms": 0.25}, paired=False)
    assert res["p99_ttft_ms"]["decision"] == "inconclusive" and "662 needed" in res["p99_ttft_ms"]["note"]
    assert res["p90_ttft_ms"]["decision"] == "fail"  # 300 >= 64


def _rows(rng, ids, side_name, shadow, ttft_s, t0=0):
    from harness.proxy.server import Row

    tt = rng.lognormal(np.log(ttft_s), 0.2, len(ids))
    return [Row(f"p{i}", side_name, shadow, t0 + i * 10_000_000, t0 + i * 10_000_000, None, "ok", float(x), 0.003,
                0.05, 16, True, False, None) for i, x in zip(ids, tt)]


def test_a_fully_mirrored_canary_is_gated_on_the_same_requests_on_both_sides():
    """The real run's case: at 5 % with every candidate request mirrored, the requests that ran on
    both sides at once were slower on both (12.9 ms) than the incumbent's own (9.2 ms)."""
    from protocols.promote.gate import gate_rows
    from protocols.promote.plan import Stage

    rng = np.random.default_rng(3)
    cand_ids = list(range(0, 2000, 20))  # 5 % of 2000 callers
    own = _rows(rng, [i for i in range(2000) if i % 20], "incumbent", False, 0.0092)
    twins = _rows(rng, cand_ids, "incumbent", True, 0.0129)
    served = _rows(rng, cand_ids, "candidate", False, 0.0129)
    cancelled = served[0]._replace(request_id="p99999", status="cancelled")
    margins = {"p50_ttft_ms": 0.25}

    mirrored = Stage("canary_5", "canary", 0.05, 1.0, 50, 0, 100)
    inc, cand, how = gate_rows(mirrored, own + twins, served + [cancelled])
    assert how == "paired (mirrored requests)"
    assert [r.request_id for r in inc] == [r.request_id for r in cand] and len(cand) == len(cand_ids)
    assert all(r.shadow for r in inc) and not any(r.shadow for r in cand)
    res = compare_sides(SideSample.from_rows(inc), SideSample.from_rows(cand), margins, paired=True, label=how)
    assert res["p50_ttft_ms"]["decision"] == "pass" and res["p50_ttft_ms"]["pairing"] == how

    # without the mirror the callers' own requests are compared: the duplicated ones look worse
    partial = Stage("canary_25", "canary", 0.25, 0.2, 50, 0, 100)
    inc, cand, how = gate_rows(partial, own + twins, served)
    assert how == "unpaired (same period)" and not any(r.shadow for r in inc) and len(inc) == len(own)
    res = compare_sides(SideSample.from_rows(inc), SideSample.from_rows(cand), margins, paired=False)
    assert res["p50_ttft_ms"]["decision"] == "fail"

    # everyone on the candidate, half mirrored: the mirrored half is all the incumbent ran
    full = Stage("full", "canary", 1.0, 0.5, 50, 0, 100)
    inc, cand, how = gate_rows(full, twins[::2], served)
    assert how == "paired (mirrored requests)" and [r.request_id for r in cand] == [r.request_id for r in twins[::2]]

    shadow = Stage("shadow", "shadow", 0.0, 0.0, 200, 0, 100)
    copies = _rows(rng, range(2000), "candidate", True, 0.0092)
    inc, cand, how = gate_rows(shadow, own, copies)
    assert how == "paired (same requests)" and len(inc) == len(own) and len(cand) == 2000
