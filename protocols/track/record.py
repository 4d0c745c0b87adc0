"""track.json: a tracked benchmark's record, built in one place and written by the protocol's
run (``protocols.track.run``), as plan.json and promote.json are by theirs: the track, the
options it was judged with, the metrics, every experiment's estimates (``history``), the newest
against its baseline (``comparison``: null for a track of one experiment) and the gate's
message (empty: the gate passes)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from harness import results_io

TRACK_FILE = "track.json"


def track_record(options, metrics: list[str], hist: dict, result: dict | None, message: str) -> dict:
    """The record of one judgement; ``options``: the protocol's typed config (``TrackProtocol``)."""
    return {"track": options.track, "protocol": "track", "options": dataclasses.asdict(options),
            "metrics": metrics, "history": hist, "comparison": result, "gate_message": message}


def write_track_record(out: Path, record: dict) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    results_io.write_json(out / TRACK_FILE, record)
    return out / TRACK_FILE
