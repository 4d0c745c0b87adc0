"""The deployment's part of the report: TTFT broken into the engine's phases per load point,
and the per-replica table (its pool, load share within the pool and what says it, prefix-cache
hit rate, queue depth, KV usage), with the load imbalance per pool.

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


def _pool_imbalance(g: Group) -> str:
    """``pool_load_imbalance`` per pool (means across repeats; ``unknown`` where a repeat's is)."""
    pools: dict[str, list] = {}
    for r in g.runs:
        for pool, v in (r.summary.get("pool_load_imbalance") or {}).items():
            pools.setdefault(pool, []).append(number(v))
    if len(pools) <= 1:
        return ""
    return " (" + ", ".join(f"{esc(p)} " + ("unknown" if None in vs else fmt(sum(vs) / len(vs)))
                            for p, vs in pools.items()) + ")"


def replica_table(data: ReportData) -> str:
    """Per load point and replica: its pool, then the replica keys of ``metrics.replicas`` (means
    across repeats; a load share nothing measured reads ``unknown``, with what says it beside), then
    the load point's imbalance keys, the load imbalance per pool; empty when no run has replicas."""
    rows = []
    for g in data.groups():
        names: list[str] = []
        for r in g.runs:
            names += [n for n in (r.summary.get("replicas") or {}) if n not in names]
        if not names:
            continue
        for name in names:
            mine = [(r.summary.get("replicas") or {}).get(name, {}) for r in g.runs]
            cells = [esc(g.series), esc(g.label), esc(name), esc(next((m["pool"] for m in mine if m.get("pool")), ""))]
            for key, _ in REPLICA_COLUMNS:
                vals = [number(m.get(key)) for m in mine]
                vals = [v for v in vals if v is not None]
                cell = fmt(sum(vals) / len(vals)) if vals else fmt(None)
                if key == "load_share":
                    froms = {m.get("load_share_from") for m in mine} - {None}
                    cell = "unknown" if not vals and "unknown" in froms else cell
                    cell += "".join(f" <small>({esc(f)})</small>" for f in sorted(froms - {"rows", "unknown"}))
                cells.append(cell)
            rows.append(cells)
        parts = []
        for key, label in IMBALANCE_COLUMNS:
            parts.append(f"{esc(label)} {fmt(_mean(g, key))}"
                         + (_pool_imbalance(g) if key == "replica_load_imbalance" else ""))
        across = ", ".join(parts)
        rows.append([esc(g.series), esc(g.label), esc("all replicas"), "",
                     f"<td colspan='{len(REPLICA_COLUMNS)}'>{across}</td>"])
    if not rows:
        return ""
    head = ["series", "load point", "replica", "pool"] + [label for _, label in REPLICA_COLUMNS]
    return ("<p>Per replica (metrics/replicas.py): means across repeats; load share = share of its pool's work "
            "(from the client's rows, or, for a pool no row names such as a prefill pool, from the engines' "
            "counters named beside it; unknown where nothing says); queue = requests waiting, KV usage 0-1; "
            "imbalance = max / mean over a pool's replicas (1: even), the load imbalance the worst pool's, each "
            "pool's in brackets.</p><div class='table-scroll'>"
            + table(head, rows) + "</div>")
