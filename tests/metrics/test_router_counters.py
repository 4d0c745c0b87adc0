"""The router's own page (Dynamo's frontend) sampled beside the workers' pages: its rows
(``source = 'router'``) and the run's ``router_*`` keys (``metrics.engine_counters.router_summary``),
on Dynamo 1.4.2's frontend page as recorded."""

from __future__ import annotations

import math
import re
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from engines import prometheus
from engines.dynamo import FRONTEND_METRICS, WORKER_METRICS
from metrics.engine_counters import engine_summary, router_summary
from metrics.telemetry.base import SCHEMA
from tests.engine_cfg import FIXTURES
from tests.fake_engine import FakeEngine

PAGE = (FIXTURES / "dynamo_1.4.2_frontend_metrics.txt").read_text()
WORKER_PAGE = (FIXTURES / "dynamo_1.4.2_worker_metrics.txt").read_text()


def _set(page: str, series: str, value: float, where: str = "") -> str:
    """``page`` with the value of the line of ``series`` (whose labels contain ``where``) replaced."""
    pat = re.compile(rf"^({re.escape(series)}(?:{{[^}}]*{re.escape(where)}[^}}]*}})?) \S+$", re.M)
    assert pat.search(page), series
    return pat.sub(lambda m: f"{m.group(1)} {value!r}", page)


def _frontend(stream_ok: int, out_tokens: int, ttft: tuple, itl: tuple, inflight=7, queued=2) -> str:
    page = _set(PAGE, "dynamo_frontend_requests_total", stream_ok, 'request_type="stream",status="success"')
    page = _set(page, "dynamo_frontend_output_tokens_total", out_tokens)
    page = _set(page, "dynamo_frontend_time_to_first_token_seconds_sum", ttft[0])
    page = _set(page, "dynamo_frontend_time_to_first_token_seconds_count", ttft[1])
    page = _set(page, "dynamo_frontend_inter_token_latency_seconds_sum", itl[0])
    page = _set(page, "dynamo_frontend_inter_token_latency_seconds_count", itl[1])
    page = _set(page, "dynamo_frontend_inflight_requests", inflight)
    return _set(page, "dynamo_frontend_queued_requests", queued)


def test_the_recorded_frontend_page_under_common_names():
    v = prometheus.common_values(PAGE, FRONTEND_METRICS)
    # 4 streamed and 1 unary completion (the warm-up), all answered with status="success"
    assert v["requests"] == 5.0 and v["requests_ok"] == 5.0
    assert v["output_tokens"] == 36.0 and v["inflight"] == 0.0 and v["queued"] == 0.0
    assert v["disconnected_clients"] == 0.0
    assert v["ttft_time_sum"] == 0.038717421 and v["ttft_time_count"] == 5.0
    assert v["itl_time_sum"] == 0.027237435 and v["itl_time_count"] == 31.0  # 36 tokens - 5 first ones
    assert v["request_time_sum"] == 0.068903938 and v["request_time_count"] == 5.0


def _table(rows: list[tuple]) -> pa.Table:
    return pa.Table.from_pylist([dict(zip(SCHEMA.names, r)) for r in rows], schema=SCHEMA)


def test_router_summary_from_its_snapshots_and_samples():
    start = {"requests": 5.0, "requests_ok": 5.0, "output_tokens": 36.0, "ttft_time_sum": 0.04, "ttft_time_count": 5.0,
             "itl_time_sum": 0.03, "itl_time_count": 31.0, "request_time_sum": 0.07, "request_time_count": 5.0}
    end = {"requests": 105.0, "requests_ok": 95.0, "output_tokens": 836.0, "ttft_time_sum": 10.04,
           "ttft_time_count": 105.0, "itl_time_sum": 1.43, "itl_time_count": 731.0, "request_time_sum": 0.07,
           "request_time_count": 5.0}
    rows = [(100, "router", k, v, "start") for k, v in start.items()]
    rows += [(200, "router", "inflight", 3.0, "dynamo_frontend_inflight_requests"),
             (300, "router", "inflight", 9.0, "dynamo_frontend_inflight_requests"),
             (300, "router", "queued", 4.0, "dynamo_frontend_queued_requests"),
             (250, "router", "cpu_percent", 80.0, None),  # the frontend process's own rows share the source
             (50, "router", "inflight", 50.0, None),  # before the start snapshot: not the run's
             (200, "engine:r0", "running", 6.0, None)]
    rows += [(1000, "router", k, v, "end") for k, v in end.items()]
    s = router_summary(_table(rows))
    assert s["router_metrics_complete"] is True
    assert s["router_requests"] == 100.0 and s["router_requests_ok"] == 90.0 and s["router_output_tokens"] == 800.0
    assert math.isclose(s["router_mean_ttft_ms"], 1000 * 10.0 / 100)
    assert math.isclose(s["router_mean_itl_ms"], 1000 * 1.4 / 700)
    assert math.isnan(s["router_mean_request_ms"])  # no request finished in the run: no mean
    assert s["router_inflight_max"] == 9.0 and s["router_inflight_mean"] == 6.0
    assert s["router_queued_max"] == 4.0 and s["router_queued_mean"] == 4.0
    assert not any(k.startswith("router_cpu") for k in s)
    assert router_summary(_table([(200, "router", "cpu_percent", 80.0, None)])) == {}  # no page sampled


@pytest.mark.slow  # a telemetry process reading two pages for half a second
def test_the_frontend_sampled_with_the_workers_as_source_router(tmp_path):
    # the harness's path: the telemetry process reads the worker's and the frontend's pages in the same rounds
    from metrics.telemetry.process import TelemetryProcess

    with FakeEngine() as worker, FakeEngine() as front:
        worker.route("GET", "/metrics", (200, WORKER_PAGE))
        front.route("GET", "/metrics", (200, _frontend(4, 36, (0.038717421, 5), (0.027237435, 31))))
        tel = TelemetryProcess({"interval_s": 0.05, "nvml": {"enabled": False}}, {}).start()
        try:
            t0 = tel.sample_now()
            assert tel.add_engine(worker.url + "/metrics", WORKER_METRICS, replica="r0") is True
            assert tel.add_engine(front.url + "/metrics", FRONTEND_METRICS, source="router") is True
            tel.engine_snapshot("start")
            # 20 more streamed requests, 160 more tokens: 2 s of TTFT over 20, 1.4 s of ITL over 140 gaps
            front.route("GET", "/metrics", (200, _frontend(24, 196, (2.038717421, 25), (1.427237435, 171))))
            time.sleep(0.3)
            tel.engine_snapshot("end")
            tel.remove_engine("r0")  # a worker removed: the frontend is still sampled
            n = len(front.calls)
            time.sleep(0.2)
            assert len(front.calls) > n
            tel.remove_engine()
            t1 = tel.sample_now()
            path = tel.write_window(tmp_path / "telemetry.parquet", t0, t1)
        finally:
            tel.stop()
    table = pq.read_table(path)
    rows = table.to_pylist()

    def times(src, name, detail):
        return {r["time_ns"] for r in rows if r["source"] == src and r["name"] == name and r["detail"] == detail}

    assert times("router", "requests", "start") == times("engine:r0", "running", "start")  # one snapshot time
    rounds = (times("router", "inflight", "dynamo_frontend_inflight_requests")
              & times("engine:r0", "running", "vllm:num_requests_running"))
    assert len(rounds) >= 3  # both pages read in the same sample rounds
    s = router_summary(table)
    assert s["router_requests"] == 20.0 and s["router_requests_ok"] == 20.0 and s["router_output_tokens"] == 160.0
    assert math.isclose(s["router_mean_ttft_ms"], 100.0) and math.isclose(s["router_mean_itl_ms"], 10.0)
    assert s["router_inflight_mean"] == 7.0 and s["router_queued_max"] == 2.0
    assert engine_summary(table)["engine_replicas"] == 1  # the router is not counted as a worker
