"""MLflow: one experiment per experiment name, a parent run per sweep, a child run per load point.

Child runs hold the flattened (redacted) config as params, ``summary.json``'s numbers as
metrics and the run folder as artifacts.  Values MLflow cannot hold as a metric (text,
lists, non-finite numbers) go in as tags so nothing in the summary is silently lost.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

DEFAULT_URI = "sqlite:///results/mlflow.db"


def tracking_uri(cfg_uri: str | None) -> str:
    return cfg_uri or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_URI


def flatten(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


class MlflowLogger:
    def __init__(self, uri: str, experiment: str):
        import mlflow

        self.mlflow = mlflow
        if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
            Path(uri[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
        mlflow.set_tracking_uri(uri)
        self.uri = uri
        self.client = mlflow.tracking.MlflowClient(uri)
        exp = self.client.get_experiment_by_name(experiment)
        if exp is None:
            artifacts = None
            if uri.startswith("sqlite:///"):
                # Artifacts beside the database, not in whatever folder the harness ran from.
                db = Path(uri[len("sqlite:///"):]).resolve()
                artifacts = (db.parent / "mlartifacts").as_uri()
            try:
                self.experiment_id = self.client.create_experiment(experiment, artifact_location=artifacts)
            except self.mlflow.exceptions.MlflowException:  # a parallel job of the same sweep made it first
                exp = self.client.get_experiment_by_name(experiment)
                if exp is None:
                    raise
                self.experiment_id = exp.experiment_id
        else:
            self.experiment_id = exp.experiment_id
        self.parent_id: str | None = None

    def start_parent(self, name: str, params: dict, tags: dict | None = None, run_id: str | None = None) -> str:
        if run_id:
            try:
                self.client.get_run(run_id)
                self.parent_id = run_id
                self.client.update_run(run_id, status="RUNNING")
                return run_id
            except Exception:  # noqa: BLE001 - a parent from another store: start a new one
                pass
        run = self.client.create_run(self.experiment_id, run_name=name,
                                     tags={"tokenfactory.kind": "sweep", **(tags or {})})
        self.parent_id = run.info.run_id
        self._params(self.parent_id, params)
        return self.parent_id

    def _params(self, run_id: str, params: dict) -> None:
        from mlflow.entities import Param

        flat = flatten(params)
        batch = [Param(k[:250], str(v)[:6000]) for k, v in flat.items()]
        for i in range(0, len(batch), 100):
            self.client.log_batch(run_id, params=batch[i:i + 100])

    def log_child(self, name: str, params: dict, summary: dict, run_dir: str | os.PathLike,
                  tags: dict | None = None) -> str:
        from mlflow.entities import Metric, RunTag
        from mlflow.utils.mlflow_tags import MLFLOW_PARENT_RUN_ID

        t = {"tokenfactory.kind": "load_point", **(tags or {})}
        if self.parent_id:
            t[MLFLOW_PARENT_RUN_ID] = self.parent_id
        run = self.client.create_run(self.experiment_id, run_name=name, tags=t)
        rid = run.info.run_id
        self._params(rid, params)
        metrics, extra_tags = [], []
        ts = int(__import__("time").time() * 1000)
        for k, v in flatten(summary).items():
            if isinstance(v, bool):
                metrics.append(Metric(k, float(v), ts, 0))
            elif isinstance(v, (int, float)) and math.isfinite(v):
                metrics.append(Metric(k, float(v), ts, 0))
            else:
                extra_tags.append(RunTag(f"summary.{k}"[:250], str(v)[:5000]))
        for i in range(0, len(metrics), 500):
            self.client.log_batch(rid, metrics=metrics[i:i + 500])
        for i in range(0, len(extra_tags), 100):
            self.client.log_batch(rid, tags=extra_tags[i:i + 100])
        self.client.log_artifacts(rid, str(run_dir))
        self.client.set_terminated(rid, "FINISHED")
        return rid

    def log_parent_metrics(self, metrics: dict[str, float]) -> None:
        """Aggregates across runs (estimates and interval bounds) on the parent run."""
        from mlflow.entities import Metric

        if not self.parent_id:
            return
        ts = int(__import__("time").time() * 1000)
        batch = [Metric(k[:250], float(v), ts, 0) for k, v in metrics.items()
                 if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]
        for i in range(0, len(batch), 500):
            self.client.log_batch(self.parent_id, metrics=batch[i:i + 500])

    def log_parent_artifact(self, path: str | os.PathLike) -> None:
        if self.parent_id:
            self.client.log_artifact(self.parent_id, str(path))

    def end_parent(self, status: str = "FINISHED") -> None:
        if self.parent_id:
            self.client.set_terminated(self.parent_id, status)
