"""Building one report: read the runs and the experiment's record, reduce the per-request data,
draw the figures, export them for print, assemble the page."""

from __future__ import annotations

import math
import time
from pathlib import Path

from harness.report import (
    adapters,
    deployment,
    figures_ablation,
    figures_load,
    figures_requests,
    figures_tradeoff,
    page,
    slo_controls,
    static,
    style,
    tables,
)
from harness.report import data as report_data
from harness.report import workload as workload_section
from harness.report.requests_view import read_runs
from harness.results_io import PROVENANCE, read_json, write_atomic
from metrics.filling import STILL_FILLING
from metrics.token_accounting import mismatch_line


def _figures(d: report_data.ReportData, views: dict, colours: dict) -> list[style.Fig]:
    made = [figures_tradeoff.throughput_interactivity(d, colours),
            figures_load.goodput(d, colours), figures_load.attainment(d, colours),
            figures_load.latency(d, "ttft", "TTFT percentiles vs offered load", colours),
            figures_load.latency(d, "tpot", "TPOT percentiles vs offered load", colours),
            figures_load.latency(d, "itl", "Inter-token latency percentiles vs offered load", colours),
            deployment.ttft_phases(d),
            figures_requests.latency_cdfs(d, views, colours),
            figures_requests.ttft_vs_cached_share(d, views, colours),
            figures_load.cost(d, colours), figures_load.energy(d, colours),
            figures_ablation.ablation_chart(d, colours),
            figures_requests.timelines(d, views, colours),
            figures_load.fidelity(d, colours)]
    return [f for f in made if f is not None]


def split_reason(text: str) -> tuple[str, list[str]]:
    """'headline (part; part; ...)' -> (headline, parts): the parts split where ``; `` is outside
    any parenthesis (a part may hold its own).  Other text: what precedes its first parenthesis
    (or all of it), and no parts."""
    text = text.strip()
    i = text.find(" (")
    if i < 0:
        return text, []
    if not text.endswith(")"):
        return text[:i], []
    inner, parts, depth, start = text[i + 2:-1], [], 0, 0
    for j, ch in enumerate(inner):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth < 0:  # the headline's parenthesis closed before the end: not this shape
            return text[:i], []
        if depth == 0 and inner.startswith("; ", j):
            parts.append(inner[start:j])
            start = j + 2
    parts.append(inner[start:])
    return text[:i], [p for p in parts if p]


def energy_note(reason: str) -> page.Note:
    """Why energy was not measured: one line, each source's error folded away."""
    head, parts = split_reason(reason)
    return page.Note(f"energy not measured: {head}", parts or ([reason] if head != reason else []))


def saturation_note(d: report_data.ReportData) -> page.Note | None:
    """Points stopped as over-saturated (``loadgen.saturation``): how many, and for each the requests
    planned and never sent; the rule's reasons folded away."""
    stopped = [r for r in d.ours if r.summary.get("saturated")]
    if not stopped:
        return None
    parts = []
    for r in stopped:
        m = r.summary
        planned, unsent = m.get("num_requests_planned"), m.get("num_requests_unsent")
        sent = m.get("num_requests_sent")
        what = (f"{sent} of {planned} planned sent, {unsent} never sent" if planned is not None
                else (f"{sent} sent" if sent is not None else "requests never sent not recorded"))
        who = " ".join(str(x) for x in (r.series, r.label) if x)
        parts.append(f"{who}: {what}; {m.get('saturation_reason') or ''}".rstrip("; "))
    known = [r.summary for r in stopped if r.summary.get("num_requests_planned") is not None]
    unsent = (f": {sum(m.get('num_requests_unsent') or 0 for m in known)} of "
              f"{sum(m['num_requests_planned'] for m in known)} planned requests never sent" if known else "")
    return page.Note(f"{len(stopped)} of {len(d.ours)} runs stopped as over-saturated{unsent}", parts)


def filling_runs_note(d: report_data.ReportData) -> page.Note | None:
    """Runs still filling up (``metrics.filling``: their requests in flight still rising through
    their arrivals): how many, and for each the rise; their latencies are a fill-up's."""
    filling = [r for r in d.ours if r.summary.get("still_filling")]
    if not filling:
        return None
    parts = [f"{' '.join(str(x) for x in (r.series, r.label) if x)}: in flight rose from "
             f"{r.summary['in_flight_second_quarter']:.3g} to {r.summary['in_flight_last_quarter']:.3g} over the "
             "arrivals' second and last quarters" for r in filling]
    return page.Note(f"{len(filling)} of {len(d.ours)} runs {STILL_FILLING}: their latencies are a fill-up's or a "
                     "growing backlog's (a lower bound), not a steady state's, and they do not meet the SLO: give them "
                     "more requests or a longer duration", parts)


def _subtitle(d: report_data.ReportData) -> list[str | page.Note]:
    exp = d.experiment
    lines = []
    if exp:
        lines.append(f"experiment {exp.get('experiment')} in {d.root.resolve().name}/ · "
                     f"protocol {exp.get('protocol')} · {exp.get('status')} · "
                     f"{exp.get('runs_finished', len(d.ours))} runs in {len(exp.get('blocks') or []) or 1} block(s)")
    engines = []
    for s in d.series:
        r = next((x for x in d.ours if x.series == s), None)
        if r is not None and (r.dir / PROVENANCE).exists():
            eng = read_json(r.dir / PROVENANCE).get("engine") or {}
            engines.append(f"{s}: {eng.get('engine')} {eng.get('engine_version') or ''} · model {eng.get('model')}")
    lines += engines
    emulated = [r for r in d.runs if r.summary.get("emulated")]
    if emulated:  # first screen: an emulated engine's numbers are never read as measured ones
        sources = ", ".join(sorted({str(r.summary.get("timing_source")) for r in emulated}))
        lines.insert(0, f"EMULATED: {len(emulated)} of {len(d.runs)} runs ran on an emulated engine (timing: "
                        f"{sources}): their latencies and throughputs come from a model, not a measurement")
    stamps = sorted({str(r.summary.get("chunk_timestamps")) for r in d.ours if r.summary.get("chunk_timestamps")})
    if stamps:  # how the load generator timed chunks (loadgen/client/stamped_socket.py)
        names = {"kernel": "the kernel's receive stamps", "read": "read times"}
        lines.append("chunk times: " + ", ".join(names.get(s, s) for s in stamps))
    disagree = [r for r in d.ours if r.summary.get("token_counts_disagree")]
    if disagree:  # first screen: output-token counts the client cannot confirm (metrics.token_accounting)
        lines.append(page.Note(
            f"TOKEN COUNTS DISAGREE in {len(disagree)} of {len(d.ours)} runs: the server's usage and the "
            "client's tokenizer count of the text received differ beyond client.token_mismatch_threshold",
            [mismatch_line(r.summary) or "" for r in disagree]))
    stopped = saturation_note(d)
    if stopped is not None:
        lines.append(stopped)
    filling = filling_runs_note(d)
    if filling is not None:
        lines.append(filling)
    first = next((r.summary for r in d.ours), {})
    if first.get("energy_available") is False and first.get("energy_unavailable_reason"):
        lines.append(energy_note(str(first["energy_unavailable_reason"])))
    slo = ", ".join(f"{k[:-3].upper()} ≤ {v:g} ms" for k, v in d.slo.items()
                    if k.endswith("_ms") and report_data.number(v) is not None)
    if slo:
        lines.append(f"SLO: p{report_data.number(d.slo.get('percentile')) or 99:g} {slo}"
                     + (f", attainment ≥ {d.slo['min_attainment']:.0%}" if report_data.number(
                         d.slo.get("min_attainment")) else ""))
    return lines


def render(root, out_path=None, title: str | None = None, *, static_figures: bool | None = None,
           imports=(), log=None) -> Path:
    """Write ``report.html`` for the runs under ``root`` (and the imported run folders in
    ``imports``) and return its path.  ``static_figures``: export every figure as PNG, SVG and
    PDF into ``figures/`` beside it (None: when kaleido and a Chromium are found; True: an
    error when they are not)."""
    t0 = time.perf_counter()
    say = log or (lambda msg: None)
    root = Path(root)
    d = report_data.load(root, list(imports))
    out_path = Path(out_path) if out_path else root / "report.html"
    colours = style.colours(d.series)
    views = read_runs(d.runs)
    say(f"read {len(d.runs)} runs ({sum(v.n for v in views.values() if v)} requests) in "
        f"{time.perf_counter() - t0:.1f} s")
    figs = _figures(d, views, colours)
    wl_table, wl_figs = workload_section.section(d)
    all_figs = figs + wl_figs

    static_note, static_files = _export(all_figs, out_path.parent / "figures", static_figures, say)
    by = {f.section: [] for f in all_figs}
    for f in all_figs:
        by[f.section].append(page.figure_html(f, static_files))
    fig = lambda name: "".join(by.get(name, []))  # noqa: E731
    cmp_html = tables.comparison_table(d)
    sections = [
        ("comparison", "Comparison", cmp_html + tables.slo_table(d) if (cmp_html or len(d.series) > 1) else ""),
        ("tradeoff", "Throughput and interactivity", fig("Throughput and interactivity")),
        ("goodput", "Goodput and SLO", fig("Goodput and SLO")),
        ("slo-controls", "Your SLO and price", slo_controls.section(d, colours)),
        ("latency", "Latency", fig("Latency")),
        ("distributions", "Latency distributions", fig("Latency distributions")),
        ("deployment", "Deployment: TTFT by phase and replicas", fig("Deployment") + deployment.replica_table(d)),
        ("adapters", "LoRA adapters", adapters.adapter_table(d)),
        ("cost", "Cost and energy", fig("Cost and energy")),
        ("ablation", "Ablation", fig("Ablation") + tables.ablation_table(d)),
        ("timeline", "Runs over time", fig("Runs over time")),
        ("imported", "Imported results", tables.imported_section(d)),
        ("workload", "Workload", wl_table + fig("Workload")),
        ("runs", "Runs", ("<p>Per load point: means and 95% intervals across repeats.</p><div class='table-scroll'>"
                          + tables.aggregate_table(d) + "</div><p>Every run:</p><div class='table-scroll'>"
                          + tables.runs_table(d) + "</div>")),
        ("fidelity", "Harness fidelity", tables.fidelity_section(d) + fig("Harness fidelity")),
        ("provenance", "Provenance", _scroll(tables.provenance_table(d, read_json))),
        ("checklist", "Protocol checklist (the seven steps)", tables.steps_table(d)),
        ("errors", "Errors", tables.errors_table(d, views)),
    ]
    # named by the experiment, as its series are: a run folder's name is an id (results/NAME/<id>)
    title = title or f"tokenfactory report: {(d.experiment or {}).get('experiment') or root.resolve().name}"
    sub = _subtitle(d) + [static_note, f"built {time.strftime('%Y-%m-%d %H:%M:%S')} in "
                                       f"{time.perf_counter() - t0:.1f} s"]
    write_atomic(out_path, page.document(title, sub, sections))
    return out_path


def _scroll(table_html: str) -> str:
    return f"<div class='table-scroll'>{table_html}</div>" if table_html else ""


def _export(figs: list[style.Fig], folder: Path, wanted: bool | None,
            say) -> tuple[str | page.Note, dict[str, list[str]]]:
    """(the note for the page, key -> relative paths of the files written)."""
    if wanted is False:
        return "static figures: off (report.static=false)", {}
    ok, why = static.available()
    if not ok:
        if wanted:
            raise ValueError(f"report.static=true but static figures cannot be exported here: {why}")
        head, _ = split_reason(why)
        hint = "the interactive figures on this page do not need it; report.static=false silences this"
        return page.Note(f"static figures not exported: {head}", ([why] if head != why else []) + [hint]), {}
    t = time.perf_counter()
    try:
        files = static.export(figs, folder)
    except Exception as e:  # the page is still worth writing; its note says what failed
        if wanted:
            raise
        return page.Note(f"static figures failed ({type(e).__name__})", [f"{type(e).__name__}: {e}"]), {}
    say(f"exported {len(files)} static figure files in {time.perf_counter() - t:.1f} s")
    out: dict[str, list[str]] = {}
    for p in files:
        out.setdefault(p.stem, []).append(f"{folder.name}/{p.name}")
    sizes = f"{style.SINGLE_IN} in wide ({style.DOUBLE_IN} in for the wide ones), PNG at {style.PNG_DPI} dpi"
    return page.Note(f"static figures: {folder.name}/ (PNG, SVG, PDF)",
                     [f"{sizes}; captions in {folder.name}/figures.json"]), out


def summary_line(path: Path) -> str:
    size = path.stat().st_size
    return f"{path} ({size / 2**20:.1f} MiB)" if size >= 2**20 else f"{path} ({math.ceil(size / 1024)} KiB)"
