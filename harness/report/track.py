"""track.html: a tracked benchmark's history as one self-contained page (the report's page
machinery: plotly inlined, nothing fetched).  Per metric and load point, each experiment's
estimate with its interval over the versions, a change detected against the experiment before
marked (red: regressed, green: improved), a break where the fixed conditions changed; then the
newest against its baseline, as ``tokenfactory track`` prints it."""

from __future__ import annotations

from pathlib import Path

from harness.report import style
from harness.report.page import document, figure_html
from harness.report.tables import esc, fmt, table
from metrics.answer import gate_answer

PAGE = "track.html"
MARK = {"regressed": ("#c0392b", "triangle-up"), "improved": ("#27ae60", "triangle-down")}


def figures(hist: dict, metrics: list[str]) -> list[style.Fig]:
    import plotly.graph_objects as go

    exps = hist["experiments"]
    xs = [style.text(f"{i + 1}. {e['version']} ({e['name']})") for i, e in enumerate(exps)]
    labels = []
    for est in hist["per_experiment"]:
        labels += [lab for lab in est if lab not in labels]
    figs = []
    for m in metrics:
        fig = go.Figure()
        col = style.colours(labels)
        for lab in labels:
            vals = [(est.get(lab) or {}).get(m) or {} for est in hist["per_experiment"]]
            y = [v.get("value") for v in vals]
            up = [(v["high"] - v["value"]) if v.get("high") is not None and v.get("value") is not None else 0
                  for v in vals]
            down = [(v["value"] - v["low"]) if v.get("low") is not None and v.get("value") is not None else 0
                    for v in vals]
            fig.add_trace(go.Scatter(x=xs, y=y, mode="lines+markers", name=style.text(str(lab)),
                                     line={"color": col[lab]},
                                     error_y={"type": "data", "array": up, "arrayminus": down, "visible": True}))
            for outcome, (colour, symbol) in MARK.items():
                at = [c["index"] for c in hist["changes"]
                      if c["metric"] == m and c["label"] == lab and c["outcome"] == outcome]
                if at:
                    fig.add_trace(go.Scatter(
                        x=[xs[i] for i in at], y=[y[i] for i in at], mode="markers", name=f"{outcome} ({lab})",
                        marker={"color": colour, "symbol": symbol, "size": 14, "line": {"width": 1, "color": "#222"}},
                        hovertext=[_change_text(c) for c in hist["changes"] if c["metric"] == m and c["label"] == lab
                                   and c["outcome"] == outcome], hoverinfo="text"))
        for i in hist["breaks"]:
            fig.add_vline(x=i - 0.5, line_dash="dot", line_color="#999")
        style.base_layout(fig, f"{m} over the track's versions", "experiment (version · folder)", m)
        figs.append(style.Fig(f"track_{m}", "history", m, fig, wide=True,
                              notes=["Points: each experiment's estimate over its repeats, bars its interval; a "
                                     "triangle marks a change detected against the experiment before it (interval of "
                                     "the difference excluding zero and beyond the margin); a dotted line, a change "
                                     "of fixed conditions (no verdict across it)."]))
    return figs


def _change_text(c: dict) -> str:
    return f"{c['outcome']}: {_diff(c, c['relative'])} [{_diff(c, c['low'])}, {_diff(c, c['high'])}]"


def _diff(f: dict, x) -> str:
    """A difference as judged: relative in %, absolute (a side was 0) in points for a share."""
    if x is None:
        return "n/a"
    if f.get("judged") == "absolute":
        return f"{x * 100:+.1f} points" if not f.get("unit") else f"{x:+.4g}"
    return f"{x * 100:+.1f} %"


def verdict_table(result: dict) -> str:
    rows = [[esc(f["label"]), esc(f["metric"]), esc(fmt(f["baseline"])), esc(fmt(f["newest"])),
             esc(_diff(f, f["relative"]) + (" (absolute)" if f["judged"] == "absolute" else "")),
             esc("n/a" if f["low"] is None else f"[{_diff(f, f['low'])}, {_diff(f, f['high'])}]"),
             f"<b>{esc(f['outcome'])}</b>" if f["outcome"] in ("regressed", "improved", "cannot judge")
             else esc(f["outcome"])]
            for f in result["findings"]]
    base = ", ".join(f"{b['version']} ({b['name']})" for b in result["baseline"])
    head = (f"<p>Newest: <b>{esc(result['newest']['version'])}</b> ({esc(result['newest']['name'])}); baseline "
            f"({esc(result['baseline_spec'])}): {esc(base)}. Unpaired (Welch) differences at "
            f"{result['difference_confidence']:.2%}{_adjusted(result)}, margin ±{result['margin']:.0%}.</p>")
    return head + table(["point", "metric", "baseline", "newest", "newest vs baseline", "interval", "outcome"], rows,
                        "track")


def _adjusted(result: dict) -> str:
    if result.get("adjust") == "bonferroni":
        return f" (Bonferroni over the {result.get('family')} verdicts: metrics x load points)"
    return " (no correction over the verdicts)"


def history_table(hist: dict) -> str:
    rows = [[esc(str(i + 1)), esc(e["version"]), esc(e["name"]), esc(e["started"][:16].replace("T", " ")),
             esc(e.get("harness_commit") or ""), esc(str(e["runs"])), esc(e.get("answer") or "")]
            for i, e in enumerate(hist["experiments"])]
    return table(["#", "version", "experiment", "started (UTC)", "harness commit", "runs", "its answer"], rows,
                 "history")


def write_track_page(folder: str | Path, track: str, hist: dict, result: dict | None, metrics: list[str]) -> Path:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    by = "".join(figure_html(f, {}) for f in figures(hist, metrics))
    sub = [f"Tracked benchmark {track}: {len(hist['experiments'])} experiments, oldest first."]
    sub += [f"answer (gate): {x}" if i == 0 else x for i, x in enumerate(gate_answer(result, track).lines)]
    sections = [("verdicts", "Newest against its baseline", verdict_table(result) if result else ""),
                ("history", "History", by), ("experiments", "Experiments", history_table(hist))]
    page = folder / PAGE
    page.write_text(document(f"Track {track}", sub, sections))
    return page
