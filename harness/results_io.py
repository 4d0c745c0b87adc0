"""Run and experiment folders: the one module that names their files, reads them and writes
them.  Every file lands under a temp name and is renamed.

A run folder is complete when its ``summary.json`` exists; it is written last.  Secrets
never reach a file: config values under keys that look like credentials are redacted.  A
file read here that is missing (where it must be there), unreadable or corrupt is one
``ResultsFileError`` naming its path.
"""

from __future__ import annotations

import json
import math
import os
import re
import secrets
import time
from pathlib import Path

import yaml

from harness.errors import UserError
from resultfiles import parquet
from resultfiles.whole import partial_path as partial_path  # re-exported: the name a file has while written
from resultfiles.whole import replace_whole

SECRET_KEY = re.compile(r"(api_key|token|secret|password|authorization)$", re.I)
# Every value of a map of HTTP headers (export.otlp_headers): an exporter's key goes in one, under
# whatever name its vendor chose (x-api-key, api-key, x-honeycomb-team, ...)
HEADERS_KEY = re.compile(r"headers$", re.I)
REDACTED = "***redacted***"
# The files of a run folder (harness.point writes them, summary.json last) and of an
# experiment's folder: named here only.
SUMMARY = "summary.json"
REQUESTS = "requests.parquet"
RUN_META = "run.json"
CONFIG = "config.yaml"
PROVENANCE = "provenance.json"
TELEMETRY = "telemetry.parquet"
WORKLOAD = "workload.json"
EXPERIMENT = "experiment.json"
RUNS_TABLE = "runs.parquet"
# The protocols' records beside experiment.json (each protocol's record module writes its own)
COMPARISON = "comparison.json"
ABLATION = "ablation.json"
PROMOTION = "promote.json"
ROLLBACK = "rollback.json"      # the promotion's config to roll back to
PLAN = "plan.json"
PROFILE = "profile.json"
PROFILE_TABLE = "perf_data.npz"  # the profile as the Dynamo mocker's timing table
AUTOSCALE = "autoscale.json"    # an autoscaled deployment's run: its replicas and bill
# What a load point writes into its run folder besides summary.json (harness.point).
RUN_FILES = (REQUESTS, RUN_META, CONFIG, PROVENANCE, TELEMETRY, WORKLOAD)
_REQUIRED = object()


class ResultsFileError(UserError, ValueError):
    """A results file missing (where it must be there), unreadable or corrupt; the message
    names its path.  (A ``ValueError`` too, as a corrupt file's JSON error was.)"""


def new_run_id() -> str:
    return time.strftime("%Y%m%d-%H%M%S") + "-" + secrets.token_hex(3)


def redact(obj):
    """A copy of a config tree with credential-like values replaced (``api_key_env`` names stay;
    a headers map keeps its header names)."""
    if isinstance(obj, dict):
        return {k: (REDACTED if SECRET_KEY.search(str(k)) and v not in (None, "") else
                    {h: REDACTED for h in v} if HEADERS_KEY.search(str(k)) and isinstance(v, dict) else redact(v))
                for k, v in obj.items()}
    if isinstance(obj, list):
        return [redact(v) for v in obj]
    return obj


def _json_default(o):
    if hasattr(o, "item"):
        return o.item()
    if isinstance(o, (set, tuple)):
        return list(o)
    return str(o)


def _clean(o):
    """JSON has no NaN/inf: write them as null and the strings "inf"/"-inf"."""
    if isinstance(o, float):
        if math.isnan(o):
            return None
        if math.isinf(o):
            return "inf" if o > 0 else "-inf"
        return o
    if isinstance(o, dict):
        return {k: _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    if hasattr(o, "item"):
        return _clean(o.item())
    return o


def write_atomic(path: str | os.PathLike, text: str) -> None:
    replace_whole(path, lambda tmp: tmp.write_text(text))


def write_parquet(path: str | os.PathLike, table, compression: str = parquet.DEFAULT_COMPRESSION) -> None:
    """A pyarrow table as ``path``, whole or not at all (pyarrow's default compression unless
    ``compression``: requests.parquet is zstd, ``loadgen.records.write_requests``)."""
    parquet.write_table(path, table, compression=compression)


# A Parquet file of a run or experiment folder as a table (only ``columns``, where given), or
# opened for its schema and row groups first; a missing or corrupt one raises as pyarrow does
# (its callers say what it was for).
read_parquet = parquet.read_table
open_parquet = parquet.open_file


def write_json(path, obj) -> None:
    write_atomic(path, json.dumps(_clean(obj), indent=2, sort_keys=False, default=_json_default) + "\n")


def write_yaml(path, obj) -> None:
    write_atomic(path, yaml.safe_dump(obj, sort_keys=False))


def _read_text(path: Path, required: bool) -> str | None:
    """The file's text; None where it is missing and not ``required``."""
    try:
        return path.read_text()
    except FileNotFoundError:
        if required:
            raise ResultsFileError(f"{path}: missing") from None
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise ResultsFileError(f"{path}: unreadable ({e})") from None


def read_json(path, default=_REQUIRED):
    """A JSON file of a run or experiment folder; a missing one is ``default`` where one is
    given (e.g. ``{}``: a record an older run did not write), else a ``ResultsFileError``, as
    is an unreadable or corrupt one."""
    path = Path(path)
    text = _read_text(path, default is _REQUIRED)
    if text is None:
        return default
    try:
        return json.loads(text)
    except ValueError as e:
        raise ResultsFileError(f"{path}: not valid JSON ({e})") from None


def read_yaml(path, default=_REQUIRED):
    """A YAML file of a run or experiment folder (its ``config.yaml``), ``{}`` when empty; a
    missing one is ``default`` where one is given, else a ``ResultsFileError``, as is an
    unreadable or corrupt one."""
    path = Path(path)
    text = _read_text(path, default is _REQUIRED)
    if text is None:
        return default
    try:
        return yaml.safe_load(text) or {}
    except yaml.YAMLError as e:
        raise ResultsFileError(f"{path}: not valid YAML ({e})") from None


def run_complete(run_dir) -> bool:
    return (Path(run_dir) / SUMMARY).exists()


def run_failed(run_dir) -> bool:
    """A finished run whose point failed (its engine died, stopped or hung: ``point_failed``);
    a resumed experiment runs it again."""
    path = Path(run_dir) / SUMMARY
    if not path.exists():
        return False
    try:
        return bool(read_json(path).get("point_failed"))
    except (OSError, ValueError):
        return False


def keep_failed_attempt(run_dir) -> Path:
    """Move a failed run's files to ``failed_attempts/<n>/`` before it runs again, its
    ``summary.json`` as ``summary.failed.json`` (so the attempt never reads as a finished run)."""
    run_dir = Path(run_dir)
    root = run_dir / "failed_attempts"
    n = 1
    while (root / str(n)).exists():
        n += 1
    dest = root / str(n)
    dest.mkdir(parents=True)
    for name in RUN_FILES:  # a single point's run folder is the experiment's: only the run's own files
        if (run_dir / name).exists():
            os.replace(run_dir / name, dest / name)
    os.replace(run_dir / SUMMARY, dest / "summary.failed.json")  # last, as it was written last
    return dest


def find_run_dirs(root) -> list[Path]:
    """Complete run folders at or below ``root``: a run folder, a sweep's, or an experiment's
    (``<config>/block<b>/<point>/``, multirun job folders)."""
    root = Path(root)
    if run_complete(root):
        return [root]
    return sorted(p.parent for p in root.rglob(SUMMARY) if run_complete(p.parent))
