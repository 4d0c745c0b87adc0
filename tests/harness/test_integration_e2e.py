"""The real `tokenfactory run` against real `transformers serve` (tiny model, CPU).

Checks the data contracts, the MLflow runs, that the summary recomputes from
requests.parquet, that the report renders in a real headless browser, and that an
interrupted sweep resumes without redoing finished points.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from loadgen.records import COLUMNS
from metrics.slo import SLO
from metrics.summary import summarize

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("e2e")
    env = {**os.environ, "PYTHONPATH": str(REPO), "MLFLOW_TRACKING_URI": f"sqlite:///{tmp}/mlflow.db"}
    args = [sys.executable, "-m", "harness.cli", "run", f"output_dir={tmp}/out", "experiment=itest",
            "workload.input_tokens=32", "workload.output_tokens=16", "load.num_requests=12",
            "load.warmup_requests=2", "protocol.load_points=[2,6]", "slo.ttft_ms=5000", "slo.tpot_ms=500"]
    p = subprocess.run(args, capture_output=True, text=True, timeout=600, cwd=tmp, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    return tmp, p.stdout + p.stderr


def test_files_and_columns(sweep):
    tmp, out = sweep
    root = tmp / "out"
    assert "report:" in out and str(root) in out
    points = sorted(d for d in root.iterdir() if d.is_dir() and d.name != "figures")  # (the report's static figures)
    assert [d.name for d in points] == ["00-poisson-rate=2", "01-poisson-rate=6"]
    for d in points:
        for f in ("requests.parquet", "summary.json", "config.yaml", "provenance.json", "telemetry.parquet"):
            assert (d / f).exists(), d / f
        t = pq.read_table(d / "requests.parquet")
        assert set(COLUMNS) <= set(t.column_names)
        assert t.num_rows == 14
        assert t.column("warmup").to_pylist().count(True) == 2
        assert set(t.column("status").to_pylist()) == {"ok"}
        assert t.column("prompt_tokens").to_pylist() == [32] * 14   # exact prompt length, per the server
        assert t.column("output_tokens").to_pylist() == [16] * 14
        assert all(r and r.startswith("") for r in t.column("response_id").to_pylist())
        for chunks, toks, n in zip(t.column("chunk_ns").to_pylist(), t.column("chunk_tokens").to_pylist(),
                                   t.column("output_tokens").to_pylist()):
            assert sum(toks) == n and len(chunks) == len(toks)
            assert chunks == sorted(chunks)
        prov = json.loads((d / "provenance.json").read_text())
        assert prov["engine"]["engine"] == "transformers" and prov["engine"]["engine_version"]
        assert prov["engine"]["model_revision"].startswith("tokenfactory-tiny-")
        assert prov["harness"]["commit"]
    assert (root / "report.html").exists() and (root / "engine.log").exists()


def test_summary_recomputes_from_requests(sweep):
    tmp, _ = sweep
    d = tmp / "out" / "00-poisson-rate=2"
    s = json.loads((d / "summary.json").read_text())
    t = pq.read_table(d / "requests.parquet")
    again = summarize(t, SLO(ttft_ms=5000, tpot_ms=500), s["window_start_ns"], s["window_end_ns"],
                      cost_cfg={"model": "rental", "num_gpus": 0, "hourly_per_gpu": 0.0, "num_hosts": 1,
                                "hourly_per_host": 0.10})
    for k in ("completed", "request_throughput", "output_throughput", "mean_ttft_ms", "p99_ttft_ms",
              "p99_itl_ms", "mean_tpot_ms", "goodput_rps", "cost_total"):
        assert again[k] == pytest.approx(s[k]), k
    # independent recomputation of a few numbers straight from the columns
    m = t.filter(t.column("warmup").to_numpy(zero_copy_only=False) == False)  # noqa: E712
    sent = np.array(m.column("sent_ns").to_pylist())
    first = np.array(m.column("first_token_ns").to_pylist())
    assert s["mean_ttft_ms"] == pytest.approx(((first - sent) / 1e6).mean())
    dur = (max(m.column("done_ns").to_pylist()) - sent.min()) / 1e9
    assert s["output_throughput"] == pytest.approx(16 * 12 / dur)
    assert s["cost_total"] == pytest.approx(0.10 * s["window_s"] / 3600)
    assert s["window_s"] > s["duration_s"]  # engine start-up is inside the first window


def test_mlflow_parent_and_children(sweep):
    tmp, _ = sweep
    import mlflow

    client = mlflow.tracking.MlflowClient(f"sqlite:///{tmp}/mlflow.db")
    exp = client.get_experiment_by_name("itest")
    runs = client.search_runs([exp.experiment_id])
    parents = [r for r in runs if r.data.tags.get("tokenfactory.kind") == "sweep"]
    children = [r for r in runs if r.data.tags.get("tokenfactory.kind") == "load_point"]
    assert len(parents) == 1 and len(children) == 2
    assert parents[0].info.status == "FINISHED"
    for c in children:
        assert c.data.tags["mlflow.parentRunId"] == parents[0].info.run_id
        label = c.data.tags["label"]
        d = tmp / "out" / ("00-poisson-rate=2" if label.endswith("=2") else "01-poisson-rate=6")
        s = json.loads((d / "summary.json").read_text())
        assert c.data.metrics["output_throughput"] == pytest.approx(s["output_throughput"])
        assert c.data.metrics["completed"] == 12
        assert c.data.params["workload.input_tokens"] == "32"
        arts = {a.path for a in client.list_artifacts(c.info.run_id)}
        assert {"requests.parquet", "summary.json", "provenance.json", "config.yaml"} <= arts


@pytest.mark.skipif(not shutil.which("chromium"), reason="Debian's chromium is not installed")
def test_report_renders_offline_in_headless_chromium(sweep):
    tmp, _ = sweep
    from playwright.sync_api import sync_playwright

    report = tmp / "out" / "report.html"
    html = report.read_text()
    assert "<script src=\"http" not in html  # plotly.js is inlined, not fetched
    assert "chunk times: the kernel&#x27;s receive stamps" in html  # loopback TCP on Linux
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium"), args=[
            "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        page = browser.new_page()
        errors = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.route("**/*", lambda route: route.abort() if not route.request.url.startswith("file:")
                   else route.continue_())
        page.goto(report.as_uri())
        page.wait_for_function("() => document.querySelectorAll('.js-plotly-plot').length >= 6")
        titles = page.eval_on_selector_all(".gtitle", "els => els.map(e => e.textContent)")
        n_points = page.evaluate("() => document.getElementById('fig-goodput_vs_load').data[0].x.length")
        rows = page.eval_on_selector_all("#runs tr", "els => els.length")  # the header and one row a run
        page.screenshot(path=str(tmp / "report.png"), full_page=True)
        browser.close()
    assert not errors, errors
    assert any("TTFT" in t for t in titles) and any("Goodput" in t for t in titles)
    assert any("Throughput vs interactivity" in t for t in titles) and any("Inter-token" in t for t in titles)
    assert any("Cost per million good" in t for t in titles)
    assert n_points == 2 and rows == 3


def test_resume_skips_finished_points(sweep, tmp_path):
    tmp, _ = sweep
    out = tmp_path / "out"
    shutil.copytree(tmp / "out", out)
    (out / "01-poisson-rate=6" / "summary.json").unlink()  # as if interrupted during the 2nd point
    before = (out / "00-poisson-rate=2" / "requests.parquet").stat().st_mtime_ns
    env = {**os.environ, "PYTHONPATH": str(REPO), "MLFLOW_TRACKING_URI": f"sqlite:///{tmp}/mlflow.db"}
    p = subprocess.run([sys.executable, "-m", "harness.cli", "run", f"output_dir={out}", "experiment=itest",
                        "workload.input_tokens=32", "workload.output_tokens=16", "load.num_requests=12",
                        "load.warmup_requests=2", "protocol.load_points=[2,6]", "progress=false",
                        "mlflow.enabled=false"], capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "1 of 2 runs already complete" in p.stdout
    assert (out / "00-poisson-rate=2" / "requests.parquet").stat().st_mtime_ns == before
    assert (out / "01-poisson-rate=6" / "summary.json").exists()
