"""A sweep's own part of its record: no file beside ``experiment.json`` and ``runs.parquet``,
and for the MLflow parent run each compared metric per load point over its repeats."""

from __future__ import annotations

import pyarrow as pa

from conf.schema import COMPARED_METRICS
from harness.experiment_record import ProtocolRecord
from metrics.comparison import point_aggregates


def sweep_aggregates(exp, table: pa.Table, record: dict, quality: dict | None) -> dict:
    """Each compared metric's mean and interval per load point, over its repeats."""
    return point_aggregates(table, list(COMPARED_METRICS), seed=int(exp.cfg.seed))


SWEEP_RECORD = ProtocolRecord(sweep_aggregates)
