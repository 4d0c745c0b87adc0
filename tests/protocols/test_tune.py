"""protocol=tune: the space, the verdicts and the Pareto front by hand; the real Optuna study
over a stubbed trial (known cost and max load per config) finding the cheapest feasible
config; and a real tune against the fake engine, resumed."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from optuna.samplers import GridSampler

from harness.errors import UserError
from metrics.tune_verdict import best_trial, judge, pareto_front
from protocols.sweep.record import SWEEP_RECORD
from protocols.tune.plan import Knob, make_sampler, parse_space, search_space


# ------------------------------------------------------------------------------------ the space
def test_space_to_study_distributions():
    knobs = parse_space({"engine.features.max_num_seqs": [4, 8, 16],
                         "engine.features.max_num_batched_tokens": {"low": 256, "high": 2048, "log": True},
                         "engine.model": ["fake-knee_rps:8", "x y"],
                         "cost.hourly_per_host": {"low": 0.1, "high": 0.5, "step": 0.1},
                         "engine.features.tensor_parallel_size": {"low": 1, "high": 4}})
    # the distributions meant, both ends included
    d = search_space(knobs)
    assert d["engine.features.max_num_seqs"].choices == (4, 8, 16)
    tokens = d["engine.features.max_num_batched_tokens"]
    assert (type(tokens).__name__, tokens.low, tokens.high, tokens.log) == ("IntDistribution", 256, 2048, True)
    assert d["engine.model"].choices == ("fake-knee_rps:8", "x y")
    cost = d["cost.hourly_per_host"]
    assert (type(cost).__name__, cost.low, cost.high, cost.step) == ("FloatDistribution", 0.1, 0.5, 0.1)
    tp = d["engine.features.tensor_parallel_size"]
    assert (type(tp).__name__, tp.low, tp.high, tp.step, tp.log) == ("IntDistribution", 1, 4, 1, False)
    # the grid gets every value, the high end included
    grid = search_space([Knob("a", low=256, high=1024, step=256, integer=True), knobs[3]], grid=True)
    assert grid["a"].choices == (256, 512, 768, 1024) and grid["cost.hourly_per_host"].choices == (
        0.1, 0.2, 0.3, 0.4, 0.5)
    # samplers are seeded; TPE starts with protocol.startup_trials random suggestions (3 by default)
    tpe = make_sampler("tpe", knobs[:1], seed=3)
    assert type(tpe).__name__ == "TPESampler" and tpe._n_startup_trials == 3
    assert isinstance(make_sampler("grid", knobs[:1], seed=3), GridSampler)
    assert type(make_sampler("random", knobs[:1], seed=3)).__name__ == "RandomSampler"


@pytest.mark.parametrize("space, needle", [
    (None, "give the knobs"),
    ({"engine.features.max_num_seqs": []}, "empty list"),
    ({"engine.features.max_num_seqs": [4, 4]}, "listed twice"),
    ({"engine.features.max_num_seqs": [None]}, "strings, numbers or booleans"),
    ({"engine.features.max_num_seqs": {"low": 8, "high": 4}}, "must be below"),
    ({"engine.features.max_num_seqs": {"low": 0, "high": 4, "log": True}}, "low > 0"),
    ({"engine.features.max_num_seqs": {"low": 1, "high": 9, "step": 3}}, "not a multiple"),
    ({"engine.features.max_num_seqs": {"low": 1, "high": 9, "step": 2, "log": True}}, "not both"),
    ({"engine.features.max_num_seqs": {"lo": 1, "high": 9}}, "unknown field"),
    ({"protocol.trials": [1, 2]}, "cannot be tuned"),
    ({"+engine.x": [1, 2]}, "existing config key"),
])
def test_bad_spaces_are_named(space, needle):
    with pytest.raises(ValueError, match=needle):
        parse_space(space)
    with pytest.raises(ValueError, match="grid needs"):
        Knob("a", low=0.1, high=1.0).grid()


# ------------------------------------------------------------------------------------ verdicts
def _search(load, cost, note="bracket within tolerance 10%", hi=None):
    return {"max_load_under_slo": load, "bracket": [load, hi or (load * 1.1 if load else "inf")], "note": note,
            "cost_per_mtok_good": cost, "goodput_rps": load * 0.9,
            "cost_per_good_request": cost / 1e4 if load else cost}


def test_feasibility_and_what_optuna_is_told():
    ok = judge(_search(8.0, 2.0), "cost_per_mtok_good")
    assert ok["feasible"] and ok["objective"] == 2.0 and ok["why"] is None
    gpd = judge(_search(8.0, 2.0), "goodput_per_dollar")
    assert gpd["objective"] == pytest.approx(1e4 / 2.0)
    none = judge(_search(0.0, "inf", note="the SLO fails already at the low end 1"), "cost_per_mtok_good")
    assert not none["feasible"] and "fails already at the low end" in none["why"] and none["objective"] == math.inf
    assert judge(_search(0.0, "inf"), "goodput_per_dollar")["objective"] == 0.0
    gate = judge(_search(8.0, 2.0), "cost_per_mtok_good", quality_passed=False, quality_reason="agreement 0.5")
    assert not gate["feasible"] and gate["why"] == "quality gate failed: agreement 0.5"
    err = judge(None, "cost_per_mtok_good", error="engine did not start")
    assert not err["feasible"] and err["why"] == "engine did not start"
    top = judge(_search(8.0, 2.0, hi="inf"), "cost_per_mtok_good")
    assert top["feasible"] and "lower bound" in top["note"]


def test_pareto_front_and_best_by_hand():
    pts = {0: (2.0, 5.0), 1: (4.0, 6.0), 2: (3.0, 7.0), 3: (8.0, 9.0), 4: (8.0, 10.0), 5: (1.0, 4.0)}
    trials = [{"trial": n, "feasible": True, "max_load_under_slo": load, "cost_per_mtok_good": cost,
               "objective": cost} for n, (load, cost) in pts.items()]
    trials.append({"trial": 6, "feasible": False, "max_load_under_slo": 0.0, "cost_per_mtok_good": math.inf,
                   "objective": math.inf})
    trials.append({"trial": 7, "feasible": False, "max_load_under_slo": 50.0, "cost_per_mtok_good": 0.1,
                   "objective": math.inf, "why": "quality gate failed"})  # would dominate all: not on the front
    # 2 (3, 7) is dominated by 1 (4, 6); 4 (8, 10) by 3 (8, 9); the rest trade load against cost
    assert [t["trial"] for t in pareto_front(trials)] == [5, 0, 1, 3]
    assert best_trial(trials, "cost_per_mtok_good")["trial"] == 5
    # maximised: the highest objective among the feasible (here the objective is the cost itself)
    assert best_trial(trials, "goodput_per_dollar")["trial"] == 4
    assert best_trial(trials[6:], "cost_per_mtok_good") is None


# ------------------------------------------------------------------------------------ the study, stubbed trials
SEQS, TOKENS = [4, 8, 16, 32], [256, 512, 768, 1024]


def truth(seqs: int, tokens: int) -> dict:
    """The stub engine: max load grows with both knobs, the price per hour faster than the load
    with seqs (so more load costs more per token: a trade-off); seqs=4 never meets the SLO,
    (32, 1024) fails the quality gate and (32, 256) does not start."""
    if (seqs, tokens) == (32, 256):
        return {"error": "engine did not start: max_num_batched_tokens too small for 32 sequences"}
    load = 0.0 if seqs == 4 else seqs / 4 * (1 + tokens / 1024)
    cost = math.inf if load == 0 else 10 * (seqs / 4) ** 1.5 / load
    return {"load": load, "cost": cost, "gate": (seqs, tokens) != (32, 1024)}


class StubExperiment:
    """Stands in for protocols.experiment.Experiment: writes what a trial's search would find."""
    runs: list = []

    def __init__(self, cfg, explicit=frozenset(), overrides=None, *, records):
        self.cfg, self.out = cfg, None
        self.seqs, self.tokens = int(cfg.engine.features.max_num_seqs), int(cfg.engine.features.max_num_batched_tokens)
        assert cfg.protocol.name == "sweep" and cfg.protocol.search == "slo"
        assert records == (SWEEP_RECORD,)  # a trial is a sweep, and records as one

    def run(self):
        StubExperiment.runs.append((self.seqs, self.tokens))
        t = truth(self.seqs, self.tokens)
        if "error" in t:
            raise UserError(t["error"])
        self.out.mkdir(parents=True, exist_ok=True)
        note = "bracket within tolerance 10%" if t["load"] else "the SLO fails already at the low end 1"
        (self.out / "search.json").write_text(json.dumps(_search(t["load"], t["cost"] if t["load"] else "inf", note)))
        (self.out / "experiment.json").write_text(json.dumps({"quality_gate_passed": t["gate"]}))


def _stub_tune(tmp_path, monkeypatch, *extra, seqs=SEQS, tokens=TOKENS):
    import protocols.tune.trials
    from harness.cli import main

    StubExperiment.runs = []
    monkeypatch.setattr(protocols.tune.trials, "Experiment", StubExperiment)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    argv = ["protocol=tune", "engine=vllm", "load=constant", "protocol.search_low=1", "protocol.search_high=40",
            f"output_dir={out}", "mlflow.enabled=false", "report.enabled=false", "progress=false",
            f"protocol.space={{engine.features.max_num_seqs: {seqs}, "
            f"engine.features.max_num_batched_tokens: {tokens}}}", *extra]
    assert main(["run", *argv]) == 0
    return json.loads((out / "tune.json").read_text()), out


def _expected(seqs=SEQS, tokens=TOKENS):
    cases = {(s, t): truth(s, t) for s in seqs for t in tokens}
    ok = {k: v for k, v in cases.items() if "error" not in v and v["load"] > 0 and v["gate"]}
    return min(ok, key=lambda k: ok[k]["cost"]), ok


@pytest.mark.slow
def test_tpe_finds_the_cheapest_feasible_config_within_the_budget(tmp_path, monkeypatch):
    # 16 configs, 8 suggestions (3 of them random) from the default sampler
    record, out = _stub_tune(tmp_path, monkeypatch, "protocol.trials=8")
    (best_seqs, best_tokens), _ = _expected()
    assert record["best"]["params"] == {"engine.features.max_num_seqs": best_seqs,
                                        "engine.features.max_num_batched_tokens": best_tokens}
    assert record["sampler"] == "tpe" and len(record["suggestions"]) == 8
    # every distinct config ran once: a repeated suggestion is read back
    assert len(StubExperiment.runs) == len(set(StubExperiment.runs)) == len(record["trials"])
    assert [s["evaluated"] for s in record["suggestions"]].count("ran") == len(record["trials"])
    steps = json.loads((out / "experiment.json").read_text())["steps"]
    assert steps[5]["ran"] and "tune:" in steps[5]["how"]
    assert (out / "study.db").exists() and record["study"]["sampler"].startswith("optuna TPESampler(")


@pytest.mark.slow
def test_grid_records_every_config_and_the_pareto_front(tmp_path, monkeypatch, capsys):
    seqs, tokens = [4, 8, 16, 32], [256, 1024]
    record, out = _stub_tune(tmp_path, monkeypatch, "protocol.sampler=grid", "protocol.trials=100",
                             seqs=seqs, tokens=tokens)
    best, ok = _expected(seqs, tokens)
    assert record["budget"] == 8 and len(record["trials"]) == 8
    assert sorted(StubExperiment.runs) == sorted((s, t) for s in seqs for t in tokens)
    by = {(t["params"]["engine.features.max_num_seqs"], t["params"]["engine.features.max_num_batched_tokens"]): t
          for t in record["trials"]}
    assert all(not by[(4, t)]["feasible"] and "meets the SLO" in by[(4, t)]["why"] for t in tokens)
    assert by[(32, 1024)]["why"].startswith("quality gate failed")
    assert by[(32, 256)]["why"].startswith("engine did not start")
    assert record["feasible"] == len(ok) == 4
    assert tuple(record["best"]["params"].values()) == best == (8, 1024)
    # the front by hand: (8, 1024) load 4 cost 7.07, (16, 1024) load 8 cost 10; (8, 256) and
    # (16, 256) carry less load at a higher cost
    assert [tuple(t["params"].values()) for t in record["pareto_front"]] == [(8, 1024), (16, 1024)]
    assert [(t["max_load_under_slo"], round(t["cost_per_mtok_good"], 3)) for t in record["pareto_front"]] == [
        (4.0, 7.071), (8.0, 10.0)]
    # the stub writes no runs, so there is no runs.parquet
    assert not (out / "runs.parquet").exists()
    # the answer: the pick as measured, last on the console and in tune.json
    assert record["answer"]["lines"][0] == (
        f"the pick is trial {record['best']['trial']} (engine.features.max_num_seqs=8 "
        "engine.features.max_num_batched_tokens=1024): cost_per_mtok_good 7.071, measured: highest load under the "
        "SLO 4, 7.071 per M good tokens there")
    console = capsys.readouterr().out.splitlines()
    assert console[console.index("answer (tune):") + 1:] == [f"  {x}" for x in record["answer"]["lines"]]


def test_bad_tunes_stop_before_any_trial(tmp_path, monkeypatch):
    import protocols.tune.run

    monkeypatch.chdir(tmp_path)
    base = ["protocol=tune", "engine=vllm", f"output_dir={tmp_path}/out", "mlflow.enabled=false"]
    cases = [(["protocol.space={engine.features.max_num_seqs: [0, 4]}", "protocol.search_low=1",
               "protocol.search_high=9"], "must be >= 1"),
             (["protocol.space={engine.features.nope: [1]}", "protocol.search_low=1", "protocol.search_high=9"],
              "no such key"),
             (["protocol.space={engine.features.max_num_seqs: [4]}"], "protocol.search_low"),
             (["protocol.space={engine.features.max_num_seqs: [4]}", "engine.features.max_num_seqs=8",
               "protocol.search_low=1", "protocol.search_high=9"], "also set on the command line")]
    for extra, needle in cases:
        with pytest.raises(UserError, match=needle):
            from conf.compose import compose_config

            protocols.tune.run.Tuner(compose_config(base + extra), base + extra)
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------------ a real tune, resumed
@pytest.mark.slow
def test_tune_against_the_fake_engine_and_resume(tmp_path, monkeypatch):
    from engines.tiny_model import ensure_tiny_model
    from harness.cli import main
    from tests.fake_server import FakeServer

    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    with FakeServer() as srv:
        argv = ["protocol=tune", "engine=openai", f"engine.base_url={srv.base_url}",
                f"engine.tokenizer={ensure_tiny_model()}", "load=constant", "load.num_requests=null",
                "load.duration_s=0.25", "load.warmup_requests=0", "load.rate=4", "protocol.search_low=4",
                "protocol.search_high=30", "protocol.search_tolerance=0.9", "slo.ttft_ms=100", "slo.tpot_ms=null",
                f"output_dir={out}", "mlflow.enabled=false", "report.enabled=false", "progress=false",
                "telemetry.idle_baseline_s=0", "protocol.sampler=grid",
                # knee 20 req/s (the fake's first token takes 300 ms above it), too slow at any load,
                # or faster but with other outputs than the quality gate's reference
                'protocol.space={engine.model: ["fake-knee_rps:20", "fake-ttft_ms:150", "fake-knee_rps:40-word:cat"]}',
                'protocol.reference=["engine.model=fake-knee_rps:20"]', "quality.num_prompts=3",
                "quality.max_tokens=4"]
        assert main(["run", *argv, "protocol.trials=3"]) == 0
        record = json.loads((out / "tune.json").read_text())
        assert [s["evaluated"] for s in record["suggestions"]] == ["ran", "ran", "ran"]
        assert json.loads((out / "reference" / "quality.json").read_text())["failed"] == 0
        runs = {p: p.stat().st_mtime_ns for p in out.glob("trials/*/**/summary.json")}
        # as if interrupted at the end of the second trial's search
        last = out / "trials" / str(record["suggestions"][2]["trial"])
        (last / "trial.json").write_text(json.dumps({**json.loads((last / "trial.json").read_text()),
                                                     "status": "running"}))
        (last / "search.json").unlink()
        # the same command: the first trial is read back, the second resumes in its folder; no run repeated
        assert main(["run", *argv, "protocol.trials=3"]) == 0
        assert {p: p.stat().st_mtime_ns for p in out.glob("trials/*/**/summary.json")} == runs
    again = json.loads((out / "tune.json").read_text())
    assert again["suggestions"] == [{**record["suggestions"][0], "evaluated": "reused"},
                                    {**record["suggestions"][1], "evaluated": "reused"},
                                    {**record["suggestions"][2], "evaluated": "resumed"}]
    assert [{k: v for k, v in t.items() if k != "duration_s"} for t in again["trials"]] == [
        {k: v for k, v in t.items() if k != "duration_s"} for t in record["trials"]]
    by = {t["params"]["engine.model"]: t for t in record["trials"]}
    fast, slow, wrong = by["fake-knee_rps:20"], by["fake-ttft_ms:150"], by["fake-knee_rps:40-word:cat"]
    assert not slow["feasible"] and "fails already at the low end" in slow["why"]
    assert not wrong["feasible"] and "quality gate failed: greedy token agreement with reference 0.000" in wrong["why"]
    assert fast["feasible"] and 4 <= fast["max_load_under_slo"] < 20 and fast["cost_per_mtok_good"] > 0
    assert record["best"]["trial"] == fast["trial"] and [t["trial"] for t in record["pareto_front"]] == [fast["trial"]]
    # each trial is an experiment with its full record; the tune's own record says tune ran
    assert (out / fast["folder"] / "search.json").exists() and (out / fast["folder"] / "runs.parquet").exists()
    assert json.loads((out / fast["folder"] / "experiment.json").read_text())["protocol"] == "sweep"
    record_steps = json.loads((out / "experiment.json").read_text())
    assert record_steps["protocol"] == "tune" and record_steps["steps"][5]["ran"]
    import pyarrow.parquet as pq

    runs = pq.read_table(out / "runs.parquet").to_pylist()
    assert {r["config"] for r in runs} == {f"trial{t['trial']}" for t in (fast, slow, wrong)}
    assert all(r["param.engine.model"] in by for r in runs)
    assert Path(out / "tune_base.json").exists()
