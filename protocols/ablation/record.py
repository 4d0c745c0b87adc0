"""An ablation's own record, ``ablation.json``: each arm's effect and the interactions at every
load point, and how the bottleneck moves (``metrics.ablation``), from the runs table; written
after the comparison of its arms (``protocols.compare.record``)."""

from __future__ import annotations

import pyarrow as pa

from harness import results_io
from harness.experiment_record import ProtocolRecord
from metrics.ablation import bottlenecks, effects, format_ablation
from protocols.ablation.plan import ablation_arms


def write_ablation(exp, table: pa.Table, record: dict, quality: dict | None) -> dict:
    """``ablation.json``, printed; no metric of its own for the MLflow parent run."""
    arms = [(name, opts) for name, opts, _ in ablation_arms(exp.cfg.protocol)]
    confidence = float(exp.cfg.protocol.confidence)
    ablation = {"arms": {name: list(opts) for name, opts in arms},
                "confidence": confidence,
                "points": effects(table, arms, confidence=confidence),
                "bottlenecks": bottlenecks(table, arms)}
    results_io.write_json(exp.out / results_io.ABLATION, ablation)
    print(format_ablation(ablation), flush=True)
    return {}


ABLATION_RECORD = ProtocolRecord(write_ablation, (results_io.ABLATION,))
