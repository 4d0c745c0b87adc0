"""Figures from per-request data and telemetry (reduced by ``requests_view``): latency CDFs per
load point (a dropdown picks the point; imported results are shown in every view for
reference) and a timeline per run (a dropdown picks the run).
"""

from __future__ import annotations

from harness.report import style
from harness.report.data import ReportData, number
from harness.report.requests_view import LATENCIES, TELEMETRY, RunView, cdf


def _dropdown(labels: list[str], visible: list[list[bool]], active: int, prefix: str) -> list[dict]:
    buttons = [dict(label=style.text(lab)[:80], method="restyle", args=[{"visible": vis}])
               for lab, vis in zip(labels, visible)]
    return [dict(buttons=buttons, active=active, direction="down", x=1.0, xanchor="right", y=1.02, yanchor="bottom",
                 pad=dict(t=0, b=24), showactive=True, type="dropdown", name=prefix)]


def latency_cdfs(data: ReportData, views: dict, colours: dict) -> style.Fig | None:
    """``views``: run dir -> RunView."""
    import numpy as np
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    groups = [g for g in data.groups() if any(views.get(r.dir) for r in g.runs)]
    ours = [g for g in groups if not g.runs[0].imported]
    imported = [g for g in groups if g.runs[0].imported]
    labels = list(dict.fromkeys(g.label for g in (ours or imported)))
    if not labels:
        return None
    fig = make_subplots(rows=1, cols=3, subplot_titles=[name for _, name in LATENCIES], horizontal_spacing=0.07)
    owner = []   # per trace: the label it belongs to (None: shown in every view)
    default = labels[len(labels) // 2]
    for g in ours + imported:
        for col, (key, name) in enumerate(LATENCIES, start=1):
            vals = [views[r.dir].latencies.get(key) for r in g.runs if views.get(r.dir)]
            vals = [v for v in vals if v is not None and v.size]
            if not vals:
                continue
            xs, ps = cdf(np.concatenate(vals))
            imp = g.runs[0].imported
            who = style.text(g.series) + ("" if not imp else f" ({style.text(g.label)})")
            fig.add_trace(go.Scatter(
                x=xs, y=ps, mode="lines",
                line=dict(color=colours[g.series], dash="dash" if imp else "solid", width=1.6),
                name=who, legendgroup=style.text(g.series), showlegend=col == 1,
                visible=imp or g.label == default,
                hovertemplate=f"{who}<br>{name} %{{x:.4g}} ms at p%{{y:.2f}}<extra></extra>"), row=1, col=col)
            owner.append(None if imp else g.label)
    if not fig.data:
        return None
    pct = number(data.slo.get("percentile")) or 99.0
    for col, slo_key in enumerate(("ttft_ms", "tpot_ms", "e2el_ms"), start=1):
        limit = number(data.slo.get(slo_key))
        if limit is not None:
            fig.add_vline(x=limit, line=dict(color="#B22222", dash="longdash", width=1), row=1, col=col,
                          annotation_text=f"SLO {limit:g} ms", annotation_font=dict(size=9, color="#B22222"))
            fig.add_hline(y=pct, line=dict(color="#B22222", dash="dot", width=0.8), row=1, col=col)
    visible = [[o is None or o == lab for o in owner] for lab in labels]
    title = "Latency CDFs per load point"
    style.base_layout(fig, title, "", "share of completed requests (%)")
    fig.update_xaxes(title_text="ms")
    fig.update_yaxes(range=[0, 100.5])
    if len(labels) > 1:
        fig.update_layout(updatemenus=_dropdown(labels, visible, labels.index(default), "load point"),
                          margin=dict(t=90))
    notes = [f"Completed, measured requests of every repeat of a load point pooled; drawn from quantiles at "
             f"{len(cdf(np.zeros(1))[0])} probabilities (finer in the tail). The menu picks the load point (shown "
             f"first: {default}); dashed: imported results, in every view. Red: the SLO's limit and its "
             f"percentile (p{pct:g})."]
    return style.Fig("latency_cdfs", "Latency distributions", title, fig, wide=True, notes=notes)


def timelines(data: ReportData, views: dict[object, RunView], colours: dict) -> style.Fig | None:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    runs = [r for r in data.runs if views.get(r.dir) is not None and views[r.dir].timeline is not None]
    if not runs:
        return None
    tls = [views[r.dir].timeline for r in runs]
    has_engine = any(tl.engine.get(k) for tl in tls for k in ("running", "waiting"))
    has_kv = any(tl.engine.get("kv_cache_usage") for tl in tls)
    has_power = any(tl.power for tl in tls)
    rows = [("requests in flight", "requests"), ("output tokens/s", "tokens/s")]
    if has_kv:
        rows.append(("KV cache usage", "% of KV cache"))
    if has_power:
        rows.append(("GPU power", "W"))
    fig = make_subplots(rows=len(rows), cols=1, shared_xaxes=True, vertical_spacing=0.06,
                        subplot_titles=[r[0] for r in rows])
    row_of = {name: i + 1 for i, (name, _) in enumerate(rows)}
    owner = []
    default = max(range(len(runs)), key=lambda i: (runs[i].x or 0.0) if not runs[i].imported else -1.0)
    names = []
    for i, (r, tl) in enumerate(zip(runs, tls)):
        c = colours[r.series]
        name = f"{r.series} · {r.title}"
        names.append(name)
        vis = i == default

        def add(y, row, what, dash="solid", _vis=vis, _c=c, _tl=tl, _i=i, _name=name):
            # telemetry is sampled more coarsely than the bins: join its samples across empty bins
            fig.add_trace(go.Scatter(x=_tl.t, y=y, mode="lines", line=dict(color=_c, dash=dash, width=1.4),
                                     connectgaps=True,
                                     name=style.text(what), visible=_vis, legendgroup=style.text(what),
                                     hovertemplate=f"{style.text(_name)}<br>{style.text(what)} %{{y:.4g}} at "
                                                   f"%{{x:.3g}} s<extra></extra>"), row=row, col=1)
            owner.append(_i)

        add(tl.in_flight, row_of["requests in flight"], "in flight (client)")
        if has_engine:
            for key, dash in (("running", "dash"), ("waiting", "dot")):
                if tl.engine.get(key):
                    add(tl.engine[key], row_of["requests in flight"], TELEMETRY[key], dash)
        add(tl.out_tps, row_of["output tokens/s"], "output tokens/s" + ("" if tl.tps_exact else " (spread)"))
        if has_kv and tl.engine.get("kv_cache_usage"):
            add(tl.engine["kv_cache_usage"], row_of["KV cache usage"], "KV cache usage")
        for dev, watts in tl.power.items():
            add(watts, row_of["GPU power"], f"{dev} power", "solid" if dev.endswith("0") else "dash")
    visible = [[o == i for o in owner] for i in range(len(runs))]
    for i, (_, unit) in enumerate(rows, start=1):
        fig.update_yaxes(title_text=unit, row=i, col=1, rangemode="tozero")
    fig.update_xaxes(title_text="seconds from the run's first send", row=len(rows), col=1)
    title = "Per-run timeline"
    style.base_layout(fig, title, "", "", height=200 + 170 * len(rows))
    fig.update_layout(updatemenus=_dropdown(names, visible, default, "run"), margin=dict(t=100))
    notes = [f"In {len(tls[0].t)} bins per run; the menu picks the run (shown first: {names[default]}). Requests in "
             "flight: sent and not yet done, as the client saw them" + ("; engine running (dashed) and waiting "
                                                                        "(dotted) from its /metrics" if has_engine
                                                                        else "") + ". Output tokens/s from every "
             "chunk's receive time" + ("" if all(t.tps_exact for t in tls) else
                                       " (runs marked 'spread': each request's tokens spread evenly between its first "
                                       "and last chunk, too many chunks to read)") + "."]
    if not has_power:
        notes.append("No GPU power in these runs (no NVML/DCGM source: see the energy note in the provenance).")
    return style.Fig("timeline", "Runs over time", title, fig, wide=True, notes=notes, height_in=1.1 * len(rows))


CACHE_BINS = 10  # cached share of the prompt in tenths


def ttft_vs_cached_share(data: ReportData, views: dict, colours: dict) -> style.Fig | None:
    """Median and p90 TTFT per tenth of the prompt served from the prefix cache (rows'
    ``cached_tokens`` / ``prompt_tokens``), each series' completed measured requests pooled;
    None when no run's rows report cached tokens."""
    import numpy as np
    import plotly.graph_objects as go

    fig = go.Figure()
    edges = np.linspace(0, 1, CACHE_BINS + 1)
    for series in data.series:
        got = [views[r.dir].cache_ttft for r in data.ours if r.series == series and views.get(r.dir)
               and views[r.dir].cache_ttft is not None]
        if not got:
            continue
        share = np.concatenate([g[0] for g in got])
        ttft = np.concatenate([g[1] for g in got]) * 1e3
        idx = np.clip(np.searchsorted(edges, share, side="right") - 1, 0, CACHE_BINS - 1)  # 1.0 in the last bin
        xs, med, p90, ns = [], [], [], []
        for b in range(CACHE_BINS):
            v = ttft[idx == b]
            if v.size:
                xs.append((edges[b] + edges[b + 1]) / 2 * 100)
                med.append(float(np.median(v)))
                p90.append(float(np.percentile(v, 90)))
                ns.append(int(v.size))
        who = style.text(series)
        for ys, dash, what in ((med, "solid", "median"), (p90, "dot", "p90")):
            fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines+markers", customdata=ns, name=f"{who} {what}",
                                     line=dict(color=colours[series], dash=dash, width=1.6),
                                     hovertemplate=f"{who}<br>{what} TTFT %{{y:.4g}} ms at %{{x:.0f}}% cached"
                                                   "<br>%{customdata} requests<extra></extra>"))
    if not fig.data:
        return None
    title = "TTFT against the cached share of the prompt"
    style.base_layout(fig, title, "prompt tokens served from the prefix cache (%)", "TTFT (ms)")
    fig.update_xaxes(range=[0, 100])
    notes = ["Completed, measured requests whose server reported usage.prompt_tokens_details.cached_tokens, "
             "pooled per series over its runs, in tenths of cached_tokens / prompt_tokens (a fully cached "
             "prompt in the last); solid: median, dotted: p90."]
    return style.Fig("ttft_vs_cached_share", "Latency distributions", title, fig, notes=notes)
