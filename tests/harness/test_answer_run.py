"""The default run's shape (a Poisson sweep, the default SLO) against the fake server with one slot:
the console ends with the warnings, once per kind and ranked, then the answer, whose lines and numbers
are ``metrics.answer``'s over the runs written; experiment.json keeps them; the report's first screen
opens with the answer, before any figure."""

from __future__ import annotations

import json
import re

import pytest
from hydra import compose, initialize_config_module

RANKS = ["changes the answer", "limits it", "details"]


def _run(overrides: list[str]) -> None:
    from protocols.registry import protocol_experiment

    with initialize_config_module("conf", version_base="1.3"):
        cfg = compose("config", overrides=overrides)
        exp = protocol_experiment(cfg, overrides=overrides)
    exp.run()


@pytest.mark.slow
def test_the_default_sweep_ends_with_its_answer(tmp_path, tiny_model, capfd):
    from harness.experiment_record import run_rows
    from metrics.answer import sweep_answer
    from tests.fake_server import FakeServer

    out = tmp_path / "out"
    # one slot, ~80 ms a request: about 12 req/s; 2 and 4 req/s are well within it, 32 far past it
    with FakeServer(slots=1) as srv:
        _run(["engine=openai", f"engine.base_url={srv.base_url}", f"engine.tokenizer={tiny_model}",
              "engine.model=fake-ttft_ms:60", "load.num_requests=40", "load.warmup_requests=0",
              "protocol.load_points=[2,4,32]", f"output_dir={out}", "mlflow.enabled=false", "report.static=false",
              "progress=false", "telemetry.idle_baseline_s=0"])
    console = capfd.readouterr().out.splitlines()
    record = json.loads((out / "experiment.json").read_text())
    answer = record["answer"]
    # the answer is metrics.answer's over the runs written, numbers included
    expected = sweep_answer(run_rows(out), record["slo"], "USD", seed=0)
    assert answer["lines"] == list(expected.lines)
    assert answer["highest_met"] == "poisson rate=4" and answer["first_missed"] == "poisson rate=32"
    at4 = json.loads((out / "01-poisson-rate=4" / "summary.json").read_text())
    assert answer["lines"][0] == (
        f"the highest load that met the SLO (p99 TTFT ≤ 1000 ms, TPOT ≤ 150 ms) is poisson rate=4: goodput "
        f"{at4['goodput_rps']:.3g} req/s ({at4['good_output_throughput']:.3g} good tok/s), "
        f"{1e6 * at4['cost_total'] / at4['good_output_tokens']:.3g} USD per M good tokens")
    at32 = json.loads((out / "02-poisson-rate=32" / "summary.json").read_text())
    assert answer["lines"][1] == (f"the first that missed it is poisson rate=32: p99 TTFT "
                                  f"{at32['slo_ttft_p99_ms']:,.0f} ms > 1,000")
    assert answer["knee"] == "poisson rate=32"  # one slot serves about 12 of the 32 req/s sent
    # the console ends on the answer, after the warnings: each kind once, ranked
    start = console.index("answer (sweep):")
    assert console[start + 1:] == [f"  {x}" for x in answer["lines"]]
    w = console.index("warnings, by what they change:")
    warned = console[w + 1:start]
    ranks = [RANKS.index(re.match(r"  \[(.*?)\] ", x).group(1)) for x in warned]
    assert ranks == sorted(ranks) and len(warned) == len(record["warnings"])
    energy = [x for x in warned if "energy not measured" in x]  # a host without a power source: once, all runs
    assert energy == [] or (len(energy) == 1
                            and energy[0].startswith("  [limits it] energy not measured in 3 of 3 runs"))
    assert not any("TOKEN COUNTS DISAGREE" in x or x.startswith("  still filling") for x in console)
    # the report's first screen: the answer before any warning and any figure
    page = (out / "report.html").read_text()
    first = page.split("</h1>", 1)[1].split("<nav", 1)[0]
    assert first.index("answer (sweep): the highest load that met the SLO") < first.index("energy not measured")
    assert "<figure" not in first


@pytest.mark.slow
def test_a_comparison_ends_with_its_answer_and_no_warning_twice(tmp_path, tiny_model, capfd):
    from harness.experiment_record import run_rows
    from metrics.answer import comparison_answer
    from tests.fake_server import FakeServer

    out = tmp_path / "out"
    with FakeServer() as srv:
        _run(["protocol=compare", "engine=openai", f"engine.base_url={srv.base_url}", f"engine.tokenizer={tiny_model}",
              "load=constant", "load.num_requests=6", "load.warmup_requests=0", "protocol.load_points=[20]",
              "protocol.repeats=2",
              'protocol.configs={fast: ["engine.model=fake-ttft_ms:5"], slow: ["engine.model=fake-ttft_ms:30"]}',
              f"output_dir={out}", "mlflow.enabled=false", "report.enabled=false", "progress=false",
              "telemetry.idle_baseline_s=0"])
    console = capfd.readouterr().out.splitlines()
    record = json.loads((out / "experiment.json").read_text())
    comparison = json.loads((out / "comparison.json").read_text())
    expected = comparison_answer(comparison, run_rows(out), record["slo"], "USD")
    assert record["answer"]["lines"] == list(expected.lines)
    assert expected.lines[0] == ("at constant rate=20, the highest load every config met the SLO at "
                                 "(p99 TTFT ≤ 1000 ms, TPOT ≤ 150 ms)")
    ttft = comparison["points"][0]["metrics"]["p99_ttft_ms"]["vs_baseline"]["slow"]["text"].split(" (", 1)[0]
    assert f"p99_ttft_ms: {ttft}" in expected.lines
    assert expected.lines[-1].startswith(f"cost per M good tokens there: {comparison['baseline']} ")
    start = console.index("answer (compare):")
    assert console[start + 1:] == [f"  {x}" for x in expected.lines]
    # each warning once for the experiment (4 runs), never under a point or a repeat
    warned = console[console.index("warnings, by what they change:") + 1:start] if record["warnings"] else []
    assert len(warned) == len(record["warnings"]) == len({w["kind"] for w in record["warnings"]})
    # the runs' warnings count them; the answer's own (what its 2 blocks could not find) is the answer's
    assert all(" of 4 runs" in x for x, w in zip(warned, record["warnings"]) if w["kind"] != "answer_power")
    assert not any("energy unavailable" in x or "TOKEN COUNTS DISAGREE" in x for x in console)
