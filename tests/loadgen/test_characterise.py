"""Workload characterisation against numbers computed by hand, and the describe command."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from harness.cli import main as cli
from loadgen.workloads.characterise import characterise
from loadgen.workloads.table import WorkloadTable


def moon():
    hashes = [[0, 1], [0, 1, 2], [3, 4], [0, 5]]
    offs = np.cumsum([0] + [len(h) for h in hashes])
    return WorkloadTable(arrival_s=np.array([0.0, 1.0, 3.0, 4.0]), input_tokens=np.array([1024, 1100, 600, 700]),
                         output_tokens=np.array([10, 20, 30, 40]), source="mooncake",
                         hash_offsets=offs, hash_values=np.array(sum(hashes, [])))


def test_characterise_by_hand():
    c = characterise(moon())
    assert c["requests"] == 4 and c["duration_s"] == 4.0
    assert c["mean_rate_rps"] == pytest.approx(0.75)
    # gaps 1, 2, 1: mean 4/3, population std sqrt(2)/3 -> CV sqrt(2)/4
    assert c["interarrival_cv"] == pytest.approx(math.sqrt(2) / 4)
    assert c["rate_timeline"] == {"bin_s": 1.0, "counts": [1, 1, 0, 1, 1], "peak_rps": 1.0, "mean_rps_in_bins": 0.8}
    # B repeats A's two blocks (all of A's 1024 tokens), D repeats block 0 (512); A and C nothing
    assert c["prefix_reuse_tokens"] == 1024 + 512
    assert c["prefix_reuse_share"] == pytest.approx(1536 / 3424)
    assert c["input_tokens"]["p50"] == 862 and c["input_tokens"]["max"] == 1100
    assert c["output_tokens"]["mean"] == 25 and c["sessions"] == {"count": 0}


def test_characterise_groups_and_sessions():
    t = WorkloadTable(arrival_s=np.array([0.0, 2.0, np.nan, 6.0, np.nan, 8.0]),
                      input_tokens=np.array([100, 80, 500, 90, 60, 120]),
                      output_tokens=np.array([10, 20, 30, 5, 5, 5]),
                      session=np.array([-1, 0, 0, -1, 0, 1]), turn=np.array([0, 0, 1, 0, 2, 0], dtype=np.int32),
                      think_s=np.array([np.nan, np.nan, 1.5, np.nan, 0.5, np.nan]),
                      prefix_group=np.array([3, -1, -1, 3, -1, 3]), prefix_tokens=np.array([40, 0, 0, 40, 0, 40]))
    c = characterise(t)
    # group 3 seen first at row 0: rows 3, 5 repeat 40 each; session 0: turn 1 repeats
    # min(80 + 20, 500) = 100, turn 2 repeats min(500 + 30, 60) = 60
    assert c["prefix_reuse_tokens"] == 40 + 40 + 100 + 60
    assert c["prefix_reuse_share"] == pytest.approx(240 / 950)
    s = c["sessions"]
    assert s["count"] == 2 and s["turns_mean"] == 2.0 and s["turns_max"] == 3 and s["turns_hist"] == [0, 1, 0, 1]
    assert s["think_s_mean"] == 1.0 and s["requests_in_multi_turn_share"] == pytest.approx(3 / 6)
    # arrivals of the timed requests 0, 2, 6, 8: gaps 2, 4, 2
    assert c["timed_requests"] == 4 and c["interarrival_cv"] == pytest.approx(np.std([2, 4, 2]) / (8 / 3))


def test_describe_command_trace(tmp_path, capsys):
    p = tmp_path / "m.jsonl"
    p.write_text("\n".join(json.dumps({"timestamp": t * 1000, "input_length": a, "output_length": o, "hash_ids": h})
                           for t, a, o, h in [(0, 1024, 10, [0, 1]), (1, 1100, 20, [0, 1, 2]), (3, 600, 30, [3, 4]),
                                              (4, 700, 40, [0, 5])]))
    out = tmp_path / "desc"
    rc = cli(["workload", "describe", "workload=mooncake", f"workload.path={p}", f"output_dir={out}"])
    assert rc == 0
    stats = json.loads((out / "workload.json").read_text())
    assert stats["prefix_reuse_share"] == pytest.approx(1536 / 3424)
    assert stats["interarrival_cv"] == pytest.approx(math.sqrt(2) / 4)
    html = (out / "workload.html").read_text()
    assert "Arrival rate" in html and "Input length" in html and html.count("plotly") > 3
    printed = capsys.readouterr().out
    assert "CV of inter-arrival times" in printed and "0.3536" in printed


def test_describe_command_synthetic_and_errors(tmp_path, capsys):
    out = tmp_path / "syn"
    rc = cli(["workload", "describe", "workload=synthetic", "load=constant", "load.rate=4", "load.num_requests=20",
              "load.warmup_requests=0", "workload.prefix_groups.count=2", "workload.prefix_groups.prefix_tokens=30",
              f"output_dir={out}"])
    assert rc == 0
    s = json.loads((out / "workload.json").read_text())
    assert s["requests"] == 20 and s["interarrival_cv"] == pytest.approx(0.0, abs=1e-9)
    assert s["mean_rate_rps"] == pytest.approx(4.0)
    # 20 requests of 128 tokens in 2 groups: all but the first of each group repeat 30 tokens
    assert s["prefix_reuse_tokens"] == 18 * 30
    assert cli(["workload", "describe", "workload=azure", f"workload.path={tmp_path / 'none.csv'}"]) == 2
    assert "no such file" in capsys.readouterr().err
    assert cli(["workload", "describe", "workload=nosuch"]) == 2
    assert "nosuch" in capsys.readouterr().err


def test_describe_constant_gaps_and_lengths(tmp_path):
    # constant arrivals and lengths: degenerate histograms must still draw (float-noise gaps)
    out = tmp_path / "c"
    assert cli(["workload", "describe", "load=constant", "load.rate=50", "load.num_requests=6",
                "load.warmup_requests=1", f"output_dir={out}"]) == 0
    s = json.loads((out / "workload.json").read_text())
    assert s["requests"] == 7 and s["interarrival_cv"] == pytest.approx(0.0, abs=1e-6)
    assert s["input_tokens"]["min"] == s["input_tokens"]["max"] == 128


def test_text_sessions_carry_the_conversation():
    # ShareGPT-like: 2 turns of one conversation; a word is a token here (hand-countable)
    t = WorkloadTable(arrival_s=np.array([0.0, np.nan]), input_tokens=np.array([-1, -1]),
                      output_tokens=np.array([-1, -1]), session=np.array([0, 0]),
                      turn=np.array([0, 1], dtype=np.int32), think_s=np.array([np.nan, np.nan]),
                      text=["a b c", "d e"], output_text=["x y y y", "z"])
    c = characterise(t, count=lambda s: len(s.split()))
    # turn 0: 3 in, 4 out; turn 1 carries 3 + 4 then its own 2 -> 9 in, 1 out; it repeats 7
    assert c["input_tokens"]["total"] == 12 and c["output_tokens"]["total"] == 5
    assert c["prefix_reuse_tokens"] == 7 and c["prefix_reuse_share"] == pytest.approx(7 / 12)
    assert c["prefix_info"] == "sessions" and c["sessions"]["count"] == 1


def test_each_load_point_is_described_at_its_own_rate():
    # A sweep's points share cfg.load (rate 2); each point's workload.json must use the point's rate.
    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf

    from harness.workload_describe import workload_table
    from protocols.sweep.load_points import plan_runs

    with initialize_config_module("conf", version_base="1.3"):
        cfg = compose("config", overrides=["load.num_requests=2000", "protocol.load_points=[2,16]"])
    plan = plan_runs(cfg)
    rates = [characterise(workload_table(cfg, None, spec.load))["mean_rate_rps"] for spec in plan]
    assert OmegaConf.select(cfg, "load.rate") == 2.0
    assert rates[0] == pytest.approx(2.0, rel=0.1) and rates[1] == pytest.approx(16.0, rel=0.1)
