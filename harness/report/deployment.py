"""The deployment's part of the report: TTFT broken into the engine's phases per load point,
and the per-replica table (load share, prefix-cache hit rate, queue depth, KV usage).

TTFT by phase stacks, per load point, the engine's mean queueing, prefill and KV-transfer
times (``engine_mean_queue_ms``, ``engine_mean_prefill_ms``, ``engine_mean_kv_transfer_ms``:
``metrics.engine_counters``) and the rest of the client's mean TTFT (``mean_ttft_ms`` minus
those: router, network, the first detokenise); it is drawn only for runs that have the phase
keys.  Values are means across a load point's repeats.  The engine's means cover the
requests it finished during the run; the client's cover its completed measured requests,
so the rest can come out below zero (warm-up, or requests finished after the window): it is
then drawn as zero and its value shown in the hover.
"""

from __future__ import annotations

from harness.report import style
from harness.report.data import Group, ReportData, number
from harness.report.tables import esc, fmt, table

PHASES = (("engine_mean_queue_ms", "queueing", "#8C8C8C"), ("engine_mean_prefill_ms", "prefill", "#1F77B4"),
          ("engine_mean_kv_transfer_ms", "KV transfer", "#9467BD"))
REST = "rest of TTFT (router, network, first detokenise)"
REPLICA_COLUMNS = (("load_share", "load share"), ("requests", "requests"), ("prefix_cache_hit_rate", "prefix hit rate"),
                   ("waiting_mean", "queue mean"), ("waiting_max", "queue max"),
                   ("kv_cache_usage_mean", "KV usage mean"), ("kv_cache_usage_max", "KV usage max"),
                   ("ttft_p50_ms", "TTFT p50 (ms)"))
IMBALANCE_COLUMNS = (("replica_load_imbalance", "load imbalance"), ("replica_queue_imbalance", "queue imbalance"),
                     ("replica_kv_usage_imbalance", "KV imbalance"), ("replica_hit_rate_spread", "hit-rate spread"),
                     ("replicas_unknown_share", "rows with no replica"))


def _mean(g: Group, key: str) -> float | None:
    vals = g.values(key)
    return sum(vals) / len(vals) if vals else None


def _phase_groups(data: ReportData) -> list[Group]:
    return [g for g in data.groups() if any(g.values(k) for k, _, _ in PHASES[:2])]


def ttft_phases(data: ReportData) -> style.Fig | None:
    """Stacked bars per load point (module doc); None when no run has the engine's phase keys."""
    groups = _phase_groups(data)
    if not groups:
        return None
    import plotly.graph_objects as go

    many = len({g.series for g in groups}) > 1
    xs = [f"{g.series} · {g.label}" if many else g.label for g in groups]
    fig = go.Figure()
    shown = [(k, name, c) for k, name, c in PHASES if any(g.values(k) for g in groups)]
    parts = {k: [_mean(g, k) for g in groups] for k, _, _ in shown}
    for k, name, colour in shown:
        fig.add_trace(go.Bar(x=xs, y=parts[k], name=name, marker_color=colour,
                             hovertemplate=f"{style.text(name)}: %{{y:.4g}} ms<extra>%{{x}}</extra>"))
    rest = []
    for i, g in enumerate(groups):
        ttft = _mean(g, "mean_ttft_ms")
        rest.append(None if ttft is None else ttft - sum(parts[k][i] or 0.0 for k in parts))
    fig.add_trace(go.Bar(x=xs, y=[None if r is None else max(r, 0.0) for r in rest], name=REST,
                         marker_color="#E0C060", customdata=[number(r) for r in rest],
                         hovertemplate="rest: %{customdata:.4g} ms<extra>%{x}</extra>"))
    style.base_layout(fig, "TTFT by phase", "load point", "mean time (ms)", barmode="stack")
    notes = ["Engine phases: Δ histogram sum / Δ count over the run (the requests the engine finished); the rest: "
             "the client's mean TTFT minus them; means across repeats."]
    if any(r is not None and r < 0 for r in rest):
        notes.append("A rest below zero (the engine's phases exceed the client's mean TTFT) is drawn as zero.")
    return style.Fig("ttft_by_phase", "Deployment", "TTFT by phase", fig, notes=notes)


def replica_table(data: ReportData) -> str:
    """Per load point and replica: the replica keys of ``metrics.replicas`` (means across
    repeats), then the load point's imbalance keys; empty when no run has replicas."""
    rows = []
    for g in data.groups():
        names: list[str] = []
        for r in g.runs:
            names += [n for n in (r.summary.get("replicas") or {}) if n not in names]
        if not names:
            continue
        for name in names:
            cells = [esc(g.series), esc(g.label), esc(name)]
            for key, _ in REPLICA_COLUMNS:
                vals = [number((r.summary.get("replicas") or {}).get(name, {}).get(key)) for r in g.runs]
                vals = [v for v in vals if v is not None]
                cells.append(fmt(sum(vals) / len(vals)) if vals else fmt(None))
            rows.append(cells)
        across = ", ".join(f"{esc(label)} {fmt(_mean(g, key))}" for key, label in IMBALANCE_COLUMNS)
        rows.append([esc(g.series), esc(g.label), esc("all replicas"),
                     f"<td colspan='{len(REPLICA_COLUMNS)}'>{across}</td>"])
    if not rows:
        return ""
    head = ["series", "load point", "replica"] + [label for _, label in REPLICA_COLUMNS]
    return ("<p>Per replica (metrics/replicas.py): means across repeats; queue = requests waiting, KV usage 0-1; "
            "imbalance = max / mean over replicas (1: even).</p><div class='table-scroll'>"
            + table(head, rows) + "</div>")
