"""The report's LoRA adapters table: each adapter's per_adapter keys side by side per load
point, means across repeats; no section for runs without adapters."""

from __future__ import annotations

from harness.results_io import find_run_dirs, read_json, write_json
from tests.synthetic_experiment import write_experiment


def test_adapters_side_by_side_means_across_repeats(tmp_path):
    from harness.report.build import render

    exp = write_experiment(tmp_path / "exp", configs={"one": {"ttft_ms": 40.0, "tpot_ms": 8.0, "capacity": 40.0,
                                                              "power_w": 450}},
                           rates=(5.0,), blocks=2, requests=20)
    plain = render(exp, tmp_path / "plain.html", static_figures=False).read_text()
    assert "sec-adapters" not in plain
    for i, d in enumerate(sorted(find_run_dirs(exp))):  # two repeats: TTFT p50 30 and 50 for adapter a
        s = read_json(d / "summary.json")
        s["per_adapter"] = {"a": {"num_requests": 12, "p50_ttft_ms": 30.0 + 20 * i, "slo_attainment": 1.0},
                            "b": {"num_requests": 8, "p50_ttft_ms": 90.0, "slo_attainment": 0.25}}
        write_json(d / "summary.json", s)
    html = render(exp, tmp_path / "report.html", static_figures=False).read_text()
    section = html[html.index("id='sec-adapters'"):]
    section = section[:section.index("</section>")]
    row_a = section[section.index("<td>a</td>"):].split("</tr>")[0]
    row_b = section[section.index("<td>b</td>"):].split("</tr>")[0]
    assert "<td>12</td>" in row_a and "<td>40</td>" in row_a and "<td>1</td>" in row_a
    assert "<td>8</td>" in row_b and "<td>90</td>" in row_b and "<td>0.25</td>" in row_b
