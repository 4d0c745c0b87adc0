"""protocol=ablation: arms from a baseline and optimisations, their effects with intervals, the
interaction of a combination, against fake engines whose speed each optimisation sets."""

from __future__ import annotations

import json
import math

import pytest
from hydra import compose, initialize_config_module

from metrics.statistics import log_ratio_ci
from protocols.ablation.plan import ablation_arms


def test_arms_singles_pairs_all_and_factorial():
    p = {"baseline": ["a=1"], "optimisations": {"x": ["b=1"], "y": ["c=1"], "z": ["d=1"]}}
    names = [n for n, _, _ in ablation_arms(p)]
    assert names == ["baseline", "+x", "+y", "+z", "all"]
    assert [nc.overrides for n, _, nc in ablation_arms(p) if n == "all"] == [["a=1", "b=1", "c=1", "d=1"]]
    assert [n for n, _, _ in ablation_arms({**p, "pairs": [["z", "x"]]})] == ["baseline", "+x", "+y", "+z",
                                                                               "+x+z", "all"]
    assert len(ablation_arms({**p, "factorial": True})) == 8
    with pytest.raises(ValueError, match="at least one named optimisation"):
        ablation_arms({"optimisations": {}})
    with pytest.raises(ValueError, match="protocol.pairs"):
        ablation_arms({**p, "pairs": [["x", "nope"]]})


def test_log_ratio_interval_is_a_geometric_mean():
    e = log_ratio_ci([2.0, 2.0, 2.0])
    assert e.value == pytest.approx(2.0) and e.low == pytest.approx(2.0)
    e = log_ratio_ci([1.0, 4.0])
    assert e.value == pytest.approx(2.0) and e.low < 2 < e.high and e.n == 2
    assert math.isnan(log_ratio_ci([]).value)


@pytest.mark.slow
def test_an_ablation_of_two_independent_optimisations(tmp_path):
    # fastfirst halves the time to first token, fastgap shortens the gaps between tokens: each
    # moves its own metric, together they multiply (interaction ~1).
    from engines.tiny_model import ensure_tiny_model
    from protocols.registry import protocol_experiment
    from tests.fake_server import FakeServer

    out = tmp_path / "out"
    with FakeServer() as srv:
        ov = ["protocol=ablation", "engine=openai", f"engine.base_url={srv.base_url}",
              f"engine.tokenizer={ensure_tiny_model()}", "load=concurrency", "load.num_requests=12",
              "load.warmup_requests=0", "protocol.load_points=[2]", "protocol.repeats=2",
              'protocol.baseline=["engine.model=fake-ttft_ms:80-gap_ms:8"]',
              'protocol.optimisations={fastfirst: ["engine.model=fake-ttft_ms:40-gap_ms:8"], '
              'fastgap: ["+engine.request_extra.fake=gap_ms:2"]}',
              f"output_dir={out}", "mlflow.enabled=false", "report.enabled=false", "progress=false",
              "telemetry.idle_baseline_s=0"]
        with initialize_config_module("conf", version_base="1.3"):
            protocol_experiment(compose("config", overrides=ov), overrides=ov).run()
    ab = json.loads((out / "ablation.json").read_text())
    assert set(ab["arms"]) == {"baseline", "+fastfirst", "+fastgap", "all"}
    m = ab["points"][0]["metrics"]
    ttft = {a: v["effect"]["value"] for a, v in m["p50_ttft_ms"]["arms"].items()}
    tpot = {a: v["effect"]["value"] for a, v in m["p50_tpot_ms"]["arms"].items()}
    assert 0.4 < ttft["+fastfirst"] < 0.65 and 0.85 < ttft["+fastgap"] < 1.15
    assert tpot["+fastgap"] < 0.5 and 0.8 < tpot["+fastfirst"] < 1.2
    both = m["p50_ttft_ms"]["arms"]["all"]
    assert 0.8 < both["interaction"]["value"] < 1.25 and "product_of_singles" in both
    record = json.loads((out / "experiment.json").read_text())
    assert [s["ran"] for s in record["steps"] if s["step"] in (5, 6)] == [True, True]
    assert "limited by" in ab["bottlenecks"]["baseline"]["concurrency=2"]["line"]
