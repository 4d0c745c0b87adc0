"""The ablation chart (``ablation.json``, ``metrics.ablation``): at one load point and metric,
the baseline (1 by definition), each optimisation alone, each combination and, beside every
combination, the product of its single effects; ratios to the baseline with their intervals
across blocks.  A menu picks the metric and load point; the bottleneck line of each arm is
in its hover text and in the table under the chart.
"""

from __future__ import annotations

from harness.report import style
from harness.report.data import ReportData, number

PREFERRED = ("output_throughput", "goodput_rps", "cost_per_mtok_good", "p99_tpot_ms", "p99_ttft_ms")


def _err(e: dict | None):
    if not e:
        return None, None, None
    v, lo, hi = number(e.get("value")), number(e.get("low")), number(e.get("high"))
    return v, (None if hi is None or v is None else hi - v), (None if lo is None or v is None else v - lo)


def ablation_chart(data: ReportData, colours: dict) -> style.Fig | None:
    import plotly.graph_objects as go

    ab = data.ablation
    if not ab or not ab.get("points"):
        return None
    arms = list(ab.get("arms") or {})
    base = next((a for a in arms if not ab["arms"][a]), "baseline")
    combos = []
    for p in ab["points"]:
        for m in sorted(p.get("metrics") or {}, key=lambda k: (PREFERRED.index(k) if k in PREFERRED else 99, k)):
            combos.append((p["label"], m, p["metrics"][m]))
    if not combos:
        return None
    fig = go.Figure()
    owner = []
    default = 0
    bottleneck = ab.get("bottlenecks") or {}
    for i, (label, _, entry) in enumerate(combos):
        names, ys, plus, minus, hover, cols = [base], [1.0], [None], [None], [], [colours.get(base, "#777777")]
        base_line = (bottleneck.get(base) or {}).get(label, {}).get("line", "")
        hover.append(f"{style.text(base)}: 1 by definition<br>{style.text(base_line)}")
        prod_x, prod_y, prod_p, prod_m, prod_h = [], [], [], [], []
        for arm, a in entry.get("arms", {}).items():
            v, p_, m_ = _err(a.get("effect"))
            names.append(arm)
            ys.append(v)
            plus.append(p_)
            minus.append(m_)
            cols.append(colours.get(arm, "#777777"))
            line = (bottleneck.get(arm) or {}).get(label, {}).get("line", "")
            hover.append(f"{style.text(arm)}: x{v if v is None else f'{v:.3g}'}<br>{style.text(line)}"
                         + (f"<br>{style.text(a['interaction_text'])}" if a.get("interaction_text") else ""))
            if a.get("product_of_singles"):
                pv, pp, pm = _err(a["product_of_singles"])
                prod_x.append(arm)
                prod_y.append(pv)
                prod_p.append(pp)
                prod_m.append(pm)
                prod_h.append(f"{style.text(arm)}: product of its single effects x{pv if pv is None else f'{pv:.3g}'}")
        vis = i == default
        # markers, not bars: on a log axis a bar's length would depend on where the axis starts
        fig.add_trace(go.Scatter(x=[style.text(n) for n in names], y=ys, mode="markers",
                                 marker=dict(color=cols, size=14, symbol="square"), name="effect (ratio to baseline)",
                                 visible=vis, hovertext=hover, hoverinfo="text",
                                 error_y=dict(type="data", symmetric=False, array=plus, arrayminus=minus,
                                              color="#333333", thickness=1.2, width=6)))
        owner.append(i)
        if prod_x:
            fig.add_trace(go.Scatter(x=[style.text(n) for n in prod_x], y=prod_y, mode="markers",
                                     name="product of single effects", visible=vis, hovertext=prod_h,
                                     hoverinfo="text", marker=dict(symbol="diamond-open", size=13, color="#000000",
                                                                   line=dict(width=2)),
                                     error_y=dict(type="data", symmetric=False, array=prod_p, arrayminus=prod_m,
                                                  color="#000000", thickness=1, width=8)))
            owner.append(i)
    fig.add_hline(y=1.0, line=dict(color="#777777", width=1))
    labels = [f"{m} at {lab}" for lab, m, _ in combos]
    visible = [[o == i for o in owner] for i in range(len(combos))]
    lab0, m0, e0 = combos[default]
    title = "Ablation: effect of each optimisation and their combination"
    head = f"Ablation: {style.text(labels[default])} ({'higher' if e0.get('higher_is_better') else 'lower'} is better)"
    style.base_layout(fig, head, "arm", "ratio to the baseline (log scale)")
    fig.update_yaxes(type="log")  # ratios: x2 and x0.5 equally far from 1, intervals on logs symmetric
    fig.update_layout(showlegend=True, updatemenus=[dict(
        buttons=[dict(label=style.text(lab)[:80], method="update",
                      args=[{"visible": vis}, {"title.text": f"Ablation: {style.text(lab)} (" + (
                          "higher" if c[2].get("higher_is_better") else "lower") + " is better)"}])
                 for lab, vis, c in zip(labels, visible, combos)],
        active=default, x=1.0, xanchor="right", y=1.02, yanchor="bottom", pad=dict(b=24))], margin=dict(t=90))
    conf = number(ab.get("confidence")) or 0.95
    notes = [f"Shown first: {m0} at {lab0}. Squares: geometric mean over blocks of the arm's ratio to the baseline "
             f"with its {conf:.0%} t interval on logs; diamonds: the product of the single effects a combination "
             "would have if they multiplied (their ratio is the interaction: below 1 for a higher-is-better metric, "
             "the bottleneck moved)."]
    return style.Fig("ablation", "Ablation", title, fig, notes=notes)
