"""The workload page of a task workload: the DAG's shape in workload.json, its rows and figures
on the page, its headline numbers in a run's summary keys (AIPerf's agentic-code sample)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main as cli
from harness.workload_describe import summary_keys

FIXTURE = Path(__file__).parents[1] / "fixtures" / "aiperf_0.13.0_agentic_code_dataset.jsonl"
L1, L15 = 63 * 512, 40 * 512


def test_describe_shows_the_task_shape_and_the_prefix_trees_reuse(tmp_path, capsys):
    out = tmp_path / "desc"
    assert cli(["workload", "describe", "workload=aiperf", f"workload.path={FIXTURE}", f"output_dir={out}"]) == 0
    stats = json.loads((out / "workload.json").read_text())
    t = stats["tasks"]
    assert t["count"] == 3 and t["calls"] == 9 and t["depth"]["max"] == 3 and t["fan_out"]["max"] == 1
    assert t["tool_s"]["n"] == 6 and t["tool_calls_share"] == 1.0
    # every call carries its session's prefix path: 6 calls under L1 + L1.5, 3 under L1 alone
    pt = t["prefix_tree"]
    assert pt["independent_tokens"] - pt["tree_tokens"] == pt["reused_tokens"] == 6 * (L1 + L15) + 3 * L1 - L1 - L15
    html = (out / "workload.html").read_text()
    for title in ("Calls per task", "Depth (calls on the longest root-to-sink chain)", "Fan-out (children per call)",
                  "Tool time per call", "longest tool chain"):
        assert title in html
    printed = capsys.readouterr().out
    assert "prefix tree" in printed and "3 (9 calls" in printed
    keys = summary_keys(stats)
    assert keys["workload_tasks"] == 3 and keys["workload_task_depth_max"] == 3
    assert keys["workload_prefix_tree_reused_tokens"] == pt["reused_tokens"]
    assert keys["workload_prefix_tree_reuse_share"] == pytest.approx(pt["reused_tokens"] / pt["independent_tokens"])


def test_a_workload_without_tasks_emits_no_task_keys():
    keys = summary_keys({"tasks": {"count": 0}})
    assert not any(k.startswith(("workload_task", "workload_prefix_tree")) for k in keys)
