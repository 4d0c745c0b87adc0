"""The report's tables, as HTML: runs, aggregates per load point, the comparison
(``comparison.json``) with the highest load meeting the SLO, the ablation's bottlenecks,
imported results with their definition differences, provenance, the seven-step checklist,
harness fidelity and error texts.  Every value is escaped here (``esc``); no caller passes
markup built from outside text.
"""

from __future__ import annotations

import html
import math

from harness import results_io
from harness.report.data import Group, ReportData, Run, number
from metrics.filling import STILL_FILLING

NA = "n/a"


def esc(v) -> str:
    return html.escape(str(v), quote=True)


def fmt(v, digits: int = 4) -> str:
    if isinstance(v, bool):
        return "yes" if v else "no"
    if v in ("inf", "-inf"):
        return "∞" if v == "inf" else "-∞"
    if isinstance(v, float):
        if math.isnan(v):
            return NA
        if math.isinf(v):
            return "∞" if v > 0 else "-∞"
        return f"{v:.{digits}g}"
    return NA if v is None else str(v)


def fmt_est(e: dict | None, pct: bool = False) -> str:
    """'value [low, high]' of an Estimate dict (comparison.json, ablation.json)."""
    if not e:
        return NA
    f = (lambda x: NA if number(x) is None else f"{number(x) * 100:+.1f}%") if pct else (
        lambda x: NA if number(x) is None else fmt(float(x)))
    if number(e.get("low")) is None:
        return f(e.get("value"))
    return f"{f(e.get('value'))} [{f(e.get('low'))}, {f(e.get('high'))}]"


def table(head: list[str], rows: list[list[str]], cls: str = "", row_attrs: list[str] | None = None,
          table_id: str = "") -> str:
    """``rows`` hold cells already escaped (``esc``/``fmt`` output, or ``<td ...>`` markup built here)."""
    h = "".join(f"<th>{esc(x)}</th>" for x in head)
    body = []
    for i, r in enumerate(rows):
        attrs = row_attrs[i] if row_attrs else ""
        cells = "".join(c if c.startswith("<td") else f"<td>{c}</td>" for c in r)
        body.append(f"<tr{attrs}>{cells}</tr>")
    tid = f" id='{esc(table_id)}'" if table_id else ""
    return f"<table class='{esc(cls)}'{tid}><thead><tr>{h}</tr></thead><tbody>{''.join(body)}</tbody></table>"


RUN_KEYS = [("completed", "completed"), ("failed", "failed"), ("request_throughput", "req/s"),
            ("output_throughput", "out tok/s"), ("goodput_rps", "goodput req/s"), ("slo_attainment", "SLO attainment"),
            ("p50_ttft_ms", "p50 TTFT ms"), ("p99_ttft_ms", "p99 TTFT ms"), ("p50_tpot_ms", "p50 TPOT ms"),
            ("p90_tpot_ms", "p90 TPOT ms"), ("p99_itl_ms", "p99 ITL ms"), ("schedule_lag_p99_ms", "p99 send lag ms"),
            ("window_s", "window s"), ("cost_total", "cost"), ("cost_per_mtok_good", "cost / M good tok"),
            ("energy_per_good_token_j", "J / good tok")]


def runs_table(data: ReportData) -> str:
    rows, attrs = [], []
    for g in data.groups() + data.groups(role="probe") + data.groups(role="search"):
        for r in g.runs:
            s = r.summary
            cells = [esc(r.series), esc(r.block if r.config else (r.repeat if r.repeats > 1 else "")), esc(r.label),
                     esc(r.role if not r.imported else "imported"), esc(fmt(r.x))]
            cells += [f"<td data-run='{esc(data.run_key(r))}' data-live='{LIVE[k]}'>{esc(fmt(s.get(k)))}</td>"
                      if k in LIVE else esc(fmt(s.get(k))) for k, _ in RUN_KEYS]
            cells.append(esc(_run_note(s)))
            rows.append(cells)
            cls = " ".join(c for c, on in (("client-limited", s.get("client_limited")), ("imported", r.imported)) if on)
            attrs.append(f" class='{cls}'" if cls else "")
    head = ["series", "block / repeat", "load point", "role", "offered"] + [label for _, label in RUN_KEYS] + ["note"]
    return table(head, rows, "runs", attrs, "runs")


def _run_note(s: dict) -> str:
    """A run's note: stopped as over-saturated, with what it sent of what it planned; still filling up
    (``metrics.filling``: its latencies a fill-up's)."""
    notes = []
    if s.get("saturated"):
        planned = s.get("num_requests_planned")
        notes.append(f"saturated: sent {s.get('num_requests_sent')} of {planned}" if planned is not None
                     else "saturated")
    if s.get("still_filling"):
        notes.append(STILL_FILLING)
    return "; ".join(notes)


# Summary keys the SLO and price controls recompute (harness/report/slo_controls.py) -> its names.
LIVE = {"slo_attainment": "attainment", "goodput_rps": "goodput", "good_output_throughput": "good_tps",
        "cost_per_mtok_good": "cost"}

AGG_KEYS = [("output_throughput", "out tok/s"), ("goodput_rps", "goodput req/s"), ("slo_attainment", "SLO attainment"),
            ("p99_ttft_ms", "p99 TTFT ms"), ("p90_tpot_ms", "p90 TPOT ms"), ("p99_tpot_ms", "p99 TPOT ms"),
            ("cost_per_mtok_good", "cost / M good tok"), ("energy_per_good_token_j", "J / good tok")]


def _est_text(g: Group, key: str) -> str:
    e = g.estimate(key)
    if e.value is None:
        return NA
    if e.n > 1 and e.low is not None:
        return f"{fmt(e.value)} [{fmt(e.low)}, {fmt(e.high)}]"
    return fmt(e.value)


def aggregate_table(data: ReportData) -> str:
    rows = []
    for i, g in enumerate(data.groups()):
        rows.append([esc(g.series), esc(g.label), esc(len(g.runs))]
                    + [f"<td data-group='{i}' data-live='{LIVE[k]}'>{esc(_est_text(g, k))}</td>" if k in LIVE
                       else esc(_est_text(g, k)) for k, _ in AGG_KEYS])
    return table(["series", "load point", "repeats"] + [label for _, label in AGG_KEYS], rows, "aggregate", None,
                 "aggregate")


def comparison_table(data: ReportData) -> str:
    """comparison.json: per load point and metric, each config's estimate and interval, and each
    config against the baseline (relative difference, interval, verdict)."""
    c = data.comparison
    if not c or not c.get("points"):
        return ""
    base = c.get("baseline")
    configs = sorted(c.get("configs") or [], key=lambda n: n != base)  # the baseline first
    others = [n for n in configs if n != base]
    head = ["load point", "metric"] + [f"{n}{' (baseline)' if n == base else ''}" for n in configs]
    head += [f"{n} vs {base}" for n in others] + [f"verdict {n}" for n in others]
    rows = []
    for p in c["points"]:
        for m, e in p.get("metrics", {}).items():
            unit = f" ({e['unit']})" if e.get("unit") else ""
            cells = [esc(p.get("label")), esc(m + unit)]
            for n in configs:
                cells.append(f"<td data-point='{esc(p.get('label'))}' data-metric='{esc(m)}' data-config='{esc(n)}'>"
                             f"{esc(fmt_est((e.get('per_config') or {}).get(n)))}</td>")
            for n in others:
                vs = (e.get("vs_baseline") or {}).get(n) or {}
                if vs.get("judged") == "absolute":  # a side was 0: the difference judged is B - A
                    cells.append(esc(fmt_est((vs.get("difference") or {}).get("absolute")) + " (absolute)"))
                else:
                    cells.append(esc(fmt_est((vs.get("difference") or {}).get("relative"), pct=True)))
            for n in others:
                vs = (e.get("vs_baseline") or {}).get(n) or {}
                outcome = vs.get("verdict") or ""
                shown = {"a_better": f"{base} better", "b_better": f"{n} better"}.get(outcome,
                                                                                        outcome.replace("_", " "))
                cells.append(f"<td class='verdict {esc(outcome)}' data-verdict='{esc(outcome)}' "
                             f"title='{esc(vs.get('text', ''))}'>{esc(shown)}</td>")
            rows.append(cells)
    kind = "paired by block" if c.get("kind") == "paired" else "unpaired (Welch)"
    conf = number(c.get("confidence")) or 0.95
    caption = (f"<p>{esc(kind)}, {conf:.0%} intervals, baseline {esc(base)}, practical margin "
               f"{(number(c.get('min_effect')) or 0):.0%}. {esc(c.get('method_note', ''))}. Hover a verdict for its "
               "full sentence.</p>")
    diffs = c.get("fixed_condition_differences") or {}
    if diffs:
        caption += "<p class='warning'>Fixed conditions differ: " + "; ".join(
            esc(f"{k}: " + ", ".join(f"{n}={v}" for n, v in vals.items())) for k, vals in diffs.items()) + "</p>"
    return caption + table(head, rows, "comparison", None, "comparison")


def slo_table(data: ReportData) -> str:
    """Per series: the highest measured load point at which every repeat met the SLO, and the
    goodput and cost there."""
    rows = []
    for s in data.series:
        if not data.on_axis(s):
            continue
        g = data.max_load_meeting_slo(s)
        if g is None:
            rows.append([esc(s), esc("none of the measured points"), "", "", "", ""])
            continue
        rows.append([esc(s), esc(g.label), esc(len(g.runs)), esc(_est_text(g, "goodput_rps")),
                     esc(_est_text(g, "good_output_throughput")), esc(_est_text(g, "cost_per_mtok_good"))])
    if not rows:
        return ""
    return ("<p>The highest measured load point at which every repeat met the SLO (each configured percentile "
            "check, no more failed requests than the percentile allows, the attainment floor if set, not "
            "over-saturated), with the goodput and cost there (means and 95% "
            "intervals across repeats).</p>"
            + table(["series", "load point", "repeats", "goodput req/s", "good out tok/s", "cost / M good tok"], rows,
                    "slo", None, "max-load"))


def ablation_table(data: ReportData) -> str:
    ab = data.ablation
    if not ab or not ab.get("bottlenecks"):
        return ""
    rows = []
    labels = [p["label"] for p in ab.get("points") or []]
    inter = {}
    for p in ab.get("points") or []:
        for m, e in (p.get("metrics") or {}).items():
            for arm, a in (e.get("arms") or {}).items():
                if a.get("interaction_text") and m == "output_throughput":
                    inter[(arm, p["label"])] = a["interaction_text"]
    for arm, per in ab["bottlenecks"].items():
        for lab in labels or list(per):
            if lab in per:
                rows.append([esc(arm), esc(lab), esc(per[lab].get("line", "")), esc(inter.get((arm, lab), ""))])
    return table(["arm", "load point", "bottleneck", "interaction (output throughput)"], rows, "ablation", None,
                 "bottlenecks")


def imported_section(data: ReportData) -> str:
    if not data.imported:
        return ""
    parts = []
    for r in data.imported:
        src = r.source or {}
        s = r.summary
        meta = [("source", f"{s.get('source_tool')} {s.get('source_version') or '(version not recorded)'}"),
                ("file", src.get("source_file") or s.get("source_file")), ("sha256", src.get("source_sha256")),
                ("benchmark", s.get("source_benchmark")), ("offered load", src.get("load_words")),
                ("window", src.get("window_rule")), ("clock", src.get("clock"))]
        rows = [[esc(k), esc(fmt(v))] for k, v in meta if v is not None]
        notes = "".join(f"<li>{esc(n)}</li>" for n in s.get("definition_notes") or [])
        cmp_rows = [[esc(c.get("name")), esc(fmt(c.get("source"))), esc(fmt(c.get("ours"))),
                     esc("same" if c.get("same_definition") else "different"),
                     esc({True: "yes", False: "no", None: NA}.get(c.get("agrees"), NA)), esc(c.get("note") or "")]
                    for c in s.get("source_comparison") or []]
        if src.get("aggregates_only"):
            rows.append([esc("numbers shown"), esc("the tool's own aggregates (the file has no per-request "
                                                    "records), where its definitions are ours")])
        parts.append(f"<h3>{esc(r.series)}: {esc(r.label)}</h3>" + table(["", ""], rows, "kv")
                     + (f"<p>Definition differences and what the import did:</p><ul class='notes'>{notes}</ul>"
                        if notes else "")
                     + (table(["quantity", "the tool's number", "ours from the same requests", "definition",
                               "agree", "note"], cmp_rows, "source-comparison") if cmp_rows else ""))
    return ("<p>Other tools' results, imported into our run format (<code>harness/imports</code>): every number in "
            "the figures and tables is recomputed from their per-request records by our definitions; the tool's own "
            "aggregates are beside ours below.</p>" + "".join(parts))


def _first(runs: list[Run]) -> Run | None:
    return runs[0] if runs else None


def provenance_table(data: ReportData, read) -> str:
    """``read(path)`` -> dict (provenance.json of the first run of each series)."""
    rows = []
    for s in data.series:
        r = _first([x for x in data.ours if x.series == s])
        if r is None or not (r.dir / results_io.PROVENANCE).exists():
            continue
        p = read(r.dir / results_io.PROVENANCE)
        eng, hw, host, gpus = p.get("engine") or {}, p.get("hardware") or {}, p.get("host") or {}, p.get("gpus") or {}
        devs = ", ".join(f"{d.get('name')} (driver {d.get('driver') or d.get('driver_version') or '?'})"
                         for d in gpus.get("devices") or []) or (gpus.get("reason") or "none")
        cmd = eng.get("command")
        rows.append([esc(s), esc(f"{eng.get('engine')} {eng.get('engine_version') or ''}"),
                     f"<td class='cmd'><code>{esc(' '.join(map(str, cmd)) if isinstance(cmd, list) else (cmd or ''))}"
                     "</code></td>", esc(eng.get("model") or ""), esc(hw.get("name") or ""), esc(devs),
                     esc(f"{host.get('hostname', '')} {host.get('platform', '')} ({host.get('cpu_count', '?')} CPUs)"),
                     esc((p.get("harness") or {}).get("commit") or "")])
    if not rows:
        return ""
    return table(["series", "engine", "command and flags", "model", "hardware profile", "GPUs", "host",
                  "harness commit"], rows, "provenance", None, "provenance")


def steps_table(data: ReportData) -> str:
    steps = data.experiment.get("steps") or []
    if not steps:
        return ""
    rows = [[esc(s.get("step")), esc(s.get("what", "")),
             f"<td class='{'ran' if s.get('ran') else 'skipped'}'>{'ran' if s.get('ran') else 'not run'}</td>",
             esc(s.get("how", ""))] for s in steps]
    return table(["step", "what it asks", "status", "how, or why not"], rows, "steps", None, "steps")


def fidelity_section(data: ReportData) -> str:
    limited = [r for r in data.runs if r.summary.get("client_limited")]
    lags = [number(r.summary.get("schedule_lag_p99_ms")) for r in data.ours]
    lags = [v for v in lags if v is not None]
    cpu = [number(r.summary.get("client_cpu_util")) for r in data.ours]
    cpu = [v for v in cpu if v is not None]
    out = ["<p>The load generator's own delay per request (sent - max(scheduled, slot)): p99 over runs "
           + (f"from {min(lags):.3g} to {max(lags):.3g} ms" if lags else "not recorded")
           + (f"; client CPU from {min(cpu):.1%} to {max(cpu):.1%} of one core" if cpu else "") + ".</p>"]
    if limited:
        out.append("<ul class='warnings'>" + "".join(
            f"<li>{esc(r.series)} · {esc(r.title)}"
            + ": client-limited (p99 of the load generator's own send delay "
            + esc(fmt(r.summary.get("schedule_lag_p99_ms"))) + " ms); its latencies include that delay</li>"
            for r in limited) + "</ul>")
    else:
        out.append("<p>No run was client-limited.</p>")
    return "".join(out)


def errors_table(data: ReportData, views: dict) -> str:
    rows = []
    for r in data.runs:
        v = views.get(r.dir)
        if v is None or not v.errors:
            continue
        for text, n in v.errors:
            rows.append([esc(r.series), esc(r.title), esc(n), f"<td class='text'>{esc(text[:500])}</td>"])
    if not rows:
        return ""
    return table(["series", "load point", "requests", "error text (as the server or client gave it)"], rows,
                 "errors", None, "errors")
