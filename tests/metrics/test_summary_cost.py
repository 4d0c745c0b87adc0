"""The cost and energy figures of a run summary, recomputed from requests.parquet, the
window and the cost profile: failures, 429 rejections, warm-up rows, an idle gap, sessions."""

import json
import math

import pyarrow.parquet as pq
import pytest
import yaml

from harness import results_io
from metrics.slo import SLO
from metrics.summary import summarize
from tests.recompute import recompute
from tests.telemetry_fixtures import S, energy_at, gpu_rows, nan, request_table, telemetry_table

SLO_CFG = {"ttft_ms": 2000, "tpot_ms": 200, "e2el_ms": None, "percentile": 99}
RENTAL = {"model": "rental", "currency": "USD", "num_gpus": 1, "hourly_per_gpu": 1.5, "num_hosts": 1,
          "hourly_per_host": 0.2, "extra_hourly": {"network": 0.1}}  # 1.8 per hour


def mixed_run():
    rows = [{"sent": 30.0, "done": 31.0, "output_tokens": 50, "warmup": True},
            {"sent": 31.0, "done": 32.0, "output_tokens": 50, "warmup": True}]
    rows += [{"sent": 35.0 + i, "done": 36.0 + i, "output_tokens": 20} for i in range(6)]           # good
    rows += [{"sent": 36.0 + i, "done": 40.0 + i, "ttft": 3.0, "output_tokens": 20} for i in range(2)]  # TTFT miss
    rows += [{"sent": 38.0, "done": 39.0, "status": "timeout", "output_tokens": 5, "partial": True,
              "chunks": [38.5, 38.6, 38.7, 38.8, 38.9]}]                                             # failed
    rows += [{"sent": 40.0 + 0.1 * i, "done": 40.01 + 0.1 * i, "status": "http_error", "http": 429,
              "output_tokens": 0} for i in range(3)]                                                 # rejected
    # idle gap: nothing from t=42 to t=100, then two more good ones
    rows += [{"sent": 100.0 + i, "done": 101.0 + i, "output_tokens": 20} for i in range(2)]
    return request_table(rows)


def write_run(run_dir, table, window, cost):
    run_dir.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, run_dir / "requests.parquet")
    (run_dir / "run.json").write_text(json.dumps({"window_start_ns": window[0], "window_end_ns": window[1]}))
    (run_dir / "config.yaml").write_text(yaml.safe_dump({"cost": cost, "slo": SLO_CFG}))


def test_cost_recomputes_from_records_with_failures_rejections_warmup_and_idle_gap(tmp_path):
    window = (0, 120 * S)  # engine started at 0, released at 120 s: warm-up and the idle gap inside
    write_run(tmp_path, mixed_run(), window, RENTAL)
    s = summarize(pq.read_table(tmp_path / "requests.parquet"), SLO.from_config(SLO_CFG), *window, cost_cfg=RENTAL)
    # by hand: 8 good x 20 tokens; all measured tokens = 10 x 20 + 5; the window's adds 2 x 50 warm-up
    assert s["window_s"] == pytest.approx(120.0)
    assert s["cost_total"] == pytest.approx(1.8 * 120 / 3600)                       # 0.06
    assert s["good_output_tokens"] == 160 and s["good_requests"] == 8
    assert s["all_output_tokens"] == 205 and s["window_output_tokens"] == 305
    assert s["cost_per_mtok_good"] == pytest.approx(1e6 * 0.06 / 160)              # 375
    assert s["cost_per_mtok_all"] == pytest.approx(1e6 * 0.06 / 205)
    assert s["cost_per_good_request"] == pytest.approx(0.06 / 8)
    assert s["num_requests"] == 14 and s["num_warmup"] == 2
    assert s["completion_rate"] == pytest.approx(10 / 14)
    assert s["rejection_rate"] == pytest.approx(3 / 14)
    assert s["error_rate"] == pytest.approx(4 / 14)
    assert s["cost_lines"] == pytest.approx({"rental_gpus": 0.05, "rental_hosts": 0.2 / 30, "extra.network": 0.1 / 30})
    # the throughput duration excludes the window's head; the window does not
    assert s["duration_s"] < s["window_s"]
    # and the same from the files alone, without metrics/
    r = recompute(tmp_path)
    for k in ("window_s", "cost_total", "good_output_tokens", "all_output_tokens", "window_output_tokens",
              "cost_per_mtok_good",
              "cost_per_mtok_all", "completion_rate", "rejection_rate", "good_requests"):
        assert s[k] == pytest.approx(r[k]), k


def test_energy_block_unavailable_without_telemetry_and_cost_still_reported():
    s = summarize(mixed_run(), SLO.from_config(SLO_CFG), 0, 120 * S, cost_cfg=RENTAL)
    assert s["energy_available"] is False and nan(s["energy_j"])
    assert s["energy_unavailable_reason"]
    assert s["cost_complete"] is True and s["cost_total"] > 0


def test_nothing_good_reports_cost_and_infinite_per_token_cost():
    rows = [{"sent": float(i), "status": "http_error", "http": 429, "output_tokens": 0} for i in range(4)]
    s = summarize(request_table(rows), SLO.from_config(SLO_CFG), 0, 60 * S, cost_cfg=RENTAL)
    assert s["cost_total"] == pytest.approx(0.03)
    assert s["cost_per_mtok_good"] == math.inf and s["cost_per_good_request"] == math.inf
    assert s["cost_per_mtok_all"] == math.inf
    assert "no good output tokens" in s["cost_per_mtok_good_reason"]
    assert s["rejection_rate"] == 1.0 and s["completion_rate"] == 0.0
    # summary.json holds it as "inf", not a crash or a null
    assert results_io._clean(s)["cost_per_mtok_good"] == "inf"


def test_sessions_completed_only_when_every_turn_is_ok():
    rows = []
    for sess, statuses in (("a", ["ok", "ok"]), ("b", ["ok", "timeout"]), ("c", ["ok", "ok", "ok"])):
        for turn, st in enumerate(statuses):
            rows.append({"sent": float(len(rows)), "session": sess, "turn": turn, "status": st, "output_tokens": 10,
                         "partial": True})
    rows.append({"sent": 50.0, "session": "w", "warmup": True})  # a warm-up session is not counted
    s = summarize(request_table(rows), SLO.from_config(SLO_CFG), 0, 3600 * S, cost_cfg=RENTAL)
    assert s["num_sessions"] == 3 and s["completed_sessions"] == 2
    assert s["session_completion_rate"] == pytest.approx(2 / 3)
    assert s["cost_per_completed_session"] == pytest.approx(1.8 / 2)
    plain = summarize(mixed_run(), SLO.from_config(SLO_CFG), 0, 120 * S, cost_cfg=RENTAL)
    assert plain["num_sessions"] == 0 and "cost_per_completed_session" not in plain


def test_owned_cost_uses_measured_energy_from_telemetry():
    owned = {"model": "owned", "hardware_price": 87_660.0, "depreciation_years": 1, "electricity_per_kwh": 0.2,
             "pue": 1.25, "ops_hourly": 0.0}
    tel = telemetry_table(gpu_rows("gpu0", t_end=130.0, dt=1.0, idle_until=2.0))
    s = summarize(mixed_run(), SLO.from_config(SLO_CFG), 0, 120 * S, cost_cfg=owned, telemetry=tel)
    e = energy_at(120.0)
    assert s["energy_available"] and s["energy_j"] == pytest.approx(e)
    assert s["cost_lines"]["energy"] == pytest.approx(e / 3.6e6 * 0.2 * 1.25)
    assert s["cost_total"] == pytest.approx(120 / 3600 * 10.0 + e / 3.6e6 * 0.2 * 1.25)
    assert s["energy_per_good_token_j"] == pytest.approx(e / 160)
    assert s["tokens_per_joule"] == pytest.approx(205 / e)
    # without telemetry the same profile is marked incomplete, never priced at zero energy
    s2 = summarize(mixed_run(), SLO.from_config(SLO_CFG), 0, 120 * S, cost_cfg=owned)
    assert s2["cost_complete"] is False and nan(s2["cost_lines"]["energy"])


def test_energy_measured_by_the_caller_prices_the_window():
    owned = {"model": "owned", "hardware_price": 87_660.0, "depreciation_years": 1, "electricity_per_kwh": 0.2,
             "pue": 1.25, "ops_hourly": 0.0}
    s = summarize(mixed_run(), SLO.from_config(SLO_CFG), 0, 120 * S, cost_cfg=owned, energy_j=36_000.0)
    assert s["energy_available"] is True and s["energy_source"] == "caller" and s["energy_j"] == 36_000.0
    # 0.01 kWh x 0.2 x PUE 1.25; 160 good and 205 measured output tokens
    assert s["cost_lines"]["energy"] == pytest.approx(0.0025) and s["cost_complete"] is True
    assert s["energy_per_good_token_j"] == pytest.approx(225.0) and s["tokens_per_joule"] == pytest.approx(205 / 36_000)
    # a caller that could not measure it: unavailable, the energy line unpriced
    s = summarize(mixed_run(), SLO.from_config(SLO_CFG), 0, 120 * S, cost_cfg=owned, energy_j=math.nan)
    assert s["energy_available"] is False and nan(s["cost_lines"]["energy"])
    # telemetry, where there is some, is the measurement
    tel = telemetry_table(gpu_rows("gpu0", t_end=130.0, dt=1.0, idle_until=2.0))
    s = summarize(mixed_run(), SLO.from_config(SLO_CFG), 0, 120 * S, telemetry=tel, energy_j=36_000.0)
    assert s["energy_j"] == pytest.approx(energy_at(120.0)) and s["energy_source"] != "caller"


def test_the_window_runs_from_its_start_to_its_end():
    s = summarize(mixed_run(), SLO.from_config(SLO_CFG), 20 * S, 140 * S, cost_cfg=RENTAL)
    assert (s["window_start_ns"], s["window_end_ns"], s["window_s"]) == (20 * S, 140 * S, 120.0)
    assert s["cost_total"] == pytest.approx(1.8 * 120 / 3600)


def test_figures_reach_mlflow(tmp_path, mlflow_uri):
    pytest.importorskip("mlflow")
    from harness.mlflow_log import MlflowLogger

    s = summarize(mixed_run(), SLO.from_config(SLO_CFG), 0, 120 * S, cost_cfg=RENTAL)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    log = MlflowLogger(mlflow_uri, "cost-test")
    rid = log.log_child("p", {"cost": RENTAL}, s, run_dir)
    run = log.client.get_run(rid)
    m, tags = run.data.metrics, run.data.tags
    assert m["cost_per_mtok_good"] == pytest.approx(375.0)
    assert m["cost_total"] == pytest.approx(0.06)
    assert m["rejection_rate"] == pytest.approx(3 / 14)
    assert m["energy_available"] == 0.0
    assert "no power or energy" in tags["summary.energy_unavailable_reason"]


def test_names_mlflow_refuses_are_made_acceptable(mlflow_uri):
    # an ablation's arms are "+prefix_caching", "+batch4096": one '+' in a metric name made
    # MLflow refuse the parent's whole batch of aggregates (seen on a real ablation)
    pytest.importorskip("mlflow")
    from harness.mlflow_log import MlflowLogger

    log = MlflowLogger(mlflow_uri, "names", strict=True)
    log.start_parent("exp", {"protocol": {"optimisations": {"+batch4096": ["x=1"]}}})
    log.log_parent_metrics({"+batch4096.p0.output_throughput.value": 2.0, "all.p0.output_throughput.value": 3.0})
    run = log.client.get_run(log.parent_id)
    assert run.data.metrics == {"_batch4096.p0.output_throughput.value": 2.0, "all.p0.output_throughput.value": 3.0}
    assert "protocol.optimisations._batch4096" in run.data.params and log.failed is None
