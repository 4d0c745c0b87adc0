"""``tokenfactory track`` on a real MLflow store (sqlite in a temporary folder) holding tracked
experiments as the harness logs them: a parent run tagged ``tokenfactory.track`` with
``runs.parquet`` and ``experiment.json``, a child run with the engine's resolved version."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from harness.commands.track import main
from protocols.track.verdicts import CANNOT_JUDGE

FIXED = {"model": "tiny", "model_revision": None, "tokenizer_sha256": "abc", "weight_dtype": "bfloat16",
         "kv_cache_dtype": "auto", "quantization": "none", "sampling": {"api": "completions"},
         "workload": {"name": "synthetic"}, "slo": {"ttft_ms": 500.0}}


def log_experiment(uri, tmp_path, name, version, ttft_ms, tput, track="nightly", n=4, fixed=None, seed=0,
                   load_points=(4,), track_version=None, cost=1.0):
    """One tracked experiment: ``n`` repeats of one load point, TTFT p99 around ``ttft_ms``,
    throughput around ``tput`` and the window's cost around ``cost`` for 1e6 good tokens (a 1 %
    spread between repeats, drawn from ``seed``); each run's ``cost_per_mtok_good`` as the
    summary writes it."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(name) or None
    eid = exp.experiment_id if exp else client.create_experiment(name, artifact_location=(tmp_path / "art").as_uri())
    rng = np.random.default_rng(seed)
    rows = [{"config": "", "label": "rate=4", "repeat": r, "role": "point", "offered_load": 4.0,
             "p99_ttft_ms": ttft_ms * (1 + 0.01 * rng.standard_normal()),
             "output_throughput": tput * (1 + 0.01 * rng.standard_normal()),
             "cost_total": cost * (1 + 0.01 * rng.standard_normal()),
             "good_output_tokens": 1e6 * (1 + 0.01 * rng.standard_normal())} for r in range(n)]
    for row in rows:
        row["cost_per_mtok_good"] = 1e6 * row["cost_total"] / row["good_output_tokens"]
    folder = tmp_path / "src" / name / version
    folder.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows), folder / "runs.parquet")
    (folder / "experiment.json").write_text(json.dumps({"fixed_conditions": {"": fixed or FIXED},
                                                        "load_points": list(load_points)}))
    tags = {"tokenfactory.kind": "sweep", "tokenfactory.track": track}
    if track_version:
        tags["tokenfactory.track_version"] = track_version
    parent = client.create_run(eid, run_name=f"{name}-{version}", tags=tags)
    client.log_param(parent.info.run_id, "hardware.name", "cpu-2core")
    for f in ("runs.parquet", "experiment.json"):
        client.log_artifact(parent.info.run_id, str(folder / f))
    child = client.create_run(eid, run_name="point", tags={"mlflow.parentRunId": parent.info.run_id,
                                                            "tokenfactory.kind": "load_point"})
    client.log_param(child.info.run_id, "engine.name", "vllm")
    client.log_param(child.info.run_id, "engine_resolved.version", version)
    client.set_terminated(child.info.run_id)
    client.set_terminated(parent.info.run_id)


@pytest.fixture(scope="module")
def _five_versions(tmp_path_factory, _mlflow_template) -> Path:
    """The store of five versions, logged once for the file: steady, then a 30 % slower TTFT at
    the fourth, then back (logging them costs seconds; the tests only read the artifacts)."""
    root = tmp_path_factory.mktemp("track-store")
    db = root / "mlflow.db"
    shutil.copy(_mlflow_template, db)  # the session's empty store: creating MLflow's tables costs seconds
    for i, (ttft, tput) in enumerate([(100, 50), (101, 50.2), (99.5, 49.8), (130, 50), (100.5, 50.1)]):
        log_experiment(f"sqlite:///{db}", root, "bench", f"0.{i}", ttft, tput, seed=i)
    return db


@pytest.fixture()
def store(tmp_path, _five_versions) -> str:
    """A copy of the five versions' store of this test's own (a test may delete a run from it)."""
    db = tmp_path / "mlflow.db"
    shutil.copy(_five_versions, db)
    return f"sqlite:///{db}"


def track(tmp_path, uri, *args):
    return main(["nightly", "--tracking-uri", uri, "--out", str(tmp_path / "out"), *args])


def test_the_gate_stops_on_the_slower_version_and_passes_the_others(tmp_path, store, capsys):
    from mlflow.tracking import MlflowClient

    # the newest (0.4) recovered: against the previous (0.3, slow) TTFT improved; the gate passes
    assert track(tmp_path, store, "--gate") == 0
    doc = json.loads((tmp_path / "out" / "track.json").read_text())
    found = {f["metric"]: f for f in doc["comparison"]["findings"]}
    assert found["p99_ttft_ms"]["outcome"] == "improved"
    assert found["output_throughput"]["outcome"] == "no significant change"
    # the cost verdict is judged on the ratio of totals it shows
    cost = found["cost_per_mtok_good"]
    assert cost["outcome"] == "no significant change"
    assert cost["relative"] == pytest.approx(cost["newest"] / cost["baseline"] - 1, rel=1e-9)
    # the history marks where the change came and went (experiment 4, then 5)
    changes = [(c["index"], c["metric"], c["outcome"]) for c in doc["history"]["changes"]]
    assert changes == [(3, "p99_ttft_ms", "regressed"), (4, "p99_ttft_ms", "improved")]
    assert [e["version"] for e in doc["history"]["experiments"]] == ["vllm 0.0", "vllm 0.1", "vllm 0.2", "vllm 0.3",
                                                                      "vllm 0.4"]
    page = (tmp_path / "out" / "track.html").read_text()
    assert "p99_ttft_ms over the track" in page and "regressed" in page
    # the gate on the slow version itself: against the previous, and against a window of three
    client = MlflowClient(store)
    newest = client.search_runs([client.get_experiment_by_name("bench").experiment_id],
                                "tags.`tokenfactory.kind` = 'sweep'", order_by=["attributes.start_time DESC"])[0]
    client.delete_run(newest.info.run_id)
    capsys.readouterr()
    for baseline in ("previous", "window:3"):
        assert track(tmp_path, store, "--gate", "--baseline", baseline) == 1
        err = capsys.readouterr().err
        assert "regressed: p99_ttft_ms at rate=4: +" in err and "beyond the ±2% margin" in err
        assert "vllm 0.3 (bench-0.3) against vllm 0.2 (bench-0.2)" in err or "against vllm 0.0 (bench-0.0)" in err
    # a named baseline, and no gate: exit 0 whatever the verdict
    assert track(tmp_path, store, "--baseline", "bench-0.0") == 0


def test_a_baseline_with_other_fixed_conditions_is_refused(tmp_path, mlflow_uri, capsys):
    uri = mlflow_uri
    log_experiment(uri, tmp_path, "bench", "0.0", 100, 50)
    log_experiment(uri, tmp_path, "bench", "0.1", 100, 50, fixed={**FIXED, "slo": {"ttft_ms": 200.0}}, seed=1)
    assert track(tmp_path, uri) == 2
    err = capsys.readouterr().err
    assert "differ in what the track holds fixed" in err and "slo:" in err and "--allow slo" in err
    assert track(tmp_path, uri, "--allow", "slo") == 0
    log_experiment(uri, tmp_path, "bench", "0.2", 100, 50, load_points=(8,), seed=2)
    assert track(tmp_path, uri) == 2 and "load_points" in capsys.readouterr().err


def test_names_and_versions(tmp_path, mlflow_uri, capsys):
    missing = f"sqlite:///{tmp_path}/missing.db"
    assert main(["nightly", "--tracking-uri", missing, "--out", str(tmp_path / "o")]) == 2
    assert "no MLflow store" in capsys.readouterr().err
    uri = mlflow_uri
    log_experiment(uri, tmp_path, "bench", "0.0", 100, 50, track="other")
    assert track(tmp_path, uri) == 2
    assert "no experiment in the MLflow store" in (e := capsys.readouterr().err) and "tracks there: other" in e
    log_experiment(uri, tmp_path, "bench2", "0.0", 100, 50, track_version="abc123")
    assert track(tmp_path, uri) == 0  # one experiment: a history, nothing to compare
    doc = json.loads((tmp_path / "out" / "track.json").read_text())
    assert doc["comparison"] is None and doc["history"]["experiments"][0]["version"] == "abc123"
    log_experiment(uri, tmp_path, "bench2", "0.1", 100, 50, seed=3)
    assert track(tmp_path, uri, "--baseline", "abc123") == 0
    assert track(tmp_path, uri, "--baseline", "nope") == 2 and "no earlier experiment" in capsys.readouterr().err
    assert track(tmp_path, uri, "--baseline", "window:0") == 2


def test_one_run_per_experiment_cannot_be_judged_and_the_gate_fails_closed(tmp_path, mlflow_uri, capsys):
    uri = mlflow_uri
    log_experiment(uri, tmp_path, "bench", "0.0", 100, 50, n=1)
    log_experiment(uri, tmp_path, "bench", "0.1", 200, 50, n=1, seed=1)
    assert track(tmp_path, uri, "--gate") == 3  # no interval: no verdict, and that is no pass
    assert "cannot judge: p99_ttft_ms at rate=4: no interval" in capsys.readouterr().err
    doc = json.loads((tmp_path / "out" / "track.json").read_text())
    assert {f["outcome"] for f in doc["comparison"]["findings"]} == {CANNOT_JUDGE}
    assert track(tmp_path, uri) == 0  # without the gate: a record, exit 0


def test_a_dearer_build_fails_the_gate_on_its_cost(tmp_path, mlflow_uri, capsys):
    uri = mlflow_uri
    log_experiment(uri, tmp_path, "bench", "0.0", 100, 50)
    log_experiment(uri, tmp_path, "bench", "0.1", 100, 50, seed=1, cost=1.3)
    assert track(tmp_path, uri, "--gate") == 1
    assert "regressed: cost_per_mtok_good at rate=4: +" in capsys.readouterr().err
    f = {f["metric"]: f for f in json.loads((tmp_path / "out" / "track.json").read_text())["comparison"]["findings"]}
    c = f["cost_per_mtok_good"]
    assert c["outcome"] == "regressed" and c["relative"] == pytest.approx(c["newest"] / c["baseline"] - 1, rel=1e-9)
    assert c["relative"] == pytest.approx(0.3, abs=0.03)


def test_bonferroni_widens_every_interval_of_the_gate(tmp_path, store):
    assert track(tmp_path, store) == 0  # bonferroni is the default
    doc = json.loads((tmp_path / "out" / "track.json").read_text())
    c = doc["comparison"]
    assert c["adjust"] == "bonferroni" and c["difference_confidence"] == pytest.approx(1 - 0.05 / len(c["metrics"]))
    plain = doc["comparison"]["findings"]
    assert track(tmp_path, store, "--adjust", "none") == 0
    each = json.loads((tmp_path / "out" / "track.json").read_text())["comparison"]["findings"]
    for a, b in zip(plain, each):  # the adjusted interval holds the unadjusted one
        if a["low"] is not None:
            assert a["low"] <= b["low"] and a["high"] >= b["high"]


def test_at_judges_an_earlier_experiment_as_the_history_stood(tmp_path, store, capsys):
    assert track(tmp_path, store, "--gate", "--at", "bench-0.3") == 1  # the slow one, against 0.2
    assert "vllm 0.3 (bench-0.3) against vllm 0.2 (bench-0.2)" in capsys.readouterr().err
    assert track(tmp_path, store, "--gate", "--at", "vllm 0.2") == 0
    assert track(tmp_path, store, "--at", "nope") == 2
