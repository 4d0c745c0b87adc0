"""Trace readers: a file of a public trace format -> a ``WorkloadTable``.

Formats (``workload=NAME`` with ``workload.path=FILE``):

- ``azure``: Azure LLM inference traces 2023 and 2024, CSV ``TIMESTAMP,ContextTokens,
  GeneratedTokens``; timestamps ``2023-11-16 18:17:03.9799600`` (up to 9 fractional
  digits, or none) with or without a ``+00:00``/``Z`` zone.
- ``burstgpt``: BurstGPT CSV ``Timestamp,Model,Request tokens,Response tokens,Total tokens,
  Log Type`` (seconds); release 3 adds ``Session ID,Elapsed time``.  ``workload.model_filter``
  keeps one model's rows.  Rows with 0 response tokens (failed requests in the trace) are
  dropped and counted in the notes.
- ``mooncake``: JSON lines ``{"timestamp": ms, "input_length", "output_length", "hash_ids"}``;
  each hash id is one block of 512 tokens.
- ``sharegpt``: JSON ``[{"id", "conversations": [{"from": "human"|"gpt", "value"}]}]``; each
  conversation is a session, each human message a turn (no arrival times).
- ``jsonl``: our own JSON lines, one request per line (see ``read_jsonl``).

Bad input: a malformed line stops the read with the file, line number and the offending
text; with ``workload.on_bad_line=skip`` it is skipped and counted (``table.bad_lines``).
CSV formats live in ``trace_csv``, JSON ones in ``trace_json``, what they share in
``trace_input``.
"""

from __future__ import annotations

from loadgen.trace_csv import parse_timestamp_ns, read_azure, read_burstgpt
from loadgen.trace_input import BAD_LINE_POLICIES, TraceError
from loadgen.trace_json import read_jsonl, read_mooncake, read_sharegpt
from loadgen.trace_table import WorkloadTable

FORMATS = ("azure", "burstgpt", "mooncake", "sharegpt", "jsonl")
__all__ = ["FORMATS", "BAD_LINE_POLICIES", "TraceError", "parse_timestamp_ns", "read_azure", "read_burstgpt",
           "read_jsonl", "read_mooncake", "read_sharegpt", "read_trace"]


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
