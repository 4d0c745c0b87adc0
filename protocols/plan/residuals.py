"""The plan model's held-out residuals (``protocol.residuals``): what a plan's cheapest-config
verdict folds in beside the capacity's block resamples (``metrics.plan_pick``).

The file is JSON, one of two shapes:

- an object ``{"model": M, "source": "...", "held_out": true|false, "residuals": [RECORD, ...]}``
  (``model``, ``source`` and ``held_out`` optional; ``model`` is then every record's default);
- a bare list ``[RECORD, ...]`` (as ``benchmarks/plan_heldout.py --json`` writes it), each
  record naming its ``model``.

A record is one metric of one validation case: ``{"case": NAME, "metric": KEY, "predicted": x,
"measured": y}`` and, where the file gives no model, ``"model"``: the replica model that made
the prediction (``processor_sharing`` or ``scheduler``, ``protocols.plan.scheduler``).  Other keys
(``error``, ``error_kind``, ``within``) are ignored: the error is recomputed from the two values;
a record whose value is null or NaN (a metric the case could not compute), or whose good output was
predicted as 0 (a replay past its capacity: no cost factor), is left out, with a note.
A case's cost factor (``metrics.plan_pick.cost_factor``) reads ``paid_replica_seconds`` and the
first of ``good_output_throughput``, ``goodput_rps``, ``slo_attainment``; latencies are kept for
the record.  Those metrics need a predicted value above 0 (and a measured one at least 0, above
0 for the replica-seconds).

The default (``DEFAULT``, this folder's ``residuals.json``): the two validation replays of
docs/measured/plan.md, calibrated processor sharing against real autoscaled vLLM CPU replays,
not held out by construction (the file says so: ``held_out: false``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from harness import results_io
from harness.errors import UserError
from metrics.plan_pick import GOOD_METRICS, PAID_METRIC, cost_factor

DEFAULT = str(Path(__file__).with_name("residuals.json"))
MODELS = ("processor_sharing", "scheduler")


@dataclass(frozen=True)
class Factors:
    """One replica model's cost factors, one per case with a good output metric."""
    cases: list[str]
    values: list[float]


@dataclass
class Residuals:
    path: str
    source: str
    held_out: bool | None
    # (model, case) -> {metric: (predicted, measured)}, in the file's order
    cases: dict[tuple[str, str], dict[str, tuple[float, float]]]
    notes: list[str] = field(default_factory=list)

    def factors(self, model: str) -> Factors:
        names, values = [], []
        for (m, case), metrics in self.cases.items():
            q = cost_factor(metrics) if m == model else None
            if q is not None:
                names.append(case)
                values.append(q)
        return Factors(names, values)

    def describe(self) -> dict:
        """What plan.json says of the residuals: the file, where its figures come from, and per
        model and case its cost factor and each metric's relative error (predicted - measured) / measured."""
        models: dict = {}
        for (m, case), metrics in self.cases.items():
            models.setdefault(m, {})[case] = {
                "cost_factor": cost_factor(metrics),
                "metrics": {k: {"predicted": p, "measured": y, "error": (p - y) / y if y else None}
                            for k, (p, y) in metrics.items()}}
        return {"file": self.path, "source": self.source, "held_out": self.held_out, "models": models,
                "notes": self.notes}


def read_residuals(path: str) -> Residuals:
    """The residuals file at ``path`` (module doc); one ``UserError`` naming the file and the
    field for anything wrong in it."""
    where = f"protocol.residuals={path}"
    try:
        doc = results_io.read_json(path)
    except results_io.ResultsFileError as e:
        raise UserError(f"{where}: {e}") from None

    def bad(field_: str, why: str) -> UserError:
        return UserError(f"{where}: {field_}: {why}")

    default_model, source, held_out = None, "", None
    if isinstance(doc, dict):
        records = doc.get("residuals")
        if not isinstance(records, list):
            raise bad("residuals", f"expected a list of records, got {records!r}"[:200])
        default_model = doc.get("model")
        if default_model is not None and default_model not in MODELS:
            raise bad("model", f"{default_model!r} is not a replica model ({', '.join(MODELS)})")
        source = str(doc.get("source") or "")
        held_out = doc.get("held_out")
        if held_out is not None and not isinstance(held_out, bool):
            raise bad("held_out", f"expected true or false, got {held_out!r}")
    elif isinstance(doc, list):
        records = doc
    else:
        raise bad("(top)", f"expected an object with `residuals` (a list of records) or a list of records, "
                           f"got {type(doc).__name__}")
    cases: dict[tuple[str, str], dict[str, tuple[float, float]]] = {}
    skipped: list[str] = []
    for i, r in enumerate(records):
        key = f"residuals[{i}]"
        if not isinstance(r, dict):
            raise bad(key, f"expected an object {{case, metric, predicted, measured}}, got {r!r}"[:200])
        model = r.get("model", default_model)
        if model is None:
            raise bad(f"{key}.model", "missing (give `model` at the top of the file or in each record)")
        if model not in MODELS:
            raise bad(f"{key}.model", f"{model!r} is not a replica model ({', '.join(MODELS)})")
        for name in ("case", "metric"):
            if not isinstance(r.get(name), str) or not r[name]:
                raise bad(f"{key}.{name}", "missing" if name not in r else f"expected a name, got {r[name]!r}")
        vals, undefined = [], []
        for name in ("predicted", "measured"):
            if name not in r:
                raise bad(f"{key}.{name}", "missing")
            v = r[name]
            if v is None or (isinstance(v, float) and math.isnan(v)):
                undefined.append(name)      # a metric the case could not compute (no TPOT, say)
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                raise bad(f"{key}.{name}", f"expected a finite number, got {v!r}")
            vals.append(float(v))
        if undefined:
            skipped.append(f"{key} (case {r['case']!r}, {r['metric']}): {' and '.join(undefined)} undefined: "
                           "left out")
            continue
        metric = r["metric"]
        if metric in (*GOOD_METRICS, PAID_METRIC):
            if vals[0] < 0:
                raise bad(f"{key}.predicted", f"{r['predicted']} must be at least 0")
            if vals[0] == 0:  # a prediction of no good output (a replay past its capacity): no cost factor
                skipped.append(f"{key} (case {r['case']!r}, {metric}): predicted 0, which divides the cost "
                               "factor: left out (the model's error there is not a factor)")
                continue
            if vals[1] < 0 or (metric == PAID_METRIC and vals[1] == 0):
                raise bad(f"{key}.measured", f"{r['measured']} must be "
                                             f"{'above' if metric == PAID_METRIC else 'at least'} 0")
        got = cases.setdefault((model, r["case"]), {})
        if metric in got:
            raise bad(key, f"case {r['case']!r} has {metric} twice (model {model})")
        got[metric] = (vals[0], vals[1])
    notes = skipped + [f"case {case!r} ({model}): no good output metric ({', '.join(GOOD_METRICS)}): not in the cost's "
             "model error" for (model, case), m in cases.items() if cost_factor(m) is None]
    return Residuals(path=str(path), source=source, held_out=held_out, cases=cases, notes=notes)
