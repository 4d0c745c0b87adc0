"""The report (harness/report/): its numbers against metrics.statistics, escaping of outside text,
plotly's JavaScript embedded once, imported results beside ours, the CLI, an MLflow experiment
as the source, and the static exports' paper sizes.  The page in a real browser:
tests/harness/test_report_browser.py."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from tests.synthetic_experiment import write_experiment

FIXTURES = Path(__file__).parent.parent / "fixtures"
EVIL = "</script><script>alert(1)</script>"


@pytest.fixture(scope="module")
def experiment(tmp_path_factory):
    """Two configs (one named with a script tag), 3 rates, 2 blocks."""
    out = tmp_path_factory.mktemp("report") / "exp"
    return write_experiment(out, configs={"fast": {"ttft_ms": 40.0, "tpot_ms": 8.0, "capacity": 40.0, "power_w": 450},
                                          EVIL: {"ttft_ms": 90.0, "tpot_ms": 14.0, "capacity": 25.0, "power_w": 400}},
                            rates=(5.0, 10.0, 20.0), blocks=2, requests=120)


@pytest.fixture(scope="module")
def page(experiment, tmp_path_factory) -> str:
    """The experiment's page, rendered once for the tests that only read it (seconds a render)."""
    from harness.report.build import render

    return render(experiment, tmp_path_factory.mktemp("page") / "report.html", static_figures=False).read_text()


def _specs(html: str) -> dict[str, dict]:
    """Figure key -> its plotly JSON, read back from the page."""
    out = {}
    for key, body in re.findall(r"<script type='application/json' id='figdata-([^']+)'>(.*?)</script>", html, re.S):
        out[key] = json.loads(body)
    return out


def test_page_is_self_contained_escaped_and_carries_plotly_once(page):
    from plotly.offline import get_plotlyjs

    html = page
    assert html.count(get_plotlyjs()[:300]) == 1                    # plotly.js once, workload figures included
    rest = html.replace(get_plotlyjs(), "")
    assert "<script src" not in rest and "http://" not in rest and "https://" not in rest  # nothing fetched
    assert "<script>alert(1)" not in html                            # nowhere as markup, JSON included
    assert html.count("&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;") >= 3  # as text: tables, subtitle
    specs = _specs(html)
    assert {"throughput_vs_interactivity", "goodput_vs_load", "slo_attainment_vs_load", "ttft_vs_load",
            "tpot_vs_load", "itl_vs_load", "latency_cdfs", "cost_vs_load", "energy_vs_load", "timeline",
            "fidelity_vs_load", "workload_0"} <= set(specs)
    assert "ablation" not in specs                                    # no ablation.json: no chart
    names = {t.get("name") for s in specs.values() for t in s["data"]}
    assert "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in names  # escaped for plotly's HTML labels
    for s in specs.values():
        for t in s["data"]:
            assert EVIL not in json.dumps(t)


def test_curves_are_means_across_blocks_with_t_intervals(experiment, page):
    from harness.results_io import find_run_dirs, read_json
    from metrics.statistics import mean_ci, ratio_ci

    html = page
    spec = _specs(html)["ttft_vs_load"]
    runs = [read_json(d / "summary.json") | {"cfg": read_json(d / "run.json")["config"]}
            for d in find_run_dirs(experiment)]
    at20 = [r["p99_ttft_ms"] for r in runs if r["cfg"] == "fast" and r["offered_load"] == 20.0]
    e = mean_ci(at20)
    panel = {"x": 50, "x2": 90, "x3": 99}                              # p50, p90, p99 side by side
    line = next(t for t in spec["data"] if t.get("name") == "fast" and t.get("mode") == "lines+markers"
                and panel[t.get("xaxis", "x")] == 99)
    assert line["x"] == [5.0, 10.0, 20.0]
    assert line["y"][2] == pytest.approx(e.value)
    band = next(t for t in spec["data"] if t.get("name") == "fast interval" and t.get("xaxis") == "x3")
    assert band["x"] == [5.0, 10.0, 20.0, 20.0, 10.0, 5.0]             # upper bounds out, lower bounds back
    assert (band["y"][2], band["y"][3]) == (pytest.approx(e.high), pytest.approx(e.low))
    # p99 of 118 requests a run: below MLPerf's 662, drawn hollow; p50 filled
    assert all(s.endswith("-open") for s in line["marker"]["symbol"])
    p50 = next(t for t in spec["data"] if t.get("name") == "fast" and t.get("mode") == "lines+markers"
               and t.get("xaxis", "x") == "x")
    assert not any(s.endswith("-open") for s in p50["marker"]["symbol"])
    # cost: BCa of the ratio of totals across blocks, as comparison.json
    cost = _specs(html)["cost_vs_load"]
    line = next(t for t in cost["data"] if t.get("name") == "fast per M good tokens")
    sel = [r for r in runs if r["cfg"] == "fast" and r["offered_load"] == 5.0]
    r = ratio_ci([x["cost_total"] for x in sel], [x["good_output_tokens"] for x in sel], scale=1e6)
    assert line["y"][0] == pytest.approx(r.value)


def test_throughput_interactivity_is_the_measured_frontier():
    from harness.report.figures_tradeoff import frontier

    pts = [(10.0, 500.0), (20.0, 300.0), (15.0, 200.0), (40.0, 100.0)]
    assert frontier(pts) == [(10.0, 500.0), (15.0, 300.0), (20.0, 300.0), (40.0, 100.0)]


def test_comparison_table_holds_comparison_json(experiment, page):
    from harness.report.tables import fmt_est

    html = page
    cmp = json.loads((experiment / "comparison.json").read_text())
    p = next(p for p in cmp["points"] if p["label"] == "poisson rate=10")
    est = p["metrics"]["p50_ttft_ms"]["per_config"]["fast"]
    cell = re.search(r"<td data-point='poisson rate=10' data-metric='p50_ttft_ms' data-config='fast'>([^<]*)</td>",
                     html)
    assert cell and cell.group(1) == fmt_est(est) and cell.group(1).startswith(f"{est['value']:.4g} [")
    assert "max load under the SLO" in html and "id='max-load'" in html


def test_imported_results_sit_beside_ours_with_their_definitions(experiment, tmp_path):
    from harness.imports import import_result
    from harness.report.build import render

    imp = import_result(FIXTURES / "vllm_bench_serve_0.32.0_detailed.json", tmp_path / "vllm")
    gl = import_result(FIXTURES / "guidellm_0.4_benchmarks.json", tmp_path / "gl")
    html = render(experiment, tmp_path / "r.html", static_figures=False, imports=[imp, gl]).read_text()
    assert "vllm bench serve: vllm_bench_serve_0.32.0_detailed.json (imported)" in html
    assert "ITL: vLLM&#x27;s *_itl_ms is per chunk" in html            # its definition notes, escaped
    specs = _specs(html)
    tradeoff = {t["name"] for t in specs["throughput_vs_interactivity"]["data"]}
    assert "vllm bench serve: vllm_bench_serve_0.32.0_detailed.json (imported)" in tradeoff
    cdf = [t for t in specs["latency_cdfs"]["data"] if "imported" in t["name"]]
    assert cdf and all(t["visible"] is True and t["line"]["dash"] == "dash" for t in cdf)
    # concurrency-driven imports are not on the rate axis, and the figure says so
    assert "Not on this axis" in html


def test_report_command_and_import_command(experiment, tmp_path, capsys):
    from harness.cli import main

    out = tmp_path / "imported"
    assert main(["import", str(FIXTURES / "aiperf_profile_export.jsonl"), str(out), "--slo-ttft-ms", "500"]) == 0
    assert (out / "summary.json").exists() and json.loads((out / "summary.json").read_text())["source_tool"] == "aiperf"
    rc = main(["report", str(experiment), "--out", str(tmp_path / "page"), "--static", "false", "--import", str(out),
               "--import", str(FIXTURES / "vllm_bench_serve_0.32.0_detailed.json")])
    assert rc == 0
    html = (tmp_path / "page" / "report.html").read_text()
    assert "aiperf: " in html and "vllm bench serve: " in html
    assert main(["report", str(tmp_path / "nowhere"), "--tracking-uri", f"sqlite:///{tmp_path}/none.db"]) == 2
    assert "no such folder, and no MLflow store" in capsys.readouterr().err
    assert not (tmp_path / "none.db").exists()
    assert main(["import", str(FIXTURES / "sglang_metrics.txt"), str(tmp_path / "x")]) == 2


def test_report_of_an_mlflow_experiment(experiment, tmp_path, mlflow_uri):
    from harness.mlflow_log import MlflowLogger
    from harness.report.build import render
    from harness.report.source import resolve
    from harness.results_io import find_run_dirs, read_json

    uri = mlflow_uri
    log = MlflowLogger(uri, "exp-by-name")
    log.start_parent("exp", {"protocol": "compare"})
    dirs = [d for d in find_run_dirs(experiment) if read_json(d / "run.json")["block"] == 0]  # fewer, faster
    for d in dirs:
        meta = read_json(d / "run.json")
        log.log_child(f"{meta['config']}/block{meta['block']}/{meta['label']}", {}, read_json(d / "summary.json"), d)
    for name in ("experiment.json", "comparison.json"):
        log.log_parent_artifact(experiment / name)
    log.end_parent()
    dest = resolve("exp-by-name", tmp_path / "dl", tracking_uri=uri, log=lambda m: None)
    assert len(find_run_dirs(dest)) == len(dirs) and (dest / "comparison.json").exists()
    html = render(dest, static_figures=False).read_text()
    assert "id='comparison'" in html and "poisson rate=20" in html
    with pytest.raises(ValueError, match="no experiment of that name"):
        resolve("not-there", tmp_path / "x", tracking_uri=uri)


def test_timeline_spreads_tokens_when_a_run_has_too_many_chunks(experiment, monkeypatch):
    from harness.report import requests_view
    from harness.report.data import load

    d = load(experiment)
    run = d.ours[0]
    exact = requests_view.read_run(run).timeline
    monkeypatch.setattr(requests_view, "MAX_CHUNKS", 0)
    spread = requests_view.read_run(run).timeline
    assert exact.tps_exact and not spread.tps_exact
    width = exact.t[1] - exact.t[0]
    total = run.summary["window_output_tokens"]
    assert sum(exact.out_tps) * width == pytest.approx(total, rel=1e-3)
    assert sum(spread.out_tps) * width == pytest.approx(total - 0, rel=0.02)


@pytest.mark.slow
def test_static_figures_are_sized_for_a_two_column_paper(experiment, tmp_path, monkeypatch):
    from harness.report import static
    from tests.conftest import NO_BROWSER

    if os.environ.get("BROWSER_PATH") == NO_BROWSER:  # the suite's default: this test is the one that exports
        monkeypatch.delenv("BROWSER_PATH")
    ok, why = static.available()
    if not ok:
        pytest.skip(f"static export unavailable here: {why}")
    from harness.report.build import render

    page = render(experiment, tmp_path / "report.html", static_figures=True)
    figs = tmp_path / "figures"
    listing = json.loads((figs / "figures.json").read_text())
    keys = {f["file"] for f in listing}
    assert {"throughput_vs_interactivity", "ttft_vs_load", "latency_cdfs"} <= keys
    for k in keys:
        for fmt in ("png", "svg", "pdf"):
            assert (figs / f"{k}.{fmt}").stat().st_size > 1000
    png = (figs / "throughput_vs_interactivity.png").read_bytes()
    assert int.from_bytes(png[16:20], "big") == 1050                   # 3.5 in at 300 dpi
    pdf = (figs / "cost_vs_load.pdf").read_bytes()
    box = re.search(rb"/MediaBox\s*\[\s*0 0 ([\d.]+) ([\d.]+)", pdf)
    assert box and float(box.group(1)) == pytest.approx(252, abs=1)    # 3.5 in = 252 pt
    wide = re.search(rb"/MediaBox\s*\[\s*0 0 ([\d.]+)", (figs / "latency_cdfs.pdf").read_bytes())
    assert float(wide.group(1)) == pytest.approx(7.16 * 72, abs=1)
    assert "figures/ttft_vs_load.svg" in page.read_text()


def _subtitle(html: str) -> str:
    """What stands between the title and the first section: the reader's first screen."""
    return html.split("</h1>", 1)[1].split("<nav", 1)[0]


def test_what_was_not_measured_is_one_line_each_with_the_detail_folded(experiment, tmp_path, monkeypatch):
    import shutil

    from harness.report import static
    from harness.report.build import render
    from harness.results_io import find_run_dirs, read_json, write_json

    exp = tmp_path / "exp"
    shutil.copytree(experiment, exp)
    reason = ("no power or energy source on this host (nvml: NVML did not start (NVMLError_LibraryNotFound: "
              "NVML Shared Library Not Found): no NVIDIA GPU or driver on this host; dcgm: telemetry.dcgm.url is not "
              "set (no DCGM exporter configured); rapl: /sys/class/powercap does not exist)")
    for d in find_run_dirs(exp):
        write_json(d / "summary.json", read_json(d / "summary.json") | {"energy_available": False,
                                                                        "energy_unavailable_reason": reason})
    why = "no Chromium or Chrome on the PATH (chromium, chromium-browser); set BROWSER_PATH"
    monkeypatch.setattr(static, "available", lambda: (False, why))
    page = render(exp, tmp_path / "r.html").read_text()
    first = _subtitle(page)
    summaries = re.findall(r"<details class='subtitle'><summary>(.*?)</summary><ul>(.*?)</ul></details>", first)
    n = len(find_run_dirs(exp))
    heads = [s for s, _ in summaries]
    # ranked: what changes the answer (the synthetic runs' failed requests, their client-side token counts)
    # before what limits it (energy), each once for the experiment
    assert heads[2] == f"energy not measured in {n} of {n} runs: no power or energy source on this host"
    # the synthetic runs' 60 requests: where the saturation guard was measured outside its bounds (metrics.guard_limits)
    assert [h.split(":")[0] for h in heads[3:]] == [f"the over-saturation guards are weaker in 5 of {n} runs"]
    assert heads[0].startswith("requests failed in ") and heads[1].startswith("output tokens counted by the client")
    energy = re.findall(r"<li>(.*?)</li>", summaries[2][1])
    assert [e.split(":")[0] for e in energy] == ["nvml", "dcgm", "rapl"]   # one item per source, its error whole
    assert energy[0].endswith("no NVIDIA GPU or driver on this host")
    # static figures not requested change nothing the reader asked for: with the provenance, not on the first screen
    prov = page.split("id='sec-provenance'", 1)[1]
    static_note = re.findall(r"<details class='subtitle'><summary>(.*?)</summary><ul>(.*?)</ul></details>", prov)[0]
    assert static_note[0] == "static figures not exported: no Chromium or Chrome on the PATH"
    assert why in static_note[1] and "static figures" not in first
    # Nothing of the detail stands unfolded: every visible line is short.
    visible = re.sub(r"<ul>.*?</ul>", "", first)
    assert "powercap" not in visible and "BROWSER_PATH" not in visible
    assert all(len(t) < 100 for t in re.findall(r">([^<>]+)<", visible))


def test_series_are_named_by_config_or_experiment_never_by_the_runs_folder(tmp_path):
    from harness.report.build import render
    from harness.report.data import load
    from harness.results_io import read_json, write_json

    one = {"": {"ttft_ms": 40.0, "tpot_ms": 8.0, "capacity": 40.0, "power_w": 450}}
    sweep = write_experiment(tmp_path / "alone" / "20261201-141144-9789c9", configs=one, rates=(5.0,), blocks=1,
                             requests=40)

    def rename(folder, name):  # write_experiment names the experiment after its folder
        write_json(folder / "experiment.json", read_json(folder / "experiment.json") | {"experiment": name})

    # A sweep's one config has no name; its experiment record names it, not the run folder's id.
    rename(sweep, "default")
    assert load(sweep).series == ["default"]
    html = render(sweep, tmp_path / "sweep.html", static_figures=False).read_text()
    names = {t.get("name") for s in _specs(html).values() for t in s["data"]}
    assert "default" in names and not any("9789c9" in str(n) for n in names)
    assert "<title>tokenfactory report: default</title>" in html  # the page too, the folder in its subtitle
    assert "experiment default in 20261201-141144-9789c9/" in html
    # Several experiments under one root: one series each, by experiment (and config); two of one
    # name told apart by their time, a multirun's jobs by their overrides.
    root = tmp_path / "results"
    for folder in ("default/20261201-100000-aaaaaa", "default/20261201-110000-bbbbbb", "other/x"):
        write_experiment(root / folder, configs=one, rates=(5.0,), blocks=1, requests=40)
    for folder, name in (("default/20261201-100000-aaaaaa", "default"), ("default/20261201-110000-bbbbbb", "default"),
                         ("other/x", "other")):
        rename(root / folder, name)
    write_experiment(root / "cmp", rates=(5.0,), blocks=1, requests=40)  # named configs fast and slow
    assert sorted(load(root).series) == ["cmp: fast", "cmp: slow", "default (2026-12-01 10:00:00)",
                                         "default (2026-12-01 11:00:00)", "other"]
    multi = tmp_path / "multi"
    for job in ("job0-workload.output_tokens=4", "job1-workload.output_tokens=8"):
        write_experiment(multi / job, configs=one, rates=(5.0,), blocks=1, requests=40)
        rename(multi / job, "default")
    assert sorted(load(multi).series) == ["default (workload.output_tokens=4)", "default (workload.output_tokens=8)"]


def test_runs_stopped_as_over_saturated_are_on_the_first_screen(experiment, tmp_path):
    import shutil

    from harness.report.build import render
    from harness.results_io import find_run_dirs, read_json, write_json

    exp = tmp_path / "exp"
    shutil.copytree(experiment, exp)
    dirs = find_run_dirs(exp)
    for d, sent in zip(dirs[:2], (60, 90)):
        write_json(d / "summary.json", read_json(d / "summary.json") | {
            "saturated": True, "saturation_reason": "over-saturated: the rule's numbers", "saturated_after_s": 8.0,
            "num_requests_planned": 400, "num_requests_sent": sent, "num_requests_unsent": 400 - sent})
    page = render(exp, tmp_path / "r.html").read_text()
    first = _subtitle(page)
    head, detail = re.findall(r"<details class='subtitle'><summary>(.*?)</summary><ul>(.*?)</ul></details>",
                              first)[0]
    assert head == f"2 of {len(dirs)} runs stopped as over-saturated: 650 planned requests never sent"
    items = re.findall(r"<li>(.*?)</li>", detail)
    labels = [read_json(d / "run.json")["label"] for d in dirs[:2]]
    assert len(items) == 2 and all(lab in i for lab, i in zip(labels, items))  # each run named in the detail
    assert all(i.endswith("; over-saturated: the rule&#x27;s numbers") for i in items)
    assert "60 of 400 planned sent, 340 never sent" in items[0] and "90 of 400 planned sent, 310 never sent" in items[1]
    assert page.count("saturated: sent 60 of 400") == 1  # the runs table's note


def test_runs_still_filling_are_on_the_first_screen(experiment, tmp_path):
    import shutil

    from harness.report.build import render
    from harness.results_io import find_run_dirs, read_json, write_json

    exp = tmp_path / "exp"
    shutil.copytree(experiment, exp)
    dirs = find_run_dirs(exp)
    # the issue 33 sweep's 16 req/s point: in flight 140.3 then 253.2 (metrics.filling)
    write_json(dirs[0] / "summary.json", read_json(dirs[0] / "summary.json") | {
        "still_filling": True, "in_flight_second_quarter": 140.33, "in_flight_last_quarter": 253.16})
    page = render(exp, tmp_path / "r.html").read_text()
    notes = re.findall(r"<details class='subtitle'><summary>(.*?)</summary><ul>(.*?)</ul></details>",
                       _subtitle(page))
    head, detail = next((h, x) for h, x in notes if "still filling" in h)
    from metrics.answer import filling_kind

    kind = {"backlog": "a growing backlog", "fill-up": "a fill-up"}[filling_kind(read_json(dirs[0] / "summary.json"))]
    assert head == f"1 of {len(dirs)} runs still filling ({kind}): latencies a lower bound, SLO not met"
    items = re.findall(r"<li>(.*?)</li>", detail)
    assert len(items) == 2 and items[0].endswith(
        "in flight rose from 140 to 253 over the arrivals&#x27; second and last quarters")
    assert items[1].startswith("a growing backlog: past capacity")
    assert page.count("<td>still filling</td>") == 1  # the runs table's note


def test_max_load_meeting_the_slo_leaves_out_a_point_with_half_its_requests_failed(tmp_path):
    """The report's highest load meeting the SLO reads the one run-level check (metrics.slo.slo_holds):
    a load point whose completed requests are fast but half its requests failed does not meet it."""
    from harness.report.data import load

    exp = write_experiment(tmp_path / "exp", configs={"fast": {"ttft_ms": 40.0, "tpot_ms": 8.0, "capacity": 40.0,
                                                               "power_w": 450}}, rates=(5.0, 10.0), blocks=1,
                           requests=60)
    assert load(exp).max_load_meeting_slo("fast").x == 10.0
    path = exp / "fast" / "block0" / "01-rate10" / "summary.json"
    summary = json.loads(path.read_text())
    path.write_text(json.dumps({**summary, "completed": 29, "failed": 29}))
    assert load(exp).max_load_meeting_slo("fast").x == 5.0
    path.write_text(json.dumps({**summary, "saturated": True}))
    assert load(exp).max_load_meeting_slo("fast").x == 5.0


def test_the_first_screen_has_the_answers_own_warnings_after_the_answer(experiment, tmp_path):
    """What the answer's own figures limit (a comparison's blocks too few) is among the warnings the
    console printed (experiment.json's ``warnings``): the report's first screen lists it too, after
    the answer, its other sentences folded in its detail."""
    import shutil

    from harness.answer_record import answer_fields
    from harness.report.build import render
    from harness.results_io import read_json, write_json
    from metrics.answer import Answer

    exp = tmp_path / "exp"
    shutil.copytree(experiment, exp)
    said = ("no winner on p99_ttft_ms: with 2 blocks only a difference above 41 % could be found; "
            "9 blocks would find 10 %")
    more = "no winner on cost_per_mtok_good: with 2 blocks only a difference above 60 % could be found"
    record = answer_fields(Answer("compare", ("fast serves 1.6x the goodput of slow",), {}, (said, more)), [])
    write_json(exp / "experiment.json", read_json(exp / "experiment.json") | record)
    first = _subtitle(render(exp, tmp_path / "r.html", static_figures=False).read_text())
    answer_at = first.index("answer (compare): fast serves 1.6x the goodput of slow")
    power = re.findall(r"<details class='subtitle'><summary>(no winner on p99_ttft_ms[^<]*)</summary><ul>(.*?)</ul>",
                       first)
    assert len(power) == 1 and first.index(power[0][0]) > answer_at
    assert power[0][0].startswith(said) and "1 more like it" in power[0][0]
    assert re.findall(r"<li>(.*?)</li>", power[0][1]) == [said, more]
    # ranked as limiting the answer: after what changes it (the synthetic runs' failed requests)
    assert first.index("requests failed in ") < first.index(power[0][0])
