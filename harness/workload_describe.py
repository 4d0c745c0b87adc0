"""``tokenfactory workload describe workload=...``: characterise a workload, and the same
description stored with every run (``workload.json`` + ``workload.html``), logged to
MLflow with the run folder and shown in the report.

The numbers come from ``loadgen/characterise.py`` (definitions there); this module builds
the table of any workload (a trace, or synthetic requests with the load's arrivals), draws
the figures and writes the files.
"""

from __future__ import annotations

import html
import math
from pathlib import Path

import numpy as np

from conf.schema import Load, typed
from harness.results_io import WORKLOAD, write_atomic, write_json
from loadgen.arrivals import OPEN_LOOP, arrival_offsets
from loadgen.workloads.characterise import characterise, replay_lengths
from loadgen.workloads.synthetic import prefix_group_spec, synthetic_blocks
from loadgen.workloads.table import WorkloadTable
from loadgen.workloads.task_shape import task_arrays
from loadgen.workloads.traces.readers import FORMATS

JSON_NAME, HTML_NAME = WORKLOAD, "workload.html"


def synthetic_table(wcfg, load: Load, n: int) -> WorkloadTable:
    """The synthetic requests a run of ``n`` requests sends under ``load`` (typed), as a table (same
    draws as the run)."""
    ins, outs, groups = [], [], []
    for _, a, b, g in synthetic_blocks(wcfg, n):
        ins.append(a)
        outs.append(b)
        groups.append(g)
    ins, outs, groups = (np.concatenate(x) if x else np.empty(0, dtype=np.int64) for x in (ins, outs, groups))
    if load.kind in OPEN_LOOP and load.rate:
        arr = arrival_offsets(load.kind, load.rate, n, load.burstiness, load.seed)
    else:
        arr = np.full(n, np.nan)  # closed loop: arrivals follow the server, not a schedule
    _, plen, _ = prefix_group_spec(wcfg)
    t = WorkloadTable(arrival_s=arr, input_tokens=ins.astype(np.int64), output_tokens=outs.astype(np.int64),
                      source="synthetic")
    if plen:
        t.prefix_group, t.prefix_tokens = groups.astype(np.int64), np.full(n, plen, dtype=np.int64)
    return t


def workload_table(cfg, n: int | None = None, load: dict | None = None) -> WorkloadTable:
    """The table of ``cfg.workload`` as a run would replay it (``n``: request cap) under
    ``load`` (a load point's; default ``cfg.load``)."""
    from loadgen.workloads.traces.replay import load_table

    name = cfg.workload.name
    if name == "synthetic":
        load = typed(load if load is not None else cfg.load, Load)
        if n is None:
            n = load.num_requests + load.warmup_requests if load.num_requests is not None else 1000
        return synthetic_table(cfg.workload, load, n)
    if name in FORMATS:
        return load_table(cfg.workload, n)
    raise ValueError(f"workload={name}: unknown workload (known: synthetic, {', '.join(FORMATS)})")


def _hist_bar(go, values: np.ndarray, title: str, xtitle: str, nbins: int = 60):
    values = np.asarray(values, dtype=np.float64)
    fig = go.Figure()
    if values.size:
        lo, hi = float(values.min()), float(values.max())
        if hi - lo <= 1e-9 * max(abs(hi), 1.0):  # one value (up to float noise): one bar around it
            d = max(abs(hi) * 1e-3, 1e-9)
            counts, edges = np.histogram(values, bins=1, range=(lo - d, hi + d))
        else:
            counts, edges = np.histogram(values, bins=nbins)
        fig.add_trace(go.Bar(x=((edges[:-1] + edges[1:]) / 2).tolist(), y=counts.tolist(),
                             width=float(edges[1] - edges[0]) if len(edges) > 1 else None, name=xtitle))
    fig.update_layout(title=title, xaxis_title=xtitle, yaxis_title="requests", template="plotly_white", bargap=0)
    return fig


def _num(v) -> float:
    """A statistic read back from workload.json: JSON has no NaN, so an undefined one is null."""
    return math.nan if v is None else float(v)


def figures(stats: dict, ins: np.ndarray, outs: np.ndarray, table: WorkloadTable) -> list:
    import plotly.graph_objects as go

    i, o = stats["input_tokens"], stats["output_tokens"]
    figs = [_hist_bar(go, ins, f"Input length (mean {_num(i.get('mean')):.0f}, p99 {_num(i.get('p99')):.0f})",
                      "prompt tokens"),
            _hist_bar(go, outs, f"Output length (mean {_num(o.get('mean')):.0f}, p99 {_num(o.get('p99')):.0f})",
                      "output tokens")]
    tl = stats.get("rate_timeline")
    if tl:
        fig = go.Figure(go.Scatter(x=(np.arange(len(tl["counts"])) * tl["bin_s"]).tolist(),
                                   y=(np.asarray(tl["counts"]) / tl["bin_s"]).tolist(), mode="lines", line_shape="hv"))
        rate = _num(stats.get("mean_rate_rps"))
        fig.update_layout(title=f"Arrival rate (bins of {tl['bin_s']:g} s; mean {rate:.3g} req/s)",
                          xaxis_title="seconds from the first request", yaxis_title="requests/s",
                          template="plotly_white")
        figs.append(fig)
        a = np.sort(table.arrival_s[np.isfinite(table.arrival_s)])
        figs.append(_hist_bar(go, np.diff(a), f"Inter-arrival times (CV {_num(stats.get('interarrival_cv')):.3g})",
                              "seconds"))
    sess = stats.get("sessions") or {}
    if sess.get("count"):
        hist = sess["turns_hist"]
        fig = go.Figure(go.Bar(x=list(range(len(hist))), y=hist))
        fig.update_layout(title=f"Turns per session ({sess['count']} sessions, mean {sess['turns_mean']:.2f})",
                          xaxis_title="turns", yaxis_title="sessions", template="plotly_white")
        figs.append(fig)
    tasks = stats.get("tasks") or {}
    if tasks.get("count"):
        figs.extend(task_figures(go, tasks, task_arrays(table)))
    return figs


def task_figures(go, tasks: dict, arrays: dict) -> list:
    """The DAG's shape (loadgen/workloads/task_shape.py): calls per task, depth, fan-out, tool time."""
    figs = []
    for key, hist, title, xtitle, ytitle in (
            ("calls_per_task", "calls_per_task_hist", "Calls per task", "calls", "tasks"),
            ("depth", "depth_hist", "Depth (calls on the longest root-to-sink chain)", "calls", "tasks"),
            ("fan_out", "fan_out_hist", "Fan-out (children per call)", "children", "calls")):
        counts = tasks[hist]
        fig = go.Figure(go.Bar(x=list(range(len(counts))), y=counts))
        d = tasks[key]
        fig.update_layout(title=f"{title} (mean {_num(d.get('mean')):.2f}, max {_num(d.get('max')):.0f})",
                          xaxis_title=xtitle, yaxis_title=ytitle, template="plotly_white")
        figs.append(fig)
    if arrays["tool_s"].size:
        fig = _hist_bar(go, arrays["tool_s"], f"Tool time per call ({arrays['tool_s'].size} calls that give one, "
                                              f"mean {_num(tasks['tool_s'].get('mean')):.3g} s)", "seconds")
        fig.update_layout(yaxis_title="calls")
        figs.append(fig)
        fig = _hist_bar(go, arrays["tool_s_critical"], "Tool time on each task's longest tool chain (mean "
                                                       f"{_num(tasks['tool_s_critical'].get('mean')):.3g} s)",
                        "seconds")
        fig.update_layout(yaxis_title="tasks")
        figs.append(fig)
    return figs


SUMMARY_ROWS = [("requests", "requests"), ("timed_requests", "requests with a trace time"),
                ("duration_s", "duration (s)"), ("mean_rate_rps", "mean rate (req/s)"),
                ("interarrival_cv", "CV of inter-arrival times"), ("prefix_reuse_share", "share of prompt tokens "
                                                                  "repeating an earlier prefix"),
                ("bad_lines_skipped", "bad lines skipped")]


def _fmt(v) -> str:
    if isinstance(v, float):
        return "n/a" if math.isnan(v) else f"{v:.4g}"
    return str(v)


def summary_rows(stats: dict) -> list[tuple[str, str]]:
    rows = [(label, _fmt(stats.get(k))) for k, label in SUMMARY_ROWS]
    for which in ("input_tokens", "output_tokens"):
        d = stats.get(which) or {}
        if d.get("n"):
            rows.append((which.replace("_", " "), f"mean {d['mean']:.1f}, p50 {d['p50']:.0f}, p90 {d['p90']:.0f}, "
                                                  f"p99 {d['p99']:.0f}, max {d['max']:.0f}"))
    s = stats.get("sessions") or {}
    if s.get("count"):
        rows.append(("sessions", f"{s['count']} (turns mean {s['turns_mean']:.2f}, max {s['turns_max']}; "
                                 f"think mean {_fmt(s['think_s_mean'])} s)"))
    t = stats.get("tasks") or {}
    if t.get("count"):
        counted = "each call's whole prompt" if t["task_input"] == "total" else "its own message"
        rows.append(("tasks", f"{t['count']} ({t['calls']} calls; calls per task mean "
                              f"{_fmt(t['calls_per_task']['mean'])}, max {_fmt(t['calls_per_task']['max'])}; "
                              f"depth mean {_fmt(t['depth']['mean'])}, max {_fmt(t['depth']['max'])}; fan-out max "
                              f"{_fmt(t['fan_out']['max'])}; {t['joins']} joins; input_tokens count "
                              f"{counted})"))
        rows.append(("tool time", f"{_fmt(_num(t['tool_s'].get('mean')))} s mean over {t['tool_s']['n']} calls "
                                  f"({t['tool_s_default_calls']} take workload.task.tool_s); share of later calls "
                                  f"behind a tool {_fmt(_num(t['tool_calls_share']))}; longest tool chain per task "
                                  f"mean {_fmt(_num(t['tool_s_critical'].get('mean')))} s"))
        pt = t.get("prefix_tree") or {}
        if pt.get("nodes"):
            rows.append(("prefix tree", f"{pt['nodes']} nodes ({pt['nodes_used']} used): {pt['independent_tokens']} "
                                        f"prompt tokens alone, {pt['tree_tokens']} on the tree, "
                                        f"{pt['reused_tokens']} reused (share {_fmt(_num(pt['reuse_share']))})"))
    for note in stats.get("notes") or []:
        rows.append(("note", note))
    return rows


def html_table(stats: dict) -> str:
    body = "".join(f"<tr><th style='text-align:left'>{html.escape(k)}</th><td style='text-align:left'>"
                   f"{html.escape(v)}</td></tr>" for k, v in summary_rows(stats))
    return f"<table class='workload'>{body}</table>"


def describe(cfg, out_dir, n: int | None = None, table: WorkloadTable | None = None, count=None,
             html_dir=None, figures_too: bool = True, load: dict | None = None) -> dict:
    """Characterise the workload of ``cfg`` (under ``load``, a load point's; default
    ``cfg.load``) and write ``workload.json`` into ``out_dir`` and, with ``figures_too``,
    ``workload.html`` into ``html_dir`` (default ``out_dir``); returns the numbers."""
    stats, page = description(cfg, n, table, count, figures_too, load)
    write_json(Path(out_dir) / JSON_NAME, stats)
    if page is not None:
        write_figures(page, html_dir or out_dir)
    return stats


def description(cfg, n: int | None = None, table: WorkloadTable | None = None, count=None,
                figures_too: bool = True, load: dict | None = None) -> tuple[dict, str | None]:
    """What ``describe`` writes, computed and not written: the numbers (``workload.json``'s) and, with
    ``figures_too``, the figures' page (``workload.html``'s; else None).  A load point's is computed
    before its engine starts (``harness.point.prebuild``), out of every cost window."""
    table = table if table is not None else workload_table(cfg, n, load)
    if table.has_tasks:  # the prefix tree the replay uses: the trace's, else workload.task.prefix_tree
        from loadgen.workloads.tasks import with_prefix_tree
        from loadgen.workloads.traces.replay import trace_config

        table = with_prefix_tree(table, trace_config(cfg.workload).task)
    if count is None and ((table.input_tokens < 0).any() or (table.output_tokens < 0).any()):
        count = _tokenizer_count(cfg)
    ins, outs = replay_lengths(table, count)
    stats = characterise(table, lengths=(ins, outs))
    stats["workload"] = cfg.workload.name
    if not figures_too:
        return stats, None
    import plotly.io as pio

    figs = figures(stats, ins, outs, table)
    divs = "".join(pio.to_html(f, full_html=False, include_plotlyjs=(i == 0), config={"displaylogo": False})
                   for i, f in enumerate(figs))
    title = f"workload {stats['workload']}" + (f": {table.path}" if table.path else "")
    return stats, (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
                   f"</title></head><body style='font-family:sans-serif'><h1>{html.escape(title)}</h1>"
                   f"{html_table(stats)}{divs}</body></html>\n")


def write_figures(page: str, html_dir) -> Path:
    """``workload.html`` (the page ``description`` drew) into ``html_dir``."""
    path = Path(html_dir) / HTML_NAME
    write_atomic(path, page)
    return path


def _tokenizer_count(cfg):
    """``str -> tokens`` under the served model's tokenizer (the embedded tiny model's by default)."""
    from loadgen.workloads.prompts import load_tokenizer

    name = cfg.engine.tokenizer or cfg.engine.model
    if not name:
        from engines.tiny_model import ensure_tiny_model

        name = str(ensure_tiny_model())
    tok = load_tokenizer(str(name))
    return lambda s: len(tok(s, add_special_tokens=True)["input_ids"])


def summary_keys(stats: dict, items=None) -> dict:
    """The numbers of the description that go into a run's ``summary.json`` (and MLflow),
    with what the replay left out (text prompts over the limit, session turns and task calls not
    buildable: their session ended there, their task's attempt failed)."""
    sessions = getattr(items, "sessions", None)
    tasks = getattr(items, "tasks", None)
    return {"workload_skipped_requests": int(getattr(items, "skipped", 0) or 0),
            "workload_unbuildable_turns": int(getattr(sessions, "unbuildable", 0) or 0),
            "workload_unbuildable_calls": int(getattr(tasks, "unbuildable", 0) or 0),
            "workload_requests": stats.get("requests"), "workload_bad_lines_skipped": stats.get("bad_lines_skipped"),
            "workload_mean_rate_rps": stats.get("mean_rate_rps"),
            "workload_interarrival_cv": stats.get("interarrival_cv"),
            "workload_prefix_reuse_share": stats.get("prefix_reuse_share"), **task_summary_keys(stats)}


def task_summary_keys(stats: dict) -> dict:
    """The task shape's headline numbers (none for a workload without tasks)."""
    t = stats.get("tasks") or {}
    if not t.get("count"):
        return {}
    pt = t.get("prefix_tree") or {}
    return {"workload_tasks": t["count"], "workload_task_calls_mean": t["calls_per_task"]["mean"],
            "workload_task_depth_mean": t["depth"]["mean"], "workload_task_depth_max": t["depth"]["max"],
            "workload_task_fan_out_max": t["fan_out"]["max"],
            "workload_task_tool_calls_share": t["tool_calls_share"],
            "workload_task_tool_s_critical_mean": t["tool_s_critical"].get("mean"),
            "workload_prefix_tree_reused_tokens": pt.get("reused_tokens"),
            "workload_prefix_tree_reuse_share": pt.get("reuse_share")}


def with_nans(stats: dict) -> dict:
    """JSON null back to NaN for formatting."""
    return {k: (math.nan if v is None else v) for k, v in stats.items()}
