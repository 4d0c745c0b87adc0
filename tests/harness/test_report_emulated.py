"""The report's first screen says when runs were emulated (Dynamo's mocker workers): their
numbers are never read as measured ones."""

from __future__ import annotations

import pytest

from tests.synthetic_experiment import write_experiment


@pytest.mark.slow  # two pages rendered (seconds each)
def test_emulated_runs_are_on_the_first_screen(tmp_path):
    from harness.report.build import render
    from harness.results_io import find_run_dirs, read_json, write_json

    exp = write_experiment(tmp_path / "exp", requests=20, rates=(5.0,), blocks=1)
    dirs = find_run_dirs(exp)
    for d in dirs[:1]:
        write_json(d / "summary.json", read_json(d / "summary.json") | {"emulated": True,
                                                                         "timing_source": "mocker-polynomial"})
    page = render(exp, tmp_path / "r.html", static_figures=False).read_text()
    first = page.split("</h1>", 1)[1].split("<nav", 1)[0]  # between the title and the first section
    lines = first.split("</p>")
    assert lines[0] == (f"<p class='subtitle'>EMULATED: 1 of {len(dirs)} runs ran on an emulated engine (timing: "
                        "mocker-polynomial): their latencies and throughputs come from a model, not a measurement")
    for d in dirs[:1]:  # a measured experiment says nothing of the kind
        write_json(d / "summary.json", read_json(d / "summary.json") | {"emulated": False})
    assert "EMULATED" not in render(exp, tmp_path / "r2.html", static_figures=False).read_text()
