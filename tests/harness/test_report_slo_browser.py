"""The report's SLO and price controls in a real browser: headless Chromium (the system's) with the
network off opens report.html of a synthetic experiment, sets the TTFT, TPOT and E2E thresholds and
the price (firing their input events), and every run's and load point's attainment, goodput, good
output tokens/s and cost per million good tokens must match those recomputed in Python from
``requests.parquet`` at that SLO (``metrics.summary.summarize``, ``metrics.slo.good_mask``,
``metrics.cost.per_million``, the bill at a price per device-hour as ``metrics.cost.fleet_cost``
gives it for the replicas each run had) within the bounds the page states: 0.5 pp of attainment, 0.5 %
of a run's output tokens for its good tokens.  One config runs on two replicas and both have a few
long generations (a bound on requests alone would not hold tokens)."""

from __future__ import annotations

import math

import numpy as np
import pyarrow.parquet as pq
import pytest

from harness.results_io import read_json
from metrics.cost import per_million
from metrics.slo import SLO
from metrics.summary import summarize
from tests.offline_browser import CHROMIUM, offline_page
from tests.synthetic_experiment import DEFAULT_CONFIGS, write_experiment

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="no /usr/bin/chromium (.ci/run installs Debian's)")

READ = """() => Array.from(document.querySelectorAll('#TABLE td[data-metric]')).map(td => ({
    i: +td.dataset.index, metric: td.dataset.metric, run: td.dataset.run || '', value: td.dataset.value,
    text: td.textContent}))"""


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    from harness.report.build import render

    tmp = tmp_path_factory.mktemp("slo-browser")
    # 1,500 requests a run: bins of 5 requests, so thresholds can fall inside one; "fast" on two replicas
    configs = {"fast": {**DEFAULT_CONFIGS["fast"], "replicas": 2, "long_share": 0.01},
               "slow": {**DEFAULT_CONFIGS["slow"], "long_share": 0.01}}
    exp = write_experiment(tmp / "exp", configs=configs, rates=(5.0, 20.0), blocks=2, requests=1500)
    return render(exp, static_figures=False), exp


def _exact(run_dir, slo: SLO, price: float | None) -> dict:
    t = pq.read_table(run_dir / "requests.parquet")
    s = read_json(run_dir / "summary.json")
    # at a price: what a rental profile of that price per GPU-hour bills the replicas the run had
    cost = None if price is None else {"model": "rental", "num_gpus": 1, "hourly_per_gpu": price, "num_hosts": 0}
    m = summarize(t, slo, s["window_start_ns"], s["window_end_ns"], cost_cfg=cost,
                  cost_replicas=int(s["cost_replicas"]))
    bill = s["cost_total"] if price is None else m["cost_total"]
    measured = t.filter(~np.asarray(t.column("warmup").to_numpy(zero_copy_only=False), dtype=bool))
    ok = np.asarray(measured.column("status").to_numpy(zero_copy_only=False)) == "ok"
    out_tokens = np.nan_to_num(np.asarray(measured.column("output_tokens").to_numpy(zero_copy_only=False), float))
    return {"attainment": 100 * m["slo_attainment"], "goodput": m["goodput_rps"],
            "good_tps": m["good_output_throughput"], "cost": per_million(bill, m["good_output_tokens"]),
            "tokens": m["good_output_tokens"], "bill": bill, "n": m["num_requests"], "duration": m["duration_s"],
            "replicas": int(s["cost_replicas"]), "all_tokens": float(out_tokens[ok].sum())}


def _by_index(cells) -> dict:
    out: dict = {}
    for c in cells:
        out.setdefault(c["i"], {"run": c["run"]})[c["metric"]] = float(c["value"]) if c["value"] else None
    return out


def _check(page_vals: dict, ex: dict) -> None:
    err = page_vals["error"]
    assert err <= 0.5 + 1e-12
    assert abs(page_vals["attainment"] - ex["attainment"]) <= err + 1e-9
    undecided = err / 100 * ex["n"]  # half the requests undecided: the most the midpoint is off, in requests
    assert abs(page_vals["goodput"] - ex["goodput"]) <= undecided / ex["duration"] + 1e-9
    # good tokens: half the undecided tokens, a share of the run's output tokens, at most 0.5 %
    assert page_vals["tok_error"] <= 0.5 + 1e-12
    tok_err = page_vals["tok_error"] / 100 * ex["all_tokens"]
    assert abs(page_vals["good_tps"] - ex["good_tps"]) <= tok_err / ex["duration"] + 1e-6
    lo_tok, hi_tok = ex["tokens"] - tok_err, ex["tokens"] + tok_err
    if hi_tok <= 0:  # no good token: the bill was paid for nothing
        assert page_vals["cost"] == ex["cost"] == math.inf
        return
    high = per_million(ex["bill"], lo_tok) if lo_tok > 0 else math.inf
    assert per_million(ex["bill"], hi_tok) - 1e-9 <= page_vals["cost"] <= high + 1e-9


@pytest.mark.slow
def test_moving_the_slo_and_price_recomputes_every_run_and_point(report):
    path, exp = report
    with offline_page() as (page, seen):
        page.goto(path.resolve().as_uri())
        page.wait_for_selector("body[data-slo-updates]", timeout=60_000)
        text = page.inner_text("#sec-slo-controls")
        initial = {i: page.input_value(f"#{i}") for i in ("slo-ttft", "slo-tpot", "slo-e2el", "slo-price")}
        assert initial == {"slo-ttft": "400", "slo-tpot": "40", "slo-e2el": "", "slo-price": ""}  # the experiment's
        first = _by_index(page.evaluate(READ.replace("TABLE", "slo-runs")))
        assert page.evaluate("() => document.querySelectorAll('td.moved').length") == 0  # not moved yet
        settings = [({"slo-ttft": "150", "slo-tpot": "15", "slo-e2el": "1500", "slo-price": "7.5"},
                     SLO(150.0, 15.0, 1500.0), 7.5),
                    ({"slo-ttft": "", "slo-tpot": "9.5", "slo-e2el": "", "slo-price": ""}, SLO(None, 9.5, None), None)]
        moved = []
        for values, slo, price in settings:
            before = int(page.get_attribute("body", "data-slo-updates"))
            for ident, v in values.items():
                page.fill(f"#{ident}", v)  # fires input; change too
                page.dispatch_event(f"#{ident}", "change")
            page.wait_for_function(f"+document.body.dataset.sloUpdates >= {before + 2 * len(values)}")
            runs = _by_index(page.evaluate(READ.replace("TABLE", "slo-runs")))
            points = _by_index(page.evaluate(READ.replace("TABLE", "slo-points")))
            trace = page.evaluate("() => { const d = document.getElementById('fig-slo_controls').data;"
                                  " return {y: d[0].y, n: d.length}; }")
            bound = float(page.inner_text("#slo-bound"))
            figs = page.evaluate("""() => Object.fromEntries(['goodput_vs_load', 'slo_attainment_vs_load',
                'cost_vs_load'].map(k => [k, document.getElementById('fig-' + k).data.map(t => ({
                    live: t.meta && t.meta.live, y: t.y, visible: t.visible,
                    stale: !!(t.meta && t.meta.stale)}))]))""")
            # the Runs section's tables follow: each run's goodput and cost as in the controls' table
            live = page.evaluate("""() => Array.from(document.querySelectorAll('#runs td.moved, #aggregate td.moved'))
                .map(td => [td.dataset.run || '', td.dataset.live, td.textContent])""")
            ours = {(c["run"], c["metric"]): c["text"] for c in page.evaluate(READ.replace("TABLE", "slo-runs"))}
            assert len([x for x in live if x[0]]) == 8 * 3 and len([x for x in live if not x[0]]) == 4 * 3
            for run, metric, shown in live:
                if run and metric != "attainment":
                    assert shown == ours[(run, metric)]
            moved.append((runs, points, trace, bound, slo, price, figs))
        # back to the values it opened with: the tables show the experiment's own numbers again
        before = int(page.get_attribute("body", "data-slo-updates"))
        for ident, v in initial.items():
            page.fill(f"#{ident}", v)
        page.wait_for_function(f"+document.body.dataset.sloUpdates >= {before + len(initial)}")
        assert page.evaluate("() => document.querySelectorAll('td.moved').length") == 0
        assert page.evaluate("() => Array.from(document.querySelectorAll('td[data-live]'))"
                             ".every(td => td.textContent === td.dataset.orig)")
        assert page.evaluate("""() => ['goodput_vs_load', 'slo_attainment_vs_load', 'cost_vs_load'].every(k => {
            const d = document.getElementById('fig-' + k), spec = JSON.parse(
                document.getElementById('figdata-' + k).textContent);
            return d.data.every((t, i) => t.visible !== false
                && JSON.stringify(t.y) === JSON.stringify(spec.data[i].y));
        })""")
        assert not seen.problems and not seen.requests

    assert "hold for the SLO the experiment ran with" in text and "0.5 pp" in text
    assert "never more than 0.5 % of them" in text and "per device-hour" in text
    # as loaded: the experiment's SLO and each run's recorded bill, i.e. the runs' summary.json
    exp_slo = SLO.from_config(read_json(exp / "experiment.json")["slo"])
    assert len(first) == 8
    for v in first.values():
        _check(v, _exact(exp / v["run"], exp_slo, None))
    for runs, points, trace, bound, slo, price, figs in moved:
        exact = {i: _exact(exp / v["run"], slo, price) for i, v in runs.items()}
        assert len(runs) == 8 and len(points) == 4
        for i, v in runs.items():
            _check(v, exact[i])
        assert max(v["error"] for v in runs.values()) == pytest.approx(bound, abs=1e-3)
        # a load point: the mean of its two repeats (the runs table lists them in the points' order)
        for p, pv in points.items():
            members = [exact[2 * p], exact[2 * p + 1]]
            assert abs(pv["attainment"] - np.mean([m["attainment"] for m in members])) <= pv["error"] + 1e-9
            tokens = sum(m["tokens"] for m in members)
            tok_err = pv["tok_error"] / 100 * sum(m["all_tokens"] for m in members)
            assert pv["tok_error"] <= 0.5 + 1e-12
            bills = sum(m["bill"] for m in members)
            high = per_million(bills, tokens - tok_err) if tokens - tok_err > 0 else math.inf
            assert per_million(bills, tokens + tok_err) - 1e-9 <= pv["cost"] <= high + 1e-9
        # the figure's first panel (attainment of the first series) redrawn with the table's numbers
        assert trace["n"] == 8 and trace["y"] == pytest.approx([points[0]["attainment"], points[1]["attainment"]])
        # the vs-load figures redrew their lines from the same numbers (points 0, 1: the first series)
        for key, metric in (("goodput_vs_load", "goodput"), ("slo_attainment_vs_load", "attainment"),
                            ("cost_vs_load", "cost")):
            lines = [t for t in figs[key] if t["live"] == metric]
            assert len(lines) == 2
            want = [points[0][metric], points[1][metric]]
            assert lines[0]["y"] == pytest.approx([None if w == math.inf else w for w in want])
            assert all(t["visible"] is False for t in figs[key] if t["stale"]) and any(t["stale"] for t in figs[key])
    # the settings moved the numbers, and some threshold fell inside a bin (the bound is exercised)
    assert any(not math.isclose(moved[0][0][i]["attainment"], first[i]["attainment"]) for i in first)
    assert any(v["error"] > 0 for runs, *_ in moved for v in runs.values())
    assert any(v["tok_error"] > 0 for runs, *_ in moved for v in runs.values())
    # both kinds of run were priced: "fast" on two replicas pays twice the device-hours
    assert {_exact(exp / v["run"], exp_slo, 1.0)["replicas"] for v in first.values()} == {1, 2}
