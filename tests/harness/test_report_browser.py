"""The report in a real browser: headless Chromium (the system's, /usr/bin/chromium) with the
network off opens report.html of a synthetic ablation (four arms in blocks, one named with a
script tag, plus an imported vllm bench serve result) and must draw every figure with no console
error, show the comparison table's values and run no injected script."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.offline_browser import CHROMIUM, offline_page
from tests.synthetic_experiment import write_experiment

FIXTURES = Path(__file__).parent.parent / "fixtures"
EVIL = "</script><script>alert(1)</script>"

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="no /usr/bin/chromium (.ci/run installs Debian's)")


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    from harness.imports import import_result
    from harness.report.build import render

    tmp = tmp_path_factory.mktemp("browser")
    arms = {"baseline": {"ttft_ms": 90.0, "tpot_ms": 14.0, "capacity": 25.0, "power_w": 400},
            "+chunked": {"ttft_ms": 60.0, "tpot_ms": 12.0, "capacity": 30.0, "power_w": 420},
            EVIL: {"ttft_ms": 70.0, "tpot_ms": 9.0, "capacity": 32.0, "power_w": 430},
            "all": {"ttft_ms": 50.0, "tpot_ms": 8.0, "capacity": 40.0, "power_w": 450}}
    exp = write_experiment(tmp / "exp", configs=arms, rates=(5.0, 15.0), blocks=2, requests=80,
                           ablation={"baseline": (), "+chunked": ("chunked",), EVIL: ("spec",),
                                     "all": ("chunked", "spec")})
    imported = import_result(FIXTURES / "vllm_bench_serve_0.32.0_detailed.json", tmp / "vllm")
    return render(exp, static_figures=False, imports=[imported]), exp


@pytest.mark.slow
def test_report_renders_offline_in_chromium(report, tmp_path):
    path, exp = report
    cmp = json.loads((exp / "comparison.json").read_text())
    with offline_page() as (page, seen):
        page.goto(path.resolve().as_uri())
        page.wait_for_selector("body[data-plotted]", timeout=60_000)
        figures = page.evaluate("""() => Array.from(document.querySelectorAll('div.plot')).map(d => ({
            id: d.id,
            svg: d.querySelectorAll('svg.main-svg').length,
            traces: (d.data || []).length,
            visible: (d.data || []).filter(t => t.visible !== false).length,
            drawn: d.querySelectorAll('g.trace path, g.trace .point, g.trace .bars path').length}))""")
        cell = page.inner_text("td[data-point='max load under the SLO'][data-metric='max_load_under_slo']"
                               "[data-config='baseline']")
        verdict = page.inner_text("#comparison tbody").replace("\n", " ")
        outcomes = page.evaluate("() => Array.from(document.querySelectorAll('#comparison td[data-verdict]'))"
                                 ".map(td => td.dataset.verdict)")
        title = page.inner_text("#comparison thead")
        text = page.inner_text("body")
        scripts = page.evaluate("() => document.querySelectorAll('script').length")
        page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
    assert not seen.problems, seen.problems
    assert not seen.dialogs, f"injected script ran: {seen.dialogs}"
    assert not seen.requests, f"the page fetched {seen.requests}"
    ids = {f["id"] for f in figures}
    assert {"fig-throughput_vs_interactivity", "fig-ttft_vs_load", "fig-latency_cdfs", "fig-ablation",
            "fig-timeline", "fig-cost_vs_load", "fig-energy_vs_load", "fig-workload_0"} <= ids
    for f in figures:
        assert f["svg"] >= 1 and f["traces"] >= 1 and f["visible"] >= 1 and f["drawn"] >= 1, f
    # the comparison table shows comparison.json's numbers: max load under the SLO, baseline's estimate
    est = cmp["points"][0]["metrics"]["max_load_under_slo"]["per_config"]["baseline"]
    assert cmp["points"][0]["label"] == "max load under the SLO"
    assert cell.startswith(f"{est['value']:.4g}")
    # a winner named, not "a better" / "b better" (the outcome stays in data-verdict)
    assert " better" in verdict and "a better" not in verdict.replace("baseline better", "")
    assert {"a_better", "b_better"} & set(outcomes)
    assert EVIL in title and EVIL in text                            # the arm's name, shown as text
    # plotly.js, one JSON block a figure, the loop; the SLO controls' figure, data and script
    assert scripts == 1 + len(figures) + 1 + 3
    assert (tmp_path / "report.png").stat().st_size > 50_000
