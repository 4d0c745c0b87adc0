"""The experiment report: one self-contained HTML page (``report.html``; plotly's JavaScript
inlined once, opens with the network off) with every config on the same axes and intervals
across repeats, plus every figure as PNG, SVG and PDF for papers (``figures/``).

Every number plotted is read from the runs' ``summary.json`` files (computed from their
``requests.parquet``) and the experiment's record (``experiment.json``, ``comparison.json``,
``ablation.json``); aggregates across repeats come from ``metrics.statistics``.  Per-request
data is reduced before it reaches the page (``requests_view``; ``slo_histogram`` for the SLO and
price controls, which recompute goodput, attainment and cost in the page: ``slo_controls``).

Modules: ``data`` (runs, series, groups, estimates), ``requests_view`` (CDF grids, timelines),
``figures_load`` / ``figures_tradeoff`` / ``figures_requests`` / ``figures_ablation`` /
``workload`` (figures), ``slo_histogram`` / ``slo_controls`` (the reader's SLO and price),
``tables``, ``page`` (the HTML document), ``static`` (kaleido exports), ``source`` (a folder, an
MLflow experiment, files to import), ``build`` (one report from all of these: ``render``); the
command is ``harness/commands/report.py``.  This init imports none of them: they import the
package back (``from harness.report import style``).
"""
