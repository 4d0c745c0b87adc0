"""protocol=tune protocol.screen=model: the space ranked on the scheduler model (a fake replay
whose knee is max_num_seqs / 2 req/s), only the finalists measured (stubbed trials whose max
load is known), the winner confirmed by a second measurement, a finalist that disagrees with
the model beyond the validated error reported as such, and no modelled figure printed as a
measured one."""

from __future__ import annotations

import json

import numpy as np
import pytest

from protocols.sweep.record import SWEEP_RECORD
from tests.protocols.plan import fake_replay
from tests.protocols.plan.test_scheduler import TABLES

# the fake replay: a request's TTFT is 50 ms up to max_num_seqs / 2 req/s, 2 s above; 10 ms a token
TTFT = """
def ttft_ms(engine_args, rows):
    knee = engine_args["max_num_seqs"] / 2
    span = (rows[-1]["timestamp"] - rows[0]["timestamp"]) / 1e3
    rate = (len(rows) - 1) / span if span > 0 else 0.0
    return 50.0 if rate <= knee * 1.01 else 2000.0
"""

MEASURED_LOAD = {4: 1.0, 8: 4.0, 16: 8.0, 32: 9.0}   # the stub engine's max load under the SLO per max_num_seqs


class StubExperiment:
    """A trial's sweep: writes the search a real one would find (``MEASURED_LOAD``); its cost per
    good token is the model's scaled by modelled / measured load (cost falls as load rises)."""
    runs: list = []
    confirm_fails = False

    def __init__(self, cfg, explicit=frozenset(), overrides=None, *, records):
        self.cfg, self.out = cfg, None
        assert cfg.protocol.name == "sweep" and cfg.protocol.search == "slo" and records == (SWEEP_RECORD,)
        self.seqs = int(cfg.engine.features.max_num_seqs)

    def run(self):
        StubExperiment.runs.append(self.seqs)
        root = self.out.parent if self.out.name == "confirm" else self.out.parent.parent
        screened = json.loads((root / "screen.json").read_text())
        m = next(c for c in screened["configs"] if c["params"]["engine.features.max_num_seqs"] == self.seqs)
        load = MEASURED_LOAD[self.seqs]
        if self.out.name == "confirm" and StubExperiment.confirm_fails:
            load = 0.0
        self.out.mkdir(parents=True, exist_ok=True)
        cost = m["cost_per_mtok_good"] * m["max_load_under_slo"] / load if load else "inf"
        (self.out / "search.json").write_text(json.dumps({
            "max_load_under_slo": load, "bracket": [load, load * 1.1 if load else 1.0], "cost_per_mtok_good": cost,
            "goodput_rps": load, "cost_per_good_request": 1.0, "note": "bracket within tolerance"}))


@pytest.fixture
def setup(tmp_path, monkeypatch):
    import protocols.tune.trials
    from tests.synthetic_experiment import write_experiment

    StubExperiment.runs, StubExperiment.confirm_fails = [], False
    monkeypatch.setattr(protocols.tune.trials, "Experiment", StubExperiment)
    monkeypatch.chdir(tmp_path)
    base = write_experiment(tmp_path / "base", configs={"vllm": {"ttft_ms": 40.0, "tpot_ms": 8.0, "capacity": 40.0,
                                                                 "power_w": 400.0}},
                            requests=40, rates=(2.0, 4.0), blocks=1)
    np.savez(base / "perf_data.npz", **TABLES)   # the profile beside the base experiment
    py = fake_replay.python(tmp_path, TTFT)
    # residuals of the scheduler model, 9 % off at worst
    val = tmp_path / "residuals.json"
    val.write_text(json.dumps({"held_out": True, "residuals": [
        {"model": "scheduler", "case": "c", "metric": "p90_ttft_ms", "predicted": 109.0, "measured": 100.0},
        {"model": "scheduler", "case": "c", "metric": "goodput_rps", "predicted": 9.7, "measured": 10.0}]}))
    yield base, py, val
    from protocols.plan import scheduler
    scheduler.close_workers()


def _tune(tmp_path, base, py, *extra):
    from harness.cli import main

    out = tmp_path / "out"
    argv = ["protocol=tune", "engine=vllm", "load=constant", "protocol.screen=model", "protocol.finalists=2",
            f"protocol.base_experiment={base}", f"protocol.dynamo_python={py}", "protocol.search_low=1",
            "protocol.search_high=16", "protocol.search_tolerance=0.42", "protocol.screen_requests=20",
            "slo.ttft_ms=1000", "slo.tpot_ms=null", f"output_dir={out}", "mlflow.enabled=false",
            "progress=false", "quality.enabled=false",
            "protocol.space={engine.features.max_num_seqs: [4, 8, 16, 32]}", *extra]
    assert main(["run", *argv]) == 0
    return json.loads((out / "tune.json").read_text()), out


@pytest.mark.slow
def test_screen_measures_the_finalists_and_confirms_the_winner(tmp_path, setup, capsys):
    base, py, val = setup
    record, out = _tune(tmp_path, base, py, f"protocol.residuals={val}", "report.enabled=true")
    s = record["screen"]
    # the ladder: 1 to 16 req/s, each 2^0.5 times the last (tolerance 0.42: ceil(ln 16 / ln 1.42) = 8 steps)
    assert s["rates"] == pytest.approx([2 ** (i / 2) for i in range(9)])
    # on the model each config holds up to its knee, max_num_seqs / 2; all modelled
    by = {c["params"]["engine.features.max_num_seqs"]: c for c in s["configs"]}
    assert {k: c["max_load_under_slo"] for k, c in by.items()} == pytest.approx({4: 2.0, 8: 4.0, 16: 8.0, 32: 16.0})
    assert {c["source"] for c in s["configs"]} == {"modelled"}
    assert [by[k]["rank"] for k in (32, 16, 8, 4)] == [1, 2, 3, 4]       # cost falls as the load rises
    # only the two finalists were measured, then the winner (32: measured 9 req/s beats 8) again
    assert StubExperiment.runs == [32, 16, 32]
    assert [t["params"]["engine.features.max_num_seqs"] for t in record["trials"]] == [32, 16]
    f32, f16 = s["finalists"]
    # 32: modelled 16 req/s, measured 9: +78 %, beyond the validated 9 % + the search's 42 %
    assert f32["max_load"] == {"error": pytest.approx(16 / 9 - 1), "limit": pytest.approx(0.51), "disagrees": True}
    assert f32["disagrees"] is True and "the model disagrees with the measurement" in f32["note"]
    assert f16["max_load"]["error"] == pytest.approx(0.0) and f16["disagrees"] is False
    assert s["disagreeing"] == [f32["trial"]] and s["validated"].startswith("validated error ±9%")
    # the result stands on measurements: trial 32's, confirmed by the second
    best = record["best"]
    assert best["params"] == {"engine.features.max_num_seqs": 32} and record["best_stands_on"] == "measurement"
    assert best["max_load_under_slo"] == 9.0 and best["confirmation"]["max_load_under_slo"] == 9.0
    assert (out / "confirm" / "search.json").exists() and not (out / "study.db").exists()
    printed = capsys.readouterr().out
    assert "MODELLED figures, not measurements" in printed
    for seqs in (4, 8):   # never measured: said so, and never in the measured tables
        line = next(x for x in printed.splitlines() if x.split()[:2] == [str(by[seqs]["rank"]), str(seqs)])
        assert line.endswith("modelled only, not measured")
    assert "(measured; confirmed by a second measurement" in printed
    # the page: the result as measured, every screened figure labelled modelled
    page = (out / "tune.html").read_text()
    assert "<b>Best (measured): trial 0, engine.features.max_num_seqs=32</b>" in page
    assert "confirmed by a second measurement" in page and "<b>modelled figures, not measurements</b>" in page
    assert page.count("modelled only, not measured") == 2 and "the model disagrees with the measurement" in page
    steps = json.loads((out / "experiment.json").read_text())["steps"]
    assert steps[5]["how"].startswith("screened 4 configs on the scheduler model (modelled), measured the 2 finalists")


@pytest.mark.slow
def test_no_result_without_a_confirmed_measurement(tmp_path, setup, capsys):
    """The confirmation fails the SLO: no best, whatever the model and the first measurement
    said; without a validated error, no disagreement is judged."""
    base, py, _ = setup
    StubExperiment.confirm_fails = True
    record, out = _tune(tmp_path, base, py, "report.enabled=false")
    assert not (out / "tune.html").exists()
    assert record["best"] is None and record["best_stands_on"] is None
    assert record["best_note"].startswith("trial 0 was the best measured finalist but is not confirmed")
    s = record["screen"]
    assert s["validated"] == "not validated" and [f["disagrees"] for f in s["finalists"]] == [None, None]
    assert s["finalists"][0]["max_load"] == {"error": pytest.approx(16 / 9 - 1), "limit": None, "disagrees": None}
    assert "best: trial 0 was the best measured finalist but is not confirmed" in capsys.readouterr().out


def test_bad_screens_stop_before_anything_runs(tmp_path, monkeypatch):
    import protocols.tune.run
    from conf.compose import compose_config
    from harness.errors import UserError

    monkeypatch.chdir(tmp_path)
    base = ["protocol=tune", "engine=vllm", f"output_dir={tmp_path}/out", "mlflow.enabled=false",
            "protocol.screen=model", "protocol.search_low=1", "protocol.search_high=9"]
    seqs = "protocol.space={engine.features.max_num_seqs: [4, 8]}"
    cases = [(["protocol.space={engine.features.dtype: [half, float]}", "load=constant", "protocol.base_experiment=x"],
              "knobs the scheduler model knows"),
             (["protocol.space={engine.features.max_num_seqs: {low: 4, high: 8}}", "load=constant",
               "protocol.base_experiment=x"], None),
             ([seqs, "load=concurrency", "protocol.base_experiment=x"], "closed-loop"),
             ([seqs, "load=constant"], "needs protocol.base_experiment")]
    for extra, needle in cases:
        argv = base + extra
        if needle is None:   # an integer range has a grid: accepted
            protocols.tune.run.Tuner(compose_config(argv), argv)
            continue
        with pytest.raises(UserError, match=needle):
            protocols.tune.run.Tuner(compose_config(argv), argv)
    assert not (tmp_path / "out").exists()


def test_an_interrupted_tune_keeps_its_finished_trials_and_ends_its_parent_killed(tmp_path, setup, monkeypatch,
                                                                                   capsys):
    from harness import lifecycle
    from harness.cli import main
    from tests.harness.test_finish import RecordingLogger

    base, py, val = setup
    parent = RecordingLogger()
    monkeypatch.setattr(lifecycle, "start_parent", lambda cfg, out, **kw: parent)
    monkeypatch.setattr("protocols.tune.run.start_parent", lambda cfg, out, **kw: parent, raising=False)
    run = StubExperiment.run

    def second_is_interrupted(self):  # Ctrl-C during the second finalist
        if len(StubExperiment.runs) == 1:
            raise KeyboardInterrupt
        run(self)

    monkeypatch.setattr(StubExperiment, "run", second_is_interrupted)
    out = tmp_path / "out"
    argv = ["protocol=tune", "engine=vllm", "load=constant", "protocol.screen=model", "protocol.finalists=2",
            f"protocol.base_experiment={base}", f"protocol.dynamo_python={py}", "protocol.search_low=1",
            "protocol.search_high=16", "protocol.search_tolerance=0.42", "protocol.screen_requests=20",
            "slo.ttft_ms=1000", "slo.tpot_ms=null", f"output_dir={out}", "progress=false", "quality.enabled=false",
            "report.enabled=false", f"protocol.residuals={val}",
            "protocol.space={engine.features.max_num_seqs: [4, 8, 16, 32]}"]
    with pytest.raises(SystemExit) as stop:
        main(["run", *argv])
    assert stop.value.code == 130
    record = json.loads((out / "tune.json").read_text())
    assert record["status"] == "interrupted" and record["evaluated"] == 1 and len(record["trials"]) == 2
    assert json.loads((out / "experiment.json").read_text())["status"] == "interrupted"
    assert parent.calls[0] == ("metrics", {"tune.evaluated": 1, "tune.feasible": 1})
    assert ("artifact", "tune.json") in parent.calls and parent.calls[-1] == ("end", "KILLED")
    stdout, stderr = capsys.readouterr()
    assert f"finished trials are kept; to resume, run the same command with output_dir={out}" in stderr
    assert stdout.splitlines()[-1].startswith("  ") and "pareto front" not in stdout  # the answer last, no table
