"""resultfiles/parquet.py: a streamed file is a row group per table written, under its temp name
until published; a file kept partial never takes the final name."""

import pyarrow as pa

from resultfiles import parquet
from resultfiles.whole import PARTIAL

SCHEMA = pa.schema([("n", pa.int64())])


def test_a_streamed_file_is_published_with_a_row_group_per_table(tmp_path):
    path = tmp_path / "r.parquet"
    w = parquet.StreamWriter(path, SCHEMA)
    w.write(pa.table({"n": [1, 2]}, schema=SCHEMA))
    w.write(pa.table({"n": [3]}, schema=SCHEMA))
    assert [p.name for p in tmp_path.iterdir()] == ["r.parquet" + PARTIAL]
    assert w.publish() == str(path)
    assert [p.name for p in tmp_path.iterdir()] == ["r.parquet"]
    f = parquet.open_file(path)
    assert [f.metadata.row_group(g).num_rows for g in range(f.num_row_groups)] == [2, 1]
    assert f.metadata.row_group(0).column(0).compression == "ZSTD"
    assert parquet.read_table(path, columns=["n"]).column("n").to_pylist() == [1, 2, 3]


def test_a_file_kept_partial_never_takes_the_final_name(tmp_path):
    w = parquet.StreamWriter(tmp_path / "r.parquet", SCHEMA)
    w.write(pa.table({"n": [1]}, schema=SCHEMA))
    w.close_partial()
    assert [p.name for p in tmp_path.iterdir()] == ["r.parquet" + PARTIAL]
    assert parquet.read_table(tmp_path / ("r.parquet" + PARTIAL)).num_rows == 1


def test_a_whole_table_is_snappy_unless_told(tmp_path):
    parquet.write_table(tmp_path / "t.parquet", pa.table({"n": [1]}))
    assert parquet.open_file(tmp_path / "t.parquet").metadata.row_group(0).column(0).compression == "SNAPPY"
