"""plan.html in a real browser: headless Chromium, network off, opens the page of a plan over a
synthetic experiment (one config named with a script tag) and must draw every figure with no
console error, run no injected script, and show plan.json's numbers in its table."""

from __future__ import annotations

import json

import pytest

from tests.offline_browser import CHROMIUM, offline_page
from tests.protocols.plan.test_plan_run import _trace
from tests.synthetic_experiment import write_experiment

EVIL = "</script><script>alert(1)</script>"

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="no /usr/bin/chromium (.ci/run installs Debian's)")


@pytest.mark.slow
def test_plan_page_renders_offline_in_chromium(tmp_path):
    from conf.compose import compose_config
    from harness.report.tables import fmt
    from protocols.registry import Invocation, run_protocol

    exp = write_experiment(tmp_path / "exp", requests=60, rates=(5.0, 10.0, 20.0), configs={
        "fast": {"ttft_ms": 40.0, "tpot_ms": 8.0, "capacity": 40.0, "power_w": 450.0},
        EVIL: {"ttft_ms": 90.0, "tpot_ms": 14.0, "capacity": 25.0, "power_w": 400.0}})
    trace = _trace(tmp_path / "trace.jsonl")
    out = run_protocol(compose_config([
        "protocol=plan", f"protocol.experiments=[{exp}]", "workload=mooncake", f"workload.path={trace}",
        "deployment.autoscale.cold_start_s=5", "deployment.autoscale.target=0.3", "deployment.autoscale.window_s=10",
        "protocol.workers=1", "protocol.slos=[{ttft_ms: 150}]", f"output_dir={tmp_path / 'plan'}"]),
        Invocation())
    doc = json.loads((out / "plan.json").read_text())
    with offline_page() as (page, seen):
        page.goto((out / "plan.html").resolve().as_uri())
        page.wait_for_selector("body[data-plotted]", timeout=60_000)
        drawn = page.evaluate("() => Array.from(document.querySelectorAll('div.plot'))"
                              ".map(d => d.querySelectorAll('.main-svg').length > 0)")
        cells = page.evaluate("() => Array.from(document.querySelectorAll('table.plan'))[0].innerText")
    assert drawn and all(drawn), drawn
    assert not seen.problems and not seen.dialogs and not seen.requests, seen
    base = doc["plans"][0]["configs"]["fast"]["metrics"]
    assert fmt(base["replicas_max"]["value"]) in cells and fmt(base["cost_per_mtok_good"]["value"]) in cells
    assert EVIL in cells      # shown as text, never run
