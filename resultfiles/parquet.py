"""Parquet results files: written whole (``write_table``) or streamed in row groups under the
temp name and renamed when done (``StreamWriter``); read whole, by columns (``read_table``),
or opened for their schema and row groups first (``open_file``).

pyarrow is imported inside each function: what reads only JSON does not load it.
"""

from __future__ import annotations

import os

from resultfiles.whole import partial_path, replace_whole

# requests.parquet and the load generator's part files: zstd (smaller than pyarrow's default
# snappy at a per-chunk list column's size; the write runs off the event loop).
STREAM_COMPRESSION = "zstd"
# pyarrow's own default: every table written whole unless its owner says otherwise
DEFAULT_COMPRESSION = "snappy"


def write_table(path: str | os.PathLike, table, compression: str = DEFAULT_COMPRESSION) -> None:
    """A pyarrow table as ``path``, whole or not at all (one row group per 1 Mi rows, pyarrow's default)."""
    import pyarrow.parquet as pq

    replace_whole(path, lambda tmp: pq.write_table(table, tmp, compression=compression))


def read_table(path: str | os.PathLike, columns: list[str] | None = None):
    """A Parquet file as a pyarrow table (only ``columns``, where given); a missing or corrupt
    file raises as pyarrow does (its callers say what it was for)."""
    import pyarrow.parquet as pq

    return pq.read_table(path, columns=columns)


def open_file(path: str | os.PathLike):
    """A Parquet file opened for its schema and metadata (``schema_arrow``, ``metadata``), then
    read whole (``read``) or a row group at a time (``read_row_group``); missing: ``FileNotFoundError``."""
    import pyarrow.parquet as pq

    return pq.ParquetFile(path)


class StreamWriter:
    """A Parquet file of ``schema`` written a table (one row group each) at a time, under its
    temp name (``tmp``) until ``publish()`` renames it into place; ``close_partial()`` keeps
    what was written under the temp name, never the final one."""

    def __init__(self, path: str | os.PathLike, schema, compression: str = STREAM_COMPRESSION):
        import pyarrow.parquet as pq

        self.path = os.fspath(path)
        self.tmp = partial_path(self.path)
        self._writer = pq.ParquetWriter(self.tmp, schema, compression=compression)

    def write(self, table) -> None:
        self._writer.write_table(table)

    def close_partial(self) -> None:
        self._writer.close()

    def publish(self) -> str:
        """Close and rename into place; returns the final path."""
        self._writer.close()
        os.replace(self.tmp, self.path)
        return self.path
