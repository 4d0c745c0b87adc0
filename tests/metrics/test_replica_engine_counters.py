"""Engine counters per replica and over a deployment, and the per-request phase means, from
telemetry rows built by hand and from two engines' /metrics pages scraped at once."""

from __future__ import annotations

import math
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from metrics.engine_counters import counter_deltas, engine_summary, replica_engine_summaries
from metrics.telemetry.base import SCHEMA
from tests.fake_engine import FakeEngine


def _table(rows: list[tuple]) -> pa.Table:
    return pa.Table.from_pylist([dict(zip(SCHEMA.names, r)) for r in rows], schema=SCHEMA)


def _rows(src: str, start: dict, end: dict, samples: dict[int, dict], t0=100, t1=1000) -> list[tuple]:
    rows = [(t0, src, k, v, "start") for k, v in start.items()]
    rows += [(t, src, k, v, None) for t, vals in samples.items() for k, v in vals.items()]
    rows += [(t1, src, k, v, "end") for k, v in end.items()]
    return rows


def test_phase_means_from_two_snapshots():
    start = {"queue_time_sum": 1.0, "queue_time_count": 10.0, "prefill_time_sum": 2.0, "prefill_time_count": 10.0,
             "kv_transfer_time_sum": 0.0, "kv_transfer_time_count": 0.0}
    end = {"queue_time_sum": 3.5, "queue_time_count": 20.0, "prefill_time_sum": 2.6, "prefill_time_count": 13.0,
           "kv_transfer_time_sum": 0.0, "kv_transfer_time_count": 0.0}
    out = counter_deltas(start, end)
    assert math.isclose(out["engine_mean_queue_ms"], 2500 / 10)
    assert math.isclose(out["engine_mean_prefill_ms"], 600 / 3)
    assert math.isnan(out["engine_mean_kv_transfer_ms"])  # no transfer finished: no mean
    assert "engine_mean_decode_ms" not in out  # the engine has no such series


def test_deployment_sums_counters_and_combines_gauges_per_round():
    r0 = _rows("engine:r0", {"prefix_cache_queries": 100.0, "prefix_cache_hits": 10.0,
                             "queue_time_sum": 1.0, "queue_time_count": 10.0},
               {"prefix_cache_queries": 1100.0, "prefix_cache_hits": 810.0,
                "queue_time_sum": 3.5, "queue_time_count": 20.0},
               {200: {"waiting": 1.0, "kv_cache_usage": 0.2}, 300: {"waiting": 3.0, "kv_cache_usage": 0.4}})
    r1 = _rows("engine:r1", {"prefix_cache_queries": 0.0, "prefix_cache_hits": 0.0,
                             "queue_time_sum": 0.0, "queue_time_count": 0.0},
               {"prefix_cache_queries": 3000.0, "prefix_cache_hits": 600.0,
                "queue_time_sum": 0.5, "queue_time_count": 10.0},
               {200: {"waiting": 2.0, "kv_cache_usage": 0.6}, 300: {"waiting": 4.0, "kv_cache_usage": 0.8}})
    table = _table(r0 + r1 + [(150, "host", "cpu_percent", 5.0, None)])
    per = replica_engine_summaries(table)
    assert set(per) == {"r0", "r1"}
    assert per["r0"]["engine_prefix_cache_hit_rate"] == 800 / 1000
    assert per["r1"]["engine_prefix_cache_hit_rate"] == 600 / 3000
    assert per["r0"]["engine_waiting_mean"] == 2.0 and per["r1"]["engine_kv_cache_usage_max"] == 0.8
    assert math.isclose(per["r1"]["engine_mean_queue_ms"], 50.0)
    d = engine_summary(table)
    assert d["engine_replicas"] == 2 and d["engine_metrics_complete"] is True
    assert d["engine_prefix_cache_queries"] == 1000 + 3000 and d["engine_prefix_cache_hits"] == 800 + 600
    assert d["engine_prefix_cache_hit_rate"] == 1400 / 4000  # Σ hits / Σ queries, not a mean of rates
    assert d["engine_waiting_mean"] == (3 + 7) / 2 and d["engine_waiting_max"] == 7  # summed per round
    assert math.isclose(d["engine_kv_cache_usage_mean"], (0.4 + 0.6) / 2)  # mean over replicas per round
    assert math.isclose(d["engine_kv_cache_usage_max"], 0.6)
    assert math.isclose(d["engine_mean_queue_ms"], (2.5 + 0.5) * 1e3 / 20)


def test_replica_without_end_snapshot_makes_the_deployment_incomplete():
    r0 = _rows("engine:r0", {"prefix_cache_queries": 0.0, "prefix_cache_hits": 0.0},
               {"prefix_cache_queries": 10.0, "prefix_cache_hits": 5.0}, {})
    r1 = [(100, "engine:r1", "prefix_cache_queries", 0.0, "start")]  # died before the end snapshot
    d = engine_summary(_table(r0 + r1))
    assert d["engine_metrics_complete"] is False and d["engine_prefix_cache_hits"] == 5.0


def test_single_engine_keeps_its_keys_and_no_replicas():
    rows = _rows("engine", {"prefix_cache_queries": 0.0, "prefix_cache_hits": 0.0},
                 {"prefix_cache_queries": 10.0, "prefix_cache_hits": 5.0}, {200: {"waiting": 1.0}})
    table = _table(rows)
    d = engine_summary(table)
    assert "engine_replicas" not in d and d["engine_prefix_cache_hit_rate"] == 0.5
    assert replica_engine_summaries(table) == {}


def _page(queries: float, hits: float, waiting: float, kv: float, qsum: float, qcount: float) -> str:
    return (f"vllm:prefix_cache_queries_total{{engine=\"0\"}} {queries}\n"
            f"vllm:prefix_cache_hits_total{{engine=\"0\"}} {hits}\n"
            f"vllm:num_requests_waiting{{engine=\"0\"}} {waiting}\n"
            f"vllm:kv_cache_usage_perc{{engine=\"0\"}} {kv}\n"
            f"vllm:request_queue_time_seconds_sum{{engine=\"0\"}} {qsum}\n"
            f"vllm:request_queue_time_seconds_count{{engine=\"0\"}} {qcount}\n")


@pytest.mark.slow  # starts the telemetry process
def test_two_engines_scraped_at_once_each_labelled(tmp_path):
    # the harness's path: the telemetry process samples both pages in the same rounds
    from engines.vllm import VLLM
    from metrics.telemetry.process import TelemetryProcess

    metric_map = VLLM.server_metric_map
    with FakeEngine() as a, FakeEngine() as b:
        a.route("GET", "/metrics", (200, _page(100, 10, 2, 0.25, 1.0, 10)))
        b.route("GET", "/metrics", (200, _page(0, 0, 5, 0.75, 0.0, 0)))
        tel = TelemetryProcess({"interval_s": 0.05, "nvml": {"enabled": False}}, {}).start()
        try:
            t0 = tel.sample_now()
            assert tel.add_engine(a.url + "/metrics", metric_map, replica="r0") is True
            assert tel.add_engine(b.url + "/metrics", metric_map, replica="r1") is True
            tel.engine_snapshot("start")
            a.route("GET", "/metrics", (200, _page(1100, 810, 2, 0.25, 3.5, 20)))
            b.route("GET", "/metrics", (200, _page(3000, 600, 5, 0.75, 0.5, 10)))
            time.sleep(0.3)
            tel.engine_snapshot("end")
            tel.remove_engine("r0")
            n_a = len(a.calls)
            time.sleep(0.2)
            assert len(a.calls) == n_a and len(b.calls) > 0  # r0 no longer sampled, r1 still is
            tel.remove_engine()
            t1 = tel.sample_now()
            path = tel.write_window(tmp_path / "telemetry.parquet", t0, t1)
        finally:
            tel.stop()
    table = pq.read_table(path)
    sources = set(table.column("source").to_pylist())
    assert {"engine:r0", "engine:r1"} <= sources and "engine" not in sources
    rows = table.to_pylist()

    def times(src, detail):
        return {r["time_ns"] for r in rows if r["source"] == src and r["name"] == "waiting" and r["detail"] == detail}

    assert times("engine:r0", "start") == times("engine:r1", "start")  # one snapshot time for both
    rounds = times("engine:r0", "vllm:num_requests_waiting") & times("engine:r1", "vllm:num_requests_waiting")
    assert len(rounds) >= 3  # both pages read in the same sample rounds
    per = replica_engine_summaries(table)
    assert per["r0"]["engine_prefix_cache_hit_rate"] == 800 / 1000
    assert per["r1"]["engine_waiting_mean"] == 5.0 and per["r0"]["engine_kv_cache_usage_mean"] == 0.25
    d = engine_summary(table)
    assert d["engine_prefix_cache_hit_rate"] == 1400 / 4000 and d["engine_metrics_complete"] is True
    assert d["engine_waiting_mean"] == 7.0 and d["engine_kv_cache_usage_mean"] == 0.5
    assert math.isclose(d["engine_mean_queue_ms"], 150.0)
