"""MLflow: one experiment per experiment name, a parent run per sweep, a child run per run
(load point and repeat; ``child_run_name``), the parent holding the aggregates per load point.

Child runs hold the flattened (redacted) config as params, ``summary.json``'s numbers as
metrics and the run folder as artifacts.  Values MLflow cannot hold as a metric (text,
lists, non-finite numbers) go in as tags so nothing in the summary is silently lost.

MLflow holds a copy of the results, never their only one: when it cannot be reached (at the
start, or the server goes away mid-run) the failure is said once, nothing more is sent to it
in that run, and the run goes on writing its folders; ``tokenfactory mlflow-sync PATH``
(``harness.mlflow_sync``) logs a finished folder afterwards.  That is ``strict=False`` (a
sweep or comparison); by default a failure raises, as callers that use ``client`` need.
"""

from __future__ import annotations

import functools
import math
import os
import re
import sys
from pathlib import Path
from urllib.parse import urlsplit

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


_NOT_IN_A_KEY = re.compile(r"[^A-Za-z0-9_\-. :/]")


def _key(name: str) -> str:
    """A metric, param or tag name MLflow accepts (alphanumerics and ``_-. :/``, 250 at most):
    an ablation's arm is ``+prefix_caching``, and one '+' made MLflow refuse the whole batch."""
    return _NOT_IN_A_KEY.sub("_", name)[:250]


def child_run_name(experiment: str, label: str, config: str = "", block: int = 0, repeat: int = 0,
                   repeats: int = 1) -> str:
    """A child run's name: a comparison's ``<config>/block<b>/<point>``, a sweep's
    ``<experiment>/<point>``, and ``/repeat <r>`` after it when the point has several repeats
    (its repeats are replicates of one point: the same name before that)."""
    name = f"{config}/block{block}/{label}" if config else f"{experiment}/{label}"
    return name + (f"/repeat {repeat}" if repeats > 1 else "")


def shown_uri(uri: str) -> str:
    """The tracking URI without credentials (``https://user:token@host``) for messages."""
    u = urlsplit(uri)
    if u.password or u.username:
        return uri.replace(u.netloc, u.netloc.rsplit("@", 1)[-1], 1)
    return uri


def _guarded(method):
    """A call to MLflow that fails disables the logger (see the module's docstring)."""
    @functools.wraps(method)
    def call(self, *args, **kwargs):
        if self.failed is not None:
            return None
        try:
            return method(self, *args, **kwargs)
        except Exception as e:  # noqa: BLE001 - whatever MLflow raises (connection, HTTP, database)
            self._fail(e)
            return None
    return call


class MlflowLogger:
    def __init__(self, uri: str, experiment: str, where: str | os.PathLike | None = None, strict: bool = True):
        self.uri = uri
        self.where = where    # the output folder, for the hint after a failure
        self.strict = strict
        self.failed: str | None = None
        self.parent_id: str | None = None
        self.experiment_id: str | None = None
        try:
            self._connect(experiment)
        except Exception as e:  # noqa: BLE001 - as in _guarded
            self._fail(e)

    def _fail(self, e: Exception) -> None:
        if self.strict:
            raise e
        self.failed = f"{type(e).__name__}: {str(e)[:300]}"
        print(f"warning: MLflow at {shown_uri(self.uri)} failed ({self.failed}); nothing more goes to it in this "
              "run. The results are written to their folders as always; log them once MLflow answers again (or "
              "the error above is fixed): "
              f"tokenfactory mlflow-sync {self.where or 'OUTPUT_DIR'}", file=sys.stderr, flush=True)

    def _connect(self, experiment: str) -> None:
        import mlflow

        uri = self.uri
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

    @_guarded
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
        batch = [Param(_key(k), str(v)[:6000]) for k, v in flat.items()]
        for i in range(0, len(batch), 100):
            self.client.log_batch(run_id, params=batch[i:i + 100])

    @_guarded
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
                metrics.append(Metric(_key(k), float(v), ts, 0))
            elif isinstance(v, (int, float)) and math.isfinite(v):
                metrics.append(Metric(_key(k), float(v), ts, 0))
            else:
                extra_tags.append(RunTag(_key(f"summary.{k}"), str(v)[:5000]))
        for i in range(0, len(metrics), 500):
            self.client.log_batch(rid, metrics=metrics[i:i + 500])
        for i in range(0, len(extra_tags), 100):
            self.client.log_batch(rid, tags=extra_tags[i:i + 100])
        self.client.log_artifacts(rid, str(run_dir))
        self.client.set_terminated(rid, "FINISHED")
        return rid

    @_guarded
    def log_parent_metrics(self, metrics: dict[str, float]) -> None:
        """Aggregates across runs (estimates and interval bounds) on the parent run."""
        from mlflow.entities import Metric

        if not self.parent_id:
            return
        ts = int(__import__("time").time() * 1000)
        batch = [Metric(_key(k), float(v), ts, 0) for k, v in metrics.items()
                 if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]
        for i in range(0, len(batch), 500):
            self.client.log_batch(self.parent_id, metrics=batch[i:i + 500])

    @_guarded
    def set_parent_tags(self, tags: dict[str, str]) -> None:
        """Text on the parent run (the experiment's answer: ``mlflow.note.content`` is its description)."""
        if self.parent_id:
            for k, v in tags.items():
                self.client.set_tag(self.parent_id, k, str(v)[:5000])

    @_guarded
    def log_parent_artifact(self, path: str | os.PathLike) -> None:
        if self.parent_id:
            self.client.log_artifact(self.parent_id, str(path))

    @_guarded
    def end_parent(self, status: str = "FINISHED") -> None:
        if self.parent_id:
            self.client.set_terminated(self.parent_id, status)
