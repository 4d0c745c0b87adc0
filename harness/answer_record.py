"""An experiment's answer and its warnings in ``experiment.json`` (``answer``, ``warnings``), on the
console's last lines and on the MLflow parent run.

The answer is the protocol's (its ``ProtocolRecord.answer``: ``metrics.answer``'s formulas over
the runs); the warnings are ``harness.caveats``' kinds, once each, ranked by what they change, and
the answer's own (``Answer.warnings``: what its figures limit, such as a comparison's blocks too few
to find a 10 % difference), ranked as limiting it.
The console prints the warnings first, then the answer, so that the answer is what a run ends on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from harness.caveats import LIMITS, RANKS, Caveat, from_rows

ANSWER_TAG = "tokenfactory.answer"
NOTE_TAG = "mlflow.note.content"  # the run's description in MLflow's UI


def answer_fields(answer, rows: Sequence[Mapping]) -> dict:
    """experiment.json's ``answer`` (``metrics.answer.Answer`` or None) and ``warnings`` (every
    kind some load-point run has, and what the answer's own figures limit, in rank order)."""
    said = list(answer.warnings) if answer is not None else []
    # one kind, one line (no warning twice): the first sentence, every sentence in its detail
    own = [Caveat("answer_power", LIMITS, said[0] + (f" (and {len(said) - 1} more like it: this warning's detail "
                                                      "in experiment.json)" if len(said) > 1 else ""),
                  tuple(said))] if said else []
    out: dict = {"warnings": [c.to_dict() for c in sorted([*from_rows(rows), *own], key=lambda c: c.rank)]}
    if answer is not None:
        out["answer"] = answer.to_dict()
    return out


def console_lines(record: Mapping) -> list[str]:
    """The console's last lines from experiment.json's ``answer`` and ``warnings`` (none: [])."""
    lines = []
    warnings = record.get("warnings") or []
    if warnings:
        lines.append("warnings, by what they change:")
        lines += [f"  [{w['rank']}] {w['text']}" for w in warnings]
    answer = record.get("answer")
    if answer and answer.get("lines"):
        lines.append(f"answer ({answer.get('protocol')}):")
        lines += [f"  {x}" for x in answer["lines"]]
    return lines


def mlflow_tags(record: Mapping) -> dict[str, str]:
    """The answer as text for the parent run (its description, and a tag the track page reads)."""
    answer = record.get("answer")
    if not answer or not answer.get("lines"):
        return {}
    text = "\n".join(answer["lines"])
    changes = [w["text"] for w in record.get("warnings") or [] if w["rank"] == RANKS[0]]
    note = text + ("".join(f"\nwarning: {w}" for w in changes))
    return {ANSWER_TAG: text, NOTE_TAG: note}
