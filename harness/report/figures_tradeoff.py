"""Throughput against interactivity, as MLPerf Endpoints draws it: the system's output tokens/s
against the tokens/s one user sees (1000 / p90 TPOT in ms), one step curve per series.

The step curve is the frontier of the measured points, without interpolation: at an
interactivity of at least x, the best throughput any measured point reached, f(x) = max{y_i :
x_i >= x}; it is constant between measured points and drops right after each (plotly's ``vh``
shape through the frontier values).  Points are the load points (means across repeats with
their intervals on both axes); every load point is plotted, whatever its offered-load kind.
"""

from __future__ import annotations

from harness.report import style
from harness.report.data import ReportData, number


def frontier(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """(x, f(x)) at each measured x, ascending: f(x) = max y over points with x_i >= x."""
    pts = sorted(points)
    out, best = [], float("-inf")
    for x, y in reversed(pts):
        best = max(best, y)
        out.append((x, best))
    return list(reversed(out))


def _inv(v):
    return 1000.0 / v if v else None


def throughput_interactivity(data: ReportData, colours: dict) -> style.Fig | None:
    import plotly.graph_objects as go

    fig = go.Figure()
    hollow = False
    for s in data.series:
        pts, hover, supported, ex, ey = [], [], [], ([], []), ([], [])
        for g in data.groups(s):
            t, y = g.estimate("p90_tpot_ms"), g.estimate("output_throughput")
            x = _inv(t.value)
            if x is None or y.value is None:
                continue
            pts.append((x, y.value))
            ok = g.sufficient("p90_tpot")
            supported.append(ok)
            # interactivity falls as TPOT rises: its interval is [1000/high, 1000/low]; a TPOT interval
            # reaching 0 leaves it unbounded above (no upper bar, said in the hover)
            xl = _inv(t.high) if t.high is not None and t.high > 0 else None
            xh = _inv(t.low) if t.low is not None and t.low > 0 else None
            ex[0].append(None if xh is None else xh - x)
            ex[1].append(None if xl is None else x - xl)
            ey[0].append(None if y.high is None else y.high - y.value)
            ey[1].append(None if y.low is None else y.value - y.low)
            hover.append(f"{style.text(s)}<br>{style.text(g.label)}<br>{x:.4g} tok/s per user (p90 TPOT "
                         f"{t.value:.4g} ms)<br>{y.value:.4g} output tok/s<br>{style.text(y.how)}"
                         + ("" if ok else "<br>too few samples for p90")
                         + ("<br>interactivity unbounded above: the TPOT interval reaches 0"
                            if t.low is not None and t.low <= 0 else ""))
        if not pts:
            continue
        hollow |= not all(supported)
        f = frontier(pts)
        fig.add_trace(go.Scatter(x=[p[0] for p in f], y=[p[1] for p in f], mode="lines", line_shape="vh",
                                 line=dict(color=colours[s], width=2), name=style.text(s), legendgroup=style.text(s),
                                 hoverinfo="skip"))
        order = sorted(range(len(pts)), key=lambda i, _pts=pts: _pts[i][0])

        def pick(a, _order=order):
            return [a[i] for i in _order]

        fig.add_trace(go.Scatter(
            x=pick([p[0] for p in pts]), y=pick([p[1] for p in pts]), mode="markers", showlegend=False,
            legendgroup=style.text(s), name=style.text(s) + " points",
            marker=dict(symbol=pick(style.hollow("circle", supported)), size=7, color=colours[s],
                        line=dict(color=colours[s], width=1.5)),
            error_x=dict(type="data", symmetric=False, array=pick(ex[0]), arrayminus=pick(ex[1]), color=colours[s],
                         thickness=1, width=2, visible=any(v is not None for v in ex[0])),
            error_y=dict(type="data", symmetric=False, array=pick(ey[0]), arrayminus=pick(ey[1]), color=colours[s],
                         thickness=1, width=2, visible=any(v is not None for v in ey[0])),
            hovertext=pick(hover), hoverinfo="text"))
    if not fig.data:
        return None
    tpot = number(data.slo.get("tpot_ms"))
    if tpot:
        style.vline(fig, 1000.0 / tpot, f"TPOT SLO {tpot:g} ms")
    title = "Throughput vs interactivity"
    style.base_layout(fig, title, "interactivity: tokens/s per user (1000 / p90 TPOT ms)",
                      "system output throughput (tokens/s)")
    fig.update_xaxes(rangemode="tozero")
    fig.update_yaxes(rangemode="tozero")
    notes = ["MLPerf Endpoints style: each point is a load point (mean across repeats, 95% intervals on both axes); "
             "the step line is the frontier, the best throughput measured at or above each interactivity, not "
             "interpolated between points. Right of the red line, users get faster tokens than the TPOT SLO "
             "requires." if tpot else
             "MLPerf Endpoints style: each point is a load point (mean across repeats, 95% intervals on both axes); "
             "the step line is the frontier, the best throughput measured at or above each interactivity."]
    return style.Fig("throughput_vs_interactivity", "Throughput and interactivity", title, fig,
                     notes=notes + ([style.HOLLOW_NOTE] if hollow else []))
