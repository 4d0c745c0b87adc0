"""How every figure looks: one colour per series throughout, units on the axes, the SLO line,
interval bands, hollow markers for unsupported percentiles, and the paper sizes of the static
exports (a two-column paper: 3.5 in single column, 7.16 in double).

Text that came from outside (config names, load labels, other tools' files) goes into figures
through :func:`text`: plotly reads a subset of HTML in its strings, so it is escaped there too.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass, field

# Okabe-Ito, then Tableau: distinguishable in print and for colour-blind readers.
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#F0E442", "#000000",
           "#4E79A7", "#F28E2B", "#59A14F", "#B07AA1", "#76B7B2", "#EDC948", "#FF9DA7", "#9C755F")
DASH = {50: "solid", 90: "dash", 99: "dot"}
SYMBOL = {50: "circle", 90: "square", 99: "diamond"}
HOLLOW_NOTE = ("Hollow markers: a run had fewer samples than MLPerf early stopping needs to claim that "
               "percentile (confidence 0.99: 64 for p90, 662 for p99).")
DPI = 96            # plotly's CSS pixels per inch: width px / 96 = inches in the PDF and SVG
PNG_DPI = 300
SINGLE_IN, DOUBLE_IN = 3.5, 7.16


def text(s) -> str:
    """Outside text for a plotly string (legend, hover, title): escaped."""
    return html.escape(str(s), quote=False)


def colours(series: list[str]) -> dict[str, str]:
    return {s: PALETTE[i % len(PALETTE)] for i, s in enumerate(series)}


def rgba(hex_colour: str, alpha: float) -> str:
    h = hex_colour.lstrip("#")
    r, g, b = (int(h[i:i + 2], 16) for i in (0, 2, 4))
    return f"rgba({r},{g},{b},{alpha})"


def hollow(symbol: str, supported: list[bool]) -> list[str]:
    return [symbol if ok else f"{symbol}-open" for ok in supported]


@dataclass
class Fig:
    """One figure of the report: its plotly figure, where it goes, what it says beside it."""

    key: str                    # file name of the static exports (fixed by the code, never user text)
    section: str
    title: str
    fig: object                 # plotly.graph_objects.Figure
    note: str = ""
    wide: bool = False          # double column in the static export
    notes: list[str] = field(default_factory=list)
    height_in: float | None = None  # the static export's plot height, when the default does not fit


def base_layout(fig, title: str, xtitle: str, ytitle: str, **kw) -> None:
    fig.update_layout(title=dict(text=title, x=0.0, xanchor="left"), xaxis_title=xtitle, yaxis_title=ytitle,
                      template="plotly_white", legend=dict(font=dict(size=11)), hovermode="closest",
                      margin=dict(l=60, r=20, t=50, b=50), **kw)


def band(go, xs, lows, highs, colour: str, name: str, group: str):
    """A filled interval band (only where both bounds exist)."""
    pts = [(x, lo, hi) for x, lo, hi in zip(xs, lows, highs) if None not in (x, lo, hi)]
    if len(pts) < 2:
        return None
    xx = [p[0] for p in pts] + [p[0] for p in reversed(pts)]
    yy = [p[2] for p in pts] + [p[1] for p in reversed(pts)]
    return go.Scatter(x=xx, y=yy, mode="lines", fill="toself", fillcolor=rgba(colour, 0.18), line=dict(width=0),
                      hoverinfo="skip", showlegend=False, legendgroup=text(group), name=text(name) + " interval")


def hline(fig, y: float, label: str, **kw) -> None:
    fig.add_hline(y=y, line=dict(color="#B22222", dash="longdash", width=1.2), annotation_text=text(label),
                  annotation_position="top left", annotation_font=dict(size=10, color="#B22222"), **kw)


def vline(fig, x: float, label: str, **kw) -> None:
    fig.add_vline(x=x, line=dict(color="#B22222", dash="longdash", width=1.2), annotation_text=text(label),
                  annotation_position="top right", annotation_font=dict(size=10, color="#B22222"), **kw)


def paper(fig, wide: bool = False, height_in: float | None = None):
    """A copy of ``fig`` laid out for print: small fonts, no title (the caption says it), no
    dropdowns, the legend below the plot in columns with room kept for it; sized in CSS pixels
    for the column width (the plot area keeps its height whatever the legend's)."""
    import plotly.graph_objects as go

    f = go.Figure(fig)
    f.data = [t for t in f.data if t.visible is not False]  # the menu's other views: not in print
    width = round((DOUBLE_IN if wide else SINGLE_IN) * DPI)
    plot_h = round((height_in or (2.4 if wide else 2.2)) * DPI)
    per_row = 4 if wide else 2
    shown = [t for t in f.data if t.showlegend is not False and t.name]
    rows = math.ceil(len(shown) / per_row) if len(shown) > 1 else 0
    legend_h = 19 * rows + (4 if rows else 0)  # a legend row at 8 px text takes ~19 px
    titled = any(a.yref == "paper" and (a.y or 0) >= 1 for a in f.layout.annotations)  # subplot titles
    top = 20 if titled else 8
    f.update_layout(title=None, width=width, height=plot_h + legend_h, showlegend=bool(rows),
                    font=dict(size=10, family="Helvetica, Arial, sans-serif"),
                    margin=dict(l=48, r=10, t=top, b=36 + legend_h),
                    legend=dict(orientation="h", yref="container", y=0, yanchor="bottom", x=0, xanchor="left",
                                font=dict(size=8), entrywidth=0.96 / per_row, entrywidthmode="fraction",
                                itemwidth=30, tracegroupgap=0))
    f.layout.updatemenus = ()  # update_layout(updatemenus=[]) would keep them
    f.update_traces(marker_size=5, selector=dict(type="scatter"))
    f.update_annotations(font_size=8)
    return f
