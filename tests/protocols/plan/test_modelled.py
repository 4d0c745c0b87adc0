"""Modelled configs without Dynamo: the knobs checked, a run's offered requests read back, a
base replayed with other knobs by a fake replay (a Python that answers with records whose TTFT
follows max_num_seqs), the validated error beside it, and a modelled verdict never worded as a
measured one."""

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from protocols.plan import scheduler as sched
from protocols.plan.capacity import ConfigCapacity, OperatingPoint, run_requests
from protocols.plan.modelled import model_knobs, modelled_capacity, rate_ladder
from tests.protocols.plan import fake_replay
from tests.protocols.plan.test_scheduler import TABLES

# the fake replay: TTFT = 400 / max_num_seqs ms, 10 ms a further token
TTFT = """
def ttft_ms(engine_args, rows):
    return 400.0 / engine_args["max_num_seqs"]
"""


@pytest.fixture
def fake_model(tmp_path):
    np.savez(tmp_path / "perf_data.npz", **TABLES)
    yield sched.SchedulerModel(fake_replay.python(tmp_path, TTFT), tmp_path / "perf_data.npz", {"max_num_seqs": 8},
                               cache_dir=tmp_path / "cache")
    sched.close_workers()


def test_knobs_by_mocker_name_or_config_key():
    assert model_knobs({"engine.features.max_num_seqs": 32, "enable_prefix_caching": False,
                        "engine.mocker.block_size": 32}, "k") == {
        "max_num_seqs": 32, "enable_prefix_caching": False, "block_size": 32}
    for given, needle in (({"max_seqs": 4}, r"k\.max_seqs: not a knob"), ({"max_num_seqs": 0}, "integer >= 1"),
                          ({"max_num_seqs": True}, "integer >= 1"), ({"enable_chunked_prefill": 1}, "true or false"),
                          ({"engine.features.max_batch_tokens": 256, "max_num_batched_tokens": 512}, "again")):
        with pytest.raises(ValueError, match=needle):
            model_knobs(given, "k")


def test_rate_ladder_as_fine_as_the_search():
    assert rate_ladder(4.0, 16.0, 1.0) == [4.0, 8.0, 16.0]
    lad = rate_ladder(1.0, 10.0, 0.1)
    assert lad[0] == 1.0 and lad[-1] == pytest.approx(10.0) and len(lad) == 26   # ceil(ln 10 / ln 1.1) = 25 steps
    assert max(b / a for a, b in zip(lad, lad[1:])) <= 1.1


def _run(folder, arrivals_s, status, warmup, output):
    folder.mkdir(parents=True)
    n = len(arrivals_s)
    pq.write_table(pa.table({"scheduled_ns": pa.array([int(5e9 + a * 1e9) for a in arrivals_s], pa.int64()),
                             "prompt_tokens": pa.array([100] * n, pa.int64()),
                             "output_tokens": pa.array(output, pa.int64()), "status": status,
                             "warmup": warmup}), folder / "requests.parquet")
    return str(folder)


def test_a_runs_offered_requests(tmp_path):
    # a warm-up row (left out), nine served and one failed at 4.5 s (its output: the median, 11)
    run = _run(tmp_path / "r", [-1.0, *range(9), 4.5], ["ok"] * 10 + ["http_error"], [True] + [False] * 10,
               [11] * 10 + [0])
    arr, pr, ou, failed = run_requests(run)
    assert arr.tolist() == [0, 1, 2, 3, 4, 4.5, 5, 6, 7, 8] and failed == 1
    assert ou.tolist() == [11] * 10 and pr.tolist() == [100] * 10


def test_base_replayed_with_other_knobs(tmp_path, fake_model):
    """Each base run's own requests replayed with the modelled knob: TTFT 400 / 4 = 100 ms, the
    base's loads and blocks kept, in flight by Little's law by hand."""
    import dataclasses

    runs = [_run(tmp_path / f"b{b}", [float(i) for i in range(10)], ["ok"] * 10, [False] * 10, [11] * 10)
            for b in (0, 1)]
    pts = [OperatingPoint(rate_rps=1.0, in_flight=0.1, prompt_tokens=np.full(10, 100), ttft_s=np.full(10, 0.05),
                          tpot_s=np.full(10, 0.01), output_tokens=np.full(10, 11), block=b, run_dir=r)
           for b, r in enumerate(runs)]
    base = ConfigCapacity(name="base", source="measured", origin="exp", points={1: pts}, cold_start_s=[3.0, 4.0],
                          cost={"model": "rental"})
    four = dataclasses.replace(fake_model, knobs={"max_num_seqs": 4})
    cap = modelled_capacity("seqs4", base, four, {"max_num_seqs": 4})
    assert cap.source == "modelled" and cap.name == "seqs4" and cap.blocks == [0, 1]
    assert cap.cost == base.cost and cap.cold_start_s == [3.0, 4.0]
    assert cap.notes == ["modelled, never run: base (measured, exp) with max_num_seqs=4; each of its 2 runs' "
                         "requests replayed by the engine's scheduler model with those knobs"]
    p = cap.points[1][0]
    assert p.rate_rps == 1.0 and p.failed == 0 and p.ttft_s == pytest.approx([0.1] * 10)
    assert p.tpot_s == pytest.approx([0.01] * 10)
    # E2EL 0.1 + 10 x 0.01 = 0.2 s each; first arrival 0, last completion 9.2 s: 10 x 0.2 / 9.2
    assert p.in_flight == pytest.approx(2.0 / 9.2)
    assert cap.points[1][1].run_dir == runs[1]


def _plan_doc(validation_model="scheduler"):
    rm = {"model": "scheduler", "modelled": {"base": "a", "knobs": {"max_num_seqs": 4}}}
    return {"candidates": {"a": {"source": "measured", "replica_model": {"model": validation_model}},
                           "a4": {"source": "modelled", "replica_model": rm}},
            "plans": [{"configs": {"a": {"source": "measured"}, "a4": {"source": "modelled"}},
                       "cheapest": {"config": "a4", "verdict": "a4 is cheapest at the SLO: -30.0% ..."}}],
            "validation": {"config": "a", "run": "RUN", "rows": [{"metric": "goodput_rps", "error": -0.07},
                                                                  {"metric": "p90_ttft_ms", "error": 0.09}]}}


def test_validated_error_from_the_residuals_or_the_plans_validation(tmp_path):
    from harness.report.plan import modelled_text
    from protocols.plan.modelled import residuals_error
    from protocols.plan.residuals import read_residuals
    from protocols.plan.run import mark_modelled, own_model_error

    f = tmp_path / "residuals.json"
    f.write_text(json.dumps({"held_out": True, "residuals": [
        {"model": "scheduler", "case": "heavy", "metric": "goodput_rps", "predicted": 9.3, "measured": 10.0},
        {"model": "scheduler", "case": "heavy", "metric": "p90_ttft_ms", "predicted": 110.0, "measured": 100.0},
        {"model": "processor_sharing", "case": "heavy", "metric": "p90_ttft_ms", "predicted": 160.0,
         "measured": 100.0}]}))
    err = residuals_error(read_residuals(str(f)))
    # the scheduler's cases only: -7 % and +10 %; processor sharing's +60 % is another model's
    assert err["bound"] == pytest.approx(0.10) and err["metric"] == "p90_ttft_ms"
    assert err["source"] == f"{f}: 1 scheduler case(s), held out"
    doc = _plan_doc()
    mark_modelled(doc, err)
    m = doc["plans"][0]["configs"]["a4"]["modelled"]
    assert m["validated"] == f"validated error ±10% (worst: p90_ttft_ms; {f}: 1 scheduler case(s), held out)"
    assert modelled_text(m) == f"modelled, never run: a with max_num_seqs=4; {m['validated']}"
    # a cheapest verdict on a config never run says so
    assert doc["plans"][0]["cheapest"]["modelled"] is True
    assert "(modelled, never run: validated error ±10%" in doc["plans"][0]["cheapest"]["verdict"]
    # without scheduler cases: the plan's own validation of a candidate on the scheduler, else none
    none = tmp_path / "ps.json"
    none.write_text(json.dumps([{"model": "processor_sharing", "case": "x", "metric": "goodput_rps",
                                 "predicted": 1.0, "measured": 2.0}]))
    assert residuals_error(read_residuals(str(none))) is None and residuals_error(None) is None
    own = own_model_error(_plan_doc())
    assert own["bound"] == pytest.approx(0.09) and own["source"] == "this plan's validation: a against RUN"
    ps = _plan_doc("processor_sharing")
    assert own_model_error(ps) is None     # a validation of processor sharing does not validate the scheduler
    mark_modelled(ps, None)
    assert ps["plans"][0]["configs"]["a4"]["modelled"]["validated"] == "not validated"
    assert "(modelled, never run: not validated;" in ps["plans"][0]["cheapest"]["verdict"]


def test_the_console_never_prints_a_modelled_config_as_measured(capsys):
    from protocols.plan.record import PLAN_METRICS, config_entry
    from protocols.plan.run import print_plan

    point = {m: 1.0 for m in PLAN_METRICS}
    common = {"metrics": config_entry(point, [], 0.95), "meets_slo": True, "outside_measurements": False,
              "replica_model": {"model": "scheduler"}}
    modelled = {"base": "a", "knobs": {"max_num_seqs": 4, "enable_prefix_caching": False},
                "validated": "not validated"}
    doc = {"plans": [{"variant": "base", "slo": {"ttft_ms": 500.0, "percentile": 99},
                      "configs": {"a": {**common, "source": "measured"},
                                  "a4": {**common, "source": "modelled", "modelled": modelled}},
                      "skipped": {}, "cheapest": {"verdict": "v"}}], "warnings": []}
    print_plan(doc)
    lines = {x.split(":")[0].strip(): x for x in capsys.readouterr().out.splitlines() if ":" in x}
    assert lines["a4"].endswith("[modelled, never run: a with max_num_seqs=4, enable_prefix_caching=false; not "
                                "validated]  [replicas: the engine's scheduler]")
    assert "modelled" not in lines["a"]
