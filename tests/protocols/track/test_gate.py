"""The regression gate fails closed (issue 31, item 2): ``tokenfactory track NAME --gate`` on
histories held in memory (``load_history`` replaced: the MLflow side is tested in test_track.py)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa
import pytest

import protocols.track.run as track_run
from harness.commands.track import main
from protocols.track.history import TrackEntry
from protocols.track.verdicts import compare_newest

FIXED = {"model": "tiny", "workload": {"name": "synthetic"}, "slo": {"ttft_ms": 500.0}, "load_points": [4],
         "hardware": "cpu-2core"}


def rows(n=4, ttft=100.0, tput=50.0, error_rate=0.0, cost=1.0, good=1e6, seed=0, label="rate=4", block=0,
         spread=0.01) -> list[dict]:
    """``n`` repeats of one point: TTFT, throughput and good tokens with a ``spread`` between
    repeats, drawn from ``seed``; ``error_rate`` and ``cost`` (per run) as given."""
    rng = np.random.default_rng(seed)
    out = []
    for r in range(n):
        er = error_rate[r] if isinstance(error_rate, (list, tuple)) else error_rate
        out.append({"config": "", "label": label, "repeat": r, "block": block, "role": "point", "offered_load": 4.0,
                    "p99_ttft_ms": ttft * (1 + spread * rng.standard_normal()),
                    "output_throughput": tput * (1 + spread * rng.standard_normal()), "error_rate": er,
                    "cost_total": cost * (1 + spread * rng.standard_normal()),
                    "good_output_tokens": good * (1 + spread * rng.standard_normal()) if good else 0.0})
    return out


def entry(i: int, data: list[dict]) -> TrackEntry:
    table = pa.Table.from_pylist(data) if data else pa.Table.from_pylist(rows(n=1)).slice(0, 0)
    return TrackEntry(run_id=f"r{i}", experiment="bench", name=f"e{i}", started=datetime(2026, 12, 1, tzinfo=UTC)
                      + timedelta(hours=i), engine=f"vllm 0.{i}", harness_commit=None, track_version=None,
                      runs=table, fixed=dict(FIXED))


def gate(monkeypatch, tmp_path, entries, *args) -> int:
    monkeypatch.setattr(track_run, "load_history", lambda *a, **k: entries)
    return main(["nightly", "--out", str(tmp_path / "out"), "--gate", *args])


def record(tmp_path) -> dict:
    return json.loads((tmp_path / "out" / "track.json").read_text())["comparison"]


def test_an_error_rate_from_zero_to_a_third_fails_the_gate_with_throughput_unchanged(monkeypatch, tmp_path, capsys):
    entries = [entry(0, rows(seed=0)), entry(1, rows(seed=1, error_rate=[0.30, 0.35, 0.40, 0.35]))]
    assert gate(monkeypatch, tmp_path, entries) == 1
    err = capsys.readouterr().err
    # 0.35 [0.35 -+ t(1 - 0.05/(2 x 4 metrics), 3) x 0.020412]: the absolute difference, in points
    assert "regressed: error_rate at rate=4: +35.0 points [" in err
    assert "beyond the ±2 points margin" in err and "(absolute: the baseline is 0)" in err
    found = {f["metric"]: f for f in record(tmp_path)["findings"]}
    assert found["error_rate"]["judged"] == "absolute" and found["error_rate"]["relative"] == pytest.approx(0.35)
    assert found["output_throughput"]["outcome"] == "no significant change"
    assert [f["metric"] for f in record(tmp_path)["regressions"]] == ["error_rate"]


def test_a_newest_without_point_runs_cannot_be_judged_exit_3(monkeypatch, tmp_path, capsys):
    entries = [entry(0, rows(seed=0)), entry(1, [])]
    assert gate(monkeypatch, tmp_path, entries) == 3
    err = capsys.readouterr().err
    assert "cannot judge: the newest experiment has no point runs: vllm 0.1 (e1) against vllm 0.0 (e0)" in err
    c = record(tmp_path)
    assert c["newest_runs"] == 0 and len(c["unjudged"]) == len(c["metrics"]) == 4
    assert {f["reason"] for f in c["unjudged"]} == {"the newest has no runs at this load point"}
    # without --gate: the record says so, the command exits 0
    monkeypatch.setattr(track_run, "load_history", lambda *a, **k: entries)
    assert main(["nightly", "--out", str(tmp_path / "out")]) == 0


def test_no_good_tokens_in_any_repeat_of_the_newest_is_a_regression_exit_1(monkeypatch, tmp_path, capsys):
    entries = [entry(0, rows(seed=0)), entry(1, rows(seed=1, good=0))]
    assert gate(monkeypatch, tmp_path, entries) == 1
    err = capsys.readouterr().err
    assert ("regressed: cost_per_mtok_good at rate=4: the newest's value is infinite: no good tokens (or no "
            "completed task) in any replicate (baseline 0.9993 per M good tok)") in err
    assert [f["metric"] for f in record(tmp_path)["regressions"]] == ["cost_per_mtok_good"]
    assert record(tmp_path)["unjudged"] == []


def test_no_good_tokens_on_a_newest_of_one_run_cannot_be_judged_exit_3(monkeypatch, tmp_path, capsys):
    entries = [entry(0, rows(seed=0)), entry(1, rows(seed=1, good=0)[:1])]
    assert gate(monkeypatch, tmp_path, entries) == 3
    err = capsys.readouterr().err
    assert ("cannot judge: cost_per_mtok_good at rate=4: the newest's value is infinite (its denominator is 0: "
            "no good tokens, or no completed task) (baseline 0.9993 per M good tok)") in err
    assert "cost_per_mtok_good" in [f["metric"] for f in record(tmp_path)["unjudged"]]


def test_a_metric_the_newest_no_longer_reports_cannot_be_judged_exit_3(monkeypatch, tmp_path, capsys):
    newest = [{k: v for k, v in r.items() if k != "error_rate"} for r in rows(seed=1)]
    entries = [entry(0, rows(seed=0)), entry(1, newest)]
    assert gate(monkeypatch, tmp_path, entries) == 3
    assert "cannot judge: error_rate at rate=4: the newest has no value for it (baseline 0)" in capsys.readouterr().err
    assert "error_rate" in record(tmp_path)["metrics"]


def test_one_run_each_gives_no_interval_and_the_gate_fails_closed(monkeypatch, tmp_path, capsys):
    entries = [entry(0, rows(n=1, seed=0)), entry(1, rows(n=1, seed=1, ttft=200))]
    assert gate(monkeypatch, tmp_path, entries) == 3
    assert "cannot judge: p99_ttft_ms at rate=4: no interval" in capsys.readouterr().err


def test_the_cost_verdict_is_judged_on_the_ratio_shown(monkeypatch, tmp_path, capsys):
    # the newest pays 30 % more for the same good tokens: cost_per_mtok_good 1.0 -> 1.3
    entries = [entry(0, rows(seed=0)), entry(1, rows(seed=1, cost=1.3))]
    assert gate(monkeypatch, tmp_path, entries) == 1
    f = {f["metric"]: f for f in record(tmp_path)["findings"]}["cost_per_mtok_good"]
    assert f["outcome"] == "regressed"
    assert f["relative"] == pytest.approx(f["newest"] / f["baseline"] - 1, rel=1e-9)
    assert f["relative"] == pytest.approx(0.3, abs=0.03)
    assert "regressed: cost_per_mtok_good at rate=4: +" in capsys.readouterr().err


def test_bonferroni_over_every_metric_and_point_is_the_default_and_said(monkeypatch, tmp_path, capsys):
    two = lambda seed: rows(seed=seed) + rows(seed=seed + 10, label="rate=8")  # noqa: E731
    entries = [entry(0, two(0)), entry(1, two(1))]
    for e in entries:
        e.fixed["load_points"] = [4, 8]
    assert gate(monkeypatch, tmp_path, entries) == 0
    c = record(tmp_path)
    assert (c["adjust"], c["family"]) == ("bonferroni", 8)  # 4 metrics x 2 load points
    assert c["difference_confidence"] == pytest.approx(1 - 0.05 / 8)
    out = capsys.readouterr().out
    assert "differences at 99.38% each: Bonferroni over the 8 verdicts (metrics x load points), 95% for all" in out
    assert gate(monkeypatch, tmp_path, entries, "--adjust", "none") == 0
    assert record(tmp_path)["difference_confidence"] == 0.95


def test_a_window_leaves_out_the_builds_the_gate_rejected(monkeypatch, tmp_path, capsys):
    # e2 is 30 % slower: the gate rejects it against e0, e1; e3 is accepted; the newest's window of
    # three is then e0, e1, e3, not e1, e2, e3
    entries = [entry(i, rows(seed=i, ttft=130 if i == 2 else 100)) for i in range(5)]
    r = compare_newest(entries, "window:3")
    assert [b["name"] for b in r["baseline"]] == ["e0", "e1", "e3"]
    assert [b["name"] for b in r["rejected"]] == ["e2"]
    r = compare_newest(entries, "window:3", keep_rejected=True)
    assert [b["name"] for b in r["baseline"]] == ["e1", "e2", "e3"] and r["rejected"] == []
    assert gate(monkeypatch, tmp_path, entries, "--baseline", "window:3") == 0
    assert "left out of the window, rejected by the gate: vllm 0.2 (e2)" in capsys.readouterr().out
    # every build before the newest rejected: an error naming the flag
    bad = [entry(0, rows(seed=0)), entry(1, rows(seed=1, ttft=130)), entry(2, rows(seed=2, ttft=170)),
           entry(3, rows(seed=3))]
    r = compare_newest(bad, "window:2")
    assert [b["name"] for b in r["baseline"]] == ["e0"] and [b["name"] for b in r["rejected"]] == ["e1", "e2"]


def test_launches_are_the_replicates_where_an_experiment_has_several(monkeypatch, tmp_path):
    # three launches (blocks) of ten repeats each: the launches differ by +-5 % (95, 100, 105), the
    # repeats inside one by 0.1 %.  The newest is 4 % slower overall, which is what launches alone
    # do: against three launches each, no significant change; counting the 30 repeats as
    # replicates would call it a regression.
    def launches(levels, seed):
        return [r for b, lv in enumerate(levels) for r in rows(n=10, ttft=lv, seed=seed + b, block=b, spread=0.001)]

    entries = [entry(0, launches((95, 100, 105), 0)), entry(1, launches((99, 104, 109), 10))]
    r = compare_newest(entries, metrics=["p99_ttft_ms"])
    assert r["replicates"] == {"baseline": "launches", "newest": "launches"}
    assert r["points"][0]["replicates"] == {"baseline": 3, "newest": 3}
    (f,) = r["findings"]
    assert f["outcome"] == "no significant change" and f["relative"] == pytest.approx(4 / 100, abs=0.002)
    # one launch a side: its repeats are the replicates, and the record says so
    single = [entry(0, rows(seed=0)), entry(1, rows(seed=1))]
    assert compare_newest(single)["replicates"] == {"baseline": "repeats", "newest": "repeats"}


def test_the_gate_ends_with_its_answer_and_the_metric_that_decided(monkeypatch, tmp_path, capsys):
    entries = [entry(0, rows(seed=0)), entry(1, rows(seed=1, error_rate=[0.30, 0.35, 0.40, 0.35]))]
    assert gate(monkeypatch, tmp_path, entries) == 1
    out = capsys.readouterr().out.splitlines()
    answer = json.loads((tmp_path / "out" / "track.json").read_text())["answer"]
    assert answer["decision"] == "regression" and answer["deciding"] == {"metric": "error_rate", "label": "rate=4"}
    assert out[out.index("answer (gate):") + 1:] == [f"  {x}" for x in answer["lines"]]
    assert answer["lines"][0] == "the gate fails: 1 regression(s), vllm 0.1 (e1) against vllm 0.0 (e0)"
    assert answer["lines"][1] == "regressed: error_rate at rate=4: baseline better than newest by 0.35 [0.2399, 0.4601]"
    # the same build again: it passes, and says so last
    entries = [entry(0, rows(seed=0)), entry(1, rows(seed=1))]
    assert gate(monkeypatch, tmp_path, entries) == 0
    out = capsys.readouterr().out.splitlines()
    at = out.index("answer (gate):")
    assert out[at + 1] == ("  the gate passes: vllm 0.1 (e1) against vllm 0.0 (e0): no metric regressed "
                           "(0 improved of 4 judged)")
    # then what its 4 repeats a side cannot give (test_a_gate_says_the_replicates_and_requests_it_would_need)
    assert all(x.startswith("  short: ") for x in out[at + 2:]) and len(out) > at + 2


def _runs(ttfts, requests=16, errors=0) -> list[dict]:
    """Runs of one point with these p99 TTFTs, ``requests`` each of which ``errors`` failed."""
    return [{"config": "", "label": "rate=4", "repeat": r, "block": 0, "role": "point", "offered_load": 4.0,
             "p99_ttft_ms": t, "output_throughput": 50.0, "error_rate": errors / requests, "cost_total": 1.0,
             "good_output_tokens": 1e6, "completed": requests - errors, "failed": errors}
            for r, t in enumerate(ttfts)]


def test_a_gate_says_the_replicates_and_requests_it_would_need(monkeypatch, tmp_path, capsys):
    # live (docs/measured/verdicts.md): at 3 repeats of 16 requests a side a 10 % longer TTFT
    # passed 6 gates of 8 and errors from 0 to 5 % all 8, and the gate said nothing of it
    entries = [entry(0, _runs([95.0, 100.0, 105.0])), entry(1, _runs([95.0, 100.0, 105.0]))]
    assert gate(monkeypatch, tmp_path, entries) == 0
    sens = record(tmp_path)["sensitivity"]
    need = {n["metric"]: n for n in sens["needs"]}
    # a spread of 5 ms on 100 (sd 5 a side), 10 ms to find, each verdict at 1 - 0.05/4: 8 a side,
    # found 19 % of the time at 3 (metrics.sample_size.replicates_for_power)
    assert need["p99_ttft_ms"]["needed"] == 8 and need["p99_ttft_ms"]["now"] == 3
    assert need["p99_ttft_ms"]["power_now"] == pytest.approx(0.186, abs=0.001)
    assert need["p99_ttft_ms"]["spread"] == pytest.approx(0.05)
    # errors from 0 to 5 %: 217 requests a side by a two-proportion test at 98.75 %; 48 now
    assert (need["error_rate"]["needed"], need["error_rate"]["now"]) == (217, 48)
    out = capsys.readouterr().out
    assert ("  short: at rate=4, to find a regression 80% of the time at 98.75% each: p99_ttft_ms 10% longer: "
            "8 repeats a side, now 3 (found 19% of the time; spread 5.0% of the mean a replicate); error_rate "
            "0 % -> 5 %: 217 requests a side (14 runs of 16), now 48 (two-proportion test)") in out
    assert "  short: false alarms: the baseline and newest's replicates are repeats of one engine launch" in out
    answer = json.loads((tmp_path / "out" / "track.json").read_text())["answer"]
    assert [x for x in answer["lines"] if x.startswith("short: ")] == [f"short: {n}" for n in sens["notes"]]


def test_a_gate_with_enough_replicates_says_nothing_short(monkeypatch, tmp_path):
    # 10 launches a side of 40 requests each (400 >= 217), the same spread (9 needed): nothing short
    def launches(i):
        return [dict(r, block=b) for b in range(10) for r in _runs([95.0 + 10 * (b % 2)], requests=40)]
    assert gate(monkeypatch, tmp_path, [entry(0, launches(0)), entry(1, launches(1))]) == 0
    sens = record(tmp_path)["sensitivity"]
    assert sens["needs"] == [] and sens["notes"] == []
