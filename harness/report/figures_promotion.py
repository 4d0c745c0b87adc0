"""The promotion timeline (``promote.json``, ``protocols.promote.run``): over the promotion's time,
the candidate's share of callers (configured, and served as measured) and each side's requests
per second; each side's SLO attainment; each side's p50 and p99 TTFT (trailing window of the
guards); every decision as a vertical line (stage starts, gates, the rollback or promotion).
``write(folder)`` puts it in ``promotion.html`` beside ``promote.json`` (self-contained)."""

from __future__ import annotations

from pathlib import Path

from harness.report import style
from harness.results_io import PROMOTION, read_json, write_atomic

SIDE_COLOURS = {"incumbent": style.PALETTE[0], "candidate": style.PALETTE[1]}
ACTION_COLOURS = {"start": "#777777", "advance": "#009E73", "extend": "#E69F00", "rollback": "#B22222",
                  "promote": "#009E73", "end": "#000000"}


def promotion_timeline(promote: dict) -> style.Fig | None:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    tl = promote.get("timeline") or {}
    t = tl.get("t_s") or []
    if not t:
        return None
    fig = make_subplots(rows=3, cols=1, shared_xaxes=True, vertical_spacing=0.06,
                        subplot_titles=("traffic: candidate share and requests/s per side", "SLO attainment",
                                        "TTFT (ms)"), specs=[[{"secondary_y": True}], [{}], [{}]])
    fig.add_trace(go.Scatter(x=t, y=tl.get("share"), name="candidate share (configured)", mode="lines",
                             line=dict(color="#000000", shape="hv", width=2)), row=1, col=1, secondary_y=True)
    inc, cand = tl.get("incumbent") or {}, tl.get("candidate") or {}
    served = [None if (a or 0) + (b or 0) == 0 else (b or 0) / ((a or 0) + (b or 0))
              for a, b in zip(inc.get("served") or [], cand.get("served") or [])]
    fig.add_trace(go.Scatter(x=t, y=served, name="candidate share (served)", mode="markers",
                             marker=dict(color="#000000", size=4, symbol="circle-open")), row=1, col=1,
                  secondary_y=True)
    for side in ("incumbent", "candidate"):
        s, c = tl.get(side) or {}, SIDE_COLOURS[side]
        fig.add_trace(go.Scatter(x=t, y=s.get("requests"), name=f"{side} requests/s", mode="lines",
                                 line=dict(color=c, width=1), legendgroup=side), row=1, col=1)
        fig.add_trace(go.Scatter(x=t, y=s.get("slo_attainment"), name=f"{side} attainment", mode="lines",
                                 line=dict(color=c), legendgroup=side, showlegend=False), row=2, col=1)
        for q, dash in (("p50", "solid"), ("p99", "dot")):
            fig.add_trace(go.Scatter(x=t, y=s.get(f"{q}_ttft_ms"), name=f"{side} {q} TTFT", mode="lines",
                                     line=dict(color=c, dash=dash), legendgroup=side), row=3, col=1)
    for d in promote.get("decisions") or []:
        colour = ACTION_COLOURS.get(d.get("action"), "#777777")
        fig.add_vline(x=d["t_s"], line=dict(color=colour, width=1, dash="dash"))
        fig.add_annotation(x=d["t_s"], y=1.0, yref="paper", text=style.text(f"{d['action']} {d['stage']}"),
                           showarrow=False, textangle=-90, xanchor="left", yanchor="top",
                           font=dict(size=9, color=colour), hovertext=style.text(d.get("reason", ""))[:500])
    fault = promote.get("fault") or {}
    if fault.get("injected_s") is not None:
        style.vline(fig, fault["injected_s"], f"fault: {fault.get('kind')}")
    fig.update_layout(yaxis2=dict(title_text="candidate share", range=[0, 1.05], tickformat=".0%", showgrid=False,
                                  tickmode="array", tickvals=[0, 0.25, 0.5, 0.75, 1.0]))
    fig.update_yaxes(title_text="requests/s", secondary_y=False, row=1, col=1)
    fig.update_yaxes(range=[0, 1.05], row=2, col=1)
    fig.update_xaxes(title_text="seconds since the promotion started", row=3, col=1)
    fig.update_layout(template="plotly_white", height=820, hovermode="x unified",
                      title=dict(text=style.text(f"promotion: {promote.get('outcome')}"), x=0.0, xanchor="left"))
    note = (f"Outcome {promote.get('outcome')}; callers {promote.get('callers', {}).get('requests')} requests, "
            f"{promote.get('callers', {}).get('failed')} failed.")
    if fault.get("fault_to_rollback_s") is not None:
        note += f" Fault ({fault.get('kind')}) to rollback: {fault['fault_to_rollback_s']:.2f} s."
    return style.Fig("promotion_timeline", "Promotion", "Promotion timeline", fig, note=note, wide=True)


def write(folder) -> Path:
    """``promotion.html`` (self-contained) from ``promote.json`` in ``folder``; returns its path."""
    folder = Path(folder)
    f = promotion_timeline(read_json(folder / PROMOTION))
    if f is None:
        raise ValueError(f"{folder / PROMOTION} has no timeline")
    path = folder / "promotion.html"
    write_atomic(path, f.fig.to_html(include_plotlyjs=True, full_html=True)
                 .replace("<body>", f"<body><p>{style.text(f.note)}</p>", 1))
    return path
