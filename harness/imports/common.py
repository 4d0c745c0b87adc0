"""What the importers share: the imported run, clock conversion, failure statuses, the
comparison of the tool's numbers with ours, and writing the run folder.

A run folder written here has our layout (``requests.parquet`` in ``loadgen.records.SCHEMA``,
``summary.json`` from ``metrics.summary.summarize``) plus ``source.json``; ``summary.json``
adds ``source_tool``, ``source_version``, ``source_file``, ``definition_notes``,
``source_metrics`` (the tool's own aggregates, untouched), ``source_comparison`` (its number
beside ours, quantity by quantity) and ``source_equivalents`` (its aggregates under our key
names, where its definition is ours).
"""

from __future__ import annotations

import hashlib
import math
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from http import HTTPStatus
from pathlib import Path

import pyarrow as pa

from harness.errors import UserError
from harness.results_io import REQUESTS, SUMMARY, write_json
from loadgen.records import SCHEMA, RequestRecord, write_requests
from metrics.request_metrics import finalize_record
from metrics.slo import SLO
from metrics.summary import summarize
from metrics.token_attribution import split_total

NS_PER_S = 1_000_000_000
# Two numbers for the same quantity agree when within 1e-5 relative (or 1e-6 of the unit, 1 ns
# for ms, near zero): our *_ns are the tool's times rounded to 1 ns, nothing else should move them.
REL_TOL = 1e-5
ABS_TOL = 1e-6


class ImportFormatError(UserError, ValueError):
    """A file that is not (or not entirely) a result file of a known tool; names the file and entry."""


def entry_error(path, tool: str, index, why: str) -> ImportFormatError:
    """The error for one malformed entry: the file, the tool, which entry, what is wrong."""
    return ImportFormatError(f"{path}: {tool} entry {index}: {why}")


@dataclass
class Check:
    """One quantity the tool reported, beside our recomputation of it.

    ``same_definition`` False: the numbers are expected to differ (``note`` says why) and no
    disagreement note is raised."""

    name: str
    source: float | None
    ours: float | None
    same_definition: bool = True
    note: str = ""

    def agrees(self) -> bool | None:
        if self.source is None or self.ours is None:
            return None
        a, b = float(self.source), float(self.ours)
        if math.isnan(a) or math.isnan(b):
            return math.isnan(a) and math.isnan(b)
        return abs(a - b) <= max(ABS_TOL, REL_TOL * max(abs(a), abs(b)))


@dataclass
class ImportedRun:
    """One benchmark of a tool's file, in our terms, before it is written."""

    tool: str
    version: str | None
    records: list[RequestRecord]
    notes: list[str]
    source_metrics: dict
    clock: str
    window_ns: tuple[int, int] | None = None      # the window the file declares, on the records' clock
    clock_origin_ns: int = 0                      # the tool's clock reading (ns) at our *_ns = 0
    label: str | None = None                      # which benchmark of the file
    provenance: dict = field(default_factory=dict)
    equivalents: dict = field(default_factory=dict)  # our summary key -> the tool's value (same definition)
    checks: Callable[[dict], list[Check]] | None = None  # our summary -> comparisons


# ---- clocks -------------------------------------------------------------------------------

class SecondsClock:
    """Float seconds (time.time() or perf_counter()) -> integer ns on the same clock.

    Whole seconds are split off first so the sub-second part keeps every digit the float
    had (``t * 1e9`` of an epoch time would round to 256 ns).  With ``rebase`` the result is
    ns since ``origin_ns`` (the first whole second): epoch ns (~1.8e18) lose 256 ns in the
    float64 arithmetic of ``metrics/``, ns since the run's start lose nothing."""

    def __init__(self, times, rebase: bool = False):
        vals = [t for t in times if isinstance(t, int | float) and math.isfinite(t)]  # bad ones: per entry
        self.base = math.floor(min(vals)) if vals else 0
        self.origin_ns = self.base * NS_PER_S if rebase else 0

    def ns(self, t: float | None) -> int | None:
        if t is None:
            return None
        return self.base * NS_PER_S - self.origin_ns + round((t - self.base) * NS_PER_S)


def s_to_ns(seconds: float) -> int:
    """A duration in seconds -> ns (rounded)."""
    return round(seconds * NS_PER_S)


UNIT_NS = {"ns": 1.0, "us": 1e3, "µs": 1e3, "ms": 1e6, "s": 1e9, "sec": 1e9, "seconds": 1e9}


def duration_ns(value: float, unit: str) -> int:
    """A duration in a tool's display unit (ns/us/ms/s) -> ns."""
    try:
        return round(float(value) * UNIT_NS[unit])
    except KeyError:
        raise ValueError(f"unknown time unit {unit!r}") from None


# ---- requests -----------------------------------------------------------------------------

_PHRASES = {s.phrase.lower(): s.value for s in HTTPStatus}
_CODES = {s.value: s.phrase.lower() for s in HTTPStatus}


def failure_status(error: str | None, code: int | None = None) -> tuple[str, int | None]:
    """Our failure status (DESIGN.md's taxonomy) and HTTP status from a tool's error text/code.

    A bare reason phrase (``"Service Unavailable"``, what vLLM's bench keeps of a non-200
    answer) gives its HTTP status, so 429/503 still count as rejections."""
    text = (error or "").strip()
    low = text.lower()
    if code is None:
        code = _http_code(low)
    if code == 499 or "cancel" in low:
        return "cancelled", code
    if "timeout" in low or "timed out" in low:
        return "timeout", code
    if code is not None and 400 <= code <= 599:
        return "http_error", code
    if "connect" in low or "disconnect" in low:
        return "connection_error", code
    return "invalid_response", code


def _http_code(low: str) -> int | None:
    """An HTTP status named in an error text: a bare reason phrase, or a code followed by its own
    phrase ("503 Service Unavailable"); a lone number is not trusted."""
    if low in _PHRASES:
        return _PHRASES[low]
    for m in re.finditer(r"\b([1-5]\d\d)\s+([a-z][a-z' -]*)", low):
        code = int(m.group(1))
        if code in _CODES and m.group(2).startswith(_CODES[code]):
            return code
    return None


def chunk_tokens_for(n_chunks: int, output_tokens: int | None) -> tuple[list[int], bool]:
    """Tokens per chunk when the tool gives only a total: one a chunk when they are as many,
    else the total split evenly (``metrics.token_attribution.split_total``, the rule our own
    client follows without per-chunk counts).  Returns (counts, one_per_chunk)."""
    if n_chunks == 0:
        return [], True
    if output_tokens is None or output_tokens == n_chunks:
        return [1] * n_chunks, True
    return split_total(int(output_tokens), [1] * n_chunks), False


def finish(rec: RequestRecord, slo: SLO | None) -> RequestRecord:
    """Derived columns (ttft_s, tpot_s, e2el_s, slo_ok) by our formulas."""
    finalize_record(rec, slo)
    return rec


def records_table(records: list[RequestRecord]) -> pa.Table:
    """Records -> a table in ``requests.parquet``'s schema."""
    return pa.table({c: [getattr(r, c) for r in records] for c in SCHEMA.names}, schema=SCHEMA)


# ---- writing ------------------------------------------------------------------------------

def _window(table: pa.Table, declared: tuple[int, int] | None) -> tuple[tuple[int, int], str]:
    """The run's window: what the file declares, widened to cover every request in it (a tool's
    window can leave out its warm-up); without one, first send to last completion."""
    sent = [v for v in table.column("sent_ns").to_pylist() if v is not None]
    ends = [d if d is not None else e for d, e in zip(table.column("done_ns").to_pylist(),
                                                      table.column("end_ns").to_pylist())]
    ends = [v for v in ends if v is not None]
    span = (min(sent), max(ends + sent)) if sent else None
    if declared is None and span is None:
        return (0, 0), "no requests and no window in the file"
    if declared is None:
        return span, "first send to last completion"
    if span is not None and (declared[1] < span[0] or declared[0] > span[1]):  # another clock or time zone
        return span, "first send to last completion (the file's window does not overlap its requests: ignored)"
    if span is None or (declared[0] <= span[0] and declared[1] >= span[1]):
        return declared, "declared by the file"
    return (min(declared[0], span[0]), max(declared[1], span[1])), "declared by the file, widened to its requests"


def _comparison(run: ImportedRun, summary: dict) -> tuple[list[dict], list[str]]:
    rows, notes = [], []
    for c in (run.checks(summary) if run.checks else []):
        ok = c.agrees()
        rows.append({**asdict(c), "agrees": ok})
        if c.same_definition and ok is False:
            why = f"; {c.note}" if c.note else ""
            notes.append(f"{c.name}: {run.tool} reported {c.source:.6g}, our recomputation from the same "
                         f"requests gives {c.ours:.6g} (beyond {REL_TOL:g} relative){why}")
    return rows, notes


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def write_run(run: ImportedRun, out_dir: Path, source_file: Path, slo: SLO | None) -> Path:
    """Write ``run`` as a run folder: requests.parquet, source.json, then summary.json (last:
    a folder with a summary is complete)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    table = records_table(run.records)
    (start, end), window_rule = _window(table, run.window_ns)
    summary = summarize(table, slo or SLO(), start, end)
    comparison, disagreements = _comparison(run, summary)
    notes = list(run.notes) + disagreements
    provenance = {"source_tool": run.tool, "source_version": run.version, "source_file": str(source_file),
                  "source_sha256": _sha256(source_file), "source_benchmark": run.label,
                  "clock": run.clock, "clock_origin_ns": run.clock_origin_ns, "window_rule": window_rule,
                  "window_start_ns": start, "window_end_ns": end,
                  "imported_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                  "num_rows": table.num_rows, **run.provenance}
    summary.update({"source_tool": run.tool, "source_version": run.version, "source_file": str(source_file),
                    "source_benchmark": run.label, "definition_notes": notes,
                    "source_metrics": run.source_metrics, "source_comparison": comparison,
                    "source_equivalents": run.equivalents})
    write_requests(out_dir / REQUESTS, table)
    write_json(out_dir / "source.json", {**provenance, "definition_notes": notes})
    write_json(out_dir / SUMMARY, summary)
    return out_dir
