"""The report's deployment part: TTFT by phase per load point and the per-replica table, only
for runs that carry those keys."""

from __future__ import annotations

import json
import re

from harness.results_io import find_run_dirs, read_json, write_json
from tests.synthetic_experiment import write_experiment


def _specs(html: str) -> dict[str, dict]:
    return {k: json.loads(b) for k, b in
            re.findall(r"<script type='application/json' id='figdata-([^']+)'>(.*?)</script>", html, re.S)}


def test_ttft_by_phase_and_replica_table(tmp_path):
    from harness.report.build import render

    exp = write_experiment(tmp_path / "exp", configs={"two": {"ttft_ms": 40.0, "tpot_ms": 8.0, "capacity": 40.0,
                                                              "power_w": 450}},
                           rates=(5.0, 10.0), blocks=1, requests=30)
    plain = render(exp, tmp_path / "plain.html", static_figures=False).read_text()
    assert "ttft_by_phase" not in _specs(plain) and "sec-deployment" not in plain  # no keys: nothing shown

    for d in find_run_dirs(exp):
        s = read_json(d / "summary.json")
        s.update({"engine_mean_queue_ms": 5.0, "engine_mean_prefill_ms": 12.0,
                  "replicas": {"r0": {"requests": 20, "load_share": 0.6, "prefix_cache_hit_rate": 0.5,
                                      "waiting_mean": 1.5, "kv_cache_usage_mean": 0.25, "ttft_p50_ms": 30.0},
                               "r1": {"requests": 10, "load_share": 0.4, "prefix_cache_hit_rate": 0.1}},
                  "replica_load_imbalance": 1.2, "replica_hit_rate_spread": 0.4, "replicas_unknown_share": 0.0})
        write_json(d / "summary.json", s)
    html = render(exp, tmp_path / "report.html", static_figures=False).read_text()
    fig = _specs(html)["ttft_by_phase"]
    bars = {t["name"]: t["y"] for t in fig["data"]}
    assert bars["queueing"] == [5.0, 5.0] and bars["prefill"] == [12.0, 12.0]
    assert "KV transfer" not in bars  # no run has the key: no bar
    rest = next(v for k, v in bars.items() if k.startswith("rest of TTFT"))
    means = [read_json(d / "summary.json")["mean_ttft_ms"] for d in sorted(find_run_dirs(exp),
                                                                            key=lambda d: read_json(
                                                                                d / "summary.json")["offered_load"])]
    assert [round(r, 6) for r in rest] == [round(max(m - 17.0, 0.0), 6) for m in means]
    section = html[html.index("id='sec-deployment'"):]
    assert "<td>r0</td>" in section and "<td>r1</td>" in section and "load imbalance 1.2" in section
    assert "<td>0.6</td>" in section and "<td>0.25</td>" in section


def test_a_disaggregated_deployment_shows_its_pools_and_unknown_shares(tmp_path):
    """Per pool: the decode workers' shares from the rows, the prefill workers' from their engines'
    counters (named beside), or ``unknown`` where nothing says (never 0); the imbalance per pool."""
    from harness.report.build import render

    exp = write_experiment(tmp_path / "exp", configs={"pd": {"ttft_ms": 40.0, "tpot_ms": 8.0, "capacity": 40.0,
                                                             "power_w": 450}},
                           rates=(5.0,), blocks=1, requests=30)
    for d in find_run_dirs(exp):
        s = read_json(d / "summary.json")
        s.update({"replicas": {
            "d0": {"pool": "decode", "requests": 15, "load_share": 0.5, "load_share_from": "rows"},
            "d1": {"pool": "decode", "requests": 15, "load_share": 0.5, "load_share_from": "rows"},
            "p0": {"pool": "prefill", "requests": 16, "load_share": 0.5,
                   "load_share_from": "engine_inference_time_count"},
            "p1": {"pool": "prefill", "requests": 16, "load_share": 0.5,
                   "load_share_from": "engine_inference_time_count"},
            "p2": {"pool": "prefill2", "requests": None, "load_share": None, "load_share_from": "unknown"},
            "p3": {"pool": "prefill2", "requests": None, "load_share": None, "load_share_from": "unknown"}},
            "pool_load_imbalance": {"decode": 1.0, "prefill": 1.0, "prefill2": None},
            "replica_load_imbalance": 1.0, "replicas_unknown_share": 0.0})
        write_json(d / "summary.json", s)
    html = render(exp, tmp_path / "report.html", static_figures=False).read_text()
    section = html[html.index("id='sec-deployment'"):]
    row = lambda name: re.search(rf"<td>{name}</td>(.*?)</tr>", section).group(1)  # noqa: E731
    assert row("d0").startswith("<td>decode</td><td>0.5</td>")
    assert row("p0").startswith("<td>prefill</td><td>0.5 <small>(engine_inference_time_count)</small></td>")
    assert row("p2").startswith("<td>prefill2</td><td>unknown</td>")
    assert "load imbalance 1 (decode 1, prefill 1, prefill2 unknown)" in section
