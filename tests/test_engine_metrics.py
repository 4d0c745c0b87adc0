import math

import pyarrow.parquet as pq

from metrics.engine_counters import counter_deltas
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
    col.rows.extend(s.rows(s.snapshot("start"), "start"))
    col.start()
    import time

    time.sleep(0.1)
    col.rows.extend(s.rows(s.snapshot("end"), "end"))
    col.stop()
    t = pq.read_table(tmp_path / "t.parquet").to_pylist()
    eng = [r for r in t if r["source"] == "engine"]
    assert {r["name"] for r in eng} == {"running", "prefix_cache_hits"}
    assert eng[0]["detail"] == "start" and eng[-1]["detail"] == "end"
    assert any(r["detail"] == "vllm:num_requests_running" for r in eng)
    d = s.summary()
    assert d["engine_prefix_cache_hits"] == s.end["prefix_cache_hits"] - s.start["prefix_cache_hits"] > 0


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
