"""The plan's validation against a real replay's run folder: the measured side by the same
definitions over the trace's span, replica-seconds from autoscale.json, the error table."""

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from metrics.slo import SLO
from protocols.plan.traffic import Traffic
from protocols.plan.validation import measured, validate

NS = 1_000_000_000


def _run(tmp_path, autoscale=True):
    t0 = 50 * NS
    sched = [t0 + int(s * NS) for s in (0, 10, 20, 30, 100)]
    pq.write_table(pa.table({"scheduled_ns": sched, "ttft_s": [0.1, 0.2, 2.0, 0.1, None],
                             "tpot_s": [0.01, 0.01, 0.01, 0.5, None], "output_tokens": [11, 11, 11, 11, 0],
                             "status": ["ok", "ok", "ok", "ok", "timeout"], "warmup": [False] * 5}),
                   tmp_path / "requests.parquet")
    if autoscale:
        # 1 serving from the start; a second requested at 20 s, serving from 50 s, leaving at 80 s, stopped at 90 s
        (tmp_path / "autoscale.json").write_text(json.dumps({
            "load_start_ns": t0, "serving": [{"t_s": -30.0, "replicas": 1}, {"t_s": 50.0, "replicas": 2},
                                             {"t_s": 80.0, "replicas": 1}],
            "decisions": [{"t_s": 20.0, "from": 1, "to": 2}, {"t_s": 80.0, "from": 2, "to": 1}],
            "starts": [{"requested_s": 20.0, "added_s": 50.0}],
            "stops": [{"requested_s": 80.0, "removed_s": 80.0, "drained_s": 85.0, "stopped_s": 90.0}]}))
    return tmp_path


def test_measured_side_by_the_plan_s_definitions(tmp_path):
    m = measured(_run(tmp_path), SLO(ttft_ms=1000, tpot_ms=100))
    # span 100 s; good: the first two (the third's TTFT, the fourth's TPOT fail; the fifth timed out)
    assert m["requests"] == 5 and m["good"] == 2
    assert m["slo_attainment"] == pytest.approx(0.4) and m["goodput_rps"] == pytest.approx(0.02)
    assert m["p50_ttft_ms"] == pytest.approx(150.0)
    # serving: 1 on [0, 50), 2 on [50, 80), 1 on [80, 100] = 50 + 60 + 20
    assert m["serving_replica_seconds"] == pytest.approx(130.0)
    # paid adds the start [20, 50) and the drain [80, 90)
    assert m["starting_replica_seconds"] == pytest.approx(30.0)
    assert m["draining_replica_seconds"] == pytest.approx(10.0)
    assert m["paid_replica_seconds"] == pytest.approx(130.0 + 30 + 10)
    assert m["replicas_max"] == 2 and m["scale_ups"] == 1


def test_validate_gives_errors_and_says_what_differs(tmp_path):
    run = _run(tmp_path)
    plan = {"initial_replicas": 1, "configs": {"c": {
        "metrics": {"slo_attainment": {"value": 0.5}, "goodput_rps": {"value": 0.025},
                    "p50_ttft_ms": {"value": 150.0}, "paid_replica_seconds": {"value": 170.0},
                    "starting_replica_seconds": {"value": 24.0}},
        "scale_ups": 1, "outside_measurements": False, "outside_measurements_share": 0.0}}}
    tr = Traffic(np.array([0.0, 10, 20, 30]), np.ones(4), np.ones(4), 30.0, "t")
    v = validate(run, plan, SLO(ttft_ms=1000, tpot_ms=100), tr)
    rows = {r["metric"]: r for r in v["rows"]}
    assert rows["slo_attainment"]["error"] == pytest.approx(0.25) and rows["slo_attainment"]["difference_pp"] == \
        pytest.approx(10.0)
    assert rows["paid_replica_seconds"]["error"] == pytest.approx(0.0)
    assert rows["starting_replica_seconds"]["error"] == pytest.approx((24.0 - 30.0) / 30.0)
    assert any("request counts differ" in n for n in v["notes"])


def test_a_run_without_autoscale_json_says_so(tmp_path):
    m = measured(_run(tmp_path, autoscale=False), SLO(ttft_ms=1000))
    assert "no autoscale.json" in m["replicas_note"]


def test_a_failed_scale_up_is_paid_until_it_failed_not_to_the_window_s_end(tmp_path):
    run = _run(tmp_path)
    a = json.loads((run / "autoscale.json").read_text())
    # a second scale-up asked for at 60 s failed at 72 s (its retry never came): 12 s paid
    a["starts"].append({"replica": "r2", "requested_s": 60.0, "failed_s": 72.0, "error": "exited with code 1"})
    (run / "autoscale.json").write_text(json.dumps(a))
    m = measured(run, SLO(ttft_ms=1000, tpot_ms=100))
    assert m["starting_replica_seconds"] == pytest.approx(30.0 + 12.0)
    assert m["paid_replica_seconds"] == pytest.approx(130.0 + 42 + 10)
    assert m["replicas_max"] == 3  # 60 .. 72 s: two serving and one starting


def test_an_older_record_s_failed_start_without_its_time_counts_nothing_and_says_so(tmp_path):
    run = _run(tmp_path)
    a = json.loads((run / "autoscale.json").read_text())
    a["starts"].append({"replica": "r2", "requested_s": 60.0, "error": "exited with code 1"})
    (run / "autoscale.json").write_text(json.dumps(a))
    m = measured(run, SLO(ttft_ms=1000, tpot_ms=100))
    assert m["starting_replica_seconds"] == pytest.approx(30.0)
    assert "the start of r2 failed at an unrecorded time: counted 0 s" in m["replicas_note"]
