"""``tokenfactory report PATH_OR_EXPERIMENT [--import FILE_OR_DIR ...] [--out DIR] [--static auto|true|false]``:
(re)build report.html and figures/ (``harness.report.build.render``)."""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

STATIC = {"auto": None, "true": True, "false": False}


def main(argv: list[str]) -> int:
    """(re)build the report of a folder or an MLflow experiment; 2 and one line on bad input."""
    ap = argparse.ArgumentParser(
        prog="tokenfactory report",
        description="(re)build report.html (self-contained) and the figures for papers (figures/)")
    ap.add_argument("target", help="a run, sweep or experiment folder, or an MLflow experiment name")
    ap.add_argument("--import", dest="imports", action="append", default=[], metavar="FILE_OR_DIR",
                    help="another tool's result file (vllm bench serve, GuideLLM, AIPerf) or a folder written by "
                         "tokenfactory import, shown beside ours (repeatable)")
    ap.add_argument("--out", help="folder for report.html and figures/ (default: the target folder; an MLflow "
                                  "experiment is downloaded to results/mlflow-reports/NAME)")
    ap.add_argument("--static", choices=list(STATIC), default="auto",
                    help="PNG/SVG/PDF of every figure with kaleido and the system's Chromium (auto: when found)")
    ap.add_argument("--title", help="the page's title")
    ap.add_argument("--tracking-uri", help="MLflow store for an experiment name (default: $MLFLOW_TRACKING_URI, "
                                           "else sqlite:///results/mlflow.db)")
    a = ap.parse_args(argv)
    from harness.errors import UserError
    from harness.report.build import render, summary_line
    from harness.report.source import prepare_imports, resolve, slo_of

    t = time.perf_counter()
    try:
        root = resolve(a.target, None, a.tracking_uri)
        out = Path(a.out) / "report.html" if a.out else None
        with tempfile.TemporaryDirectory(prefix="tokenfactory-imports-") as tmp:
            imports = prepare_imports(a.imports, Path(tmp), slo_of(root))
            path = render(root, out, a.title, static_figures=STATIC[a.static], imports=imports, log=print)
    except (ValueError, UserError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"report: {summary_line(path)}, built in {time.perf_counter() - t:.1f} s")
    if (path.parent / "figures" / "figures.json").exists():
        print(f"figures: {path.parent / 'figures'}")
    return 0
