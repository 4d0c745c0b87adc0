"""A sweep's own part of its record: no file beside ``experiment.json`` and ``runs.parquet``,
and for the MLflow parent run each compared metric per load point over its repeats."""

from __future__ import annotations

import pyarrow as pa

from conf.schema import COMPARED_METRICS
from harness.experiment_record import ProtocolRecord
from metrics.answer import Answer, sweep_answer
from metrics.comparison import point_aggregates


def sweep_aggregates(exp, table: pa.Table, record: dict, quality: dict | None) -> dict:
    """Each compared metric's mean and interval per load point, over its repeats."""
    return point_aggregates(table, list(COMPARED_METRICS), seed=int(exp.cfg.seed))


def sweep_answer_of(exp, rows: list[dict], record: dict) -> Answer:
    """The sweep's answer (``metrics.answer.sweep_answer``) from its load points' runs."""
    currency = next((str(r["cost_currency"]) for r in rows if r.get("cost_currency")), "")
    return sweep_answer(rows, record.get("slo") or {}, currency, seed=int(exp.cfg.seed))


SWEEP_RECORD = ProtocolRecord(sweep_aggregates, answer=sweep_answer_of)
