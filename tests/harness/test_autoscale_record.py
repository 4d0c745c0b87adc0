"""harness/autoscale_record.py: the bill of an autoscaled point (starting, serving, draining and paid
replica-seconds) in autoscale.json and the summary's keys, from a scaler's record, worked by
hand; the cost bills what was paid."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from omegaconf import OmegaConf

from conf.schema import Autoscale
from engines.autoscale_policy import ScalingPolicy
from engines.live_scaler import LiveScaler
from harness import autoscale_record
from metrics.cost import fleet_cost

S = 1_000_000_000
T0 = 1000 * S  # the deployment's start, on perf_counter_ns's clock


def scaler() -> LiveScaler:
    """A finished ``LiveScaler``: two replicas started (40 s cold starts), each serving 100 s,
    each draining 5 s, and one start that failed after 12 s; one failed read."""
    sc = LiveScaler(SimpleNamespace(replicas=["r0"], starting=[]),
                    ScalingPolicy(Autoscale(signal="queue", target=2.0, interval_s=5.0, max_replicas=4)))
    sc.origin_ns = T0
    sc.starts = [{"replica": "r1", "requested_ns": T0 + 10 * S, "added_ns": T0 + 50 * S},
                 {"replica": "r2", "requested_ns": T0 + 20 * S, "added_ns": T0 + 60 * S},
                 {"replica": "r3", "requested_ns": T0 + 200 * S, "failed_ns": T0 + 212 * S, "error": "exited",
                  "retry_in_s": 10.0}]
    sc.stops = [{"replica": "r1", "requested_ns": T0 + 150 * S, "removed_ns": T0 + 150 * S,
                 "stopped_ns": T0 + 155 * S},
                {"replica": "r2", "requested_ns": T0 + 160 * S, "removed_ns": T0 + 160 * S,
                 "stopped_ns": T0 + 165 * S}]
    sc.failed_reads = [{"t_ns": T0 + 100 * S, "signal": "queue", "error": "replica r0: no running count",
                        "retry_in_s": 10.0}]
    return sc


def session_and_point(tmp_path):
    cfg = OmegaConf.create({"deployment": {"autoscale": {"enabled": True, "drain_timeout_s": 60.0}}})
    engine = SimpleNamespace(serving_log=[(T0, 1), (T0 + 50 * S, 2), (T0 + 60 * S, 3), (T0 + 150 * S, 2),
                                          (T0 + 160 * S, 1)])
    s = SimpleNamespace(cfg=cfg, engine=engine, engine_prov=None)
    p = SimpleNamespace(run_dir=tmp_path, window_open_ns=T0, window_close_ns=T0 + 300 * S, summary={},
                        stats={"start_ns": T0 + 5 * S, "end_ns": T0 + 295 * S}, scaler=scaler())
    return s, p


def test_the_point_bills_starting_serving_and_draining(tmp_path):
    s, p = session_and_point(tmp_path)
    f = autoscale_record.figures(s, p)
    # starting: 40 + 40 + 12 (the failed start, until it failed); serving 300 + 100 + 100; draining 5 + 5
    assert f["starting_replica_seconds"] == pytest.approx(92.0)
    assert f["serving_replica_seconds"] == pytest.approx(500.0)
    assert f["draining_replica_seconds"] == pytest.approx(10.0)
    assert f["paid_replica_seconds"] == pytest.approx(602.0)
    # the summary's cost is billed on what was paid (harness.point passes paid_replica_seconds)
    cost = fleet_cost({"model": "rental", "hourly_per_host": 36.0}, f["paid_replica_seconds"], 300.0)
    assert cost["cost_total"] == pytest.approx(602 * 36 / 3600) and cost["cost_replica_seconds"] == 602.0


def test_autoscale_json_names_the_bill_and_the_failed_reads(tmp_path):
    s, p = session_and_point(tmp_path)
    autoscale_record.record(s, p)
    a = json.loads((tmp_path / "autoscale.json").read_text())
    assert (a["starting_replica_seconds"], a["serving_replica_seconds"], a["draining_replica_seconds"],
            a["paid_replica_seconds"]) == pytest.approx((92.0, 500.0, 10.0, 602.0))
    assert "replica_seconds" not in a and set(a["bill_what"]) == {
        "starting_replica_seconds", "serving_replica_seconds", "draining_replica_seconds", "paid_replica_seconds"}
    # over the load alone (5 s .. 295 s): serving 290 + 100 + 100, the same starts and drains
    assert a["load"]["paid_replica_seconds"] == pytest.approx(92.0 + 490 + 10)
    assert a["failed_reads"] == [{"t_s": 95.0, "signal": "queue", "error": "replica r0: no running count",
                                  "retry_in_s": 10.0}]
    assert "x 2^k" in a["backoff"] and "40 s" in a["backoff"]  # 8 intervals of 5 s at most
    # the summary's replica keys are these figures, added by harness.point.summarise alone
    f = autoscale_record.figures(s, p)
    assert p.summary == {} and f["paid_replica_seconds"] == pytest.approx(602.0) and f["replicas_max"] == 3
