"""Trace readers: a file of a public trace format -> a ``WorkloadTable``.

One module per format (``workload=NAME`` with ``workload.path=FILE``, mirroring
``conf/workload/``): ``azure``, ``burstgpt``, ``mooncake``, ``sharegpt`` and ``jsonl`` (our
own).  What they share is in ``common`` (errors, bad lines, sessions), ``csv_fields`` and
``json_fields``.

Bad input: a malformed line stops the read with the file, line number and the offending
text; with ``workload.on_bad_line=skip`` it is skipped and counted (``table.bad_lines``).
"""

from __future__ import annotations

from loadgen.workloads.table import WorkloadTable
from loadgen.workloads.traces.azure import read_azure
from loadgen.workloads.traces.burstgpt import read_burstgpt
from loadgen.workloads.traces.common import TraceError
from loadgen.workloads.traces.jsonl import read_jsonl
from loadgen.workloads.traces.mooncake import read_mooncake
from loadgen.workloads.traces.sharegpt import read_sharegpt

FORMATS = ("azure", "burstgpt", "mooncake", "sharegpt", "jsonl")


def read_trace(fmt: str, path, on_bad_line: str = "error", model_filter: str | None = None) -> WorkloadTable:
    if fmt == "azure":
        return read_azure(path, on_bad_line)
    if fmt == "burstgpt":
        return read_burstgpt(path, on_bad_line, model_filter)
    if fmt == "mooncake":
        return read_mooncake(path, on_bad_line)
    if fmt == "sharegpt":
        return read_sharegpt(path, on_bad_line)
    if fmt == "jsonl":
        return read_jsonl(path, on_bad_line)
    raise TraceError(f"workload={fmt}: unknown trace format (known: {', '.join(FORMATS)}, synthetic)")
