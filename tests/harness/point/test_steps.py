"""The load point's steps (harness.point.steps): what a point's cost window holds."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pyarrow.parquet as pq

from conf.load_point import RunSpec
from harness import results_io
from harness.point.point_run import PointRun
from harness.point.steps import close_window, write_results
from metrics.telemetry import collector as collector_module
from metrics.telemetry.collector import TelemetryCollector


class _Engine:
    def alive(self) -> bool:
        return True


def test_the_telemetry_write_is_not_in_the_next_points_window(tmp_path, monkeypatch):
    """Issue 43: ``close_window`` read the close time, then wrote telemetry.parquet (0.2 to 0.65 s: the
    telemetry process's first write imported pyarrow.parquet) before the step returned; the next point's
    window opens at that close, so it paid for the write before its first request.  A slow writer injected:
    the step must return (the next point may start) while the write is still running, and the file is
    whole on disk once the collector stops."""
    release, times = threading.Event(), {}
    real_write = collector_module.write_table

    def slow_write(path, rows):
        release.wait(5)  # the test lets it finish once the step has returned (a synchronous write waits 5 s)
        times["write_done_ns"] = time.perf_counter_ns()
        return real_write(path, rows)

    monkeypatch.setattr(collector_module, "write_table", slow_write)
    tel = TelemetryCollector(None, [], 1.0)
    tel.record([(t, "host", "cpu_percent", float(t), None) for t in range(100, 2000, 100)])
    s = SimpleNamespace(engine=_Engine(), engine_metrics=False, telemetry=tel, idle_interval=None)
    p = PointRun(spec=RunSpec(index=0, label="constant-rate=16", load={}), run_dir=tmp_path, last=False,
                 window_open_ns=150, inputs=None, stats={"start_ns": 200, "end_ns": 900})
    try:
        close_window(s, p)
        returned_ns = time.perf_counter_ns()
        release.set()
    finally:
        release.set()
        tel.stop()
    assert p.window_close_ns < returned_ns < times["write_done_ns"]  # the write ran off the next window
    path = Path(tmp_path / results_io.TELEMETRY)
    assert p.telemetry_path == path
    written = pq.read_table(path)
    # the summary reads the table the file holds (repr: the marks' values are NaN)
    assert written.schema.equals(p.telemetry.schema) and repr(written.to_pylist()) == repr(p.telemetry.to_pylist())
    times_ns = written.column("time_ns").to_pylist()
    assert times_ns[0] == 100 and 1900 in times_ns  # the edges before and after the window kept
    assert sorted(r for r in written.column("name").to_pylist() if r in ("load_start", "load_end")) == [
        "load_end", "load_start"]


def test_a_run_is_complete_only_once_its_telemetry_file_is_on_disk(tmp_path, monkeypatch):
    """summary.json, written last, marks a run complete (a rerun keeps it); with telemetry.parquet written
    off the window, ``write_results`` waits for it first, so a run killed in between is not taken as
    finished without its telemetry."""
    seen = {}
    real_write = collector_module.write_table

    def slow_write(path, rows):
        time.sleep(0.5)
        seen["summary_before_telemetry"] = (Path(path).parent / results_io.SUMMARY).exists()
        return real_write(path, rows)

    monkeypatch.setattr(collector_module, "write_table", slow_write)
    tel = TelemetryCollector(None, [], 1.0)
    s = SimpleNamespace(engine=_Engine(), engine_metrics=False, telemetry=tel, idle_interval=None, name=None,
                        block=0, safe_config={}, engine_prov={}, fixed_conditions=dict)
    p = PointRun(spec=RunSpec(index=0, label="constant-rate=16", load={}), run_dir=tmp_path, last=False,
                 window_open_ns=150, inputs=None, stats={"start_ns": 200, "end_ns": 900}, summary={"ok": 1})
    try:
        close_window(s, p)
        write_results(s, p)
    finally:
        tel.stop()
    assert seen == {"summary_before_telemetry": False}
    assert (tmp_path / results_io.SUMMARY).exists() and (tmp_path / results_io.TELEMETRY).exists()
