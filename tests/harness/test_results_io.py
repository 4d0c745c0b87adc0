"""harness/results_io.py: the one reader of run and experiment folders.  A missing file is the
default where the caller gives one, else one error naming the path; an unreadable or corrupt
file is one error naming the path, whoever reads it."""

from __future__ import annotations

import pytest

from harness import results_io
from harness.errors import UserError
from harness.results_io import ResultsFileError, read_json, read_yaml


def test_a_missing_file_is_the_default_given_else_an_error_naming_it(tmp_path):
    path = tmp_path / results_io.SUMMARY
    assert read_json(path, {}) == {} and read_json(path, None) is None and read_yaml(path, {}) == {}
    for read in (read_json, read_yaml):
        with pytest.raises(ResultsFileError) as e:
            read(path)
        assert str(e.value) == f"{path}: missing"


def test_a_corrupt_file_is_one_error_naming_it_default_or_not(tmp_path):
    bad_json = tmp_path / results_io.SUMMARY
    bad_json.write_text('{"goodput_rps": 1.5,')
    bad_yaml = tmp_path / results_io.CONFIG
    bad_yaml.write_text("deployment: [replicas: 2\n")
    for read, path, what in ((read_json, bad_json, "JSON"), (read_yaml, bad_yaml, "YAML")):
        for args in ((), ({},)):
            with pytest.raises(ResultsFileError) as e:
                read(path, *args)
            assert str(e.value).startswith(f"{path}: not valid {what} (")
            # the command line prints it without a traceback; callers that caught a JSON error still do
            assert isinstance(e.value, UserError) and isinstance(e.value, ValueError)


def test_a_folder_in_place_of_a_file_is_unreadable_naming_it(tmp_path):
    (tmp_path / results_io.RUN_META).mkdir()
    with pytest.raises(ResultsFileError, match=rf"^{tmp_path / results_io.RUN_META}: unreadable"):
        read_json(tmp_path / results_io.RUN_META, {})


def test_what_is_written_reads_back(tmp_path):
    results_io.write_json(tmp_path / results_io.SUMMARY, {"x": float("inf"), "n": 2})
    results_io.write_yaml(tmp_path / results_io.CONFIG, {"cost": {"num_gpus": 2}})
    assert read_json(tmp_path / results_io.SUMMARY) == {"x": "inf", "n": 2}
    assert read_yaml(tmp_path / results_io.CONFIG) == {"cost": {"num_gpus": 2}}
    (tmp_path / "empty.yaml").write_text("")
    assert read_yaml(tmp_path / "empty.yaml") == {}


def test_a_parquet_file_is_replaced_whole_or_not_at_all(tmp_path, monkeypatch):
    import errno

    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / results_io.REQUESTS
    results_io.write_parquet(path, pa.table({"n": [1, 2, 3]}), compression="zstd")
    assert results_io.read_parquet(path).column("n").to_pylist() == [1, 2, 3]
    assert results_io.read_parquet(path, columns=["n"]).column_names == ["n"]
    assert pq.ParquetFile(path).metadata.row_group(0).column(0).compression == "ZSTD"

    def disk_full(table, where, **kw):
        with open(where, "wb") as f:
            f.write(b"PAR1")
        raise OSError(errno.ENOSPC, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(pq, "write_table", disk_full)
        with pytest.raises(OSError) as e:  # the old file stays, no half-written copy is left
            results_io.write_parquet(path, pa.table({"n": [4]}))
    assert e.value.filename == str(path)
    assert results_io.read_parquet(path).column("n").to_pylist() == [1, 2, 3]
    assert sorted(p.name for p in tmp_path.iterdir()) == [results_io.REQUESTS]
    results_io.write_parquet(tmp_path / results_io.RUNS_TABLE, pa.table({"n": [1]}))  # pyarrow's default
    assert pq.ParquetFile(tmp_path / results_io.RUNS_TABLE).metadata.row_group(0).column(0).compression == "SNAPPY"


def test_the_folder_file_names_are_said_in_results_io_only():
    """No module of the packages or benchmarks spells a run or experiment folder's file name (the
    protocols' records included) as a string of its own (prose in docstrings and messages may
    name them)."""
    import io
    import tokenize
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    names = {results_io.SUMMARY, results_io.REQUESTS, results_io.RUN_META, results_io.CONFIG, results_io.PROVENANCE,
             results_io.TELEMETRY, results_io.WORKLOAD, results_io.EXPERIMENT, results_io.RUNS_TABLE,
             results_io.COMPARISON, results_io.ABLATION, results_io.PROMOTION, results_io.ROLLBACK, results_io.PLAN,
             results_io.PROFILE, results_io.PROFILE_TABLE, results_io.AUTOSCALE}
    spelled = []
    for pkg in ("harness", "protocols", "engines", "loadgen", "metrics", "conf", "resultfiles", "benchmarks"):
        for path in sorted((root / pkg).rglob("*.py")):
            if path == root / "harness" / "results_io.py":
                continue
            for tok in tokenize.generate_tokens(io.StringIO(path.read_text()).readline):
                if tok.type == tokenize.STRING and tok.string[1:-1] in names:
                    spelled.append(f"{path.relative_to(root)}:{tok.start[0]}: {tok.string}")
    assert spelled == []
