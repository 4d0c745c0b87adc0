"""``tokenfactory track NAME [--gate] [--baseline previous|window:N|NAME] [--metric M]...``: a
tracked benchmark's history (every experiment run with ``track=NAME`` into the MLflow store),
the newest against its baseline metric by metric (regressed, improved, no significant change),
written to ``track.json`` and the history page ``track.html`` (``--out``, default
results/track/NAME/).  ``--gate`` fails closed: exit 1 when a metric regressed (the interval of
the difference excludes zero and the effect is beyond the margin), naming metric, size,
interval and both versions; 3 when a metric the baseline has cannot be judged on the newest
(no point runs, an infinite cost, no interval); 2 for an error; 0 otherwise."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness import results_io
from harness.report.source import safe_part


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(
        prog="tokenfactory track", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="a tracked benchmark's history and a regression gate: the newest experiment against a baseline",
        epilog="exit codes with --gate:\n"
               "  0  passed: no metric regressed and every metric the baseline has was judged\n"
               "  1  regressed: a metric's interval excludes zero and the effect is beyond the margin\n"
               "  2  error: no such track or baseline, conditions that differ, a bad flag\n"
               "  3  cannot judge: a metric the baseline has cannot be compared on the newest (no point runs,\n"
               "     the metric missing, an infinite cost: no good tokens, one run: no interval); never a pass\n"
               "without --gate: 0, or 2 for an error")
    ap.add_argument("name", help="the tracked benchmark (the experiments ran with track=NAME)")
    ap.add_argument("--gate", action="store_true", help="exit 1 on a regression beyond the margin, 3 when a "
                                                        "metric cannot be judged (below)")
    ap.add_argument("--baseline", default="previous",
                    help="previous (default), window:N (the N accepted experiments before the newest, pooled), "
                         "or an earlier experiment's run id, folder name or version")
    ap.add_argument("--keep-rejected", action="store_true",
                    help="window:N pools the experiments the gate rejected too (default: left out)")
    ap.add_argument("--at", help="judge this experiment (run id, folder name or version) as the history stood "
                                 "when it was the newest (default: the newest)")
    ap.add_argument("--metric", action="append", help="a metric to compare (repeatable; default: the usual set)")
    ap.add_argument("--margin", type=float, default=0.02,
                    help="smallest relative change that counts (0.02); where a side's mean is 0, the smallest "
                         "absolute one: 0.02 = 2 points for a rate")
    ap.add_argument("--confidence", type=float, default=0.95, help="level of the intervals (0.95)")
    ap.add_argument("--adjust", choices=("bonferroni", "none"), default="bonferroni",
                    help="bonferroni (default): the confidence holds for every verdict the gate judges together "
                         "(metrics x load points); none: for each")
    ap.add_argument("--allow", default="", help="track conditions allowed to differ (comma-separated)")
    ap.add_argument("--tracking-uri", help="the MLflow store (default: $MLFLOW_TRACKING_URI, else "
                                           "sqlite:///results/mlflow.db)")
    ap.add_argument("--out", help="folder for track.json and track.html (default: results/track/NAME)")
    a = ap.parse_args(argv)
    from protocols.track.run import PASSED, gate_code, run_track

    out = Path(a.out) if a.out else Path("results") / "track" / safe_part(a.name)
    allow = {k.strip() for k in a.allow.split(",") if k.strip()}
    try:
        doc = run_track(a.name, out, baseline=a.baseline, metrics=a.metric, margin=a.margin,
                        confidence=a.confidence, allow=allow, tracking_uri=a.tracking_uri, adjust=a.adjust, at=a.at,
                        keep_rejected=a.keep_rejected)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    results_io.write_json(out / "track.json", doc)
    print(f"track.json and track.html written: {out.resolve()}")
    code = gate_code(doc)
    if a.gate and code != PASSED:
        print(doc["gate_message"], file=sys.stderr)
        return code
    return 0
