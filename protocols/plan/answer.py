"""The plan's answer at the end of its run: ``metrics.answer.plan_answer`` over ``plan.json``, kept
in it as ``answer`` (and printed as the console's last lines by the run lifecycle, ``harness.lifecycle``)."""

from __future__ import annotations

from pathlib import Path

from harness import results_io
from metrics.answer import plan_answer


def answer_plan(out: Path) -> dict | None:
    """Add the answer to ``out``'s plan.json; returns it as a record's ``answer`` (none there: None)."""
    path = out / results_io.PLAN
    if not path.exists():
        return None
    doc = results_io.read_json(path)
    answer = plan_answer(doc)
    doc["answer"] = answer.to_dict()
    results_io.write_json(path, doc)
    return {"answer": doc["answer"]}
