"""tokenfactory plan end to end on a synthetic experiment (two configs, three blocks): plan.json
with intervals, a cheapest config, SLOs and policy variants side by side, the page; and the
bad inputs a user can give, each named."""

import json
import re

import numpy as np
import pytest

from conf.compose import compose_config
from harness.errors import UserError
from protocols.registry import Invocation, run_protocol
from tests.synthetic_experiment import write_experiment


@pytest.fixture(scope="module")
def experiment(tmp_path_factory):
    return write_experiment(tmp_path_factory.mktemp("plan") / "exp", requests=60, rates=(5.0, 10.0, 20.0))


def _trace(path, duration=200.0, peak=12.0, seed=0):
    """Mooncake-format requests whose rate rises to ``peak`` req/s mid-window and falls again."""
    rng = np.random.default_rng(seed)
    t, rows = 0.0, []
    while t < duration:
        rate = 2 + (peak - 2) * np.sin(np.pi * t / duration) ** 2
        t += rng.exponential(1 / rate)
        rows.append(json.dumps({"timestamp": int(t * 1000), "input_length": 256, "output_length": 32,
                                "hash_ids": [1]}))
    path.write_text("\n".join(rows) + "\n")
    return str(path)


def _plan(tmp_path, experiment, *extra):
    trace = _trace(tmp_path / "trace.jsonl")
    cfg = compose_config(["protocol=plan", f"protocol.experiments=[{experiment}]", "workload=mooncake",
                          f"workload.path={trace}", "deployment=replicas", "router=vllm",
                          "deployment.autoscale.cold_start_s=5", "deployment.autoscale.max_replicas=6",
                          "deployment.autoscale.target=0.3",
                          "deployment.autoscale.window_s=10", "deployment.autoscale.scale_down_delay_s=30",
                          "protocol.workers=1", f"output_dir={tmp_path / 'plan'}", *extra])
    out = run_protocol(cfg, Invocation(explicit=frozenset(e.split("=")[0] for e in extra)))
    return out, json.loads((out / "plan.json").read_text())


@pytest.mark.slow  # a whole plan simulated over a day's trace: tens of seconds
def test_plan_two_configs_two_slos_and_a_variant(tmp_path, experiment):
    out, doc = _plan(tmp_path, experiment, "protocol.slos=[{ttft_ms: 150}]",
                     "protocol.variants={fast_start: ['cold_start_s=1']}")
    assert (out / "plan.html").is_file()
    assert [(p["variant"], p["slo"]["ttft_ms"]) for p in doc["plans"]] == [("base", 400.0), ("fast_start", 400.0),
                                                                          ("base", 150.0)]
    base = doc["plans"][0]
    assert set(base["configs"]) == {"fast", "slow"}
    for e in base["configs"].values():
        m = e["metrics"]
        assert m["slo_attainment"]["interval"][0] <= m["slo_attainment"]["value"] <= m["slo_attainment"]["interval"][1]
        assert e["resamples"] == 10                      # the exact bootstrap over 3 blocks
        assert m["replicas_max"]["value"] >= 2 and e["scale_ups"] >= 1
    for name, e in base["configs"].items():
        # the runs recorded no cost profile: the plan's own (a CPU host rental) prices the replica-seconds
        cost = doc["candidates"][name]["cost"]
        hourly = cost["hourly_per_host"] * cost["num_hosts"] + cost["hourly_per_gpu"] * cost["num_gpus"]
        assert e["metrics"]["cost_total"]["value"] == pytest.approx(
            e["metrics"]["paid_replica_seconds"]["value"] / 3600 * hourly)
    # the slower config needs more replicas for the same traffic
    assert (base["configs"]["slow"]["metrics"]["paid_replica_seconds"]["value"]
            > base["configs"]["fast"]["metrics"]["paid_replica_seconds"]["value"])
    assert base["cheapest"]["ranking"][0] == "fast"
    assert doc["answers"]["replicas"]["fast"]["peak"] >= 2
    assert len(doc["answers"]["slos"]) == 2 and doc["answers"]["variants"][0]["variant"] == "fast_start"
    page = (out / "plan.html").read_text()
    assert "What a tighter SLO costs" in page and "fast_start" in page


@pytest.mark.slow  # a whole plan simulated over a day's trace: tens of seconds
def test_an_slo_no_point_meets_is_named_and_skipped(tmp_path, experiment):
    _, doc = _plan(tmp_path, experiment, "protocol.slos=[{ttft_ms: 1}]", "protocol.resamples=0")
    tight = doc["plans"][-1]
    assert not tight["configs"] and "no measured point meets the SLO" in tight["skipped"]["fast"]
    assert any("protocol.search_low" in w for w in doc["warnings"])


def test_nothing_plannable_is_an_error(tmp_path, experiment):
    with pytest.raises(UserError, match="no candidate can be planned"):
        _plan(tmp_path, experiment, "slo.ttft_ms=1", "protocol.resamples=0")


def test_a_policy_that_cannot_keep_up_is_said(tmp_path, experiment):
    _, doc = _plan(tmp_path, experiment, "deployment.autoscale.max_replicas=1", "protocol.resamples=0")
    assert any("cannot keep up" in w for w in doc["warnings"])
    # the slower config (capacity 8.3 req/s at this SLO) falls behind a 13 req/s peak; the faster
    # (16.7 req/s: block 0's 20 req/s run lost 2 of its 58 requests, more than a p99 allows) keeps
    # up with the peak but for a few seconds of Poisson bursts
    assert [c["capacity"]["mean"] for c in doc["plans"][0]["configs"].values()] == pytest.approx([50 / 3, 25 / 3])
    assert not any("fast:" in w and "cannot keep up" in w for w in doc["warnings"])

    def behind(name):
        w = [w for w in doc["plans"][0]["configs"][name]["warnings"] if "could not keep up" in w]
        return float(re.search(r"for ([0-9.]+) s", w[0]).group(1)) if w else 0.0
    assert behind("slow") > 30 and behind("fast") <= 10


@pytest.mark.parametrize("extra, needle", [
    (["protocol.configs=[nope]"], "protocol.configs: nope"),
    (["protocol.costs={nope: example_cpu_rental}"], "protocol.costs: nope"),
    (["protocol.variants={v: 3}"], "protocol.variants.v"),
])
def test_bad_plan_settings_are_named(tmp_path, experiment, extra, needle):
    with pytest.raises(UserError, match=needle):
        _plan(tmp_path, experiment, "protocol.resamples=0", *extra)


def test_no_experiment_is_an_error(tmp_path):
    cfg = compose_config(["protocol=plan"])
    with pytest.raises(UserError, match="needs finished experiments"):
        run_protocol(cfg, Invocation())


def test_a_bad_residuals_file_is_named_before_any_simulation(tmp_path, experiment):
    bad = tmp_path / "res.json"
    bad.write_text('{"model": "scheduler", "residuals": [{"case": "a", "metric": "goodput_rps", "predicted": 1}]}')
    with pytest.raises(UserError, match=r"protocol.residuals=.*res.json: residuals\[0\].measured: missing"):
        _plan(tmp_path, experiment, "protocol.resamples=0", f"protocol.residuals={bad}")


@pytest.mark.slow  # a whole plan with resamples: tens of seconds on a shared machine
def test_the_verdict_states_the_chance_the_runner_up_is_cheaper(tmp_path, experiment, capsys):
    res = tmp_path / "res.json"
    res.write_text(json.dumps({"model": "processor_sharing", "source": "test", "held_out": True, "residuals": [
        {"case": "over", "metric": "goodput_rps", "predicted": 1.2, "measured": 1.0},
        {"case": "under", "metric": "goodput_rps", "predicted": 0.9, "measured": 1.0}]}))
    _, doc = _plan(tmp_path, experiment, "protocol.resamples=3", "protocol.replica_model=processor_sharing",
                   f"protocol.residuals={res}")
    base = doc["plans"][0]
    fast, slow = base["configs"]["fast"], base["configs"]["slow"]
    assert fast["model_error"]["factors"] == pytest.approx([1.2, 0.9])
    assert fast["model_error"]["cases"] == ["over", "under"]
    assert len(fast["cost_resamples"]) == 3                   # 3 random draws (10 distinct multisets > 3)
    r = base["cheapest"]["runner_up_cheaper"]
    pick, other = base["configs"][r["pick"]], base["configs"][r["runner_up"]]
    # recomputed by hand from plan.json, ties half: one replica model's cases, so the model's error is
    # taken as shared (each case on both sides); independent (every pair of joint resamples) beside it
    def chance(pairs):
        return sum(wa * wb * (1.0 if cb < ca else 0.5 if cb == ca else 0.0) for ca, wa, cb, wb in pairs) / sum(
            wa * wb for _, wa, _, wb in pairs)
    ja = [(c * q, w / 2, k) for c, w in pick["cost_resamples"] for k, q in enumerate((1.2, 0.9))]
    jb = [(c * q, w / 2, k) for c, w in other["cost_resamples"] for k, q in enumerate((1.2, 0.9))]
    assert base["cheapest"]["model_error_between"]["taken_as"] == "shared"
    assert r["probability"] == pytest.approx(chance([(ca, wa, cb, wb) for ca, wa, i in ja for cb, wb, k in jb
                                                     if i == k]), abs=1e-9)
    assert base["cheapest"]["model_error_between"]["independent"]["probability"] == pytest.approx(
        chance([(ca, wa, cb, wb) for ca, wa, _ in ja for cb, wb, _ in jb]), abs=1e-9)
    assert r["standard_error"] >= 0                           # random draws: a resample error
    # the chance the pick is wrong over every config, each resample meeting the SLO as its simulation on a
    # redrawn day did, at its cost there
    ma, mb = pick["meets_slo_resamples"], other["meets_slo_resamples"]
    assert len(ma) == 3 and all(isinstance(m, bool) for m in ma + mb)
    assert len(pick["redrawn_day_costs"]) == 3
    ja = [(c * q, w / 2, k) for c, (_, w) in zip(pick["redrawn_day_costs"], pick["cost_resamples"])
          for k, q in enumerate((1.2, 0.9))]
    jb = [(c * q, w / 2, k) for c, (_, w) in zip(other["redrawn_day_costs"], other["cost_resamples"])
          for k, q in enumerate((1.2, 0.9))]
    right = sum(wa * ma[i // 2] * (1 - sum(wb * mb[j // 2] * (1.0 if cb < ca else 0.5 if cb == ca else 0.0)
                                           for j, (cb, wb, k) in enumerate(jb) if k == c) * 2)
                for i, (ca, wa, c) in enumerate(ja))
    assert base["cheapest"]["pick_wrong"]["probability"] == pytest.approx(1 - right, abs=1e-9)
    assert doc["model_error"]["applied"] is True and doc["model_error"]["held_out"] is True
    iv = slow["metrics"]["cost_per_mtok_good"]["interval_with_model_error"]
    costs = [c for c, _ in slow["cost_resamples"]]
    assert iv[0] == pytest.approx(min(costs) * 0.9) and iv[1] == pytest.approx(max(costs) * 1.2)
    out = capsys.readouterr().out
    assert f"chance that {r['runner_up']} is in fact the cheaper at the SLO: {r['probability']:.1%}" in out
    page = (tmp_path / "plan" / "plan.html").read_text()
    assert f"{r['probability']:.1%}" in page and "held out: the model was fixed before these runs" in page


def test_a_candidate_takes_its_replica_models_cases_and_random_draws_are_told_apart():
    from protocols.plan.residuals import DEFAULT, read_residuals
    from protocols.plan.run import model_error_for, random_draws

    res = read_residuals(DEFAULT)
    ps = model_error_for(res, "processor_sharing")
    assert ps["cases"] == ["azure-code-0.2", "azure-code-0.3"] and len(ps["factors"]) == 2 and "why" not in ps
    sched = model_error_for(res, "scheduler")
    assert sched["factors"] == [] and "no held-out case of the scheduler model" in sched["why"]
    assert model_error_for(None, "scheduler")["why"] == "protocol.model_error=false"
    # 3 blocks: 10 distinct multisets, enumerated under 200 and drawn over 5; 6 blocks: 462 > 200
    assert [random_draws(3, 200), random_draws(3, 5), random_draws(6, 200), random_draws(1, 200)] == \
        [False, True, True, False]


def test_resamples_read_back_the_point_estimates_replays(tmp_path):
    """In parallel processes the point estimate on the scheduler runs first, alone: resamples
    that route as it did (here a policy of fixed capacity: all of them) replay nothing, and
    every simulation's requests get the replay's latencies."""
    from conf.schema import Autoscale
    from engines.autoscale_policy import ScalingPolicy
    from metrics.slo import SLO
    from protocols.plan import scheduler as sched
    from protocols.plan.capacity import resamples
    from protocols.plan.simulations import Job, simulate_all
    from protocols.plan.traffic import Traffic
    from tests.protocols.plan import fake_replay
    from tests.protocols.plan.capacity_fixtures import capacity
    from tests.protocols.plan.test_scheduler import TABLES

    np.savez(tmp_path / "perf_data.npz", **TABLES)
    model = sched.SchedulerModel(fake_replay.python(tmp_path), tmp_path / "perf_data.npz", {"max_num_seqs": 8},
                                 cache_dir=tmp_path / "cache", workers=1)
    rng = np.random.default_rng(1)
    arr = np.cumsum(rng.exponential(0.5, 120))
    traffic = Traffic(arr, np.full(120, 100), np.full(120, 21), float(arr[-1]) + 1, "test")
    cap = capacity()
    pol = ScalingPolicy(Autoscale(capacity_rps=1.0, min_replicas=1, max_replicas=3, cold_start_s=1.0, window_s=5.0))
    jobs = [Job(0, "c", b, w, cap, pol, SLO(), {}, False, model)
            for b, w in [(None, 1.0)] + resamples(cap.blocks, 3, 0)]
    got = simulate_all(jobs, traffic, "round_robin", 1, 0, workers=2)
    streams = fake_replay.log(tmp_path)[1]
    assert sum(streams) == 120                       # each request replayed once, by the point estimate
    assert [r["completed"] for r in got] == [120] * 4
    assert [r["p99_ttft_ms"] for r in got] == pytest.approx([50.0] * 4)


def test_owned_hardware_says_its_cost_is_a_lower_bound(tmp_path, experiment, capsys):
    # the plan simulates no energy: an owned profile's electricity line is NaN and left out of the cost
    _, doc = _plan(tmp_path, experiment, "protocol.resamples=0", "protocol.replica_model=processor_sharing",
                   "cost=example_8gpu_owned")
    bound = doc["cost_lower_bound"]
    assert bound["configs"] == ["fast", "slow"]
    assert "electricity" in bound["reason"] and "lower bound" in bound["reason"]
    for e in doc["plans"][0]["configs"].values():
        assert e["cost"]["cost_lines"]["energy"] is None and e["cost"]["cost_complete"] is False
    out = capsys.readouterr().out   # once, ranked with the plan's other warnings (protocols.plan.caveats)
    assert ("  [limits it] cost a lower bound for fast in 1 of 1 plan, slow in 1 of 1 plan: owned hardware, and the "
            "plan simulates no energy, so electricity is left out of the cost") in out.splitlines()
    assert "note: " not in out and doc["caveats"][-1]["kind"] == "cost_lower_bound"
    page = (tmp_path / "plan" / "plan.html").read_text()
    assert "lower bound" in page and "electricity" in page


def test_a_rental_plan_is_no_lower_bound(tmp_path, experiment, capsys):
    _, doc = _plan(tmp_path, experiment, "protocol.resamples=0", "protocol.replica_model=processor_sharing")
    assert doc["cost_lower_bound"] is None
    assert "lower bound" not in capsys.readouterr().out


ESTIMATE = ("protocol.estimates=[{name: est, model: meta-llama/Meta-Llama-3.1-8B, system: h200_sxm, isl: 256, "
            "osl: 32, concurrencies: [1, 8, 32], cost: example_h100_rental, cold_start_s: 5}]")


@pytest.fixture(scope="module")
def fake_estimator(tmp_path_factory) -> str:
    """An interpreter that finds the stand-in aiconfigurator (tests/protocols/plan/fake_aiconfigurator)."""
    import stat
    import sys
    from pathlib import Path

    fake = Path(__file__).parent / "fake_aiconfigurator"
    path = tmp_path_factory.mktemp("fake-venv") / "python"
    path.write_text(f'#!/bin/sh\nPYTHONPATH="{fake}" exec "{sys.executable}" "$@"\n')
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_warnings_once_per_kind_ranked_after_the_plans_before_the_answer(tmp_path, experiment, fake_estimator,
                                                                         capsys):
    # two SLOs: slow (p99 TPOT above 20 ms at its lowest load) is skipped at both; est is estimated
    _, doc = _plan(tmp_path, experiment, "slo.tpot_ms=20", "protocol.slos=[{ttft_ms: 300}]", "protocol.resamples=0",
                   f"protocol.estimator_python={fake_estimator}", ESTIMATE)
    out = capsys.readouterr().out.splitlines()
    assert not [x for x in out if x.startswith("warning:")]
    start = out.index("warnings, by what they change:")
    assert out[start - 1].startswith("     no ") and out[start - 2].startswith("  -> ")  # after the plans
    assert out[start + 1:start + 4] == [
        "  [changes the answer] 1 candidate not planned: slow in 2 of 2 plans (no measured point meets the SLO): "
        "left out of the pick",
        "  [limits it] 1 candidate estimated, not measured: est in 2 of 2 plans: capacity from a performance "
        "model's estimate",
        "  [limits it] served outside the measurements: fast in 2 of 2 plans, est in 2 of 2 plans: longer prompts, "
        "more replicas or a higher rate than any measured run; their intervals are marked"]
    assert out[start + 4].startswith("plan: ") and out.index("answer (plan):") > start + 4
    assert [(c["kind"], c["rank"]) for c in doc["caveats"]] == [
        ("not_planned", "changes the answer"), ("estimated", "limits it"), ("outside_measurements", "limits it")]
    assert doc["caveats"][0]["detail"] == [
        f"base, {w.split(' at ', 1)[1].split(': ', 1)[0]}: {w.split(': ', 1)[1]}" for w in doc["warnings"]
        if w.startswith("slow at")]
    assert len(doc["warnings"]) == 6    # kept for old readers, every string as before
    # the page's first screen (before its contents and figures): the same lines, in the same order
    import html
    page = html.unescape((tmp_path / "plan" / "plan.html").read_text())
    first = page[:page.index("<nav class='toc'>")]
    at = [first.index(c["text"]) for c in doc["caveats"]]
    assert at == sorted(at) and all(c["text"] not in page[page.index("<nav class='toc'>"):] for c in doc["caveats"])
    # the answer first, before the warnings: the page is written with it (issue 44: the answer before any figure)
    assert doc["answer"]["lines"] and first.index(f"answer (plan): {doc['answer']['lines'][0]}") < min(at)
    assert all(x in first for x in doc["answer"]["lines"])


def test_a_dry_run_says_its_warnings_ranked_once_per_kind(tmp_path, experiment, capsys):
    cfg = compose_config(["protocol=plan", f"protocol.experiments=[{experiment}]", "workload=mooncake",
                          f"workload.path={_trace(tmp_path / 'trace.jsonl')}", "deployment=replicas",
                          "deployment.autoscale.cold_start_s=5", "slo.tpot_ms=20", "protocol.slos=[{ttft_ms: 300}]",
                          "protocol.dry_run=true", f"output_dir={tmp_path / 'plan'}"])
    run_protocol(cfg, Invocation(explicit=frozenset({"slo.tpot_ms", "protocol.slos"})))
    out = capsys.readouterr().out.splitlines()
    start = out.index("warnings, by what they change:")
    assert out[start + 1] == ("  [changes the answer] 1 candidate not planned: slow in 2 of 2 plans (no measured point "
                              "meets the SLO): left out of the pick")
    assert out[-1] == "dry run: nothing simulated, nothing written" and not (tmp_path / "plan").exists()
