"""protocol=compare: the plan (blocks in seeded orders), a dry run, and a real comparison against
fake engines whose latency is set by the config (tests/fake_server.py reads it from the model name)."""

from __future__ import annotations

import json
import signal
import sys

import pyarrow.parquet as pq
import pytest
from hydra import compose, initialize_config_module

from conf.load_point import RunSpec
from protocols.blocks import NamedConfig, block_orders, plan_sessions
from protocols.compare.plan import named_configs


def test_block_orders_are_seeded_permutations():
    a = block_orders(["x", "y", "z"], 6, seed=3)
    assert a == block_orders(["x", "y", "z"], 6, seed=3)           # reproducible
    assert all(sorted(o) == ["x", "y", "z"] for o in a)             # every config once per block
    assert len({tuple(o) for o in a}) > 1                           # not one fixed order
    assert block_orders(["x", "y", "z"], 2, seed=3, first_block=4) == a[4:6]  # more blocks keep the old ones
    assert a != block_orders(["x", "y", "z"], 6, seed=4)
    # counterbalanced: in each cycle of 3 blocks every config runs once in every position
    for cycle in (a[0:3], a[3:6]):
        for pos in range(3):
            assert sorted(o[pos] for o in cycle) == ["x", "y", "z"]
    for seed in range(20):  # two configs: every pair of blocks is AB and BA
        o = block_orders(["a", "b"], 4, seed=seed)
        assert {tuple(o[0]), tuple(o[1])} == {tuple(o[2]), tuple(o[3])} == {("a", "b"), ("b", "a")}


def test_sessions_cover_every_config_in_every_block():
    runs = [RunSpec(0, "poisson rate=2", {"kind": "poisson", "rate": 2})]
    s = plan_sessions([NamedConfig("a", []), NamedConfig("b", ["engine.model=x"])], runs, 3, seed=0)
    assert [(x.block, x.config) for x in s if x.block == 0] in ([(0, "a"), (0, "b")], [(0, "b"), (0, "a")])
    assert sorted((x.block, x.config) for x in s) == [(b, c) for b in range(3) for c in ("a", "b")]
    assert {x.subdir for x in s} == {f"{c}/block{b}" for b in range(3) for c in ("a", "b")}


@pytest.mark.parametrize("configs, needle", [
    ({"a": []}, "at least two named configs"),
    ({"a": [], "b c": []}, "config name"),
    ({"a": [], "b": ["oops"]}, "not an override"),
    ({"a": [], "b": ["protocol.repeats=9"]}, "may not change the protocol"),
])
def test_bad_configs_are_named(configs, needle):
    with pytest.raises(ValueError, match=needle):
        named_configs({"configs": configs})


def _overrides(base_url, tok, out, extra=()):
    return ["protocol=compare", "engine=openai", f"engine.base_url={base_url}", f"engine.tokenizer={tok}",
            "load=constant", "load.num_requests=12", "load.warmup_requests=0",
            "protocol.load_points=[20]", "protocol.repeats=3",
            'protocol.configs={fast: ["engine.model=fake-ttft_ms:10"], slow: ["engine.model=fake-ttft_ms:60"]}',
            f"output_dir={out}", "mlflow.enabled=false", "report.enabled=false", "progress=false",
            "telemetry.idle_baseline_s=0", *extra]


def test_dry_run_prints_the_plan_and_writes_nothing(tmp_path, tiny_model, monkeypatch, capfd):
    from harness.cli import main

    out = tmp_path / "out"
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", list(sys.argv))  # the command sets it for Hydra
    sigterm = signal.getsignal(signal.SIGTERM)  # and installs its SIGTERM handler
    try:
        rc = main(["run", *_overrides("http://127.0.0.1:9", tiny_model, out), "--dry-run"])
    finally:
        signal.signal(signal.SIGTERM, sigterm)
    stdout, stderr = capfd.readouterr()
    assert rc == 0, stdout + stderr
    assert "config fast: engine.model=fake-ttft_ms:10" in stdout and "block 2:" in stdout
    assert "6 engine launches" in stdout and not out.exists()


@pytest.mark.slow
def test_a_comparison_of_two_fake_engines_gives_a_verdict(tmp_path):
    from engines.tiny_model import ensure_tiny_model
    from protocols.registry import protocol_experiment
    from tests.fake_server import FakeServer

    out = tmp_path / "out"
    with FakeServer() as srv:
        overrides = _overrides(srv.base_url, ensure_tiny_model(), out)
        with initialize_config_module("conf", version_base="1.3"):
            cfg = compose("config", overrides=overrides)
            exp = protocol_experiment(cfg, overrides=overrides)
        exp.run()
    runs = pq.read_table(out / "runs.parquet").to_pylist()
    assert sorted((r["config"], r["block"]) for r in runs) == [(c, b) for c in ("fast", "slow") for b in range(3)]
    assert all(r["completed"] == 12 for r in runs)
    record = json.loads((out / "experiment.json").read_text())
    assert record["status"] == "complete" and len(record["blocks"]) == 3
    assert record["configs"] == {"fast": ["engine.model=fake-ttft_ms:10"], "slow": ["engine.model=fake-ttft_ms:60"]}
    assert [s["ran"] for s in record["steps"] if s["step"] == 6] == [True]
    fixed = record["fixed_conditions"]
    assert fixed["fast"]["tokenizer_sha256"] == fixed["slow"]["tokenizer_sha256"]
    cmp = json.loads((out / "comparison.json").read_text())
    ttft = cmp["points"][0]["metrics"]["p50_ttft_ms"]
    assert ttft["per_config"]["fast"]["value"] < 40 < ttft["per_config"]["slow"]["value"]
    assert ttft["vs_baseline"]["slow"]["verdict"] == "a_better"       # fast (the baseline) has the lower TTFT
    assert ttft["vs_baseline"]["slow"]["difference"]["paired"] is True
    from harness.report.build import render
    from harness.report.data import load_points
    assert len(load_points(out)) == 6 and render(out).exists()  # runs nested <config>/block<b>/<point>/
    # the same folder again: everything is complete, nothing runs, the record is the same
    with FakeServer() as srv2:
        overrides = _overrides(srv2.base_url, ensure_tiny_model(), out)
        with initialize_config_module("conf", version_base="1.3"):
            exp2 = protocol_experiment(compose("config", overrides=overrides), overrides=overrides)
        exp2.run()
        assert srv2.requests == []


@pytest.mark.slow
def test_compare_command_on_separate_experiments_is_unpaired_and_checks_fixed_conditions(tmp_path, mlflow_uri):
    from engines.tiny_model import ensure_tiny_model
    from protocols.compare.record import compare_experiments
    from protocols.registry import protocol_experiment
    from tests.fake_server import FakeServer

    outs = []
    with FakeServer() as srv:
        for name, ttft, seed in (("one", 10, 0), ("two", 60, 0), ("three", 10, 5)):
            out = tmp_path / name
            # "two" is also logged to MLflow and compared from there, by its experiment's name
            logged = [f"mlflow.tracking_uri={mlflow_uri}", "experiment=cmp-two"] \
                if name == "two" else ["mlflow.enabled=false"]
            ov = ["engine=openai", f"engine.base_url={srv.base_url}", f"engine.model=fake-ttft_ms:{ttft}",
                  f"engine.tokenizer={ensure_tiny_model()}", "load=constant", "load.num_requests=8",
                  "load.warmup_requests=0", "protocol.load_points=[20]", "protocol.repeats=2", f"output_dir={out}",
                  *logged, "report.enabled=false", "progress=false", "telemetry.idle_baseline_s=0",
                  f"workload.seed={seed}"]
            with initialize_config_module("conf", version_base="1.3"):
                protocol_experiment(compose("config", overrides=ov)).run()
            outs.append(str(out))
    cmp = compare_experiments(outs[:2], allow={"model"})
    assert cmp["kind"] == "unpaired"
    diff = cmp["points"][0]["metrics"]["p50_ttft_ms"]["vs_baseline"]["two"]
    assert diff["difference"]["paired"] is False and "Welch" in diff["difference"]["method"]
    with pytest.raises(ValueError, match="differ in fixed conditions:\n  model"):
        compare_experiments(outs[:2], allow=set())
    with pytest.raises(ValueError, match="workload"):
        compare_experiments([outs[0], outs[2]], allow=set())
    by_name = compare_experiments([outs[0], "cmp-two"], allow={"model"}, tracking_uri=mlflow_uri)
    assert by_name["configs"] == ["one", "cmp-two"]
    named = by_name["points"][0]["metrics"]["p50_ttft_ms"]["per_config"]["cmp-two"]
    assert named["value"] == pytest.approx(cmp["points"][0]["metrics"]["p50_ttft_ms"]["per_config"]["two"]["value"])


@pytest.mark.slow
def test_blocks_are_added_until_the_intervals_converge(tmp_path):
    from engines.tiny_model import ensure_tiny_model
    from protocols.registry import protocol_experiment
    from tests.fake_server import FakeServer

    out = tmp_path / "out"
    with FakeServer() as srv:
        overrides = _overrides(srv.base_url, ensure_tiny_model(), out, extra=(
            "protocol.repeats=2", "protocol.max_repeats=4", "protocol.target_rel_halfwidth=0.0001",
            "protocol.converge_metrics=[p50_ttft_ms]"))
        with initialize_config_module("conf", version_base="1.3"):
            exp = protocol_experiment(compose("config", overrides=overrides), overrides=overrides)
        exp.run()
    record = json.loads((out / "experiment.json").read_text())
    assert len(record["blocks"]) == 4            # 2 planned, 2 added: +-0.01 % is out of reach
    assert "max_repeats=4" in record["convergence"] and "not converged" in record["convergence"]
    assert len(pq.read_table(out / "runs.parquet")) == 8


@pytest.mark.parametrize("protocol", ["compare", "ablation"])
def test_the_verdicts_of_a_point_are_a_family_by_default(protocol):
    # adjust=none gave a false winner between identical engines in 2 of 3 live comparisons
    # (benchmarks/verdicts.py --row compare, docs/measured/verdicts.md): bonferroni is the default
    with initialize_config_module("conf", version_base="1.3"):
        cfg = compose("config", overrides=[f"protocol={protocol}"])
    assert cfg.protocol.adjust == "bonferroni"
