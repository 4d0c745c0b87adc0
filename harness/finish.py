"""The end of every protocol's run, after it has written its record: the record's aggregate
metrics and files on the MLflow parent run, the report (``report.enabled``), the parent run
ended, a note where MLflow could not be reached, and the results folder printed.  Every protocol
with a parent run ends here, through the run lifecycle (``harness.lifecycle``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

from omegaconf import DictConfig

from harness.answer_record import console_lines, mlflow_tags
from harness.mlflow_log import MlflowLogger


def finish_run(cfg: DictConfig, out: Path, mlflow: MlflowLogger | None, *, metrics: dict | None = None,
               artifacts: Iterable[str] = (), report: Callable[[], Path | None] | None = None,
               end: str | None = None, answer: dict | None = None) -> Path:
    """``metrics``: the record's aggregates for the parent run; ``artifacts``: the record's
    files in ``out`` (those that exist are logged, so ``tokenfactory report NAME`` rebuilds the
    report from MLflow); ``report``: draws the protocol's report, returning a file to log beside
    them (or None); ``end``: the parent run's final status (None: already ended); ``answer``: the
    record holding the protocol's ``answer`` and ``warnings`` (``harness.answer_record``), set on the
    parent run and printed last."""
    if mlflow and metrics:
        mlflow.log_parent_metrics(metrics)
    if mlflow and mlflow_tags(answer or {}):
        mlflow.set_parent_tags(mlflow_tags(answer or {}))
    if mlflow:
        for name in artifacts:
            if (out / name).exists():
                mlflow.log_parent_artifact(out / name)
    if report is not None and cfg.report.enabled:
        path = report()
        if mlflow and path is not None:
            mlflow.log_parent_artifact(path)
    if mlflow and end:
        mlflow.end_parent(end)
    if mlflow and mlflow.failed:
        print(f"MLflow: not logged ({mlflow.failed}); once it is back: tokenfactory mlflow-sync {out}", flush=True)
    print(f"results: {out}", flush=True)
    for line in console_lines(answer or {}):
        print(line, flush=True)
    return out
