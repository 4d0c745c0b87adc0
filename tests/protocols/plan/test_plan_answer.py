"""The plan's answer (metrics.answer.plan_answer, protocols.plan.answer): per plan, the pick, its cost
with the interval, and the probability the runner-up is the cheaper; kept in plan.json, printed last."""

from __future__ import annotations

import json

from metrics.answer import plan_answer
from protocols.plan.answer import answer_plan

SLO = {"ttft_ms": 1000, "tpot_ms": 150, "percentile": 99}


def _plan(variant: str, cheapest: dict) -> dict:
    cost = {"value": 0.1234, "interval": [0.11, 0.135]}
    return {"variant": variant, "slo": SLO, "cheapest": cheapest,
            "configs": {"fast": {"metrics": {"cost_per_mtok_good": cost}}, "slow": {"metrics": {}}}}


DOC = {"plans": [
    _plan("reactive", {"config": "fast", "ranking": ["fast", "slow"], "among": "configs whose plan meets the SLO",
                       "runner_up_cheaper": {"pick": "fast", "runner_up": "slow", "probability": 0.0375}}),
    _plan("predictive", {"config": None, "ranking": ["fast", "slow"], "among": "configs whose plan meets the SLO",
                         "runner_up_cheaper": {"pick": "fast", "runner_up": "slow", "probability": 0.41}}),
    _plan("fixed", {"config": None, "ranking": ["slow"], "among": "no config meets the SLO: ranked by cost alone",
                    "verdict": "no config's plan meets the SLO",
                    "runner_up_cheaper": {"probability": None, "why": "no pick to be wrong"}})]}


def test_each_plan_answers_its_pick_cost_and_the_chance_it_is_wrong():
    assert plan_answer(DOC).lines == (
        "reactive policy, p99 TTFT ≤ 1000 ms, TPOT ≤ 150 ms: the pick is fast, 0.1234 [0.11, 0.135] per M good "
        "tokens; P(slow cheaper, the pick wrong) = 3.8%",
        "predictive policy, p99 TTFT ≤ 1000 ms, TPOT ≤ 150 ms: the pick is fast (not significantly cheaper than "
        "the runner-up), 0.1234 [0.11, 0.135] per M good tokens; P(slow cheaper, the pick wrong) = 41.0%",
        "fixed policy, p99 TTFT ≤ 1000 ms, TPOT ≤ 150 ms: no pick: no config's plan meets the SLO")


def test_the_answer_is_kept_in_plan_json_and_printed_last(tmp_path, capsys):
    from harness.answer_record import console_lines

    (tmp_path / "plan.json").write_text(json.dumps(DOC))
    record = answer_plan(tmp_path)
    doc = json.loads((tmp_path / "plan.json").read_text())
    assert record == {"answer": doc["answer"]}
    assert doc["answer"]["lines"] == list(plan_answer(DOC).lines)
    assert doc["answer"]["picks"][0] == {"pick": "fast", "probability_wrong": 0.0375}
    # what the run lifecycle prints last (harness.lifecycle, a protocol without a parent run)
    assert console_lines(record) == ["answer (plan):", *(f"  {x}" for x in doc["answer"]["lines"])]


def test_the_answer_states_the_chance_the_pick_is_wrong_over_every_config():
    # the runner-up missing the SLO in its plan: no runner-up's figure, the pick_wrong one stated
    doc = {"plans": [_plan("fixed", {
        "config": "fast", "ranking": ["fast"], "among": "configs whose plan meets the SLO",
        "runner_up_cheaper": {"pick": "fast", "probability": None,
                              "why": "no runner-up: fast is the only config whose plan meets the SLO"},
        "pick_wrong": {"pick": "fast", "probability": 0.4}})]}
    a = plan_answer(doc)
    assert a.lines == ("fixed policy, p99 TTFT ≤ 1000 ms, TPOT ≤ 150 ms: the pick is fast, 0.1234 [0.11, 0.135] per M "
                       "good tokens; P(the pick wrong) = 40.0% over every config meeting the SLO or not (no runner-up: "
                       "fast is the only config whose plan meets the SLO)",)
    assert a.facts["picks"] == [{"pick": "fast", "probability_wrong": 0.4}]
