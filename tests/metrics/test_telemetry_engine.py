"""The engine's /metrics in telemetry (metrics.telemetry.engine) and the run's counter deltas from it
(metrics.engine_counters)."""

import math
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from metrics.engine_counters import counter_deltas, engine_summary
from metrics.telemetry.collector import TelemetryCollector
from metrics.telemetry.engine import EngineMetricsSampler


def test_counter_deltas_and_ratios():
    start = {"prefix_cache_queries": 1000.0, "prefix_cache_hits": 100.0, "preemptions": 2.0,
             "spec_decode_draft_tokens": 50.0, "spec_decode_accepted_tokens": 20.0}
    end = {"prefix_cache_queries": 6400.0, "prefix_cache_hits": 4708.0, "preemptions": 5.0,
           "spec_decode_draft_tokens": 450.0, "spec_decode_accepted_tokens": 320.0}
    out = counter_deltas(start, end, {"running": [0.0, 4.0, 2.0], "kv_cache_usage": [0.1, math.nan, 0.3]})
    assert out["engine_prefix_cache_queries"] == 5400.0 and out["engine_prefix_cache_hits"] == 4608.0
    assert out["engine_prefix_cache_hit_rate"] == 4608.0 / 5400.0
    assert out["engine_preemptions"] == 3.0
    assert out["engine_spec_decode_acceptance_rate"] == 300.0 / 400.0
    assert out["engine_running_max"] == 4.0 and out["engine_running_mean"] == 2.0
    assert out["engine_kv_cache_usage_max"] == 0.3 and abs(out["engine_kv_cache_usage_mean"] - 0.2) < 1e-12
    assert out["engine_metrics_complete"] is True


def test_no_lookups_is_nan_and_dead_engine_is_incomplete():
    same = {"prefix_cache_queries": 10.0, "prefix_cache_hits": 0.0}
    assert math.isnan(counter_deltas(same, same)["engine_prefix_cache_hit_rate"])
    out = counter_deltas(same, None)
    assert out == {"engine_metrics_complete": False}


def test_sampler_rows_land_in_telemetry(tmp_path):
    values = iter([{"running": float(i), "prefix_cache_hits": 10.0 * i} for i in range(1000)])
    s = EngineMetricsSampler(lambda: next(values), {"running": "vllm:num_requests_running"})
    col = TelemetryCollector(tmp_path / "t.parquet", [s], interval_s=0.01)  # available() reads one value
    col.record(s.snapshot_rows("start"))
    col.start()
    import time

    time.sleep(0.1)
    col.record(s.snapshot_rows("end"))
    col.stop()
    table = pq.read_table(tmp_path / "t.parquet")
    t = table.to_pylist()
    eng = [r for r in t if r["source"] == "engine"]
    assert {r["name"] for r in eng} == {"running", "prefix_cache_hits"}
    assert eng[0]["detail"] == "start" and eng[-1]["detail"] == "end"
    assert any(r["detail"] == "vllm:num_requests_running" for r in eng)
    # the run's engine figures come from the table alone
    d = engine_summary(table)
    start = {r["name"]: r["value"] for r in eng if r["detail"] == "start"}
    end = {r["name"]: r["value"] for r in eng if r["detail"] == "end"}
    assert d["engine_prefix_cache_hits"] == end["prefix_cache_hits"] - start["prefix_cache_hits"] > 0
    between = [r["value"] for r in eng if r["name"] == "running" and r["detail"] not in ("start", "end")]
    assert d["engine_running_max"] == max(between) and d["engine_metrics_complete"] is True


@pytest.mark.slow  # starts the telemetry process
def test_engine_scraped_from_the_telemetry_process(tmp_path):
    # The harness's path: a child process scrapes /metrics; snapshots and samples reach the window.
    from metrics.telemetry.process import TelemetryProcess
    from tests.engine_cfg import FIXTURES
    from tests.fake_engine import FakeEngine

    page = (FIXTURES / "vllm_0.32.0_metrics.txt").read_text()
    metric_map = {"running": ("vllm:num_requests_running", None),
                  "prefix_cache_hits": ("vllm:prefix_cache_hits_total", None)}
    with FakeEngine() as fake:
        fake.route("GET", "/metrics", (200, page))
        tel = TelemetryProcess({"interval_s": 0.05, "nvml": {"enabled": False}}, {}).start()
        try:
            a = tel.sample_now()
            assert tel.add_engine(fake.url + "/metrics", metric_map, {"Authorization": "Bearer k"}) is True
            tel.engine_snapshot("start")
            import time

            time.sleep(0.3)
            tel.engine_snapshot("end")
            tel.remove_engine()
            b = tel.sample_now()
            path = tel.write_window(tmp_path / "telemetry.parquet", a, b)
        finally:
            tel.stop()
        assert all(c[1] == "/metrics" for c in fake.calls)
        assert all(h.get("Authorization") == "Bearer k" for h in fake.headers)  # the scrape carries the key
    table = pq.read_table(path)
    eng = [r for r in table.to_pylist() if r["source"] == "engine"]
    assert len([r for r in eng if r["detail"] == "vllm:num_requests_running"]) >= 3
    d = engine_summary(table)
    assert d["engine_prefix_cache_hits"] == 0.0 and d["engine_metrics_complete"] is True


def test_unreadable_engine_is_recorded_unavailable(tmp_path):
    def boom():
        raise ConnectionRefusedError("no engine")

    col = TelemetryCollector(tmp_path / "t.parquet", [EngineMetricsSampler(boom)], interval_s=0.01)
    col.start()
    col.stop()
    rows = pq.read_table(tmp_path / "t.parquet").to_pylist()
    assert rows[0]["name"] == "unavailable" and "no engine" in rows[0]["detail"]


def test_engine_source_added_once_up_and_removed_before_stop():
    ok = EngineMetricsSampler(lambda: {"running": 1.0})
    col = TelemetryCollector(None, [], interval_s=60)
    assert col.add_sampler(ok) is True
    col.sample_now()
    col.remove_sampler(ok)
    col.sample_now()
    assert [r[2] for r in col.rows] == ["running"]

    def dead():
        raise ConnectionRefusedError("engine down")

    assert col.add_sampler(EngineMetricsSampler(dead)) is False
    assert col.rows[-1][2] == "unavailable" and "engine down" in col.rows[-1][4]


def test_closed_windows_files_are_on_disk_after_an_interrupted_run(tmp_path):
    """Issue 43: a closed window's telemetry.parquet is written in the telemetry process after it
    replied (off the next window).  Stopped at once (a Ctrl-C's ``finally``), or with the harness gone
    (the pipe's end), every window closed before is whole on disk and holds the table returned."""
    from metrics.telemetry.process import TelemetryProcess

    for how in ("stop", "parent_gone"):
        tel = TelemetryProcess({"interval_s": 0.05, "nvml": {"enabled": False}}, {}).start()
        tables = []
        try:
            for k in range(3):
                a = tel.sample_now()
                tel.mark("load_start", a, f"p{k}")
                b = tel.sample_now()
                tables.append(tel.close_window(tmp_path / f"{how}{k}.parquet", a, b))
            tel.flush()  # (what write_results does before summary.json)
            assert sorted(f.name for f in tmp_path.glob(f"{how}*.parquet")) == [f"{how}{k}.parquet" for k in range(3)]
            tables.append(tel.close_window(tmp_path / f"{how}3.parquet", b, tel.sample_now()))
        finally:
            if how == "stop":
                tel.stop()
            else:
                tel._conn.close()  # as if this process died: the child reads EOF, finishes its writes, ends
                tel._proc.join(20)
        for k, table in enumerate(tables):
            written = pq.read_table(tmp_path / f"{how}{k}.parquet")
            assert repr(written.to_pylist()) == repr(table.to_pylist())
            marks = [r["detail"] for r in written.to_pylist() if r["name"] == "load_start"]
            assert marks == ([f"p{k}"] if k < 3 else [])
        assert not list(tmp_path.glob("*.partial"))


@pytest.mark.slow  # starts the telemetry process from a script of its own
def test_the_telemetry_process_does_not_run_the_callers_main_module_again(tmp_path):
    """``spawn`` ran the parent's ``__main__`` again in the child: a script's top-level imports (a
    benchmark's scipy, a user's torch) were paid by every session's telemetry process (1.90 s against
    0.71 s a start, measured in benchmarks/verdicts.py).  Now neither the fork server nor a child
    runs it."""
    import subprocess
    import sys

    marker = tmp_path / "imported"
    script = tmp_path / "user_script.py"
    script.write_text(
        "import os, sys\n"
        f"open({str(marker)!r}, 'a').write(str(os.getpid()) + '\\n')  # a top-level side effect\n"
        "from metrics.telemetry.process import TelemetryProcess\n"
        "if __name__ == '__main__':\n"
        "    import psutil\n"
        "    servers = set()\n"
        "    for _ in range(2):\n"
        "        tel = TelemetryProcess({'interval_s': 0.5, 'nvml': {'enabled': False}}, {})\n"
        "        assert tel.sample_now() > 0\n"
        "        servers.add(psutil.Process(tel.pid).ppid())\n"
        "        tel.stop()\n"
        "    print(os.getpid(), *servers)\n")
    root = str(Path(__file__).resolve().parents[2])
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": root})
    assert p.returncode == 0, p.stderr
    assert len(marker.read_text().split()) == 1  # the parent's import only: not in the server, not in a child
    # Each session's child is a fork of one server (started once, clean: not the script itself), not
    # an interpreter of its own: 0.04 s a start and 0.005 s a stop where a spawned one took 0.63 and
    # 0.17 (benchmarks/telemetry_start.py).
    script_pid, *servers = p.stdout.split()
    assert len(servers) == 1 and servers[0] != script_pid
