"""Building one report: read the runs and the experiment's record, reduce the per-request data,
draw the figures, export them for print, assemble the page."""

from __future__ import annotations

import math
import time
from pathlib import Path

from harness.caveats import DETAILS, RANKS, Caveat, collect, split_reason
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


def caveats(d: report_data.ReportData) -> list[Caveat]:
    """The experiment's warnings, ranked: ``harness.caveats``' kinds over its load-point runs, and
    what the answer's own figures limit (``experiment.json``'s ``warnings`` of a kind no run has, as
    the console printed them: a comparison's blocks too few to find a 10 % difference)."""
    runs = collect([(r.title if not r.series or len(d.series) < 2 else f"{r.series} {r.title}", r.summary)
                    for r in d.ours if r.role == "point"])
    rank = {text: k for k, text in RANKS.items()}
    kinds = {c.kind for c in runs}
    own = [Caveat(w["kind"], rank[w["rank"]], w["text"], tuple(w.get("detail") or ()))
           for w in (d.experiment or {}).get("warnings") or [] if w.get("kind") not in kinds and w.get("rank") in rank]
    return sorted([*runs, *own], key=lambda c: c.rank)


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
    answer = (exp or {}).get("answer") or {}
    for i, text in enumerate(answer.get("lines") or []):  # the answer first, before any warning or figure
        lines.append(page.Note(f"answer ({answer.get('protocol')}): {text}" if i == 0 else text, css="answer"))
    lines += [page.Note(c.text, list(c.detail)) for c in caveats(d) if c.rank < DETAILS and c.kind != "emulated"]
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
        ("provenance", "Provenance", details_html([static_note, *(page.Note(c.text, list(c.detail)) for c in caveats(d)
                                                                   if c.rank == DETAILS)])
         + _scroll(tables.provenance_table(d, read_json))),
        ("checklist", "Protocol checklist (the seven steps)", tables.steps_table(d)),
        ("errors", "Errors", tables.errors_table(d, views)),
    ]
    # named by the experiment, as its series are: a run folder's name is an id (results/NAME/<id>)
    title = title or f"tokenfactory report: {(d.experiment or {}).get('experiment') or root.resolve().name}"
    sub = _subtitle(d) + [f"built {time.strftime('%Y-%m-%d %H:%M:%S')} in "
                                       f"{time.perf_counter() - t0:.1f} s"]
    write_atomic(out_path, page.document(title, sub, sections))
    return out_path


def details_html(notes: list) -> str:
    """What changes nothing the reader asked for (static exports, a token-count difference every row
    took the server's count over): at the top of the provenance section, not on the first screen."""
    return "".join(page.note_html(n) for n in notes if n)


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
