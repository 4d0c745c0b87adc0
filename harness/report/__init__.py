"""The experiment report: one self-contained HTML page (``report.html``; plotly's JavaScript
inlined once, opens with the network off) with every config on the same axes and intervals
across repeats, plus every figure as PNG, SVG and PDF for papers (``figures/``).

Every number plotted is read from the runs' ``summary.json`` files (computed from their
``requests.parquet``) and the experiment's record (``experiment.json``, ``comparison.json``,
``ablation.json``); aggregates across repeats come from ``metrics.statistics``.  Per-request
data is reduced before it reaches the page (``requests_view``).

Modules: ``data`` (runs, series, groups, estimates), ``requests_view`` (CDF grids, timelines),
``figures_load`` / ``figures_tradeoff`` / ``figures_requests`` / ``figures_ablation`` /
``workload`` (figures), ``tables``, ``page`` (the HTML document), ``static`` (kaleido exports),
``source`` (a folder, an MLflow experiment, files to import), ``command`` (the CLI),
``build`` (one report from all of these).
"""

from __future__ import annotations

from pathlib import Path

from harness.report.build import render

__all__ = ["load_points", "render"]


def load_points(root) -> list[dict]:
    """Our complete runs under ``root`` as dicts (dir, label, load, x, summary, config, block),
    ordered by offered load."""
    from harness.report.data import read_run
    from harness.results_io import find_run_dirs

    points = []
    for d in find_run_dirs(Path(root)):
        r = read_run(d)
        points.append({"dir": r.dir, "label": r.label, "load": r.load, "x": r.x, "summary": r.summary,
                       "config": r.config, "block": r.block})
    points.sort(key=lambda p: (p["x"] is None, p["x"] or 0.0))
    return points
