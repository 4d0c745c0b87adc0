"""The per-request record (one row of ``requests.parquet``) and its streaming writer.

Rows are written in batches as requests finish, so a long replay does not grow in memory,
into a temporary file renamed into place only when the run ends normally: a crash never
leaves a ``requests.parquet`` that looks complete.
"""

from __future__ import annotations

import os
import socket
from array import array
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, fields

import numpy as np
import pyarrow as pa

from resultfiles import parquet

HOST = socket.gethostname()  # evaluated in each load-generator process: a Ray worker's is its node's
# Statuses of DESIGN.md's failure taxonomy.
UNKNOWN_REPLICA = "unknown"  # the ``replica`` of a row nobody said which replica served
STATUSES = ("ok", "http_error", "timeout", "connection_error", "invalid_response", "truncated", "cancelled")


def _col(arrow_type: pa.DataType, default=None, factory=None):
    """A field written to ``requests.parquet`` as ``arrow_type`` (the one schema: see ``SCHEMA``)."""
    meta = {"arrow": arrow_type}
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


@dataclass(slots=True)
class RequestRecord:
    """One request; the fields with an Arrow type are the columns of ``requests.parquet``,
    in this order (DESIGN.md's data contract), the others live in memory only."""

    request_id: str = _col(pa.string())
    response_id: str | None = _col(pa.string())
    session_id: str | None = _col(pa.string())
    turn: int = _col(pa.int32(), 0)
    prefix_group: int | None = _col(pa.int32())   # workload.prefix_groups: the shared prefix it starts with
    scheduled_ns: int | None = _col(pa.int64())
    slot_ns: int | None = _col(pa.int64())        # got its concurrency slot (= scheduled_ns when nothing caps it)
    sent_ns: int | None = _col(pa.int64())
    first_token_ns: int | None = _col(pa.int64())
    end_ns: int | None = _col(pa.int64())         # the last output chunk
    done_ns: int | None = _col(pa.int64())        # response over: [DONE] read, else the body's end
    chunk_ns: list = _col(pa.list_(pa.int64()), factory=list)
    chunk_tokens: list = _col(pa.list_(pa.int32()), factory=list)
    prompt_tokens: int | None = _col(pa.int64())
    expected_prompt_tokens: int | None = _col(pa.int64())
    max_tokens: int | None = _col(pa.int64())
    output_tokens: int | None = _col(pa.int64())
    # Token truth (metrics.token_accounting): the prompt tokens the server says it served from its
    # prefix cache (usage.prompt_tokens_details.cached_tokens; null: not reported), the server's
    # usage.completion_tokens, and the served model's tokenizer count of the whole text received
    # (null: no usage / no tokenizer).
    cached_tokens: int | None = _col(pa.int64())
    server_output_tokens: int | None = _col(pa.int64())
    client_output_tokens: int | None = _col(pa.int64())
    tokens_source: str = _col(pa.string(), "none")  # usage_continuous | usage | usage+tokenizer_split | tokenizer | ...
    status: str = _col(pa.string(), "cancelled")
    http_status: int | None = _col(pa.int32())
    error: str | None = _col(pa.string())
    finish_reason: str | None = _col(pa.string())
    ttft_s: float | None = _col(pa.float64())
    tpot_s: float | None = _col(pa.float64())
    e2el_s: float | None = _col(pa.float64())
    connect_s: float | None = _col(pa.float64())  # opening a connection for this request (null: a pooled one)
    # Reasoning models (loadgen.client.openai_stream's chunk kinds): output tokens that came as
    # reasoning / as tool-call deltas (both part of output_tokens; 0: none came), the first output
    # chunk that is not reasoning, and the time to it (metrics.request_metrics.ttfa_s).
    reasoning_tokens: int | None = _col(pa.int64())
    tool_call_tokens: int | None = _col(pa.int64())
    first_answer_ns: int | None = _col(pa.int64())
    ttfa_s: float | None = _col(pa.float64())
    slo_ok: bool = _col(pa.bool_(), False)
    warmup: bool = _col(pa.bool_(), False)
    # Set by the promotion proxy (harness/proxy): which endpoint served the row, and whether its
    # response was a copy the caller never saw (shadow / mirror).  A load generator's rows: null, False.
    side: str | None = _col(pa.string())          # incumbent | candidate
    shadow: bool = _col(pa.bool_(), False)
    worker: int = _col(pa.int32(), 0)             # the load-generator worker that sent it (client.workers)
    worker_host: str | None = _col(pa.string(), HOST)  # the host that worker ran on (client.backend=ray: several)
    # The deployment's replica that served it (r0, r1, p0, d0 ...): from the response header the
    # client is told to read (loadgen.client.config.ClientConfig.replica_header), else the
    # client's default_replica (a single engine: r0), else UNKNOWN_REPLICA.
    replica: str = _col(pa.string(), UNKNOWN_REPLICA)
    # the LoRA adapter the request named as its model (workload.lora; null: the engine's model)
    lora: str | None = _col(pa.string())
    # A call of a task (a DAG of calls, loadgen.workloads.tasks): which task and node, the
    # nodes it waited for, its attempt (from 1; 0: not a task), the tool time it waited after
    # its last parent ended, the calls in the task's DAG, and (a sink: a call no other waits
    # for) whether its reply passed the task's success rule (null: not a sink, or not a task).
    task_id: str | None = _col(pa.string())
    node: str | None = _col(pa.string())
    parents: list = _col(pa.list_(pa.string()), factory=list)
    attempt: int = _col(pa.int32(), 0)
    tool_s: float | None = _col(pa.float64())
    task_calls: int | None = _col(pa.int32())
    check_ok: bool | None = _col(pa.bool_())
    # In memory only: what the stream said, before token attribution (metrics.token_attribution).
    chunk_text: list = field(default_factory=list)     # text of each output chunk
    chunk_usage: list = field(default_factory=list)    # cumulative usage.completion_tokens at each chunk (-1: none)
    # answer | reasoning | tool_call per output chunk; a chunk of several kinds: its (kind, text) parts
    chunk_kind: list = field(default_factory=list)
    usage_prompt_tokens: int | None = None
    usage_completion_tokens: int | None = None
    text: str = ""  # generated text; kept for multi-turn prompts
    check: object = None  # a task sink's success rule (loadgen.workloads.tasks.TaskCheck): sets check_ok


SCHEMA = pa.schema([(f.name, f.metadata["arrow"]) for f in fields(RequestRecord) if "arrow" in f.metadata])
COLUMNS = tuple(SCHEMA.names)


LIST_COLUMNS = ("chunk_ns", "chunk_tokens")
_LIST_CODES = {"chunk_ns": "q", "chunk_tokens": "i"}
_LIST_DTYPES = {"chunk_ns": np.int64, "chunk_tokens": np.int32}
SCALAR_COLUMNS = tuple(c for c in COLUMNS if c not in LIST_COLUMNS)


class RecordWriter:
    """Appends records to ``path`` in row groups of ``batch_size``; ``close()`` publishes it.

    It runs inside the load generator's event loop, so a flush must not stall it: the
    per-chunk lists go into flat C arrays as records arrive (no per-element Python work at
    flush time) and compression and file I/O run on a background thread.
    """

    def __init__(self, path: str | os.PathLike, batch_size: int = 2048):
        self._file = parquet.StreamWriter(path, SCHEMA)
        self.path, self.tmp = self._file.path, self._file.tmp
        self.batch_size = batch_size
        self.rows = 0
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="record-writer")
        # its thread starts now: started at the first flush, mid-run, it held the loop ~10 ms
        self._pending: Future | None = self._pool.submit(int)
        self._reset()
        self._table()  # pays pyarrow's lazy imports now, not at the first flush mid-run

    def _reset(self) -> None:
        self._buf: dict[str, list] = {c: [] for c in SCALAR_COLUMNS}
        self._flat = {c: array(_LIST_CODES[c]) for c in LIST_COLUMNS}
        self._offsets = {c: array("i", [0]) for c in LIST_COLUMNS}
        self._n_buf = 0

    def append(self, rec: RequestRecord) -> None:
        buf = self._buf
        for c in SCALAR_COLUMNS:
            buf[c].append(getattr(rec, c))
        for c in LIST_COLUMNS:
            flat = self._flat[c]
            flat.extend(getattr(rec, c))
            self._offsets[c].append(len(flat))
        self._n_buf += 1
        if self._n_buf >= self.batch_size:
            self.flush()

    def append_table(self, table: pa.Table) -> None:
        """Append rows already in ``SCHEMA`` form (the worker processes' part files)."""
        self.flush()
        self._wait()
        self._file.write(table.select(list(COLUMNS)).cast(SCHEMA))
        self.rows += table.num_rows

    def _table(self) -> pa.Table:
        cols = {}
        for f in SCHEMA:
            c = f.name
            if c in LIST_COLUMNS:
                values = pa.array(np.frombuffer(self._flat[c], dtype=_LIST_DTYPES[c]))
                cols[c] = pa.ListArray.from_arrays(pa.array(np.frombuffer(self._offsets[c], dtype=np.int32)),
                                                   values).cast(f.type)
            else:
                cols[c] = pa.array(self._buf[c], type=f.type)
        return pa.table(cols, schema=SCHEMA)

    def _wait(self) -> None:
        if self._pending is not None:
            fut, self._pending = self._pending, None
            fut.result()  # a write error surfaces here, at the next flush or at close

    def flush(self) -> None:
        if self._n_buf:
            table = self._table()
            self._wait()
            self._pending = self._pool.submit(self._file.write, table)
            self.rows += self._n_buf
            self._reset()

    def close(self) -> str:
        """Flush, close and rename into place; returns the final path."""
        self.flush()
        self._wait()
        self._pool.shutdown()
        return self._file.publish()

    def abort(self) -> None:
        """Keep what was written under the ``.partial`` name (never the final one)."""
        try:
            self.flush()
            self._wait()
        except Exception:  # noqa: BLE001 - aborting already: keep what reached the file, lose the rest
            pass
        self._pool.shutdown()
        try:
            self._file.close_partial()
        except Exception:  # noqa: BLE001 - as above
            pass


def write_requests(path: str | os.PathLike, table: pa.Table) -> None:
    """A whole ``requests.parquet`` at once (an imported run's, a rewritten one's), as
    ``RecordWriter`` writes it (its compression), whole or not at all."""
    parquet.write_table(path, table, compression=parquet.STREAM_COMPRESSION)


def read_requests(path: str | os.PathLike) -> pa.Table:
    """A ``requests.parquet``; a file written before the ``replica`` column existed reads as
    every row's replica ``unknown``."""
    t = parquet.read_table(path)
    if "replica" not in t.column_names:
        t = t.append_column(pa.field("replica", pa.string()), pa.array([UNKNOWN_REPLICA] * t.num_rows, pa.string()))
    return t
