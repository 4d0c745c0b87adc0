"""Figures against the offered load: latency percentiles, goodput and achieved load, SLO
attainment, cost per million good tokens, energy per good token, and the harness's own
fidelity.  One colour per series; bands are intervals across repeats, error bars the
within-run order-statistic interval of a single run's percentile.
"""

from __future__ import annotations

from harness.report import style
from harness.report.data import CONCURRENCY, Group, ReportData, number


def x_title(data: ReportData) -> str:
    if data.x_kind == CONCURRENCY:
        return "concurrency (requests in flight, closed loop)"
    return "offered load (requests/s)"


def _fmt(v) -> str:
    return "n/a" if v is None else f"{v:.4g}"


def curve(go, groups: list[Group], key: str, name: str, colour: str, *, dash: str = "solid", symbol: str = "circle",
          pct: str | None = None, scale: float = 1.0, legend: bool = True, yaxis: str | None = None,
          bands: bool = True, live: tuple[str, list[int]] | None = None, stale: bool = False) -> tuple[list, bool]:
    """Traces of one series' ``key`` against load: an interval band where there are repeats at two
    points or more (error bars at a lone point), error bars for a single run's within-run
    interval, hollow markers where ``pct``'s sample was too small.  Returns (traces, any hollow).

    ``live``: (the SLO controls' name of this metric, each point's index in ``data.groups()``):
    the page redraws the line when the reader moves the SLO or price (``slo_controls``), hiding its
    band and error bars; ``stale``: a line those controls would change but do not recompute, hidden
    while they are moved."""
    xs = [g.x for g in groups]
    ests = [g.estimate(key) for g in groups]

    def sc(v):
        return None if v is None else v * scale

    ys, lows, highs = [sc(e.value) for e in ests], [sc(e.low) for e in ests], [sc(e.high) for e in ests]
    if all(y is None for y in ys):
        return [], False
    traces = []
    group = style.text(name)
    extra = {"yaxis": yaxis} if yaxis else {}
    repeated = [e.n > 1 and e.low is not None for e in ests]
    b = None
    if bands and sum(repeated) >= 2:
        b = style.band(go, [x if r else None for x, r in zip(xs, repeated)], lows, highs, colour, name, name)
        if b is not None:
            traces.append(b.update(**extra, meta={"stale": True} if live or stale else None))
    # error bars: a single run's within-run interval, or repeats' interval where no band can be drawn (one point)
    bars = [(e.n == 1 and e.low is not None) or (bands and r and b is None) for e, r in zip(ests, repeated)]
    plus = [(h - y) if s and None not in (h, y) else None for s, h, y in zip(bars, highs, ys)]
    minus = [(y - lo) if s and None not in (lo, y) else None for s, lo, y in zip(bars, lows, ys)]
    supported = [g.sufficient(pct) for g in groups] if pct else [True] * len(groups)
    hover = [f"{style.text(name)}<br>{style.text(g.label)}<br>{_fmt(y)} [{_fmt(lo)}, {_fmt(hi)}]"
             f"<br>{style.text(e.how)}" + ("" if ok else "<br>too few samples for this percentile")
             for g, y, lo, hi, e, ok in zip(groups, ys, lows, highs, ests, supported)]
    traces.append(go.Scatter(
        x=xs, y=ys, mode="lines+markers", name=style.text(name), legendgroup=group, showlegend=legend,
        line=dict(color=colour, dash=dash, width=1.8),
        marker=dict(symbol=style.hollow(symbol, supported), size=7, color=colour, line=dict(color=colour, width=1.5)),
        error_y=dict(type="data", symmetric=False, array=plus, arrayminus=minus, color=colour, thickness=1, width=3,
                     visible=any(p is not None for p in plus)),
        hovertext=hover, hoverinfo="text", **extra,
        meta={"live": live[0], "groups": live[1]} if live else ({"stale": True} if stale else None)))
    return traces, not all(supported)


def live_points(data: ReportData, groups: list[Group]) -> list[int]:
    """Each group's index in ``data.groups()``: how the SLO controls' script finds its point."""
    index = {(g.series, g.label): i for i, g in enumerate(data.groups())}
    return [index[(g.series, g.label)] for g in groups]


def _off_axis_note(data: ReportData) -> list[str]:
    if not data.off_axis:
        return []
    return ["Not on this axis (their offered load is of another kind or not recorded): "
            + ", ".join(data.off_axis) + "; they are in the tables, the CDFs and the throughput-interactivity figure."]


def latency(data: ReportData, metric: str, title: str, colours: dict) -> style.Fig | None:
    """p50, p90 and p99 side by side (one panel each, shared load axis), one line per series."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    pcts = (50, 90, 99)
    fig = make_subplots(rows=1, cols=3, subplot_titles=[f"p{q}" for q in pcts], horizontal_spacing=0.06)
    hollow = False
    for s in data.series:
        gs = data.on_axis(s)
        for col, q in enumerate(pcts, start=1):
            tr, h = curve(go, gs, f"p{q}_{metric}_ms", s, colours[s], symbol=style.SYMBOL[q],
                          pct=f"p{q}_{metric}", legend=col == 1)
            if tr:
                fig.add_traces(tr, rows=1, cols=col)
            hollow |= h
    if not fig.data:
        return None
    slo_key = {"ttft": "ttft_ms", "tpot": "tpot_ms"}.get(metric)
    limit = number(data.slo.get(slo_key)) if slo_key else None
    if limit is not None:  # in the panel of the SLO's percentile (all three when it is another one)
        pct = number(data.slo.get("percentile")) or 99.0
        cols = [pcts.index(int(pct)) + 1] if pct in pcts else [1, 2, 3]
        for col in cols:
            style.hline(fig, limit, f"SLO: p{pct:g} ≤ {limit:g} ms", row=1, col=col)
    style.base_layout(fig, title, "", f"{metric.upper()} (ms)")
    fig.update_xaxes(title_text=x_title(data), row=1, col=2)
    notes = ["Bands (error bars at a lone load point): 95% interval across repeats; error bars without repeats: "
             "a single run's 95% order-statistic interval."] + (
        [style.HOLLOW_NOTE] if hollow else []) + _off_axis_note(data)
    return style.Fig(f"{metric}_vs_load", "Latency", title, fig, wide=True, notes=notes)


def goodput(data: ReportData, colours: dict) -> style.Fig | None:
    import plotly.graph_objects as go

    fig = go.Figure()
    open_loop = data.x_kind != CONCURRENCY
    for s in data.series:
        gs = data.on_axis(s)
        tr, _ = curve(go, gs, "goodput_rps", f"{s} goodput", colours[s], live=("goodput", live_points(data, gs)))
        fig.add_traces(tr)
        tr, _ = curve(go, gs, "request_throughput", f"{s} completed", colours[s], dash="dot", symbol="x", bands=False)
        fig.add_traces(tr)
        if open_loop:
            tr, _ = curve(go, gs, "achieved_send_rate_rps", f"{s} achieved send rate", colours[s], dash="dash",
                          symbol="triangle-up", bands=False)
            fig.add_traces(tr)
    if not fig.data:
        return None
    if open_loop:
        xs = [g.x for s in data.series for g in data.on_axis(s)]
        if xs:
            fig.add_trace(go.Scatter(x=[0, max(xs)], y=[0, max(xs)], mode="lines", name="offered (y = x)",
                                     line=dict(color="#999999", dash="dot", width=1), hoverinfo="skip"))
    title = "Goodput and achieved load vs offered load"
    style.base_layout(fig, title, x_title(data), "requests/s")
    notes = ["Goodput: requests that completed and met every SLO, per second. Completed: all finished requests per "
             "second. Achieved send rate: the arrivals the engine actually saw (below the offered load when the "
             "client or an over-saturated engine held sends back)." if open_loop else
             "Goodput: requests that completed and met every SLO, per second; completed: all finished requests."]
    return style.Fig("goodput_vs_load", "Goodput and SLO", title, fig, notes=notes + _off_axis_note(data))


def attainment(data: ReportData, colours: dict) -> style.Fig | None:
    import plotly.graph_objects as go

    fig = go.Figure()
    for s in data.series:
        gs = data.on_axis(s)
        tr, _ = curve(go, gs, "slo_attainment", f"{s} all SLOs", colours[s], scale=100,
                      live=("attainment", live_points(data, gs)))
        fig.add_traces(tr)
        for key, dash, sym in (("ttft", "dash", "square"), ("tpot", "dot", "diamond"), ("e2el", "dashdot", "x")):
            if len(data.series) <= 2 and any(f"slo_attainment_{key}" in r.summary for g in gs for r in g.runs):
                tr, _ = curve(go, gs, f"slo_attainment_{key}", f"{s} {key.upper()} SLO", colours[s], dash=dash,
                              symbol=sym, scale=100, bands=False, stale=True)
                fig.add_traces(tr)
    if not fig.data:
        return None
    floor = number(data.slo.get("min_attainment"))
    if floor is not None:
        style.hline(fig, floor * 100, f"required attainment {floor:.0%}")
    title = "SLO attainment vs offered load"
    style.base_layout(fig, title, x_title(data), "requests meeting the SLO (%)")
    fig.update_yaxes(range=[0, 102])
    limits = ", ".join(f"{k[:-3].upper()} ≤ {v:g} ms" for k, v in data.slo.items()
                       if k.endswith("_ms") and number(v) is not None)
    notes = [f"Share of all measured requests (failed ones count as missing) meeting the SLO ({limits or 'none set'})"
             + ("; dashed and dotted: each SLO on its own." if len(data.series) <= 2 else ".")]
    return style.Fig("slo_attainment_vs_load", "Goodput and SLO", title, fig, notes=notes + _off_axis_note(data))


def cost(data: ReportData, colours: dict) -> style.Fig | None:
    import plotly.graph_objects as go

    fig = go.Figure()
    for s in data.series:
        gs = data.on_axis(s)
        tr, _ = curve(go, gs, "cost_per_mtok_good", f"{s} per M good tokens", colours[s],
                      live=("cost", live_points(data, gs)))
        fig.add_traces(tr)
        tr, _ = curve(go, gs, "cost_per_mtok_all", f"{s} per M tokens (all)", colours[s], dash="dot", symbol="x",
                      bands=False, stale=True)
        fig.add_traces(tr)
    if not fig.data:
        return None
    currency = next((r.summary.get("cost_currency") for r in data.ours if r.summary.get("cost_currency")), "cost")
    title = "Cost per million good output tokens vs offered load"
    style.base_layout(fig, title, x_title(data), f"{currency} per million output tokens")
    infinite = sorted({f"{r.series} at {r.label}" for r in data.ours if r.summary.get("cost_per_mtok_good") == "inf"})
    notes = ["Full observation window: the whole bill from engine start (warm-up, ramp, drain and idle gaps "
             "included) divided by the good output tokens in it; dotted: divided by every output token. Bands: BCa "
             "bootstrap of the ratio of totals across repeats."]
    if infinite:
        notes.append("No good tokens (cost per good token infinite, not drawn): " + "; ".join(infinite) + ".")
    return style.Fig("cost_vs_load", "Cost and energy", title, fig, notes=notes + _off_axis_note(data))


def energy(data: ReportData, colours: dict) -> style.Fig | None:
    import plotly.graph_objects as go

    if not any(r.summary.get("energy_available") for r in data.runs):
        return None
    fig = go.Figure()
    steady = False
    for s in data.series:
        gs = data.on_axis(s)
        tr, _ = curve(go, gs, "energy_per_good_token_j", f"{s} full window, per good token", colours[s])
        fig.add_traces(tr)
        tr, _ = curve(go, gs, "steady_energy_per_token_j", f"{s} steady state, per token", colours[s], dash="dash",
                      symbol="square-open")
        fig.add_traces(tr)
        steady |= bool(tr)
    if not fig.data:
        return None
    title = "Energy per good output token vs offered load"
    style.base_layout(fig, title, x_title(data), "joules per output token")
    srcs = sorted({str(r.summary.get("energy_source")) for r in data.runs if r.summary.get("energy_available")})
    notes = [f"Solid: the full observation window's energy ({', '.join(srcs)}) divided by good output tokens. "
             + ("Dashed: ML.ENERGY's steady state (first full batch to the start of the final drain) divided by "
                "every token in it; reported beside the full-window figure, never instead of it." if steady else
                "No steady-state window in these runs (steady_unavailable_reason in the runs table).")]
    return style.Fig("energy_vs_load", "Cost and energy", title, fig, notes=notes + _off_axis_note(data))


def fidelity(data: ReportData, colours: dict) -> style.Fig | None:
    import plotly.graph_objects as go

    fig = go.Figure()
    for s in data.series:
        gs = data.on_axis(s)
        tr, _ = curve(go, gs, "schedule_lag_p99_ms", f"{s} p99 send lag", colours[s])
        fig.add_traces(tr)
        tr, _ = curve(go, gs, "client_cpu_util", f"{s} client CPU", colours[s], dash="dot", symbol="x", scale=100,
                      yaxis="y2", bands=False)
        fig.add_traces(tr)
    if not fig.data:
        return None
    title = "Harness fidelity: the load generator's own send delay and CPU"
    style.base_layout(fig, title, x_title(data), "p99 send lag (ms)",
                      yaxis2=dict(title="client CPU (% of one core)", overlaying="y", side="right", rangemode="tozero"))
    fig.update_layout(legend=dict(orientation="h", yanchor="top", y=-0.2, x=0))
    notes = ["Send lag: sent - max(scheduled, slot), the client's own delay (waiting for a load.max_concurrency "
             "slot is queueing, not counted). A run whose p99 exceeds client.max_schedule_lag_ms is client-limited "
             "and flagged in the fidelity section."]
    return style.Fig("fidelity_vs_load", "Harness fidelity", title, fig, notes=notes)
