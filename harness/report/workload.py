"""The report's workload section: the characterisation of the first run that has one
(``workload.json``, ``loadgen.workloads.characterise``) as a table, and its figures drawn by
``harness.workload_describe`` from the lengths and send schedule the run actually had, on the
report's one copy of plotly's JavaScript.
"""

from __future__ import annotations

import html

import numpy as np

from harness.report import style
from harness.report.data import ReportData
from harness.results_io import REQUESTS, read_json, read_parquet
from harness.workload_describe import JSON_NAME, figures, html_table, with_nans
from loadgen.workloads.table import WorkloadTable


def section(data: ReportData) -> tuple[str, list[style.Fig]]:
    run = next((r for g in data.groups() for r in g.runs if (r.dir / JSON_NAME).exists()), None)
    if run is None:
        return "", []
    stats = read_json(run.dir / JSON_NAME)
    where = run.dir.relative_to(data.root) if run.dir.is_relative_to(data.root) else run.dir.name
    head = (f"<p>As replayed at {html.escape(run.series)} · {html.escape(run.title)} "
            f"(<code>{html.escape(str(where))}</code>); every run's own description is its "
            "<code>workload.json</code>.</p>")
    table = head + html_table(with_nans(stats))
    path = run.dir / REQUESTS
    if not path.exists():
        return table, []
    t = read_parquet(path, columns=["scheduled_ns", "prompt_tokens", "output_tokens", "status"])
    ok = np.asarray(t.column("status").to_pylist()) == "ok"
    ins = np.asarray(t.column("prompt_tokens").to_numpy(zero_copy_only=False), dtype=float)
    outs = np.asarray(t.column("output_tokens").to_numpy(zero_copy_only=False), dtype=float)
    sched = np.asarray(t.column("scheduled_ns").to_numpy(zero_copy_only=False), dtype=float)
    arrivals = (sched - np.nanmin(sched)) / 1e9 if np.isfinite(sched).any() else sched
    if run.load.get("kind") == "concurrency":
        arrivals = np.full(len(sched), np.nan)  # closed loop: sends follow completions, not a schedule
    wt = WorkloadTable(arrival_s=arrivals, input_tokens=np.nan_to_num(ins, nan=-1).astype(np.int64),
                       output_tokens=np.nan_to_num(outs, nan=-1).astype(np.int64), source=str(stats.get("source")))
    figs = []
    for i, f in enumerate(figures(stats, ins[ok & np.isfinite(ins)], outs[ok & np.isfinite(outs)], wt)):
        title = f.layout.title.text or f"workload {i}"
        figs.append(style.Fig(f"workload_{i}", "Workload", title, f, notes=[
            "Lengths: the completed requests of that run (prompt tokens as counted by the server, output tokens "
            "from its usage); arrivals: its send schedule." if i == 0 else ""]))
    return table, figs
