"""A tracked benchmark's history: every finished experiment run with ``track=NAME`` into one
MLflow store (its parent run is tagged ``tokenfactory.track``), from any machine, oldest first.

Each entry is read from its parent run: ``runs.parquet`` (one row per run: a load point's
replicates, every summary metric) and ``experiment.json`` (its fixed conditions, load points)
downloaded once into a cache folder; the version under test is ``track_version`` where the
experiment was given one (an engine commit, a build), else the engine's own version (a child
run's ``engine_resolved.version``), with the harness commit beside it.  An experiment that did
not finish (no ``runs.parquet``) is left out and counted.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from harness import results_io
from harness.report.source import safe_part

TAG = "tokenfactory.track"
VERSION_TAG = "tokenfactory.track_version"


@dataclass
class TrackEntry:
    run_id: str
    experiment: str            # the MLflow experiment (experiment=...)
    name: str                  # the parent run's name (its results folder)
    started: datetime
    engine: str | None         # engine name and version, e.g. "vllm 0.32.0"
    harness_commit: str | None
    track_version: str | None  # what the experiment said it is a version of (track_version=...)
    runs: pa.Table             # one row per run (role=point), every summary metric
    fixed: dict                # fixed conditions (model, workload, SLO, ... + load points, hardware)
    notes: list = field(default_factory=list)
    answer: str | None = None  # the first line of its experiment.json's answer (metrics.answer)

    @property
    def version(self) -> str:
        """What this experiment measured a version of: ``track_version``, else the engine's."""
        return self.track_version or self.engine or "unknown version"

    @property
    def label(self) -> str:
        return f"{self.version} · {self.name} · {self.started:%Y-%m-%d %H:%M}"


def load_history(track: str, tracking_uri: str | None = None, cache: Path | None = None,
                 log=print) -> list[TrackEntry]:
    """The finished experiments of ``track``, oldest first; raises ValueError naming the store
    when there is none."""
    import os

    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    from mlflow.tracking import MlflowClient

    from harness.report.source import store_uri

    uri = store_uri(tracking_uri)
    client = MlflowClient(uri)
    ids = [e.experiment_id for e in client.search_experiments()]
    parents = client.search_runs(ids, f"tags.`{TAG}` = '{_quoted(track)}' and tags.`tokenfactory.kind` = 'sweep'",
                                 order_by=["attributes.start_time ASC"], max_results=5000) if ids else []
    if not parents:
        known = _known_tracks(client, ids)
        raise ValueError(f"track {track!r}: no experiment in the MLflow store {uri} ran with track={track} "
                         f"(tracks there: {', '.join(known) or 'none'})")
    cache = cache or Path("results") / "track" / safe_part(track) / "runs"
    names = {e.experiment_id: e.name for e in client.search_experiments()}
    out, unfinished = [], 0
    for run in parents:
        entry = _entry(client, run, names.get(run.info.experiment_id, ""), cache / run.info.run_id)
        if entry is None:
            unfinished += 1
            continue
        out.append(entry)
    if unfinished:
        log(f"track {track}: {unfinished} experiment(s) without a finished record (no runs.parquet) left out")
    if not out:
        raise ValueError(f"track {track!r}: {len(parents)} experiment(s) in {uri}, none finished")
    return out


def _quoted(s: str) -> str:
    return s.replace("\\", "\\\\").replace("'", "\\'")


def _known_tracks(client, ids) -> list[str]:
    runs = client.search_runs(ids, "tags.`tokenfactory.kind` = 'sweep'", max_results=1000) if ids else []
    return sorted({r.data.tags[TAG] for r in runs if TAG in r.data.tags})


def _entry(client, run, experiment: str, folder: Path) -> TrackEntry | None:
    rid = run.info.run_id
    folder.mkdir(parents=True, exist_ok=True)
    have = {a.path for a in client.list_artifacts(rid)}
    if results_io.RUNS_TABLE not in have:
        return None
    for name in (results_io.RUNS_TABLE, results_io.EXPERIMENT):
        if name in have and not (folder / name).exists():
            client.download_artifacts(rid, name, str(folder))
    table = results_io.read_parquet(folder / results_io.RUNS_TABLE)
    if "role" in table.column_names:  # probes and search steps are not replicates of a point
        table = table.filter(pc.equal(table.column("role"), "point"))
    record = results_io.read_json(folder / results_io.EXPERIMENT, {})
    configs = sorted(set(table.column("config").to_pylist())) if "config" in table.column_names else [""]
    notes = []
    if len(configs) > 1:
        notes.append(f"{len(configs)} configs ({', '.join(map(str, configs))}): the first, {configs[0]!r}, is tracked")
        table = table.filter(pc.equal(table.column("config"), configs[0]))
    fixed = dict((record.get("fixed_conditions") or {}).get(configs[0] or "", {}) or
                 next(iter((record.get("fixed_conditions") or {}).values()), {}))
    params = run.data.params
    fixed["load_points"] = record.get("load_points")
    fixed["hardware"] = params.get("hardware.name")
    engine, commit = _versions(client, run, folder)
    started = datetime.fromtimestamp(run.info.start_time / 1000, tz=UTC)
    return TrackEntry(run_id=rid, experiment=experiment, name=run.info.run_name or rid, started=started,
                      engine=engine, harness_commit=commit, track_version=run.data.tags.get(VERSION_TAG),
                      runs=table, fixed=fixed, notes=notes,
                      answer=next(iter((record.get("answer") or {}).get("lines") or []), None))


def _versions(client, parent, folder: Path) -> tuple[str | None, str | None]:
    """(engine name and version, harness commit) from the experiment's first child run."""
    kids = client.search_runs([parent.info.experiment_id], f"tags.mlflow.parentRunId = '{parent.info.run_id}'",
                              max_results=1)
    if not kids:
        return None, None
    p = kids[0].data.params
    name, version = p.get("engine.name"), p.get("engine_resolved.version")
    engine = " ".join(str(x) for x in (name, version) if x and x != "None") or None
    commit = None
    prov = folder / results_io.PROVENANCE
    try:
        if not prov.exists():
            client.download_artifacts(kids[0].info.run_id, results_io.PROVENANCE, str(folder))
        commit = (results_io.read_json(prov).get("harness") or {}).get("commit")
    except Exception:  # noqa: BLE001 - an older run without the file: the commit is unknown
        pass
    return engine, commit
