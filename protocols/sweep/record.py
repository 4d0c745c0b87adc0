"""A sweep's own part of its record: no file beside ``experiment.json`` and ``runs.parquet``,
and for the MLflow parent run each compared metric per load point over its repeats."""

from __future__ import annotations

import pyarrow as pa

from conf.schema import COMPARED_METRICS
from harness.experiment_record import ProtocolRecord, search_results
from metrics.answer import Answer, search_line, sweep_answer
from metrics.comparison import point_aggregates


def sweep_aggregates(exp, table: pa.Table, record: dict, quality: dict | None) -> dict:
    """Each compared metric's mean and interval per load point, over its repeats."""
    return point_aggregates(table, list(COMPARED_METRICS), seed=int(exp.cfg.seed))


def sweep_answer_of(exp, rows: list[dict], record: dict) -> Answer:
    """The sweep's answer (``metrics.answer.sweep_answer``) from its load points' runs."""
    currency = next((str(r["cost_currency"]) for r in rows if r.get("cost_currency")), "")
    answer = sweep_answer(rows, record.get("slo") or {}, currency, seed=int(exp.cfg.seed))
    searches = search_results(exp.out)  # protocol.search=slo: its answer first
    if not searches:
        return answer
    found = [search_line(s, currency) for s in searches]
    return Answer(answer.protocol, (*found, *answer.lines), {**answer.facts, "search": [
        {k: v for k, v in x.items() if k != "probes"} for x in searches]})


SWEEP_RECORD = ProtocolRecord(sweep_aggregates, answer=sweep_answer_of)
