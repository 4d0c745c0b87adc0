"""The curve report: one self-contained plotly HTML file (the plotly JS is inside it).

Every number plotted is read from the runs' ``summary.json`` files, which are themselves
computed from ``requests.parquet``; the report recomputes nothing.
"""

from __future__ import annotations

import html
import json
import math
from pathlib import Path

from harness.results_io import find_run_dirs, read_json, write_atomic
from harness.workload_describe import report_section
from protocols.plan import offered_load

PCTS = (50, 90, 99)


def load_points(root) -> list[dict]:
    """The complete runs under ``root``, ordered by offered load."""
    points = []
    for d in find_run_dirs(root):
        summary = read_json(d / "summary.json")
        meta = read_json(d / "run.json") if (d / "run.json").exists() else {}
        load = meta.get("load", {})
        points.append({"dir": d, "label": meta.get("label", d.name), "load": load,
                       "x": offered_load(load), "summary": summary})
    points.sort(key=lambda p: (p["x"] is None, p["x"] or 0.0))
    return points


def _num(v):
    if v is None or (isinstance(v, str)):
        return None
    return v if math.isfinite(v) else None


def _x_title(points) -> str:
    kinds = {p["load"].get("kind") for p in points}
    if kinds == {"concurrency"}:
        return "concurrency (closed loop)"
    return "offered load (requests/s)"


def _latency_fig(go, points, metric: str, title: str):
    fig = go.Figure()
    xs = [p["x"] for p in points]
    for q in PCTS:
        ys = [_num(p["summary"].get(f"p{q}_{metric}_ms")) for p in points]
        lo = [_num(p["summary"].get(f"p{q}_{metric}_ms_ci95_low")) for p in points]
        hi = [_num(p["summary"].get(f"p{q}_{metric}_ms_ci95_high")) for p in points]
        plus = [(h - y) if (h is not None and y is not None) else None for h, y in zip(hi, ys)]
        minus = [(y - lo_) if (lo_ is not None and y is not None) else None for lo_, y in zip(lo, ys)]
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers", name=f"p{q}",
                                 error_y=dict(type="data", symmetric=False, array=plus, arrayminus=minus)))
    fig.update_layout(title=title + " (95% order-statistic CI)", xaxis_title=_x_title(points),
                      yaxis_title="ms", template="plotly_white")
    return fig


def build_figures(points: list[dict]) -> list:
    import plotly.graph_objects as go

    xs = [p["x"] for p in points]
    figs = [_latency_fig(go, points, "ttft", "TTFT percentiles vs load"),
            _latency_fig(go, points, "itl", "Inter-token latency percentiles vs load"),
            _latency_fig(go, points, "tpot", "TPOT percentiles vs load")]

    tp = go.Figure()
    tp.add_trace(go.Scatter(x=xs, y=[_num(p["summary"].get("output_throughput")) for p in points],
                            mode="lines+markers", name="output tokens/s"))
    tp.add_trace(go.Scatter(x=xs, y=[_num(p["summary"].get("good_output_throughput")) for p in points],
                            mode="lines+markers", name="good output tokens/s"))
    tp.update_layout(title="Output throughput vs load", xaxis_title=_x_title(points),
                     yaxis_title="tokens/s", template="plotly_white")
    figs.append(tp)

    gp = go.Figure()
    gp.add_trace(go.Scatter(x=xs, y=[_num(p["summary"].get("request_throughput")) for p in points],
                            mode="lines+markers", name="completed requests/s"))
    gp.add_trace(go.Scatter(x=xs, y=[_num(p["summary"].get("goodput_rps")) for p in points],
                            mode="lines+markers", name="goodput (good requests/s)"))
    gp.add_trace(go.Scatter(x=xs, y=[_num(p["summary"].get("slo_attainment")) for p in points],
                            mode="lines+markers", name="SLO attainment (all SLOs)", yaxis="y2",
                            line=dict(dash="dot")))
    for key, label in (("slo_attainment_ttft", "TTFT SLO"), ("slo_attainment_tpot", "TPOT SLO"),
                       ("slo_attainment_e2el", "E2EL SLO")):
        if any(key in p["summary"] for p in points):
            gp.add_trace(go.Scatter(x=xs, y=[_num(p["summary"].get(key)) for p in points],
                                    mode="lines+markers", name=f"attainment: {label}", yaxis="y2",
                                    line=dict(dash="dash")))
    gp.update_layout(title="Goodput and SLO attainment vs load", xaxis_title=_x_title(points),
                     yaxis=dict(title="requests/s"),
                     yaxis2=dict(title="attainment", overlaying="y", side="right", range=[0, 1.05],
                                 tickformat=".0%", dtick=0.2),
                     template="plotly_white")
    figs.append(gp)

    cost = go.Figure()
    cost.add_trace(go.Scatter(x=xs, y=[_num(p["summary"].get("cost_per_mtok_good")) for p in points],
                              mode="lines+markers", name="per M good output tokens"))
    cost.add_trace(go.Scatter(x=xs, y=[_num(p["summary"].get("cost_per_mtok_all")) for p in points],
                              mode="lines+markers", name="per M output tokens (all)", line=dict(dash="dot")))
    if any(p["summary"].get("energy_available") for p in points):
        cost.add_trace(go.Scatter(x=xs, y=[_num(p["summary"].get("energy_per_good_token_j")) for p in points],
                                  mode="lines+markers", name="J per good token", yaxis="y2"))
    currency = next((p["summary"].get("cost_currency") for p in points if p["summary"].get("cost_currency")), "")
    cost.update_layout(title="Cost per million good output tokens vs load (full observation window)",
                       xaxis_title=_x_title(points), yaxis=dict(title=currency or "cost"),
                       yaxis2=dict(title="J / good token", overlaying="y", side="right"),
                       template="plotly_white")
    figs.append(cost)
    return figs


TABLE_KEYS = [("offered", "offered"), ("completed", "completed"), ("failed", "failed"),
              ("request_throughput", "req/s"), ("output_throughput", "out tok/s"),
              ("goodput_rps", "goodput req/s"), ("slo_attainment", "SLO attainment"),
              ("p50_ttft_ms", "p50 TTFT ms"), ("p99_ttft_ms", "p99 TTFT ms"),
              ("p50_itl_ms", "p50 ITL ms"), ("p99_itl_ms", "p99 ITL ms"),
              ("schedule_lag_p99_ms", "p99 send lag ms"), ("window_s", "window s"),
              ("cost_total", "cost"), ("cost_per_mtok_good", "cost / M good tok"),
              ("energy_j", "energy J"), ("energy_per_good_token_j", "J / good tok")]


def _fmt(v) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.4g}"
    return "" if v is None else str(v)


def render(root, out_path=None, title: str | None = None) -> Path:
    """Write ``report.html`` for the runs under ``root`` and return its path."""
    import plotly.io as pio

    root = Path(root)
    points = load_points(root)
    if not points:
        raise ValueError(f"{root}: no complete run (no summary.json) to report on")
    out_path = Path(out_path) if out_path else root / "report.html"
    figs = build_figures(points)
    divs = []
    for i, fig in enumerate(figs):
        divs.append(pio.to_html(fig, full_html=False, include_plotlyjs=(i == 0), div_id=f"fig{i}",
                                config={"displaylogo": False}))
    head = "".join(f"<th>{html.escape(label)}</th>" for _, label in TABLE_KEYS)
    rows = []
    for p in points:
        cells = [html.escape(_fmt(p["x"]))] + [html.escape(_fmt(p["summary"].get(k))) for k, _ in TABLE_KEYS[1:]]
        flag = " class='client-limited'" if p["summary"].get("client_limited") else ""
        rows.append(f"<tr{flag}><td>{html.escape(p['label'])}</td>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    warnings = [f"<li>{html.escape(p['label'])}: client-limited (p99 of the load generator's own send delay "
                f"{_fmt(p['summary'].get('schedule_lag_p99_ms'))} ms, waiting for a load.max_concurrency slot "
                "not counted); latencies include that delay</li>"
                for p in points if p["summary"].get("client_limited")]
    prov_file = points[0]["dir"] / "provenance.json"
    prov = json.loads(prov_file.read_text()) if prov_file.exists() else {}
    eng = prov.get("engine", {})
    subtitle = f"engine {eng.get('engine')} {eng.get('engine_version') or ''} · model {eng.get('model')}"
    stamps = sorted({p["summary"].get("chunk_timestamps") for p in points} - {None})
    if stamps:  # how the load generator timed chunks (loadgen/stamped_socket.py)
        names = {"kernel": "the kernel's receive stamps", "read": "read times"}
        subtitle += " · chunk times: " + ", ".join(names.get(s, s) for s in stamps)
    first = points[0]["summary"]
    if first.get("energy_available") is False and first.get("energy_unavailable_reason"):
        subtitle += f" · energy unavailable: {first['energy_unavailable_reason']}"
    title = title or f"tokenfactory report: {root.name}"
    doc = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;margin:2em;}} table{{border-collapse:collapse;font-size:13px}}
td,th{{border:1px solid #ccc;padding:3px 6px;text-align:right}} tr.client-limited{{background:#fee}}</style>
</head><body>
<h1>{html.escape(title)}</h1>
<p>{html.escape(subtitle)}</p>
{"<ul class='warnings'>" + "".join(warnings) + "</ul>" if warnings else ""}
<table id="summary"><tr><th>run</th>{head}</tr>
{''.join(rows)}
</table>
{report_section([p["dir"] for p in points], root)}
{''.join(divs)}
</body></html>
"""
    write_atomic(out_path, doc)
    return out_path
