"""Trace readers: a file of a public trace format -> a ``WorkloadTable``.

One module per format (``workload=NAME`` with ``workload.path=FILE``, mirroring
``conf/workload/``): ``azure``, ``burstgpt``, ``mooncake``, ``sharegpt`` and ``jsonl`` (our
own); peers' agentic formats, read as tasks: ``aiperf`` (its multi-turn Mooncake trace, as
``aiperf synthesize agentic-code`` writes it), ``aiperf_dag`` (its branching DAG
conversations), ``guidellm`` (its conversation graphs) and
``sglang_agentic`` (SGLang's agentic trace).  What they share is in ``common`` (errors, bad
lines, sessions), ``csv_fields``, ``json_fields``, ``task_columns`` and ``block_prefix_tree``.

Bad input: a malformed line stops the read with the file, line number and the offending
text; with ``workload.on_bad_line=skip`` it is skipped and counted (``table.bad_lines``).
"""

from __future__ import annotations

from loadgen.workloads.table import WorkloadTable
from loadgen.workloads.traces.aiperf import read_aiperf
from loadgen.workloads.traces.aiperf_dag import read_aiperf_dag
from loadgen.workloads.traces.azure import read_azure
from loadgen.workloads.traces.burstgpt import read_burstgpt
from loadgen.workloads.traces.common import TraceError
from loadgen.workloads.traces.guidellm import read_guidellm
from loadgen.workloads.traces.jsonl import read_jsonl
from loadgen.workloads.traces.mooncake import read_mooncake
from loadgen.workloads.traces.sglang_agentic import read_sglang_agentic
from loadgen.workloads.traces.sharegpt import read_sharegpt

# The registry: ``workload=NAME`` -> its reader, ``reader(path, on_bad_line)`` (burstgpt's also
# takes ``model_filter``: only its format records a model a row was served by).
READERS = {"azure": read_azure, "burstgpt": read_burstgpt, "mooncake": read_mooncake, "sharegpt": read_sharegpt,
           "jsonl": read_jsonl, "aiperf": read_aiperf, "aiperf_dag": read_aiperf_dag, "guidellm": read_guidellm,
           "sglang_agentic": read_sglang_agentic}
FORMATS = tuple(READERS)
TASK_READERS = {name: READERS[name] for name in ("aiperf", "aiperf_dag", "guidellm", "sglang_agentic")}
MODEL_FILTERED = ("burstgpt",)


def reader(fmt: str):
    """The reader of ``workload=fmt``; an unknown name is a ``TraceError`` listing the known ones."""
    if fmt not in READERS:
        raise TraceError(f"workload={fmt}: unknown trace format (known: {', '.join(FORMATS)}, synthetic)")
    return READERS[fmt]


def read_trace(fmt: str, path, on_bad_line: str = "error", model_filter: str | None = None) -> WorkloadTable:
    read = reader(fmt)
    return read(path, on_bad_line, model_filter) if fmt in MODEL_FILTERED else read(path, on_bad_line)
