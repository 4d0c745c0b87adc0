"""RecordWriter: flat per-chunk buffers and background writes keep every row intact."""

from __future__ import annotations

import pyarrow.parquet as pq

from loadgen.records import SCHEMA, RecordWriter, RequestRecord


def test_rows_round_trip_across_batches(tmp_path):
    w = RecordWriter(tmp_path / "r.parquet", batch_size=3)
    for i in range(8):
        w.append(RequestRecord(f"r{i}", scheduled_ns=10 * i, sent_ns=10 * i + 1,
                               chunk_ns=list(range(100 + i, 100 + 2 * i)), chunk_tokens=[2] * i,
                               status="ok" if i % 2 else "timeout", response_id=None if i == 4 else f"s{i}"))
    assert w.close() == str(tmp_path / "r.parquet")
    f = pq.ParquetFile(tmp_path / "r.parquet")
    assert f.schema_arrow == SCHEMA and f.num_row_groups == 3
    d = f.read().to_pydict()
    assert d["request_id"] == [f"r{i}" for i in range(8)]
    assert d["chunk_ns"] == [list(range(100 + i, 100 + 2 * i)) for i in range(8)]
    assert d["chunk_tokens"] == [[2] * i for i in range(8)]
    assert d["response_id"][4] is None and d["status"][3] == "ok" and d["sent_ns"][7] == 71
    assert not (tmp_path / "r.parquet.partial").exists()


def test_abort_keeps_only_the_partial_file(tmp_path):
    w = RecordWriter(tmp_path / "r.parquet", batch_size=2)
    for i in range(3):
        w.append(RequestRecord(f"r{i}", scheduled_ns=0, chunk_ns=[1, 2], chunk_tokens=[1, 1]))
    w.abort()
    assert not (tmp_path / "r.parquet").exists()
    assert pq.read_table(tmp_path / "r.parquet.partial").num_rows == 3
