"""AIPerf's DAG conversations read as tasks: spawns joined where AIPerf joins them, forks,
templates instantiated per spawn, bad conversations named by line and field; (integration)
AIPerf's own DAG loader, from its venv, accepts the checked-in sample and counts the same turns."""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import pytest

from loadgen.workloads.traces.common import TraceError
from loadgen.workloads.traces.readers import read_trace

FIXTURE = Path(__file__).parents[3] / "fixtures" / "aiperf_0.13.0_dag.jsonl"


def test_spawns_join_at_the_next_turn_or_join_at_and_forks_run_after_their_turn():
    t = read_trace("aiperf_dag", FIXTURE)
    assert t.task_names == ["plan", "solo"] and t.task_input == "message" and len(t) == 13
    calls = {n: (p, int(o), float(s)) for n, p, o, s in zip(t.node, t.parents, t.output_tokens, t.tool_s)}
    # two searches spawned at turn 0, joined by turn 1; a review spawned at turn 1, joined at turn 3
    assert calls["plan:1"][0] == ("plan:0", "plan:0>search_a:1", "plan:0>search_b:0")
    assert calls["plan:0>search_a:1"][0] == ("plan:0>search_a:0",)
    assert calls["plan:2"][0] == ("plan:1",) and calls["plan:3"][0] == ("plan:2", "plan:1>review:0")
    # a fork on the last turn (no join); a background fork mid-conversation, the parent going on
    assert calls["plan:3>polish:0"][0] == ("plan:3",) and calls["solo:1>side:0"][0] == ("solo:1",)
    assert calls["solo:2"][0] == ("solo:1",)
    # delay (ms) is the tool time; max_tokens the output length
    assert calls["plan:1"][2] == 1.5 and calls["plan:0>search_a:1"][2] == 3.0 and math.isnan(calls["plan:0"][2])
    assert calls["plan:3"][1] == 400 and (t.input_tokens == -1).all()
    assert t.text[0] == "You plan research.\nPlan a survey of KV cache reuse." and t.text[2] == "Summarise the hits."
    assert any("spawned conversations start fresh" in n for n in t.notes)


def _write(tmp_path, convs) -> Path:
    p = tmp_path / "dag.jsonl"
    p.write_text("".join(json.dumps(c) + "\n" for c in convs))
    return p


def turn(text="hi", n=5, **kw):
    return {"messages": [{"role": "user", "content": text}], "max_tokens": n, **kw}


def test_a_template_spawned_twice_is_two_instances(tmp_path):
    p = _write(tmp_path, [{"session_id": "r", "turns": [turn(spawns=["w"]), turn(spawns=["w"]), turn()]},
                          {"session_id": "w", "turns": [turn()]}])
    t = read_trace("aiperf_dag", p)
    assert t.node.tolist() == ["r:0", "r:0>w:0", "r:1", "r:1>w:0", "r:2"]
    assert t.parents.tolist()[2] == ("r:0", "r:0>w:0") and t.parents.tolist()[4] == ("r:1", "r:1>w:0")


@pytest.mark.parametrize(("convs", "why"), [
    ([{"session_id": "r", "turns": [turn(spawns=["nobody"])]}], "branch target 'nobody' is not a session_id"),
    ([{"session_id": "r", "turns": [turn(forks=["c"]), turn()]}, {"session_id": "c", "turns": [turn()]}],
     r"turns\[0\]: a fork without background=true"),
    ([{"session_id": "r", "turns": [turn(n=None)]}], r"turns\[0\]: missing 'max_tokens'"),
    ([{"session_id": "r", "turns": [turn(colour="red")]}], r"turns\[0\]: unknown key 'colour'"),
    ([{"session_id": "r", "orchestrator": True, "spawns": ["c"], "turns": []}], "'orchestrator'.* not supported"),
    ([{"session_id": "r", "turns": [turn(spawns=[{"children": ["c"], "join_at": 0}])]}], "join_at=0 must be after"),
    ([{"session_id": "r", "turns": [{"messages": [], "max_tokens": 3}]}], "'messages' must be a non-empty list"),
])
def test_a_bad_conversation_names_its_line_and_field(tmp_path, convs, why):
    p = _write(tmp_path, [{"session_id": "ok", "turns": [turn()]}, *convs])
    with pytest.raises(TraceError, match=rf"^{p}:2: .*({why})"):
        read_trace("aiperf_dag", p)
    t = read_trace("aiperf_dag", p, "skip")
    assert t.bad_lines >= 1 and "ok" in t.task_names


def test_a_cycle_of_branches_is_refused(tmp_path):
    p = _write(tmp_path, [{"session_id": "r", "turns": [turn(spawns=["a"]), turn()]},
                          {"session_id": "a", "turns": [turn(spawns=["b"])]},
                          {"session_id": "b", "turns": [turn(spawns=["a"])]}])
    with pytest.raises(TraceError, match=rf"^{p}:1: conversations branch in a cycle: r -> a -> b -> a"):
        read_trace("aiperf_dag", p)


AIPERF = os.environ.get("TOKENFACTORY_AIPERF") or str(Path.home() / ".cache/tokenfactory/aiperf-venv/bin/aiperf")


@pytest.mark.integration
@pytest.mark.skipif(not os.access(AIPERF, os.X_OK),
                    reason="AIPerf's venv is missing: build it with .ci/aiperf_venv.sh (or set TOKENFACTORY_AIPERF)")
def test_aiperfs_own_dag_loader_accepts_the_sample_with_the_same_roots_and_turns():
    python = str(Path(AIPERF).with_name("python"))
    got = subprocess.run([python, "-c", "import json, sys\n"
                          "from aiperf.dataset.loader.dag_jsonl import DagJsonlLoader\n"
                          "l = DagJsonlLoader(sys.argv[1]); cs = l.load()\n"
                          "print(json.dumps({'roots': sorted(l.root_session_ids()), "
                          "'turns': {c.session_id: len(c.turns) for c in cs}}))", str(FIXTURE)],
                         check=True, capture_output=True, text=True, timeout=300)
    theirs = json.loads(got.stdout.strip().splitlines()[-1])
    t = read_trace("aiperf_dag", FIXTURE)
    assert theirs["roots"] == sorted(t.task_names)
    # each conversation here is instantiated once, so the calls are AIPerf's turns, one for one
    assert sum(theirs["turns"].values()) == len(t)
