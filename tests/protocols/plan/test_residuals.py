"""The plan's held-out residuals file (``protocols.plan.residuals``): its two shapes (an object
with a model and a list of records, or a bare list of records each naming its model, as
``benchmarks/plan_heldout.py --json`` writes them), the cost factor per case and model, the
shipped default's two cases, and one clear error naming the file and field for each bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.errors import UserError
from protocols.plan.residuals import DEFAULT, read_residuals


def write(tmp_path, doc) -> str:
    p = tmp_path / "res.json"
    p.write_text(json.dumps(doc) if not isinstance(doc, str) else doc)
    return str(p)


def test_the_default_is_the_two_validation_replays_of_processor_sharing():
    r = read_residuals(DEFAULT)
    assert r.held_out is False                   # the model was chosen with these replays in view
    f = r.factors("processor_sharing")
    # (paid measured / predicted) x (good tokens predicted / measured), docs/measured/plan.md
    assert [round(x, 5) for x in f.values] == [round(1507 / 1519 * 19.73 / 19.10, 5),
                                                round(1603 / 1602 * 18.53 / 19.12, 5)]
    assert [round(x, 4) for x in f.values] == [1.0248, 0.9697]
    assert f.cases == ["azure-code-0.2", "azure-code-0.3"]
    assert r.factors("scheduler").values == []   # no held-out case of the scheduler model yet


def test_a_bare_list_of_records_with_their_model(tmp_path):
    recs = [{"case": "light", "metric": "goodput_rps", "predicted": 2.0, "measured": 1.6, "error": 0.25,
             "error_kind": "relative", "within": False, "model": "scheduler"},
            {"case": "light", "metric": "p90_ttft_ms", "predicted": 100.0, "measured": 90.0, "model": "scheduler"},
            {"case": "seqs8", "metric": "slo_attainment", "predicted": 0.9, "measured": 0.9, "model": "scheduler"}]
    r = read_residuals(write(tmp_path, recs))
    f = r.factors("scheduler")
    assert f.cases == ["light", "seqs8"] and f.values == pytest.approx([1.25, 1.0])
    assert r.factors("processor_sharing").values == []


def test_the_object_form_gives_the_model_once_and_skips_latency_only_cases(tmp_path):
    doc = {"model": "scheduler", "source": "held-out sweep", "held_out": True, "residuals": [
        {"case": "a", "metric": "slo_attainment", "predicted": 0.5, "measured": 0.4},
        {"case": "b", "metric": "p50_ttft_ms", "predicted": 10.0, "measured": 12.0}]}
    r = read_residuals(write(tmp_path, doc))
    f = r.factors("scheduler")
    assert f.cases == ["a"] and f.values == pytest.approx([1.25])
    assert r.held_out is True and r.source == "held-out sweep"
    assert any("b" in n and "no good output" in n for n in r.notes)


@pytest.mark.parametrize("doc, needle", [
    ("{not json", "not valid JSON"),
    ({"residuals": "x"}, "residuals: expected a list"),
    (42, "expected an object"),
    ([{"case": "a", "metric": "goodput_rps", "predicted": 1.0, "measured": 1.0}], "residuals[0].model: missing"),
    ({"model": "roofline", "residuals": []}, "model: 'roofline' is not a replica model"),
    ({"model": "scheduler", "residuals": [{"metric": "goodput_rps", "predicted": 1, "measured": 1}]},
     "residuals[0].case: missing"),
    ({"model": "scheduler", "residuals": [{"case": "a", "metric": "goodput_rps", "predicted": "x", "measured": 1}]},
     "residuals[0].predicted: expected a finite number"),
    ({"model": "scheduler", "residuals": [{"case": "a", "metric": "goodput_rps", "measured": 1}]},
     "residuals[0].predicted: missing"),
    ({"model": "scheduler", "residuals": [{"case": "a", "metric": "goodput_rps", "predicted": -1, "measured": 1}]},
     "residuals[0].predicted: -1 must be at least 0"),
    ({"model": "scheduler", "residuals": [{"case": "a", "metric": "goodput_rps", "predicted": 1, "measured": -1}]},
     "residuals[0].measured: -1 must be at least 0"),
    ({"model": "scheduler", "residuals": [{"case": "a", "metric": "goodput_rps", "predicted": 1, "measured": 1},
                                          {"case": "a", "metric": "goodput_rps", "predicted": 2, "measured": 1}]},
     "residuals[1]: case 'a' has goodput_rps twice"),
    ({"model": "scheduler", "held_out": "yes", "residuals": []}, "held_out: expected true or false"),
])
def test_a_bad_file_is_one_error_naming_the_file_and_field(tmp_path, doc, needle):
    path = write(tmp_path, doc)
    with pytest.raises(UserError) as e:
        read_residuals(path)
    assert path in str(e.value) and needle in str(e.value)


def test_a_missing_file_is_named(tmp_path):
    with pytest.raises(UserError, match="protocol.residuals=.*nowhere.json: missing"):
        read_residuals(str(tmp_path / "nowhere.json"))


def test_an_undefined_value_leaves_its_record_out_with_a_note(tmp_path):
    # as a validation script writes a metric it could not compute (json.dump's NaN, or null)
    path = write(tmp_path, '[{"case": "a", "metric": "p90_tpot_ms", "predicted": NaN, "measured": 3.0, '
                           '"model": "scheduler"}, {"case": "a", "metric": "goodput_rps", "predicted": null, '
                           '"measured": 1.0, "model": "scheduler"}, {"case": "a", "metric": "slo_attainment", '
                           '"predicted": 0.9, "measured": 0.75, "model": "scheduler"}]')
    r = read_residuals(path)
    assert r.factors("scheduler").values == pytest.approx([1.2])    # attainment: goodput undefined
    assert [n.split(" ")[0] for n in r.notes] == ["residuals[0]", "residuals[1]"]


def test_a_prediction_of_no_good_output_is_left_out_with_a_note(tmp_path):
    # the held-out vLLM CPU cases where the replay saturated: predicted goodput and attainment 0
    path = write(tmp_path, {"model": "scheduler", "residuals": [
        {"case": "knee", "metric": "goodput_rps", "predicted": 0.0, "measured": 1.5},
        {"case": "knee", "metric": "slo_attainment", "predicted": 0.0, "measured": 0.6},
        {"case": "light", "metric": "slo_attainment", "predicted": 0.9, "measured": 0.75}]})
    r = read_residuals(path)
    assert r.factors("scheduler").values == pytest.approx([1.2])
    assert [n.split(" ")[0] for n in r.notes][:2] == ["residuals[0]", "residuals[1]"] and "predicted 0" in r.notes[0]


def test_the_held_out_vllm_cpu_residuals_are_read():
    r = read_residuals(str(Path(__file__).parents[2] / "fixtures" / "plan_validation_residuals_vllm_cpu.json"))
    assert len(r.factors("scheduler").values) >= 1
