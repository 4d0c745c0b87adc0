"""Tracked experiments through the whole harness against the fake server: ``track=NAME`` tags
the parent run, the record reaches MLflow, and ``tokenfactory track`` reads them back."""

from __future__ import annotations

import json

import pytest

from harness.commands.track import main
from tests.fake_server import FakeServer
from tests.harness.test_openai_endpoint import _run, tokenizer_dir  # noqa: F401


@pytest.mark.slow
def test_two_tracked_experiments_and_their_comparison(tmp_path, mlflow_uri, tokenizer_dir):  # noqa: F811
    with FakeServer() as srv:
        for i, version in enumerate(("build-1", "build-2")):
            p = _run(tmp_path, mlflow_uri, srv.base_url, tokenizer_dir, f"output_dir={tmp_path}/e{i}",
                     "protocol.load_points=[20]", "protocol.repeats=2", "track=nightly",
                     f"track_version={version}", "report.enabled=false")
            assert p.returncode == 0, p.stdout + p.stderr
    out = tmp_path / "track"
    # two builds of the same server: the gate passes, every metric judged, nothing regressed
    assert main(["nightly", "--tracking-uri", mlflow_uri, "--out", str(out), "--gate"]) == 0
    doc = json.loads((out / "track.json").read_text())
    assert doc["comparison"]["regressions"] == [] and doc["comparison"]["unjudged"] == []
    assert [e["version"] for e in doc["history"]["experiments"]] == ["build-1", "build-2"]
    assert [e["name"] for e in doc["history"]["experiments"]] == ["e0", "e1"]
    assert doc["comparison"]["baseline"][0]["version"] == "build-1"
    assert {f["label"] for f in doc["comparison"]["findings"]} == {"constant rate=20"}
    # two repeats each: every default metric got an interval and an outcome
    assert all(f["outcome"] != "not enough data" for f in doc["comparison"]["findings"]
               if f["metric"] in ("output_throughput", "p99_ttft_ms"))
    # the cost verdict is exercised: judged on the ratio of totals it shows
    cost = {f["metric"]: f for f in doc["comparison"]["findings"]}["cost_per_mtok_good"]
    assert cost["outcome"] != "not enough data"
    assert cost["relative"] == pytest.approx(cost["newest"] / cost["baseline"] - 1, rel=1e-9)
    assert (out / "track.html").exists()
    # each experiment's answer (its experiment.json, through MLflow) in the history, and the gate's on the page
    answers = [e["answer"] for e in doc["history"]["experiments"]]
    assert all(a.startswith("every load point met the SLO") for a in answers), answers
    page = (out / "track.html").read_text()
    assert "answer (gate): the gate passes: build-2 (e1) against build-1 (e0)" in page
    assert doc["answer"]["decision"] == "pass"
