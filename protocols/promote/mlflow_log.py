"""protocol=promote: MLflow: the gates' numbers per look and the decisions on the parent run."""

from __future__ import annotations

import math
import time


def log_gate(mlflow, step: int, stage_index: int, stage_name: str, gate: dict) -> None:
    """One look of a stage's gate on the parent run ``mlflow``: its numbers as metrics at ``step``
    (the promotion's look count), its outcome and reasons as a tag."""
    if mlflow is None:
        return
    from mlflow.entities import Metric, RunTag

    ts = int(time.time() * 1000)
    ms = [Metric("gate.stage_index", float(stage_index), ts, step), Metric("gate.t_s", gate["t_s"], ts, step),
          Metric("gate.advance", float(gate["outcome"] == "advance"), ts, step)]
    for name, v in gate["metrics"].items():
        for k in ("incumbent", "candidate", "difference", "low", "high"):
            x = v.get(k)
            if isinstance(x, (int, float)) and math.isfinite(x):
                ms.append(Metric(f"gate.{name}.{k}", float(x), ts, step))
    a = gate.get("agreement") or {}
    for k in ("mean_agreement", "low", "high"):
        x = a.get(k)
        if isinstance(x, (int, float)) and math.isfinite(x):
            ms.append(Metric(f"gate.token_agreement.{k}", float(x), ts, step))
    mlflow.client.log_batch(mlflow.parent_id, metrics=ms, tags=[RunTag(
        f"gate.{step:02d}", f"{stage_name} look {gate['look']}: {gate['outcome']}: "
                            f"{'; '.join(gate['reasons'])}"[:5000])])

def log_decisions(mlflow, rec: dict) -> None:
    """The outcome and each decision as tags of the parent run (its metrics, files and end:
    ``harness.finish``)."""
    if mlflow is None:
        return
    from mlflow.entities import RunTag

    tags = [RunTag("promotion.outcome", rec["outcome"])]
    tags += [RunTag(f"decision.{i:02d}", f"{d['t_s']:.1f}s {d['stage']} {d['action']}: {d['reason']}"[:5000])
             for i, d in enumerate(rec["decisions"])]
    mlflow.client.log_batch(mlflow.parent_id, tags=tags)
