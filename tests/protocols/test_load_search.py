"""Adaptive load points and the SLO search (protocols/sweep/load_search.py), planned by hand and run
against a fake engine whose knee is known."""

from __future__ import annotations

import json

import pytest
from hydra import compose, initialize_config_module

from metrics.slo import slo_holds
from protocols.sweep.load_search import Bisection, place_points, probe_done, saturation, thin_percentile_warning


def test_saturation_is_where_doubling_stops_paying():
    steps = [(1, 5.0), (2, 9.8), (4, 18.0), (8, 24.0), (16, 24.6)]
    assert saturation(steps) == (24.6, 8, True)
    assert probe_done(steps) and not probe_done(steps[:4])
    assert saturation([(1, 5.0), (2, 10.0)]) == (10.0, 2, False)


@pytest.mark.parametrize("spacing, want", [
    ("linear", [2.0, 6.0, 10.0, 14.0, 18.0, 22.0]),
    ("geometric", [0.688, 1.375, 2.75, 5.5, 11.0, 22.0]),
    ("mlperf", [1.0, 2.0, 4.0, 8.0, 16.0, 17.792, 19.784, 22.0]),
])
def test_points_up_to_and_past_saturation(spacing, want):
    assert place_points(20.0, spacing, 6) == pytest.approx(want, abs=1e-3)
    assert place_points(20.0, spacing, 6, integer=True)[-1] == 22


def test_bisection_finds_a_known_knee_within_the_tolerance():
    knee = 37.0
    b = Bisection(5, 100, tolerance=0.05)
    while (x := b.next_load()) is not None:
        b.record(x, x < knee)
    r = b.result()
    lo, hi = r["bracket"]
    assert lo < knee <= hi and hi - lo <= 0.05 * lo and r["max_load_under_slo"] == lo
    assert "tolerance" in r["note"] and len({p["load"] for p in r["probes"]}) <= 8
    # each miss below the first (the high end) measured three times before it counted
    assert all(sum(p["load"] == x for p in r["probes"]) == 3 for x in {p["load"] for p in r["probes"][1:]
                                                                         if not p["passed"]})


def test_bisection_edges():
    b = Bisection(5, 10)
    b.record(b.next_load(), True)          # the high end passes: no knee inside
    assert b.next_load() is None and "beyond the bracket" in b.result()["note"]
    b = Bisection(5, 10)
    b.record(b.next_load(), False)
    b.record(b.next_load(), False)         # the low end fails too, and again when re-measured twice
    b.record(b.next_load(), False)
    b.record(b.next_load(), False)
    assert b.next_load() is None and b.result()["max_load_under_slo"] == 0.0
    b = Bisection(1, 64, integer=True)
    while (x := b.next_load()) is not None:
        assert x == int(x)
        b.record(x, x <= 13)
    assert b.result()["bracket"] == [13, 14]


def test_a_probe_still_filling_fails_and_the_note_says_so():
    # the issue 33 sweep: 400 requests at 16 req/s met the SLO on a fill-up's latencies (in flight
    # 140 then 253 over the arrivals' second and last quarters) and the search answered 16
    filling = {"slo_ttft_met": True, "slo_tpot_met": True, "completed": 400, "failed": 0,
               "in_flight_second_quarter": 140.33, "in_flight_last_quarter": 253.16}
    steady = {**filling, "in_flight_second_quarter": 22.98, "in_flight_last_quarter": 26.99}
    b = Bisection(4, 16)
    for summary in (filling, steady):           # 16 first (the high end), then 4 (the low end)
        load = b.next_load()
        ok, why = slo_holds(summary)
        b.record(load, ok, f"search/rate={load:g}", why)
    assert [(p.load, p.passed) for p in b.probes] == [(16, False), (4, True)]
    assert b.probes[0].why.startswith("still filling: in flight rose from 140 to 253")
    b.record(10.0, True)
    b.record(13.0, True)
    b.record(15.0, True)
    r = b.result()
    assert r["max_load_under_slo"] == 15.0 and r["bracket"] == [15.0, 16]
    # 16 - 15 = 1 <= 10 % of 15: within the tolerance, the filling probe named
    assert r["note"] == ("bracket within tolerance 10%; still filling at 16 (its latencies a fill-up's, not a "
                         "steady state's), read as missing the SLO: give each probe more requests "
                         "(load.num_requests) or a longer duration (load.duration_s)")


def test_a_p99_on_too_few_requests_is_said():
    # live on a loaded host, one stall of the host failed a probe of 8 requests at a fifth of the
    # true highest load (docs/measured/verdicts.md): the answer says its probes were too small
    w = thin_percentile_warning(99.0, [80, 8, 44])
    assert "as few as 8 requests" in w and "needs 662" in w and "at least 662 requests" in w
    assert thin_percentile_warning(99.0, [662, 700]) is None
    assert "needs 130" in thin_percentile_warning(95.0, [129])
    assert thin_percentile_warning(99.0, []) is None and thin_percentile_warning(100.0, [3]) is None


def test_slo_holds_reads_the_summary():
    assert slo_holds({"slo_ttft_met": True, "slo_tpot_met": True, "completed": 5}) == (True, "")
    assert slo_holds({"slo_ttft_met": False, "completed": 5})[1] == "missed: ttft"
    assert not slo_holds({"slo_ttft_met": True, "completed": 5, "slo_attainment": 0.8}, 0.9)[0]
    assert slo_holds({"saturated": True, "completed": 5})[1] == "over-saturated"


@pytest.mark.slow
def test_the_search_finds_the_fake_engines_knee(tmp_path):
    from engines.tiny_model import ensure_tiny_model
    from protocols.registry import protocol_experiment
    from tests.fake_server import FakeServer

    out = tmp_path / "out"
    with FakeServer(knee_rps=20) as srv:
        ov = ["engine=openai", f"engine.base_url={srv.base_url}", "engine.model=fake",
              f"engine.tokenizer={ensure_tiny_model()}", "load=constant", "load.num_requests=null",
              "load.duration_s=2", "load.warmup_requests=0", "protocol.load_points=[]", "protocol.search=slo",
              "protocol.search_low=4", "protocol.search_high=40", "protocol.search_tolerance=0.1",
              "slo.ttft_ms=100", "slo.tpot_ms=null", f"output_dir={out}", "mlflow.enabled=false",
              "report.enabled=false", "progress=false", "telemetry.idle_baseline_s=0"]
        with initialize_config_module("conf", version_base="1.3"):
            protocol_experiment(compose("config", overrides=ov), overrides=ov).run()
    found = json.loads((out / "search.json").read_text())
    lo, hi = found["bracket"]
    # the knee is 20 req/s: never reported above it, and the bracket within 10 %.  The fake
    # judges each gap between arrivals as its server thread sees them, so send and GIL jitter
    # make a few gaps shorter just below the knee (a CI check on a busy host failed 18.6 req/s
    # that way and found 17.5): the answer may sit up to 20 % below the knee
    assert 16 <= found["max_load_under_slo"] == lo < 20 and hi <= 22 and hi - lo <= 0.1 * lo + 1e-9, found
    assert found["goodput_rps"] > 0 and found["cost_per_mtok_good"] > 0
    # 2 s probes of 9 to 81 requests: a p99 none of them can claim, and the answer says so
    assert "judged on as few as 9 requests" in found["warning"] and "needs 662" in found["warning"]


def test_slo_holds_counts_failed_requests_against_the_percentile():
    # 30 of 60 failed: the completed ones' p99 is within the limit, the run's is not
    half = {"slo_ttft_met": True, "completed": 30, "failed": 30, "slo_percentile": 99.0, "slo_attainment": 0.5}
    assert slo_holds(half) == (False, "30 of 60 requests failed: more than the 1% a p99 SLO allows")
    assert slo_holds({**half, "completed": 199, "failed": 1, "slo_attainment": 0.995}) == (True, "")


def _search(b: Bisection, meets) -> dict:
    """Run bisection ``b`` on ``meets(load, measurement)`` (0 for a load's first, 1 its re-measurement)."""
    seen: dict[float, int] = {}
    while (x := b.next_load()) is not None:
        n = seen.get(x, 0)
        seen[x] = n + 1
        b.record(x, meets(x, n))
    return b.result()


def test_a_stall_failing_a_low_probe_is_remeasured_before_it_counts():
    # live (docs/measured/verdicts.md): 4 of 44 searches of a knee at 20.52 req/s answered 5.69
    # to 17.5, one stall of the host failing a small probe far below it.  The crafted sequence:
    # 40 misses, 4 meets, 22 misses, then 13 misses once (the stall) and meets when re-measured;
    # with one re-measurement (protocol.search_recheck=1, the default before two)
    truth = 20.52

    def meets(load, n):
        return load <= truth and not (load == 13.0 and n == 0)
    r = _search(Bisection(4, 40, tolerance=0.1, recheck=1), meets)
    assert r["max_load_under_slo"] == 19.75 and r["bracket"] == [19.75, 20.875]
    # each miss below the bracket's upper end was measured twice; the high end (no upper
    # evidence above it) once: 40, 4, 22 x2, 13 x2, 17.5, 19.75, 20.875 x2
    assert [(p["load"], p["passed"], p["recheck"]) for p in r["probes"]] == [
        (40.0, False, 0), (4.0, True, 0), (22.0, False, 0), (22.0, False, 1), (13.0, False, 0), (13.0, True, 1),
        (17.5, True, 0), (19.75, True, 0), (20.875, False, 0), (20.875, False, 1)]
    assert "re-measured: 13 met the SLO when re-measured (a miss before read as a stall of the host)" in r["note"]
    assert r["rechecked"] == [{"load": 22.0, "confirmed": True}, {"load": 13.0, "confirmed": False},
                              {"load": 20.875, "confirmed": True}]
    # off (protocol.search_recheck=0): the stall counts, and the answer falls to 11.875
    off = _search(Bisection(4, 40, tolerance=0.1, recheck=0), meets)
    assert off["max_load_under_slo"] == 11.875 and all(p["recheck"] == 0 for p in off["probes"])
    assert abs(off["max_load_under_slo"] - truth) > 0.1 * truth


def test_a_low_end_missed_by_a_stall_is_remeasured():
    # 5 of 16 searches on the fake before its timing fix answered 0: the low end missed once
    r = _search(Bisection(4, 40, tolerance=0.1), lambda x, n: x <= 20.52 and not (x == 4 and n == 0))
    assert r["max_load_under_slo"] == 19.75
    b = Bisection(4, 40, recheck=2)   # a miss counts only when every re-measurement misses too
    r = _search(b, lambda x, n: x <= 20.52 and not (x == 4 and n < 2))
    assert r["max_load_under_slo"] == 19.75 and [p["recheck"] for p in r["probes"] if p["load"] == 4] == [0, 1, 2]
    with pytest.raises(ValueError, match="protocol.search_recheck"):
        Bisection(4, 40, recheck=-1)


def test_a_burst_of_host_load_outlasting_one_remeasurement_does_not_count():
    # live (docs/measured/verdicts.md, 04:11): with one re-measurement 3 of 34 searches still
    # answered more than a step low, the host stalling across consecutive probes (13 req/s missed
    # twice in a row, then met the SLO).  The default re-measures a miss twice before it counts
    truth = 20.52
    r = _search(Bisection(4, 40, tolerance=0.1), lambda x, n: x <= truth and not (x == 13.0 and n < 2))
    assert r["max_load_under_slo"] == 19.75 and r["bracket"] == [19.75, 20.875]
    assert [p["recheck"] for p in r["probes"] if p["load"] == 13.0] == [0, 1, 2]
    # its price: a miss the engine's own (22 and 20.875, above the knee) is measured three times
    assert sum(p["recheck"] > 0 for p in r["probes"]) == 6 and len(r["probes"]) == 13
    one = _search(Bisection(4, 40, tolerance=0.1, recheck=1), lambda x, n: x <= truth and not (x == 13.0 and n < 2))
    assert one["max_load_under_slo"] == 11.875  # one re-measurement falls in the same burst
    with initialize_config_module("conf", version_base="1.3"):  # the run's default is the search's
        assert compose("config").protocol.search_recheck == 2


def test_a_miss_overturned_only_at_the_last_remeasurement_is_said_with_what_would_tell():
    # 13 met the SLO only on its second re-measurement, the last allowed: a burst a little longer
    # would have counted it, so the counted misses above the answer may be the host's too
    r = _search(Bisection(4, 40, tolerance=0.1), lambda x, n: x <= 20.52 and not (x == 13.0 and n < 2))
    assert ("13 met the SLO only at its last re-measurement (protocol.search_recheck=2): a burst of the host's "
            "load a little longer would have counted it, and the bracket's upper end 20.875 may be one; "
            "protocol.search_recheck=3 or a quieter host would tell") in r["note"]
    # overturned at the first of two: nothing more to say
    r = _search(Bisection(4, 40, tolerance=0.1), lambda x, n: x <= 20.52 and not (x == 13.0 and n < 1))
    assert "last re-measurement" not in r["note"]

