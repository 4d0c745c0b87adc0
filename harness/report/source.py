"""What a report is built from: a folder on disk, or an MLflow experiment (its runs' artifacts
downloaded to a folder in our layout first), plus other tools' result files imported on the way
(``harness.imports``) or folders they were imported to before (``tokenfactory import``).
"""

from __future__ import annotations

import re
from pathlib import Path

from harness.results_io import ABLATION, COMPARISON, EXPERIMENT, RUN_META, RUNS_TABLE, SUMMARY, find_run_dirs, read_json

MLFLOW_DOWNLOADS = Path("results") / "mlflow-reports"
_UNSAFE = re.compile(r"[^A-Za-z0-9._=+,-]+")


def safe_part(name: str) -> str:
    """One path component from a name someone else chose (no separators, no '..')."""
    s = _UNSAFE.sub("_", name).strip("._") or "_"
    return s[:120]


def resolve(target: str, dest=None, tracking_uri: str | None = None, log=print) -> Path:
    """The folder to report on: ``target`` itself when it is a folder, else the MLflow experiment
    of that name, downloaded to ``dest`` (default ``results/mlflow-reports/<name>``)."""
    p = Path(target)
    if p.is_dir():
        return p
    if p.exists():
        raise ValueError(f"{target}: a file, not a results folder (another tool's result file goes with --import; "
                         "tokenfactory import FILE OUT_DIR converts one)")
    return download_mlflow(target, Path(dest) if dest else MLFLOW_DOWNLOADS / safe_part(target), tracking_uri, log)


def store_uri(tracking_uri: str | None) -> str:
    from harness.mlflow_log import DEFAULT_URI
    from harness.mlflow_log import tracking_uri as resolve_uri

    uri = resolve_uri(tracking_uri)
    if uri.startswith("sqlite:///") and not Path(uri[len("sqlite:///"):]).exists():
        # do not create an empty store just to look a name up in it
        raise ValueError(f"no such folder, and no MLflow store at {uri}" + (
            " (the default; set MLFLOW_TRACKING_URI or --tracking-uri)" if uri == DEFAULT_URI else ""))
    return uri


def download_mlflow(name: str, dest: Path, tracking_uri: str | None = None, log=print) -> Path:
    """Download the latest tokenfactory parent run of MLflow experiment ``name`` (its load-point
    child runs' artifacts, each a run folder, at ``dest/<child run name>``; the parent's own
    record files at ``dest``).  Runs already downloaded whole are kept."""
    import os

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # one line per run is enough
    from mlflow.tracking import MlflowClient

    try:
        uri = store_uri(tracking_uri)
    except ValueError as e:
        raise ValueError(f"{name}: {e}") from None
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(name)
    if exp is None:
        known = ", ".join(e.name for e in client.search_experiments(max_results=20))
        raise ValueError(f"{name}: not a folder, and no experiment of that name in the MLflow store {uri} "
                         f"(experiments there: {known or 'none'})")
    ids = [exp.experiment_id]
    parents = client.search_runs(ids, "tags.`tokenfactory.kind` = 'sweep'", order_by=["attributes.start_time DESC"],
                                 max_results=100)
    if parents:
        parent = parents[0]
        children = client.search_runs(ids, f"tags.mlflow.parentRunId = '{parent.info.run_id}'", max_results=50000)
        log(f"MLflow experiment {name} ({uri}): parent run {parent.info.run_name} ({parent.info.run_id}), "
            f"the latest of {len(parents)}, {len(children)} runs")
    else:
        parent = None
        children = client.search_runs(ids, "tags.`tokenfactory.kind` = 'load_point'", max_results=50000)
        log(f"MLflow experiment {name} ({uri}): no parent run, {len(children)} load-point runs")
    if not children:
        raise ValueError(f"{name}: the MLflow experiment has no load-point runs to report on")
    dest.mkdir(parents=True, exist_ok=True)
    fetched = 0
    for run in children:
        rname = run.info.run_name or run.info.run_id
        folder = dest.joinpath(*[safe_part(p) for p in rname.split("/") if p not in ("", ".", "..")])
        if (folder / SUMMARY).exists():
            continue
        folder.mkdir(parents=True, exist_ok=True)
        client.download_artifacts(run.info.run_id, "", str(folder))
        fetched += 1
    if parent is not None:
        for art in client.list_artifacts(parent.info.run_id):
            if not art.is_dir and art.path in (EXPERIMENT, COMPARISON, ABLATION, RUNS_TABLE):
                client.download_artifacts(parent.info.run_id, art.path, str(dest))
    log(f"downloaded {fetched} run(s) to {dest} ({len(children) - fetched} already there)")
    return dest


def slo_of(root):
    """The SLO the experiment under ``root`` was held to (for imports: goodput by the same SLO)."""
    from metrics.slo import SLO

    root = Path(root)
    slo = {}
    if (root / EXPERIMENT).exists():
        slo = read_json(root / EXPERIMENT).get("slo") or {}
    if not slo:
        for d in find_run_dirs(root):
            if (d / RUN_META).exists():
                slo = (read_json(d / RUN_META).get("fixed_conditions") or {}).get("slo") or {}
                if slo:
                    break
    return SLO.from_config(slo) if slo else None


def prepare_imports(items: list[str], workdir: Path, slo) -> list[Path]:
    """Each item: a result file of another tool (imported into ``workdir`` now) or a folder
    written by ``harness.imports`` before.  Returns the folders."""
    from harness.imports import import_result

    out = []
    for i, item in enumerate(items):
        p = Path(item)
        if p.is_dir():
            if not find_run_dirs(p):
                raise ValueError(f"--import {item}: a folder without any imported run (no summary.json)")
            out.append(p)
        elif p.is_file():
            out.append(import_result(p, workdir / f"{i:02d}-{safe_part(p.stem)}", slo))
        else:
            raise ValueError(f"--import {item}: no such file or folder")
    return out
