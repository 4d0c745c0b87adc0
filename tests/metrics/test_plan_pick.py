"""The chance a plan's pick is wrong (``metrics.plan_pick``): the cost factor of a held-out
case, the joint resamples (capacity x model error), the probability that the runner-up is the
cheaper, its resample error, and the relative difference's pairs; on constructed
distributions whose answers are known by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metrics.plan_pick import Draws, cost_factor, joint, pick_wrong, relative_differences, runner_up_cheaper


def test_the_cost_factor_is_measured_over_predicted_cost_per_good_token():
    # paid 1507 measured / 1519 predicted; good tokens 19.73 predicted / 19.10 measured
    case = {"paid_replica_seconds": (1519.0, 1507.0), "good_output_throughput": (19.73, 19.10),
            "goodput_rps": (1.576, 1.511), "p90_ttft_ms": (1169.0, 1886.0)}
    assert cost_factor(case) == pytest.approx(1507 / 1519 * 19.73 / 19.10, rel=1e-12)


def test_the_cost_factor_falls_back_to_goodput_then_attainment_and_a_fixed_fleet_pays_alike():
    assert cost_factor({"goodput_rps": (2.0, 1.6), "slo_attainment": (0.5, 0.1)}) == pytest.approx(1.25)
    assert cost_factor({"slo_attainment": (0.8, 0.5)}) == pytest.approx(1.6)
    assert cost_factor({"p50_ttft_ms": (100.0, 120.0)}) is None      # latency alone: no cost factor
    assert cost_factor({"slo_attainment": (0.8, 0.0)}) == math.inf   # nothing good measured: no finite cost


def test_joint_resamples_are_every_capacity_resample_times_every_case():
    d = joint([1.0, 2.0], [0.25, 0.75], [0.5, 2.0])
    assert d.values.tolist() == [0.5, 2.0, 1.0, 4.0]
    assert d.weights.tolist() == [0.125, 0.125, 0.375, 0.375]
    assert d.unit.tolist() == [0, 0, 1, 1]
    # no case: the capacity's resamples as they are
    e = joint([1.0, 2.0], [0.25, 0.75], [])
    assert e.values.tolist() == [1.0, 2.0] and e.weights.tolist() == [0.25, 0.75]


def test_a_known_pair_of_distributions_gives_the_exact_probability():
    # pick a: 1.0 (0.2), 2.0 (0.5), 4.0 (0.3); runner-up b: 1.5 (0.6), 3.0 (0.4)
    # b < a: a=2 with b=1.5 (0.5 x 0.6) + a=4 with any b (0.3) = 0.6
    a = joint([1.0, 2.0, 4.0], [0.2, 0.5, 0.3], [])
    b = joint([1.5, 3.0], [0.6, 0.4], [])
    got = runner_up_cheaper(a, b)
    assert got["probability"] == pytest.approx(0.6, abs=1e-12)
    assert got["standard_error"] == 0.0              # both exact enumerations: no resample error


def test_model_error_alone_decides_when_capacity_is_certain():
    # a's cost 1.0 with held-out factors 0.5 and 2.0 (half its cases over-, half under-predict);
    # b's cost 1.5, measured with no model error: b is cheaper in half the joint resamples
    a = joint([1.0], [1.0], [0.5, 2.0])
    b = joint([1.5], [1.0], [])
    assert runner_up_cheaper(a, b)["probability"] == pytest.approx(0.5, abs=1e-12)
    # capacity-only, the same two candidates: b is never cheaper
    assert runner_up_cheaper(joint([1.0], [1.0], []), b)["probability"] == 0.0


def test_zero_residuals_give_the_capacity_only_answer():
    rng = np.random.default_rng(3)
    ya, yb = rng.normal(10, 1, 50), rng.normal(10.5, 1, 50)
    w = np.full(50, 1 / 50)
    cap = runner_up_cheaper(joint(ya, w, []), joint(yb, w, []))
    zero = runner_up_cheaper(joint(ya, w, [1.0, 1.0, 1.0]), joint(yb, w, [1.0]))
    assert zero["probability"] == pytest.approx(cap["probability"], abs=1e-12)
    ra, wa = relative_differences(joint(ya, w, []), joint(yb, w, []))
    rz, wz = relative_differences(joint(ya, w, [1.0, 1.0]), joint(yb, w, [1.0]))
    assert np.sort(np.unique(rz)).tolist() == pytest.approx(np.sort(np.unique(ra)).tolist())
    assert wz.sum() == pytest.approx(wa.sum())


def test_identical_exact_candidates_are_a_coin_toss():
    a = joint([1.0, 2.0, 3.0], [0.2, 0.3, 0.5], [0.9, 1.1])
    got = runner_up_cheaper(a, joint([1.0, 2.0, 3.0], [0.2, 0.3, 0.5], [0.9, 1.1]))
    assert got["probability"] == pytest.approx(0.5, abs=1e-12)
    assert got["standard_error"] == 0.0


def test_identical_random_draws_give_one_half_with_their_resample_error():
    # both sides the values 1..200 drawn at random (weight 1/200 each): P = 0.5 exactly (ties half);
    # each draw's placement is (i - 1/2)/200, variance (n + 1)/(12 n) with n - 1 in the divisor,
    # so se^2 = 2 (n + 1) / (12 n^2)
    n = 200
    v = np.arange(1.0, n + 1)
    w = np.full(n, 1 / n)
    got = runner_up_cheaper(joint(v, w, [], random=True), joint(v, w, [], random=True))
    assert got["probability"] == pytest.approx(0.5, abs=1e-12)
    assert got["standard_error"] == pytest.approx(math.sqrt(2 * (n + 1) / (12 * n * n)), rel=1e-9)  # 0.02894


def test_two_random_samples_of_one_distribution_stay_within_their_resample_error():
    rng = np.random.default_rng(11)
    w = np.full(200, 1 / 200)
    got = runner_up_cheaper(joint(rng.normal(5, 1, 200), w, [], random=True),
                            joint(rng.normal(5, 1, 200), w, [], random=True))
    assert got["standard_error"] == pytest.approx(0.0289, abs=0.002)
    assert abs(got["probability"] - 0.5) < 3 * got["standard_error"]


def test_nan_costs_are_left_out_and_infinite_ones_kept():
    a = joint([1.0, math.nan], [0.5, 0.5], [])
    b = joint([0.5, math.inf], [0.5, 0.5], [])
    # a is 1.0 (its NaN resample left out, weight renormalised); b is cheaper half the time
    assert runner_up_cheaper(a, b)["probability"] == pytest.approx(0.5)


def test_relative_differences_pair_every_joint_resample():
    rel, w = relative_differences(joint([1.0, 2.0], [0.5, 0.5], []), joint([4.0], [1.0], [0.5, 1.0]))
    # a / b - 1 over (1, 2) x (2, 4)
    assert sorted(zip(rel.tolist(), w.tolist())) == sorted([(-0.5, 0.25), (-0.75, 0.25), (0.0, 0.25), (-0.5, 0.25)])


def test_too_many_pairs_are_drawn_by_weight_with_a_seed():
    a = joint(np.arange(1.0, 1001.0), np.full(1000, 1e-3), [1.0, 1.1])
    b = joint(np.arange(1.0, 1001.0), np.full(1000, 1e-3), [0.9])
    rel, w = relative_differences(a, b, max_pairs=10_000, seed=0)
    assert rel.size == 10_000 and w.sum() == pytest.approx(1.0)
    again, _ = relative_differences(a, b, max_pairs=10_000, seed=0)
    assert np.array_equal(rel, again)


def test_draws_carry_whether_they_are_random():
    assert isinstance(joint([1.0], [1.0], []), Draws)
    assert joint([1.0], [1.0], [], random=True).random is True


def _by_hand(a, wa, qa, b, wb, qb) -> float:
    """P(runner-up cheaper) as the formula reads: every pair of joint resamples, ties half."""
    ja = [(y * q, w / len(qa or [1.0])) for y, w in zip(a, wa) for q in (qa or [1.0])]
    jb = [(y * q, w / len(qb or [1.0])) for y, w in zip(b, wb) for q in (qb or [1.0])]
    num = sum(x * z * (1.0 if yb < ya else 0.5 if yb == ya else 0.0) for ya, x in ja for yb, z in jb)
    return num / (sum(x for _, x in ja) * sum(z for _, z in jb))


costs = st.lists(st.tuples(st.sampled_from([0.5, 1.0, 1.25, 2.0, 3.0]), st.integers(1, 5)), min_size=1, max_size=6)
facs = st.lists(st.sampled_from([0.8, 1.0, 1.25, 2.0]), max_size=3)


@settings(max_examples=60, deadline=None)
@given(costs, facs, costs, facs)
def test_the_probability_agrees_with_the_formula_by_hand(a, qa, b, qb):
    ya, wa = [c for c, _ in a], [w / sum(x for _, x in a) for _, w in a]
    yb, wb = [c for c, _ in b], [w / sum(x for _, x in b) for _, w in b]
    got = runner_up_cheaper(joint(ya, wa, qa), joint(yb, wb, qb))["probability"]
    assert got == pytest.approx(_by_hand(ya, wa, qa, yb, wb, qb), abs=1e-12)


def test_a_shared_model_error_cancels_between_candidates_on_one_models_cases():
    # a at 1.0 and b at 1.05 on one replica model whose cases' factors are 1.2 and 0.9.  As
    # independent, b is the cheaper in 1 of 4 pairs (b x 0.9 below a x 1.2); the one model's error
    # moves both alike, so b, 5 % dearer on every case, is never the cheaper
    a, b = joint([1.0], [1.0], [1.2, 0.9]), joint([1.05], [1.0], [1.2, 0.9])
    assert runner_up_cheaper(a, b)["probability"] == pytest.approx(0.25)
    assert runner_up_cheaper(a, b, shared=True)["probability"] == 0.0
    rel, w = relative_differences(a, b, shared=True)
    assert rel.tolist() == pytest.approx([1 / 1.05 - 1] * 2) and w.sum() == pytest.approx(1.0)


def _shared_by_hand(a, wa, b, wb, q) -> float:
    """P_shared (module doc): each case on both sides, ties half."""
    q = q or [1.0]
    return sum(x * z / len(q) * (1.0 if yb * c < ya * c else 0.5 if yb * c == ya * c else 0.0)
               for c in q for ya, x in zip(a, wa) for yb, z in zip(b, wb))


@settings(max_examples=40, deadline=None)
@given(costs, costs, facs, st.booleans(), st.booleans())
def test_the_shared_probability_agrees_with_the_formula_by_hand(a, b, q, ra, rb):
    ya, wa = [c for c, _ in a], [w / sum(x for _, x in a) for _, w in a]
    yb, wb = [c for c, _ in b], [w / sum(x for _, x in b) for _, w in b]
    got = runner_up_cheaper(joint(ya, wa, q, random=ra), joint(yb, wb, q, random=rb), shared=True)
    assert got["probability"] == pytest.approx(_shared_by_hand(ya, wa, yb, wb, q), abs=1e-12)
    rel, w = relative_differences(joint(ya, wa, q), joint(yb, wb, q), shared=True)
    from metrics.plan_pick import probability_from_differences
    assert probability_from_differences(rel, w) == pytest.approx(got["probability"], abs=1e-12)


def test_shared_pairs_past_the_limit_are_drawn_within_a_case():
    a, b = joint([1.0, 2.0], [0.5, 0.5], [1.0, 10.0]), joint([1.5, 3.0], [0.5, 0.5], [1.0, 10.0])
    rel, w = relative_differences(a, b, max_pairs=4, shared=True)
    assert rel.size == 4 and w.sum() == pytest.approx(1.0)
    # within one case the factor cancels: only the capacity ratios 1/1.5, 1/3, 2/1.5, 2/3 remain
    assert set(np.round(rel + 1, 6)) <= {round(x, 6) for x in (1 / 1.5, 1 / 3, 2 / 1.5, 2 / 3)}


def test_pick_wrong_counts_a_cheaper_candidate_by_its_share_meeting_the_slo():
    a = joint([1.0, 1.0], [0.5, 0.5], [])
    b = joint([0.9, 0.9, 0.9, 0.9, 0.9], [0.2] * 5, [])          # cheaper always, meets in 2 of 5
    c = joint([0.95, 1.2], [0.5, 0.5], [])                      # cheaper in half, meets always
    got = pick_wrong(a, [True, True], {"b": (b, [True, False, True, False, False], False),
                                        "c": (c, [True, True], False)})
    # right = 1 x (1 - 0.4) x (1 - 0.5) = 0.3
    assert got["probability"] == pytest.approx(0.7)
    assert got["meets_and_cheaper"] == {"b": pytest.approx(0.4), "c": pytest.approx(0.5)}
    # the pick missing the SLO in one resample of two: wrong there whatever the others
    got = pick_wrong(a, [True, False], {"b": (b, [False] * 5, False)})
    assert got["probability"] == pytest.approx(0.5) and got["pick_misses_slo"] == pytest.approx(0.5)


def test_pick_wrong_ties_count_half_and_no_resample_gives_none():
    a, b = joint([1.0], [1.0], []), joint([1.0], [1.0], [])
    assert pick_wrong(a, [True], {"b": (b, [True], False)})["probability"] == pytest.approx(0.5)
    empty = joint([float("nan")], [1.0], [])
    assert pick_wrong(a, [True], {"b": (empty, [True], False)})["probability"] is None
