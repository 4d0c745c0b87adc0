"""Other tools' results as our run folders: ``vllm bench serve`` JSON, GuideLLM's
``benchmarks.json``, AIPerf's ``profile_export.jsonl`` and ``profile_export_aiperf.json``.

``import_result(path, out_dir)`` detects the tool from the file's content and writes a run
folder in our format (``requests.parquet``, ``summary.json``, ``source.json``), so the same
tables and figures show them, labelled with their source and with the definition differences
stated (``summary.json``'s ``definition_notes``).  A file with several benchmarks (a GuideLLM
sweep, a ``vllm bench --append-result`` file) gives one run folder per benchmark under
``out_dir`` (``bench-00``, ``bench-01``, ...) and an ``out_dir/source.json`` listing them.

Detection, on content (never the file name):
- JSON object with ``ttfts``/``itls``/``start_times`` (``--save-detailed``), or ``date``,
  ``backend`` and ``request_throughput`` (aggregates only): vLLM bench.
- JSON object with a ``benchmarks`` list whose entries have ``requests``: GuideLLM.
- JSON object of AIPerf metric blocks (``{"unit", "avg", ...}``) with ``aiperf_version``,
  ``input_config`` or ``schema_version``: AIPerf's aggregate export (no per-request rows).
- JSON lines each with ``metadata.request_start_ns``: AIPerf's ``profile_export.jsonl``;
  JSON lines that are vLLM bench results: an ``--append-result`` file.
"""

from __future__ import annotations

import json
from pathlib import Path

from harness.imports import aiperf, guidellm, vllm_bench
from harness.imports.common import ImportedRun, ImportFormatError, write_run
from harness.results_io import write_json
from metrics.slo import SLO

__all__ = ["EXPECTED", "IMPORTERS", "ImportFormatError", "detect_tool", "import_result", "importer", "load"]

EXPECTED = ("a `vllm bench serve` result JSON (--save-result, per request with --save-detailed), a GuideLLM "
            "benchmarks.json (benchmarks[].requests), an AIPerf profile_export.jsonl (one record a request) "
            "or an AIPerf profile_export_aiperf.json")


def import_result(path, out_dir, slo: SLO | None = None, *, source_version: str | None = None) -> Path:
    """Import one result file of another tool into ``out_dir`` (a run folder; one per benchmark
    under it when the file holds several).  ``slo`` sets goodput and ``slo_ok`` as in our runs;
    ``source_version`` fills in a version the file does not record.  Returns ``out_dir``.

    Raises ``ImportFormatError`` (a ``ValueError``) naming the file, and the entry where one is
    malformed, when the file is none of the formats above."""
    path, out_dir = Path(path), Path(out_dir)
    runs = load(path, slo)
    for run in runs:
        run.version = run.version or source_version
    if len(runs) == 1:
        return write_run(runs[0], out_dir, path.resolve(), slo)
    folders = [write_run(run, out_dir / f"bench-{i:02d}", path.resolve(), slo) for i, run in enumerate(runs)]
    write_json(out_dir / "source.json", {"source_tool": runs[0].tool, "source_version": runs[0].version,
                                          "source_file": str(path.resolve()),
                                          "runs": [{"folder": f.name, "benchmark": r.label}
                                                   for f, r in zip(folders, runs)]})
    return out_dir


def detect_tool(path) -> str:
    """'vllm_bench', 'guidellm', 'aiperf_records' or 'aiperf_aggregate' (content-based)."""
    kind, _ = _read(Path(path))
    return kind


def _vllm_bench(content, path: Path, slo: SLO | None) -> list[ImportedRun]:
    objs = content if isinstance(content, list) else [content]
    return [vllm_bench.parse(o, path, slo, label=None if len(objs) == 1 else f"line {i + 1}")
            for i, o in enumerate(objs)]


# The registry: a detected kind (``detect_tool``) -> its importer, ``(content, path, slo)`` -> runs.
IMPORTERS = {
    "vllm_bench": _vllm_bench,
    "guidellm": guidellm.parse,
    "aiperf_records": lambda content, path, slo: [aiperf.parse_records(content, path, slo)],
    "aiperf_aggregate": lambda content, path, slo: [aiperf.parse_aggregate(content, path)],
}


def importer(kind: str):
    """The importer of ``kind``; an unknown one is an ``ImportFormatError`` listing the known kinds."""
    if kind not in IMPORTERS:
        raise ImportFormatError(f"{kind}: no importer of that kind (known: {', '.join(IMPORTERS)})")
    return IMPORTERS[kind]


def load(path, slo: SLO | None = None) -> list[ImportedRun]:
    """The file's benchmarks as imported runs (not written)."""
    path = Path(path)
    kind, content = _read(path)
    return importer(kind)(content, path, slo)


def _read(path: Path):
    """(kind, parsed content); the error names the file and what was expected."""
    if not path.is_file():
        raise ImportFormatError(f"{path}: no such file; expected {EXPECTED}")
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        raise ImportFormatError(f"{path}: not a text file; expected {EXPECTED}") from None
    try:
        obj = json.loads(text)
    except json.JSONDecodeError:
        return _read_lines(path, text)
    if vllm_bench.looks_like(obj):
        return "vllm_bench", obj
    if guidellm.looks_like(obj):
        return "guidellm", obj
    if aiperf.looks_like_aggregate(obj):
        return "aiperf_aggregate", obj
    if aiperf.looks_like_record(obj):  # a one-line profile_export.jsonl
        return "aiperf_records", [(1, obj)]
    keys = ", ".join(list(obj)[:8]) if isinstance(obj, dict) else type(obj).__name__
    raise ImportFormatError(f"{path}: not a result file of a known tool (top level: {keys}); expected {EXPECTED}")


def _read_lines(path: Path, text: str):
    """JSON lines: AIPerf records, or vLLM bench results appended one a line."""
    lines = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            lines.append((n, json.loads(line)))
        except json.JSONDecodeError as e:
            if not lines:
                raise ImportFormatError(f"{path}: neither JSON nor JSON lines (line {n}: {e.msg}); "
                                        f"expected {EXPECTED}") from None
            raise ImportFormatError(f"{path}: line {n}: not valid JSON ({e.msg})") from None
    if not lines:
        raise ImportFormatError(f"{path}: empty; expected {EXPECTED}")
    first = lines[0][1]
    if aiperf.looks_like_record(first):
        for n, obj in lines:
            if not aiperf.looks_like_record(obj):
                raise ImportFormatError(f"{path}: aiperf entry line {n}: not a profile_export.jsonl record "
                                        "(no metadata.request_start_ns)")
        return "aiperf_records", lines
    if vllm_bench.looks_like(first):
        for n, obj in lines:
            if not vllm_bench.looks_like(obj):
                raise ImportFormatError(f"{path}: vllm bench serve entry line {n}: not a result object")
        return "vllm_bench", [obj for _, obj in lines]
    raise ImportFormatError(f"{path}: JSON lines of an unknown kind (line {lines[0][0]}); expected {EXPECTED}")
