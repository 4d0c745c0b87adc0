"""``tokenfactory track NAME [--gate] [--baseline previous|window:N|NAME] [--metric M]...``: a
tracked benchmark's history (every experiment run with ``track=NAME`` into the MLflow store),
the newest against its baseline metric by metric (regressed, improved, no significant change),
written to ``track.json`` and the history page ``track.html`` (``--out``, default
results/track/NAME/).  ``--gate``: exit 1 when a metric regressed (the interval of the
difference excludes zero and the effect is beyond the margin), naming metric, size, interval
and both versions; 2 for an error; 0 otherwise."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness import results_io
from harness.report.source import safe_part


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(prog="tokenfactory track", description="a tracked benchmark's history and a "
                                 "regression gate: the newest experiment against a baseline")
    ap.add_argument("name", help="the tracked benchmark (the experiments ran with track=NAME)")
    ap.add_argument("--gate", action="store_true", help="exit 1 on a regression beyond the margin")
    ap.add_argument("--baseline", default="previous",
                    help="previous (default), window:N (the N experiments before the newest, pooled), or an "
                         "earlier experiment's run id, folder name or version")
    ap.add_argument("--at", help="judge this experiment (run id, folder name or version) as the history stood "
                                 "when it was the newest (default: the newest)")
    ap.add_argument("--metric", action="append", help="a metric to compare (repeatable; default: the usual set)")
    ap.add_argument("--margin", type=float, default=0.02, help="smallest relative change that counts (0.02)")
    ap.add_argument("--confidence", type=float, default=0.95, help="level of the intervals (0.95)")
    ap.add_argument("--adjust", choices=("bonferroni", "none"), default="none",
                    help="bonferroni: the confidence for all of a load point's verdicts together (default: each)")
    ap.add_argument("--allow", default="", help="track conditions allowed to differ (comma-separated)")
    ap.add_argument("--tracking-uri", help="the MLflow store (default: $MLFLOW_TRACKING_URI, else "
                                           "sqlite:///results/mlflow.db)")
    ap.add_argument("--out", help="folder for track.json and track.html (default: results/track/NAME)")
    a = ap.parse_args(argv)
    from protocols.track.run import run_track

    out = Path(a.out) if a.out else Path("results") / "track" / safe_part(a.name)
    allow = {k.strip() for k in a.allow.split(",") if k.strip()}
    try:
        doc = run_track(a.name, out, baseline=a.baseline, metrics=a.metric, margin=a.margin,
                        confidence=a.confidence, allow=allow, tracking_uri=a.tracking_uri, adjust=a.adjust, at=a.at)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    results_io.write_json(out / "track.json", doc)
    print(f"track.json and track.html written: {out.resolve()}")
    if a.gate and doc["comparison"] and doc["comparison"]["regressions"]:
        print(doc["gate_message"], file=sys.stderr)
        return 1
    return 0
