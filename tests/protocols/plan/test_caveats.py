"""The plan's warnings once per kind, ranked (protocols/plan/caveats.py): candidates named with the
plans each concerns counted, what changes the pick before what limits it, the entries' own
findings (source, replay sample, an incomplete bill) read from plan.json."""

from harness.caveats import CHANGES, LIMITS
from protocols.plan.caveats import Finding, plan_caveats


def _doc(configs_per_plan: list[dict]) -> dict:
    return {"plans": [{"variant": "base", "slo": {"ttft_ms": t}, "configs": c, "skipped": {}}
                      for t, c in zip((400, 150, 100), configs_per_plan)],
            "candidates": {"est": {"origin": "estimated by aiconfigurator 0.12.0: llama on h200_sxm"}}}


def _label(plan: dict) -> str:
    return f"{plan['variant']}, ttft {plan['slo']['ttft_ms']}"


def test_one_line_per_kind_ranked_with_the_plans_counted():
    doc = _doc([{"est": {"source": "estimated"}, "a": {"source": "modelled", "replay_sample": {
        "undrained_blocks": 2, "text": "approximate: 2 block(s) had not drained"}}},
                {"est": {"source": "estimated", "cost": {"cost_complete": False, "cost_notes": ["no energy"]}}},
                {}])
    findings = [
        Finding("outside_measurements", "b", 0, "3.0% of requests were served outside the measurements"),
        Finding("not_planned", "b", 1, "no measured point meets the SLO (ttft_ms=150 at p99): its lowest load fails"),
        Finding("not_planned", "b", 2, "no measured point meets the SLO (ttft_ms=100 at p99): its lowest load fails"),
        Finding("not_planned", "a", 2, "no measured cold start (engine_startup_s) in its runs: set it"),
        Finding("impossible_estimate", "est", None, "est (estimated): faster than the roofline bound at 8 in flight"),
        Finding("cannot_keep_up", "b", 0, "the policy could not keep up for 40 s"),
        Finding("cannot_keep_up", "b", 0, "the policy could not keep up for 40 s"),  # said twice: once
    ]
    got = plan_caveats(findings, doc, _label)
    assert [(c.kind, c.rank) for c in got] == [
        ("not_planned", CHANGES), ("cannot_keep_up", CHANGES), ("impossible_estimate", CHANGES),
        ("replay_sample", CHANGES), ("estimated", LIMITS), ("modelled", LIMITS), ("outside_measurements", LIMITS),
        ("cost_lower_bound", LIMITS)]
    text = {c.kind: c.text for c in got}
    assert text["not_planned"] == ("2 candidates not planned: b in 2 of 3 plans, a in 1 of 3 plans (no measured point "
                                   "meets the SLO, no measured cold start): left out of the pick")
    assert text["impossible_estimate"] == ("1 candidate estimated faster than the roofline bound: est: an impossible "
                                           "estimate")
    assert text["estimated"] == ("1 candidate estimated, not measured: est in 2 of 3 plans: capacity from a "
                                 "performance model's estimate")
    assert text["cost_lower_bound"].startswith("cost a lower bound for est in 1 of 3 plans: owned hardware")
    detail = {c.kind: c.detail for c in got}
    assert detail["cannot_keep_up"] == ("base, ttft 400: the policy could not keep up for 40 s",)
    assert detail["estimated"] == ("base, ttft 400: est: estimated by aiconfigurator 0.12.0: llama on h200_sxm",
                                   "base, ttft 150: est: estimated by aiconfigurator 0.12.0: llama on h200_sxm")
    assert detail["replay_sample"] == ("base, ttft 400: a: approximate: 2 block(s) had not drained",)


def test_a_plan_with_nothing_to_say_has_no_caveats():
    assert plan_caveats([], _doc([{"a": {"source": "measured", "cost": {"cost_complete": True}}}]), _label) == []
