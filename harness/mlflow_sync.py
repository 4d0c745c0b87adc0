"""``tokenfactory mlflow-sync PATH``: log a finished results folder to MLflow afterwards.

For a run that could not reach MLflow (down at the start, or gone mid-run: the harness says
so and carries on, ``harness.mlflow_log``), or one run with ``mlflow.enabled=false``.  PATH is
a run, sweep or experiment folder.  What goes in is what the run would have logged: the
experiment by its name (``experiment.json``, else ``config.yaml``), a parent run for the
folder (the one in ``mlflow_parent.txt`` when this tracking store has it) with the
experiment's config as params and its record (``experiment.json``, ``runs.parquet``,
``comparison.json``, ``report.html``, ``workload.html``) as artifacts, and a child run per
finished run folder (a ``summary.json``) with its config as params, its summary as metrics
and the folder as artifacts.  Runs already under that parent (tagged with their folder) are
skipped, so syncing twice, or after a run that logged half its points, adds nothing twice.

    tokenfactory mlflow-sync results/default/20260101-120000-abcdef [--tracking-uri URI]

The tracking store: ``--tracking-uri``, else the folder's ``mlflow.tracking_uri``, else
``$MLFLOW_TRACKING_URI``, else ``sqlite:///results/mlflow.db``.
"""

from __future__ import annotations

from pathlib import Path

from conf.load_point import split_repeat
from conf.schema import COMPARED_METRICS
from harness import results_io
from harness.experiment_record import run_rows, runs_table
from harness.mlflow_log import MlflowLogger, child_run_name, tracking_uri
from harness.parent_run import track_tags
from metrics.comparison import point_aggregates

RECORD_FILES = (results_io.EXPERIMENT, results_io.RUNS_TABLE, results_io.COMPARISON, results_io.ABLATION, "report.html",
                "workload.html", results_io.CONFIG)


def _child_params(run_dir: Path) -> dict:
    """As the run logged them (``harness.point.log_mlflow``): its config (written redacted)
    with the engine as it resolved."""
    params = results_io.read_yaml(run_dir / results_io.CONFIG, {})
    prov = results_io.read_json(run_dir / results_io.PROVENANCE, {})
    eng = prov.get("engine") or {}
    params["engine_resolved"] = {"version": eng.get("engine_version"),
                                 "feature_flags": " ".join(eng.get("feature_flags") or []),
                                 "command": " ".join(eng.get("command") or [])}
    return params


def sync(path: str | Path, uri: str | None = None) -> tuple[str, int, int]:
    """Log ``path``; returns (parent run id, child runs logged, child runs already there)."""
    out = Path(path)
    if not out.is_dir():
        raise ValueError(f"{out}: no such folder")
    runs = results_io.find_run_dirs(out)
    if not runs:
        raise ValueError(f"{out}: no finished run here (a run folder holds a summary.json)")
    record = results_io.read_json(out / results_io.EXPERIMENT, {})
    config = results_io.read_yaml(out / results_io.CONFIG, {}) or results_io.read_yaml(runs[0] / results_io.CONFIG, {})
    name = str(record.get("experiment") or config.get("experiment") or out.name)
    uri = tracking_uri(uri or (config.get("mlflow") or {}).get("tracking_uri"))
    log = MlflowLogger(uri, name, where=out, strict=True)
    marker = out / "mlflow_parent.txt"
    prev = marker.read_text().strip() if marker.exists() else None
    parent = log.start_parent(out.name, config, run_id=prev, tags={
        "output_dir": str(out.resolve()), "tokenfactory.protocol": str(record.get("protocol") or "sweep"),
        "tokenfactory.synced": "true", **track_tags(config)})
    results_io.write_atomic(marker, parent + "\n")
    there = set()
    for r in log.client.search_runs([log.experiment_id], f"tags.mlflow.parentRunId = '{parent}'",
                                    max_results=50000):
        d = r.data.tags.get("tokenfactory.run_dir")
        if d:
            there.add(Path(d).resolve())
    logged = skipped = 0
    for d in runs:
        if d.resolve() in there:
            skipped += 1
            continue
        meta = results_io.read_json(d / results_io.RUN_META, {})
        summary = results_io.read_json(d / results_io.SUMMARY)
        label, old_repeat = split_repeat(str(meta.get("label") or summary.get("label") or d.name))
        repeat = int(meta.get("repeat") or old_repeat or 0)
        repeats = int(meta.get("repeats") or (2 if old_repeat is not None else 1))  # (older folders: "... #r")
        cfg_name = meta.get("config")
        run_name = child_run_name(out.name, label, str(cfg_name or ""), int(meta.get("block") or 0), repeat, repeats)
        tags = {"label": label, "repeat": str(repeat), "tokenfactory.run_dir": str(d.resolve()),
                "tokenfactory.synced": "true",
                **({"config": str(cfg_name), "block": str(meta.get("block", 0))} if cfg_name else {})}
        log.log_child(run_name, _child_params(d), summary, d, tags=tags)
        logged += 1
    comparison = out / results_io.COMPARISON
    if comparison.exists():
        log.log_parent_metrics(results_io.read_json(comparison).get("mlflow_metrics") or {})
    else:  # a sweep: per load point, over its repeats (as the run logs them: harness.experiment_record)
        log.log_parent_metrics(point_aggregates(runs_table(run_rows(out)), list(COMPARED_METRICS),
                                                 seed=int(record.get("seed") or 0)))
    for f in RECORD_FILES:
        if (out / f).exists():
            log.log_parent_artifact(out / f)
    log.end_parent("FINISHED" if record.get("status", "complete") == "complete" else "FAILED")
    return parent, logged, skipped
