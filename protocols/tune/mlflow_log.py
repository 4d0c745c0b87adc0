"""protocol=tune: MLflow: each trial's run a child of the tune's parent run, with its params and verdict."""

from __future__ import annotations

import math
from pathlib import Path


def log_trial(mlflow, folder: Path, number: int, params: dict, verdict: dict) -> None:
    """A trial's own parent run (``mlflow_parent.txt`` in its folder) made a child of the tune's
    parent run ``mlflow`` (``harness.parent_run``), tagged with its params and verdict."""
    from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID, MLFLOW_RUN_NAME

    marker = folder / "mlflow_parent.txt"
    if not marker.exists():
        return
    rid = marker.read_text().strip()
    client = mlflow.client
    client.set_tag(rid, MLFLOW_PARENT_RUN_ID, mlflow.parent_id)
    client.set_tag(rid, MLFLOW_RUN_NAME, f"trial {number}")
    client.set_tag(rid, "tokenfactory.kind", "tune_trial")
    client.set_tag(rid, "tune.feasible", str(verdict["feasible"]))
    if verdict["why"]:
        client.set_tag(rid, "tune.why", str(verdict["why"])[:5000])
    for k, v in params.items():
        client.set_tag(rid, f"tune.param.{k}"[:250], str(v))
    for k in ("objective", "max_load_under_slo", "cost_per_mtok_good", "goodput_rps", "goodput_per_dollar"):
        v = verdict.get(k)
        if isinstance(v, (int, float)) and math.isfinite(v):
            client.log_metric(rid, f"tune.{k}", float(v))
