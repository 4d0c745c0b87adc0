"""The report's LoRA adapters table: per load point and adapter, the ``per_adapter`` keys of
``summary.json`` (``metrics.summary.adapter_summary``), means across repeats, side by side.

No interval or verdict between two adapters: they share one run's engine and window, so they
are not independent repeats (docs/metrics.md, Per LoRA adapter)."""

from __future__ import annotations

from harness.report.data import ReportData, number
from harness.report.tables import esc, fmt, table

ADAPTER_COLUMNS = (("num_requests", "requests"), ("request_throughput", "req/s"),
                   ("output_throughput", "output tok/s"), ("p50_ttft_ms", "TTFT p50 ms"),
                   ("p99_ttft_ms", "TTFT p99 ms"), ("p50_tpot_ms", "TPOT p50 ms"), ("p99_tpot_ms", "TPOT p99 ms"),
                   ("goodput_rps", "goodput req/s"), ("slo_attainment", "SLO attainment"))


def adapter_table(data: ReportData) -> str:
    """Empty when no run measured adapters."""
    rows = []
    for g in data.groups():
        names: list[str] = []
        for r in g.runs:
            names += [n for n in (r.summary.get("per_adapter") or {}) if n not in names]
        for name in names:
            mine = [(r.summary.get("per_adapter") or {}).get(name, {}) for r in g.runs]
            cells = [esc(g.series), esc(g.label), esc(name)]
            for key, _ in ADAPTER_COLUMNS:
                vals = [v for v in (number(m.get(key)) for m in mine) if v is not None]
                cells.append(fmt(sum(vals) / len(vals)) if vals else fmt(None))
            rows.append(cells)
    if not rows:
        return ""
    head = ["series", "load point", "adapter"] + [label for _, label in ADAPTER_COLUMNS]
    return ("<p>Per LoRA adapter (workload.lora; metrics/summary.py adapter_summary): means across repeats; "
            "throughputs over the run's whole duration, so an adapter's add up with the others' to the run's. "
            "Side by side only: the adapters of a run share its engine and window, so no interval or verdict "
            "is drawn between them.</p><div class='table-scroll'>" + table(head, rows) + "</div>")
