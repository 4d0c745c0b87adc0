"""A plan marks an emulated config's capacity (runs on Dynamo's mocker) as it marks estimates."""

from protocols.plan.capacity import read_experiment
from tests.synthetic_experiment import write_experiment


def test_an_emulated_config_is_marked_as_estimates_are(tmp_path, capsys):
    import json

    from protocols.plan.run import print_plan

    exp = write_experiment(tmp_path / "exp", requests=20, rates=(5.0,), blocks=1)
    for s in (exp / "slow").rglob("summary.json"):  # slow ran on Dynamo's mocker
        s.write_text(json.dumps({**json.loads(s.read_text()), "emulated": True, "timing_source": "mocker-polynomial"}))
    caps = {c.name: c for c in read_experiment(exp)}
    assert caps["fast"].source == "measured" and caps["slow"].source == "emulated"
    assert any("ran on an emulated engine (mocker-polynomial)" in n for n in caps["slow"].notes)
    metric = {"value": 1.0, "interval": None}
    entry = {"metrics": {"slo_attainment": metric, "cost_per_mtok_good": metric, "replicas_max": {"value": 1},
                         "replicas_mean": metric}, "meets_slo": True, "outside_measurements": False}
    print_plan({"plans": [{"variant": "fixed", "slo": {}, "configs": {"slow": {**entry, "source": "emulated"},
                                                                       "fast": {**entry, "source": "measured"}},
                           "skipped": {}, "cheapest": {"verdict": "-"}}], "warnings": []})
    lines = capsys.readouterr().out.splitlines()
    assert lines[2].startswith("  slow:") and lines[2].endswith("[emulated]")
    assert lines[3].startswith("  fast:") and "[" not in lines[3]
