"""The per-request record (one row of ``requests.parquet``) and its streaming writer.

Rows are written in batches as requests finish, so a long replay does not grow in memory,
into a temporary file renamed into place only when the run ends normally: a crash never
leaves a ``requests.parquet`` that looks complete.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import pyarrow as pa
import pyarrow.parquet as pq

# Statuses of DESIGN.md's failure taxonomy.
STATUSES = ("ok", "http_error", "timeout", "connection_error", "invalid_response", "truncated", "cancelled")

SCHEMA = pa.schema([
    ("request_id", pa.string()),
    ("response_id", pa.string()),
    ("session_id", pa.string()),
    ("turn", pa.int32()),
    ("scheduled_ns", pa.int64()),
    ("sent_ns", pa.int64()),
    ("first_token_ns", pa.int64()),
    ("end_ns", pa.int64()),
    ("done_ns", pa.int64()),          # stream closed (after the usage chunk); end_ns is the last output chunk
    ("chunk_ns", pa.list_(pa.int64())),
    ("chunk_tokens", pa.list_(pa.int32())),
    ("prompt_tokens", pa.int64()),
    ("expected_prompt_tokens", pa.int64()),
    ("max_tokens", pa.int64()),
    ("output_tokens", pa.int64()),
    ("tokens_source", pa.string()),   # usage_continuous | usage | usage+tokenizer_split | tokenizer | none
    ("status", pa.string()),
    ("http_status", pa.int32()),
    ("error", pa.string()),
    ("finish_reason", pa.string()),
    ("ttft_s", pa.float64()),
    ("tpot_s", pa.float64()),
    ("e2el_s", pa.float64()),
    ("slo_ok", pa.bool_()),
    ("warmup", pa.bool_()),
])

COLUMNS = tuple(SCHEMA.names)


@dataclass(slots=True)
class RequestRecord:
    request_id: str
    scheduled_ns: int
    session_id: str | None = None
    turn: int = 0
    warmup: bool = False
    expected_prompt_tokens: int | None = None
    max_tokens: int | None = None
    response_id: str | None = None
    sent_ns: int | None = None
    first_token_ns: int | None = None
    end_ns: int | None = None
    done_ns: int | None = None
    chunk_ns: list = field(default_factory=list)
    chunk_tokens: list = field(default_factory=list)
    prompt_tokens: int | None = None
    output_tokens: int | None = None
    tokens_source: str = "none"
    status: str = "cancelled"
    http_status: int | None = None
    error: str | None = None
    finish_reason: str | None = None
    ttft_s: float | None = None
    tpot_s: float | None = None
    e2el_s: float | None = None
    slo_ok: bool = False
    text: str = ""  # generated text; kept for multi-turn prompts, not written to parquet


class RecordWriter:
    """Appends records to ``path`` in row groups of ``batch_size``; ``close()`` publishes it."""

    def __init__(self, path: str | os.PathLike, batch_size: int = 2048):
        self.path = os.fspath(path)
        self.tmp = self.path + ".partial"
        self.batch_size = batch_size
        self._buf: dict[str, list] = {c: [] for c in COLUMNS}
        self._n_buf = 0
        self.rows = 0
        self._writer = pq.ParquetWriter(self.tmp, SCHEMA, compression="zstd")

    def append(self, rec: RequestRecord) -> None:
        buf = self._buf
        for c in COLUMNS:
            buf[c].append(getattr(rec, c))
        self._n_buf += 1
        if self._n_buf >= self.batch_size:
            self.flush()

    def flush(self) -> None:
        if self._n_buf:
            self._writer.write_table(pa.table(self._buf, schema=SCHEMA))
            self.rows += self._n_buf
            self._buf = {c: [] for c in COLUMNS}
            self._n_buf = 0

    def close(self) -> str:
        """Flush, close and rename into place; returns the final path."""
        self.flush()
        self._writer.close()
        os.replace(self.tmp, self.path)
        return self.path

    def abort(self) -> None:
        """Keep what was written under the ``.partial`` name (never the final one)."""
        try:
            self.flush()
            self._writer.close()
        except Exception:
            pass


def read_requests(path: str | os.PathLike) -> pa.Table:
    return pq.read_table(path)
