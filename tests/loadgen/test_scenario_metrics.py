"""Fast checks of what engine faults and scenarios compute: the dispatcher's abort, the
recovery and cold-start figures on hand-built records, the attribution of failed requests
to a fault, and a failed run's folder kept apart when it runs again."""

from __future__ import annotations

import asyncio
import json
import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from engines.watchdog import EngineFault, exit_fault
from harness import results_io
from harness.engine_faults import attribute
from loadgen.client import ClientConfig, StreamingClient
from loadgen.dispatch import Dispatcher, LoadSpec
from loadgen.records import RecordWriter, RequestRecord
from loadgen.workloads.item import WorkItem
from metrics.cold_start import cold_start_figures
from metrics.recovery import outage_cost, recovery_figures, windows_meeting_slo
from metrics.slo import SLO
from tests.fake_server import END, HEAD_CHUNKED, FakeServer, chunk, completion, event

S = 1_000_000_000


def _table(rows: list[dict]) -> pa.Table:
    recs = [RequestRecord(**r) for r in rows]
    from loadgen.records import COLUMNS

    return pa.table({c: [getattr(r, c) for r in recs] for c in COLUMNS})


# ------------------------------------------------------------------------------ the abort
def _slow_script(req, k):
    return [HEAD_CHUNKED, chunk(event(completion(f"s-{k}", "a"))), 30.0, END]  # stalls after its first token


@pytest.mark.parametrize("kind", ["constant", "concurrency"])
def test_abort_stops_sending_and_names_the_reason_in_flight(tmp_path, kind):
    spec = LoadSpec.of(kind=kind, rate=50.0 if kind == "constant" else None,
                       concurrency=4 if kind != "constant" else None, requests_to_send=200)
    writer = RecordWriter(tmp_path / "r.parquet")

    async def go(url):
        async with StreamingClient(ClientConfig(base_url=url, model="m")) as c:
            d = Dispatcher(c, writer)
            loop = asyncio.get_running_loop()
            loop.call_later(0.5, d.abort, "engine failure (stopped): on purpose")
            return await d.run((WorkItem(f"r{i}", "p", 1, 4) for i in range(200)), spec)

    with FakeServer(_slow_script) as srv:
        stats = asyncio.run(go(srv.url))
        sent_by_server = len(srv.requests)
    writer.close()
    t = pq.read_table(tmp_path / "r.parquet").to_pylist()
    assert stats["aborted"] == "engine failure (stopped): on purpose"
    assert len(t) == stats["sent"] == sent_by_server < 200  # nothing sent after the abort, every send recorded
    assert {r["status"] for r in t} == {"cancelled"}
    assert all(r["error"] == "engine failure (stopped): on purpose" for r in t)


# ------------------------------------------------------------------------------ recovery
def _req(i, sent_s, end_s, status="ok", ttft_s=0.05, tpot_s=0.01, warmup=False):
    ok = status == "ok"
    return {"request_id": f"r{i}", "sent_ns": int(sent_s * S), "done_ns": int(end_s * S), "end_ns": int(end_s * S),
            "status": status, "ttft_s": ttft_s if ok else None, "tpot_s": tpot_s if ok else None,
            "e2el_s": end_s - sent_s if ok else None, "warmup": warmup, "output_tokens": 4}


def test_recovery_figures_by_their_definition():
    # ok every 0.5 s until the kill at 10 s; two in flight then lost; the outage's sends refused
    # until the engine is back at 14 s; after it, one slow request (TTFT over the SLO), then good ones.
    rows = [_req(i, 5 + 0.5 * i, 5.2 + 0.5 * i) for i in range(10)]             # end 5.2 .. 9.7
    rows += [_req(10, 9.8, 10.01, "connection_error"), _req(11, 9.9, 10.02, "connection_error")]
    rows += [_req(12 + i, 10.5 + i, 10.5 + i, "connection_error") for i in range(4)]  # sent 10.5..13.5
    rows += [_req(16, 14.0, 14.3, ttft_s=3.0)]                                     # ok but misses the TTFT SLO
    rows += [_req(17 + i, 14.5 + 0.5 * i, 14.7 + 0.5 * i) for i in range(6)]       # end 14.7 .. 17.2
    rows += [_req(99, 1.0, 1.1, warmup=True)]
    slo = SLO(ttft_ms=2000, tpot_ms=200, percentile=99)
    m = recovery_figures(_table(rows), slo, kill_ns=10 * S, ready_ns=14 * S, window_n=3)
    assert m["requests_in_flight_at_kill"] == 2 and m["requests_lost"] == 2
    assert m["requests_sent_during_outage"] == 4 and m["requests_failed_during_outage"] == 4
    assert m["requests_failed_after_kill"] == 6
    assert m["engine_down_s"] == pytest.approx(4.0)
    assert m["slo_met_before_kill"] is True
    # windows of 3 after the kill, in end order: the first all-good one ends with r19 at 15.7 s
    assert m["slo_recovered"] is True and m["slo_recovery_s"] == pytest.approx(5.7)
    assert m["slo_recovery_after_ready_s"] == pytest.approx(1.7)
    # a floor below 1 lets one bad request in three pass: the window r16 r17 r18 ends at 15.2 s
    m2 = recovery_figures(_table(rows), slo, 10 * S, 14 * S, 3, min_attainment=0.6)
    assert m2["slo_recovery_s"] == pytest.approx(5.2)
    # never back: no window
    m3 = recovery_figures(_table(rows[:16]), slo, 10 * S, None, 3)
    assert m3["slo_recovered"] is False and math.isnan(m3["slo_recovery_s"]) and math.isnan(m3["engine_down_s"])


def test_windows_and_outage_cost():
    assert windows_meeting_slo([1, 1, 0, 1, 1, 1], 3, 1.0).tolist() == [False, False, False, True]
    assert windows_meeting_slo([1], 3, 1.0).size == 0
    c = outage_cost({"window_start_ns": 0, "window_end_ns": 100 * S, "window_s": 100.0, "cost_total": 2.0},
                    kill_ns=10 * S, ready_ns=30 * S)
    assert c == {"outage_in_window": True, "outage_share_of_window": 0.2, "outage_cost": pytest.approx(0.4)}
    assert outage_cost({"window_start_ns": 20 * S, "window_end_ns": 100 * S, "window_s": 80.0, "cost_total": 1.0},
                       10 * S, 30 * S)["outage_in_window"] is False


# ------------------------------------------------------------------------------ cold start
def test_cold_start_figures_by_their_definition():
    launch, healthy, t0 = 100 * S, 103 * S, 104 * S
    rows = [dict(_req(0, 104.0, 106.0, ttft_s=1.5), first_token_ns=int(105.5 * S))]
    rows += [dict(_req(i, 104 + i * 10, 104.5 + i * 10, ttft_s=0.1 * i), first_token_ns=int((104.05 + i * 10) * S))
             for i in range(1, 9)]                                   # sent at 114 .. 184 s
    m = cold_start_figures(_table(rows), launch, healthy, t0, first_window_s=60)
    assert m["engine_ready_s"] == 3.0 and m["engine_start_s"] == 4.0
    assert m["first_token_after_start_s"] == pytest.approx(5.5)
    assert m["first_request_ttft_ms"] == pytest.approx(1500) and m["first_request_status"] == "ok"
    assert m["first_window_n"] == 6 and m["rest_n"] == 3            # sent before 164 s: i = 0..5
    assert m["first_window_p50_ttft_ms"] == pytest.approx(350.0)     # median of 1.5, .1, .2, .3, .4, .5 s
    assert m["rest_p99_ttft_ms"] == pytest.approx(1000 * (0.7 + 0.98 * 0.1))


# ------------------------------------------------------------------------------ attribution and folders
def test_failed_requests_name_the_fault_that_ended_them(tmp_path):
    rows = [_req(0, 1, 2), _req(1, 2, 3.5, "connection_error"), _req(2, 3, 4, "timeout"), _req(3, 9, 9.5, "timeout")]
    rows[1]["error"] = "ConnectionResetError: reset"
    path = tmp_path / "requests.parquet"
    pq.write_table(_table(rows), path)
    f = exit_fault("vllm", -9, "last words", last_ok_ns=3 * S, now=int(3.2 * S))
    f.restarted, f.restart_healthy_ns = True, 8 * S
    assert attribute(path, [f]) == 2
    err = pq.read_table(path).column("error").to_pylist()
    assert err[0] is None and err[3] is None  # ok, and a failure after the engine was back
    assert err[1] == ("engine failure (killed): engine=vllm was killed by SIGKILL (exit -9); the kernel's OOM killer "
                      "sends SIGKILL too (see dmesg); the client saw: ConnectionResetError: reset")
    assert err[2].startswith("engine failure (killed)")
    assert attribute(path, [f]) == 0  # named once


def test_exit_classification():
    assert exit_fault("x", 1, "RuntimeError: CUDA error: out of memory", 0, 1).kind == "oom"
    assert exit_fault("x", -9, "", 0, 1).kind == "killed"
    assert exit_fault("x", 2, "bad flag", 0, 1).kind == "exited"
    f = EngineFault(kind="hung", message="m", last_ok_ns=0, detected_ns=1, log_tail="a\nb")
    assert f.error() == "m\nlast lines of the engine's log:\na\nb"


def test_a_failed_run_runs_again_with_its_attempt_kept(tmp_path):
    d = tmp_path / "run"
    d.mkdir()
    for name in ("requests.parquet", "run.json", "engine.log"):
        (d / name).write_text(name)
    results_io.write_json(d / "summary.json", {"point_failed": True})
    assert results_io.run_complete(d) and results_io.run_failed(d)
    kept = results_io.keep_failed_attempt(d)
    assert kept == d / "failed_attempts" / "1"
    assert json.loads((kept / "summary.failed.json").read_text()) == {"point_failed": True}
    assert (kept / "requests.parquet").exists() and (d / "engine.log").exists()  # the session's log stays
    assert not results_io.run_complete(d) and results_io.find_run_dirs(tmp_path) == []
