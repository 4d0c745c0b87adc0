"""A sweep's repeats of a load point are replicates of that point: one label for all of them
(``repeat`` says which), one group per point in ``tokenfactory compare`` with n = repeats on each
side, one point in the report, per-point aggregates in MLflow; folders written when each repeat
had its own label ("<point> #r") read the same way.  The end-to-end case runs three sweeps with
``protocol.repeats=3`` at one Poisson point against fake servers (two identical, one 30 ms slower
to first token) and compares them as a user would."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from conf.load_point import split_repeat
from harness import results_io
from harness.cli import main as cli_main
from protocols.sweep.load_points import runs_from_points

POINT = "poisson rate=20"
FIXED = {"model": "fake", "tokenizer_sha256": "abc", "workload": {"name": "synthetic"}}


def test_repeats_of_a_point_share_its_label_and_keep_their_folders():
    base = {"kind": "poisson", "rate": None, "concurrency": None, "num_requests": 5}
    runs = runs_from_points(base, [4, 8], repeats=3)
    assert [(r.label, r.repeat) for r in runs[:2]] == [("poisson rate=4", 0), ("poisson rate=8", 0)]
    assert [r.label for r in runs if r.load["rate"] == 4] == ["poisson rate=4"] * 3
    assert [r.repeat for r in runs if r.load["rate"] == 4] == [0, 1, 2]
    # the folders are what they were (a sweep interrupted before this change resumes into them)
    assert [r.subdir for r in runs[:3]] == ["00-poisson-rate=4-_0", "01-poisson-rate=8-_0", "02-poisson-rate=4-_1"]
    assert len({r.subdir for r in runs}) == 6
    assert runs[2].title == "poisson rate=4 (repeat 1)"
    assert runs_from_points(base, [4])[0].title == "poisson rate=4"
    assert split_repeat("poisson rate=4 #2") == ("poisson rate=4", 2)
    assert split_repeat("poisson rate=4") == ("poisson rate=4", None)


def _experiment(root: Path, name: str, ttft: list[float], labels: list[str] | None = None) -> str:
    """A finished sweep's record as ``tokenfactory compare`` reads it: runs.parquet (one row per
    repeat) and experiment.json (its fixed conditions)."""
    out = root / name
    out.mkdir()
    n = len(ttft)
    pq.write_table(pa.table({
        "config": [""] * n, "block": [0] * n, "role": ["point"] * n,
        "label": labels or [POINT] * n, "offered_load": [20.0] * n,
        "repeat": list(range(n)) if labels is None else [0] * n,
        "p50_ttft_ms": ttft, "output_throughput": [100.0 + i for i in range(n)]}), out / "runs.parquet")
    results_io.write_json(out / "experiment.json", {"fixed_conditions": {"": FIXED}})
    return str(out)


def _compare(capsys, *args: str) -> tuple[int, str, dict | None]:
    rc = cli_main(["compare", *args])
    text = capsys.readouterr().out
    path = next((line.split(": ", 1)[1] for line in text.splitlines()
                 if line.startswith("comparison.json written: ")), None)
    return rc, text, json.loads(Path(path).read_text()) if path else None


def test_compare_groups_repeats_of_a_point_and_writes_comparison_json_here(tmp_path, monkeypatch, capsys):
    a = _experiment(tmp_path, "a", [10.1, 10.3, 10.2])
    c = _experiment(tmp_path, "c", [40.2, 40.1, 40.4])
    # written by a version that labelled each repeat as a point of its own
    old = _experiment(tmp_path, "old", [40.3, 40.2, 40.1], labels=[f"{POINT} #{r}" for r in range(3)])
    here = tmp_path / "here"
    here.mkdir()
    monkeypatch.chdir(here)
    rc, text, cmp = _compare(capsys, a, c, "--metric", "p50_ttft_ms")
    assert rc == 0, text
    assert f"comparison.json written: {here / 'comparison.json'}" in text
    assert cmp["kind"] == "unpaired" and "not interleaved" in cmp["method_note"]
    [point] = cmp["points"]
    assert point["label"] == POINT and point["replicates"] == {"a": 3, "c": 3}
    ttft = point["metrics"]["p50_ttft_ms"]
    assert ttft["per_config"]["a"]["n"] == ttft["per_config"]["c"]["n"] == 3
    assert ttft["vs_baseline"]["c"]["verdict"] == "a_better"
    assert "need 2 each" not in text
    # the answer last: the verdict on the metric compared, at the highest point (these runs recorded no SLO)
    assert cmp["answer"]["protocol"] == "compare"
    assert text.rstrip("\n").splitlines()[-len(cmp["answer"]["lines"]) - 1:] == [
        "answer (compare):", *(f"  {x}" for x in cmp["answer"]["lines"])]
    assert cmp["answer"]["lines"] == [
        f"at {POINT}, the highest load point (no SLO set: not an equal-SLO comparison)",
        "p50_ttft_ms: " + ttft["vs_baseline"]["c"]["text"].split(" (", 1)[0]]
    assert cmp["answer"]["lines"][1].startswith("p50_ttft_ms: a better than c by ")
    out = tmp_path / "elsewhere.json"
    rc, text, cmp = _compare(capsys, a, old, "--metric", "p50_ttft_ms", "--out", str(out))
    assert rc == 0 and f"comparison.json written: {out}" in text
    [point] = cmp["points"]
    assert point["label"] == POINT and point["replicates"] == {"a": 3, "old": 3}
    assert point["metrics"]["p50_ttft_ms"]["vs_baseline"]["old"]["verdict"] == "a_better"


def test_compare_of_task_runs_shows_the_task_metrics(tmp_path, monkeypatch, capsys):
    """The seed's A/B example (tests/task_rows.py) as two sweeps of 3 repeats each: ``tokenfactory
    compare`` lists the task metrics by default, A cheaper per completed task, B per attempt."""
    from harness.experiment_record import runs_table
    from tests.task_rows import ab_run

    paths = []
    for c in ("A", "B"):
        out = tmp_path / c
        out.mkdir()
        pq.write_table(runs_table([{**ab_run(c, r), "config": "", "block": 0, "repeat": r} for r in range(3)]),
                       out / "runs.parquet")
        results_io.write_json(out / "experiment.json", {"fixed_conditions": {"": FIXED}})
        paths.append(str(out))
    monkeypatch.chdir(tmp_path)
    # each verdict at 95 % (the default, bonferroni over every metric of the point, leaves 3 repeats no winner)
    rc, text, cmp = _compare(capsys, *paths, "--adjust", "none")
    assert rc == 0, text
    [point] = cmp["points"]
    m = point["metrics"]
    assert {"task_completion_rate", "p50_task_time_ms", "attempts_per_completed_task", "cost_per_completed_task",
            "cost_per_task_attempt", "cost_per_mtok_good_task"} <= set(m)
    assert "task_slo_attainment" not in m  # no slo.task_s: not in the runs
    # ratios of totals: A 0.96 / 12 tasks = 0.08; B 1.2 / 12 = 0.10 per task, 1.2 / 24 = 0.05 per attempt
    per_task = m["cost_per_completed_task"]
    assert per_task["per_config"]["A"]["value"] == pytest.approx(0.08)
    assert per_task["per_config"]["B"]["value"] == pytest.approx(0.10)
    vs = per_task["vs_baseline"]["B"]
    assert vs["difference"]["relative"]["value"] == pytest.approx(0.25)   # mean 0.10 / 0.08 - 1
    assert vs["verdict"] == "a_better"
    vs = m["cost_per_task_attempt"]["vs_baseline"]["B"]
    assert vs["difference"]["relative"]["value"] == pytest.approx(-0.375)  # mean 0.05 / 0.08 - 1
    assert vs["verdict"] == "b_better"
    assert "cost_per_completed_task" in text and "cost_per_task_attempt" in text


def test_folders_with_a_label_per_repeat_read_as_one_point(tmp_path):
    from harness.experiment_record import run_rows
    from harness.report.data import load

    for r in range(3):  # run folders as a sweep wrote them before: "<point> #r" in run.json
        d = tmp_path / f"{r:02d}-poisson-rate=20-_{r}"
        d.mkdir()
        results_io.write_json(d / "run.json", {"index": r, "label": f"{POINT} #{r}", "repeat": r,
                                               "load": {"kind": "poisson", "rate": 20}})
        results_io.write_json(d / "summary.json", {"label": f"{POINT} #{r}", "offered_load": 20.0,
                                                   "p50_ttft_ms": 10.0 + r})
    assert [(row["label"], row["repeat"]) for row in run_rows(tmp_path)] == [(POINT, r) for r in range(3)]
    [group] = load(tmp_path).groups()
    assert group.label == POINT and len(group.runs) == 3
    est = group.estimate("p50_ttft_ms")
    assert est.n == 3 and est.low < 11.0 < est.high
    assert [r.title for r in group.runs] == [f"{POINT} (repeat {r})" for r in range(3)]


# ------------------------------------------------------------------------------ end to end
def _sweep(srv, out: Path, tok: str, mlflow: str | None = None) -> None:
    from hydra import compose, initialize_config_module

    from protocols.registry import protocol_experiment

    logged = [f"mlflow.tracking_uri={mlflow}", "experiment=replicates"] if mlflow else ["mlflow.enabled=false"]
    ov = ["engine=openai", f"engine.base_url={srv.base_url}", "engine.model=fake", f"engine.tokenizer={tok}",
          "load=poisson", "load.num_requests=20", "load.warmup_requests=0", "protocol.load_points=[20]",
          "protocol.repeats=3", f"output_dir={out}", *logged, "report.enabled=false", "progress=false",
          "telemetry.idle_baseline_s=0"]
    with initialize_config_module("conf", version_base="1.3"):
        protocol_experiment(compose("config", overrides=ov), overrides=ov).run()


@pytest.mark.slow
def test_three_sweeps_with_repeats_compare_as_a_user_would(tmp_path, monkeypatch, capsys):
    """(a) a fake server, (b) the same server again, (c) one 30 ms slower to first token; each a
    sweep of protocol.repeats=3 at one Poisson point.  ``compare a c``: TTFT worse for c, its
    interval excluding zero; ``compare a b``: no significant difference; comparison.json in the
    current folder, its path printed."""
    from engines.tiny_model import ensure_tiny_model
    from harness.report.data import load
    from tests.fake_server import FakeServer

    tok = ensure_tiny_model()
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    # TTFT 250 ms: this machine's noise (a run's median moves by a few ms when the host is busy)
    # stays far under the 2 % margin, so identical servers never make a winner, and 30 ms more
    # (+12 %) is a certain one
    with FakeServer(ttft_ms=250.0) as srv:
        _sweep(srv, tmp_path / "a", tok, mlflow=uri)
        _sweep(srv, tmp_path / "b", tok)
        # interrupted before its last repeat finished: the same command runs that repeat only
        (tmp_path / "b" / "02-poisson-rate=20-_2" / "summary.json").unlink()
        sent = len(srv.requests)
        _sweep(srv, tmp_path / "b", tok)
        assert sum(bool(r.get("stream")) for r in srv.requests[sent:]) == 20  # (besides the engine's warm-up)
        assert sorted(pq.read_table(tmp_path / "b" / "runs.parquet").column("repeat").to_pylist()) == [0, 1, 2]
    with FakeServer(ttft_ms=280.0) as slow:
        _sweep(slow, tmp_path / "c", tok)
    capsys.readouterr()

    runs = pq.read_table(tmp_path / "a" / "runs.parquet").to_pylist()
    assert sorted((r["label"], r["repeat"]) for r in runs) == [(POINT, r) for r in range(3)]
    assert len({r["run_dir"] for r in runs}) == 3                     # a folder per repeat
    [group] = load(tmp_path / "a").groups()                           # the report: one point, three repeats
    assert group.label == POINT and len(group.runs) == 3 and group.estimate("p50_ttft_ms").n == 3
    record = json.loads((tmp_path / "a" / "experiment.json").read_text())
    assert record["load_points"] == [{"label": POINT, "load": record["load_points"][0]["load"], "repeats": 3}]

    import mlflow

    client = mlflow.tracking.MlflowClient(uri)
    exp = client.get_experiment_by_name("replicates")
    found = client.search_runs([exp.experiment_id])
    kids = [r for r in found if "mlflow.parentRunId" in r.data.tags]
    [parent] = [r for r in found if "mlflow.parentRunId" not in r.data.tags]
    assert sorted(r.info.run_name for r in kids) == [f"a/{POINT}/repeat {r}" for r in range(3)]
    assert {r.data.tags["label"] for r in kids} == {POINT}
    assert parent.data.metrics["p0.p50_ttft_ms.n"] == 3
    assert parent.data.metrics["p0.p50_ttft_ms.low"] <= parent.data.metrics["p0.p50_ttft_ms.value"]

    monkeypatch.chdir(tmp_path)
    rc, text, cmp = _compare(capsys, str(tmp_path / "a"), str(tmp_path / "c"))
    print(text)
    assert rc == 0 and f"comparison.json written: {tmp_path / 'comparison.json'}" in text
    assert "need 2 each" not in text                                   # every metric has 3 replicates a side
    [point] = cmp["points"]
    assert point["label"] == POINT and point["replicates"] == {"a": 3, "c": 3}
    vs = point["metrics"]["p50_ttft_ms"]["vs_baseline"]["c"]
    assert vs["verdict"] == "a_better", vs["text"]                     # c is slower to first token
    assert 0 < vs["difference"]["relative"]["low"] < vs["difference"]["relative"]["high"]  # excluding zero
    assert point["metrics"]["p99_ttft_ms"]["vs_baseline"]["c"]["verdict"] != "b_better"

    rc, text, cmp = _compare(capsys, str(tmp_path / "a"), str(tmp_path / "b"))
    print(text)
    assert rc == 0 and "need 2 each" not in text
    [point] = cmp["points"]
    assert point["replicates"] == {"a": 3, "b": 3}
    for m in ("p50_ttft_ms", "p99_ttft_ms"):
        vs = point["metrics"][m]["vs_baseline"]["b"]
        assert vs["verdict"] in ("no_significant_difference", "equivalent"), vs["text"]
