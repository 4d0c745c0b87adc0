"""AIPerf's multi-turn Mooncake trace read as tasks: a checked-in sample of what
``aiperf synthesize agentic-code`` 0.13.0 writes, bad lines, and (integration) a file AIPerf's
own generator writes now, from its venv (.ci/aiperf_venv.sh)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest

from loadgen.workloads.traces.common import TraceError
from loadgen.workloads.traces.readers import read_trace

FIXTURE = Path(__file__).parents[3] / "fixtures" / "aiperf_0.13.0_agentic_code_dataset.jsonl"
# Three sessions of three turns cut from a generated file: two in L1.5 group 0, one in group 2.
L1 = 63 * 512       # agentic-code's 32,000-token L1 (tools, system prompt) in whole 512-token blocks
L15 = 40 * 512      # its 20,000-token L1.5 (a group's repository context)


def test_the_agentic_code_sample_reads_as_chains_under_the_shared_prefix_tree():
    t = read_trace("aiperf", FIXTURE)
    assert t.source == "aiperf" and t.task_input == "message" and len(t) == 9
    assert [t.task_names[c] for c in t.task] == ["sess-956a26afbccd"] * 3 + ["sess-027168b37723"] * 3 + \
        ["sess-7db5faf446df"] * 3
    assert t.node.tolist() == ["t0", "t1", "t2"] * 3
    assert t.parents.tolist() == [(), ("t0",), ("t1",)] * 3
    # L1 is shared by all three sessions, group 0's L1.5 (first block 63 + 0 x 200) by two
    assert t.prefix_tree == {"h0": L1, "h0/h63": L15}
    assert t.prefix.tolist() == ["h0/h63"] * 6 + ["h0"] * 3
    # a first turn's message is what its shared prefix leaves; later turns' input_length is new tokens
    assert t.input_tokens.tolist() == [55663 - L1 - L15, 880, 4013, 92062 - L1 - L15, 452, 1188,
                                       61003 - L1, 3061, 3752]
    assert t.output_tokens.tolist() == [110, 430, 188, 290, 377, 213, 260, 399, 369]
    np.testing.assert_allclose(t.tool_s, [np.nan, 4.1464, 0.6548, np.nan, 3.8416, 1.9225, np.nan, 3.7631, 0.787])
    # every session starts at timestamp 0: the roots carry it, the later turns NaN
    assert t.arrival_s[[0, 3, 6]].tolist() == [0.0, 0.0, 0.0] and np.isnan(t.arrival_s[[1, 2, 4, 5, 7, 8]]).all()
    assert t.line.tolist() == list(range(1, 10)) and t.bad_lines == 0


def _write(tmp_path, rows) -> Path:
    p = tmp_path / "trace.jsonl"
    p.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return p


def test_lines_without_a_session_are_tasks_of_one_call_timed_in_seconds(tmp_path):
    p = _write(tmp_path, [{"timestamp": 3000, "input_length": 600, "output_length": 5, "hash_ids": [7, 8]},
                          {"timestamp": 1000, "input_length": 700, "output_length": 5, "hash_ids": [7, 9]}])
    t = read_trace("aiperf", p)
    assert [t.task_names[c] for c in t.task] == ["line2", "line1"]   # tasks in order of their start
    assert t.arrival_s.tolist() == [0.0, 2.0]
    assert t.prefix_tree == {"h7": 512} and t.prefix.tolist() == ["h7", "h7"]
    assert t.input_tokens.tolist() == [700 - 512, 600 - 512]


def test_a_shared_prefix_always_leaves_the_call_a_token_of_its_own(tmp_path):
    p = _write(tmp_path, [{"session_id": "a", "input_length": 1024, "output_length": 5, "hash_ids": [1, 2]},
                          {"session_id": "b", "input_length": 1024, "output_length": 5, "hash_ids": [1, 2]}])
    t = read_trace("aiperf", p)
    assert t.prefix_tree == {"h1": 512} and t.input_tokens.tolist() == [512, 512]


@pytest.mark.parametrize(("row", "why"), [
    ({"session_id": "s", "output_length": 5, "hash_ids": []}, "missing 'input_length'"),
    ({"session_id": "s", "input_length": 600, "output_length": 5, "hash_ids": [1]}, "cannot cover input_length=600"),
    ({"session_id": "s", "input_length": 6, "output_length": 5, "hash_ids": [1], "delay": -2}, "'delay' must be >= 0"),
    ({"session_id": "s", "text_input": "hi", "output_length": 5}, "'text_input' is not supported"),
    ({"session_id": "s", "input_length": 6, "output_length": 0, "hash_ids": [1]}, "'output_length' must be >= 1"),
])
def test_a_bad_line_names_file_line_and_field(tmp_path, row, why):
    good = {"session_id": "s", "input_length": 6, "output_length": 5, "hash_ids": [1]}
    p = _write(tmp_path, [good, row])
    with pytest.raises(TraceError, match=rf"^{p}:2: .*{why}"):
        read_trace("aiperf", p)
    t = read_trace("aiperf", p, "skip")
    assert t.bad_lines == 1 and len(t) == 1


def test_not_json_is_a_bad_line_too(tmp_path):
    p = _write(tmp_path, ['{"session_id": "s", "input_length": 6, "output_length": 5, "hash_ids": [1]}', "{oops"])
    with pytest.raises(TraceError, match=rf"^{p}:2: not JSON"):
        read_trace("aiperf", p)


AIPERF = os.environ.get("TOKENFACTORY_AIPERF") or str(Path.home() / ".cache/tokenfactory/aiperf-venv/bin/aiperf")


@pytest.mark.integration
@pytest.mark.skipif(not os.access(AIPERF, os.X_OK),
                    reason="AIPerf's venv is missing: build it with .ci/aiperf_venv.sh (or set TOKENFACTORY_AIPERF)")
def test_a_file_aiperfs_own_generator_writes_reads_as_tasks(tmp_path):
    subprocess.run([AIPERF, "synthesize", "agentic-code", "--num-sessions", "12", "--seed", "3",
                    "--output", str(tmp_path)], check=True, capture_output=True, timeout=300)
    (path,) = tmp_path.glob("*/dataset.jsonl")
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    t = read_trace("aiperf", path)
    sessions = list(dict.fromkeys(r["session_id"] for r in rows))
    assert len(t) == len(rows) and sorted(t.task_names) == sorted(sessions) and t.bad_lines == 0
    # AIPerf's own account of the prefix layers (cache_structure.json) against the tree read from hash ids
    cache = json.loads((path.parent / "cache_structure.json").read_text())
    l1 = cache["l1_blocks"] * cache["block_size"]
    assert t.prefix_tree["h0"] == l1
    groups = {r["session_id"]: r["group_id"] for r in rows if "group_id" in r}
    for i, name in enumerate(t.task_names):
        rows_i = np.flatnonzero(t.task == i)
        shared = sum(g == groups[name] for g in groups.values()) > 1
        want = l1 + (cache["l15_blocks"] * cache["block_size"] if shared else 0)
        prefix = t.prefix[rows_i[0]]
        got = sum(t.prefix_tree["/".join(prefix.split("/")[:k + 1])] for k in range(prefix.count("/") + 1))
        assert got == want, name
        first = next(r for r in rows if r["session_id"] == name)
        assert t.input_tokens[rows_i[0]] == first["input_length"] - want
    later = [r for r in rows if "delay" in r]
    np.testing.assert_allclose(np.sort(t.tool_s[np.isfinite(t.tool_s)]), np.sort([r["delay"] / 1e3 for r in later]))
