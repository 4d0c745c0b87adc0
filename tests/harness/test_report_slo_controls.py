"""The report's price control prices each run as it was priced (harness/report/slo_controls.py): the
page carries each run's device-seconds, and a price per device-hour over them is the bill
``metrics.summary.summarize`` gives the same run under a rental profile at that price
(``metrics.cost.priced_cost``), so a config of two replicas pays twice what one of one pays and the
cost ranking is the one a real bill would give, not the one a shared price per hour would."""

from __future__ import annotations

import json
import re

import numpy as np
import pyarrow.parquet as pq
import pytest

from harness.report import slo_controls
from harness.report import slo_histogram as sh
from harness.report.data import load
from harness.results_io import read_json
from metrics.cost import fleet_cost, per_million, priced_cost
from metrics.slo import SLO
from metrics.summary import summarize
from tests.synthetic_experiment import write_experiment

PRICE = 4.0  # per device-hour
SLO_SET = SLO(200.0, 25.0, None)
# "two" runs on two replicas and serves more good tokens than "one", but not twice as many
CONFIGS = {"one": {"ttft_ms": 60.0, "tpot_ms": 11.0, "capacity": 14.0, "power_w": 400.0},
           "two": {"ttft_ms": 40.0, "tpot_ms": 8.0, "capacity": 40.0, "power_w": 400.0, "replicas": 2}}


@pytest.fixture(scope="module")
def experiment(tmp_path_factory):
    exp = write_experiment(tmp_path_factory.mktemp("slo-price") / "exp", configs=CONFIGS, rates=(10.0,), blocks=1,
                           requests=900)
    d = load(exp)
    html = slo_controls.section(d, {s: "#000000" for s in d.series})
    payload = json.loads(re.search(r"id='slo-controls-data'>(.*?)</script>", html, re.S).group(1))
    return exp, d, payload


def _exact_cost(run_dir, replicas: int) -> float:
    """The run's cost per M good tokens as metrics.summary bills it under a rental profile at PRICE."""
    s = read_json(run_dir / "summary.json")
    cost = {"model": "rental", "num_gpus": 1, "hourly_per_gpu": PRICE, "num_hosts": 0}
    m = summarize(pq.read_table(run_dir / "requests.parquet"), SLO_SET, s["window_start_ns"], s["window_end_ns"],
                  cost_cfg=cost, cost_replicas=replicas)
    return m["cost_per_mtok_good"]


def test_each_series_is_priced_per_replica_and_the_ranking_is_the_bills(experiment):
    exp, d, payload = experiment
    runs = {r["key"]: r for r in payload["runs"]}
    assert len(runs) == 2
    page, shared, exact = {}, {}, {}
    for run in d.ours:
        r = runs[d.run_key(run)]
        b = sh.bounds(r["hist"], SLO_SET.ttft_ms, SLO_SET.tpot_ms, SLO_SET.e2el_ms)
        # what the page computes at PRICE (its script: price x device_s / 3600; a page without
        # device_s billed every run its window, as if on one device)
        page[run.config] = per_million(priced_cost(PRICE, r.get("device_s", r["window_s"])), b.tokens)
        shared[run.config] = per_million(PRICE * r["window_s"] / 3600, b.tokens)
        exact[run.config] = _exact_cost(run.dir, CONFIGS[run.config].get("replicas", 1))
        # the page's claim: the exact cost lies between the bill over its good tokens plus and minus
        # the error it states on them
        e, bill = b.tokens_error * r["hist"]["tokens"], priced_cost(PRICE, r.get("device_s", r["window_s"]))
        assert per_million(bill, b.tokens + e) - 1e-9 <= exact[run.config] <= per_million(bill, b.tokens - e) + 1e-9
    assert page["two"] == pytest.approx(exact["two"], rel=0.01) and page["one"] == pytest.approx(exact["one"], rel=0.01)
    # the bills rank "one" cheaper; one shared price per hour would have ranked "two" cheaper
    assert exact["one"] < exact["two"] and page["one"] < page["two"]
    assert shared["two"] < shared["one"]


def test_device_seconds_are_the_replicas_and_gpus_billed(experiment, tmp_path):
    exp, d, payload = experiment
    for run in d.ours:
        replicas = CONFIGS[run.config].get("replicas", 1)
        window = run.summary["window_s"]
        assert run.summary["cost_device_seconds"] == pytest.approx(replicas * window)
        assert slo_controls.device_seconds(run) == pytest.approx(replicas * window)
        # the bill at one price per device-hour is what a rental profile at that price alone bills
        one_gpu = {"model": "rental", "num_gpus": 1, "hourly_per_gpu": PRICE, "num_hosts": 0}
        assert priced_cost(PRICE, slo_controls.device_seconds(run)) == pytest.approx(
            fleet_cost(one_gpu, replicas * window, window)["cost_total"])
    # a summary written before cost_device_seconds: the replica-seconds x the profile's GPUs a replica
    run = next(r for r in d.ours if r.config == "two")
    old = {k: v for k, v in run.summary.items() if k not in ("cost_device_seconds", "cost_devices")}
    (tmp_path / "config.yaml").write_text("cost:\n  model: rental\n  num_gpus: 4\n")
    then = type(run)(tmp_path, old, run.label, run.series, config=run.config)
    assert slo_controls.device_seconds(then) == pytest.approx(4 * 2 * run.summary["window_s"])
    (tmp_path / "config.yaml").write_text("cost:\n  model: owned\n")  # no GPUs named: one a replica
    assert slo_controls.device_seconds(then) == pytest.approx(2 * run.summary["window_s"])
    assert float(np.float64(priced_cost(2.0, 7200.0))) == 4.0
