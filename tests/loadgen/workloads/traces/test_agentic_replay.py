"""The agentic readers' tables through the real replay and Dispatcher (a client that answers at
once): every call is sent, none before its parents ended plus its tool time, a join after all
its parents, and a whole-prompt length (SGLang's) replayed as the whole prompt."""

from __future__ import annotations

import json
from pathlib import Path

from omegaconf import OmegaConf

from loadgen.dispatch import LoadSpec
from loadgen.workloads.traces.replay import TraceWorkload
from tests.loadgen.test_trace_replay import builder, run  # noqa: F401

FIXTURES = Path(__file__).parents[3] / "fixtures"


def replay(name, path, builder, tasks: int):  # noqa: F811
    items = TraceWorkload(OmegaConf.create({"name": name, "path": str(path)}), builder, max_model_len=4096)
    # the traces give no start times (or one task's only): tasks arrive as a fast Poisson process
    rows, _, client = run(items, LoadSpec.of(kind="poisson", rate=50, requests_to_send=tasks))
    return {(r.task_id, r.node): r for r in rows}, client


def check_order(by: dict, table_parents: dict) -> None:
    for (task, node), r in by.items():
        assert r.status == "ok", (task, node, r.error)
        for p in table_parents[(task, node)]:
            parent = by[(task, p)]
            assert r.scheduled_ns >= parent.done_ns + (r.tool_s or 0) * 1e9, (task, node, p)


def test_guidellms_branched_graph_replays_as_its_dag(builder):  # noqa: F811
    by, _ = replay("guidellm", FIXTURES / "guidellm_0.8.1_conversation_turns.jsonl", builder, 2)
    assert len(by) == 8
    main_2 = next(r for (t, n), r in by.items() if n == "main_2")
    assert sorted(main_2.parents) == ["branch_0_1", "main_1"] and main_2.tool_s == 0.5
    check_order(by, {k: r.parents for k, r in by.items()})


def test_aiperfs_dag_with_spawns_joins_and_forks_replays(tmp_path, builder):  # noqa: F811
    turn = lambda text, **kw: {"messages": [{"role": "user", "content": text}], "max_tokens": 3, **kw}  # noqa: E731
    p = tmp_path / "dag.jsonl"
    p.write_text("\n".join(json.dumps(c) for c in [
        {"session_id": "plan", "turns": [turn("plan it", spawns=["a", "b"]), turn("merge", delay=20),
                                         turn("write", forks=["polish"])]},
        {"session_id": "a", "turns": [turn("search a"), turn("sum a", delay=10)]},
        {"session_id": "b", "turns": [turn("search b")]},
        {"session_id": "polish", "turns": [turn("polish")]}]))
    by, client = replay("aiperf_dag", p, builder, 1)
    assert {n for _, n in by} == {"plan:0", "plan:0>a:0", "plan:0>a:1", "plan:0>b:0", "plan:1", "plan:2",
                                  "plan:2>polish:0"}
    check_order(by, {k: r.parents for k, r in by.items()})
    # the join's prompt carries its message, and its ancestors' (workload.task.context=ancestors)
    merge = client.prompts[by[("plan", "plan:1")].request_id]
    assert "merge" in merge and "search a" in merge and "plan it" in merge


def test_sglangs_whole_prompt_lengths_are_the_prompts_sent(tmp_path, builder):  # noqa: F811
    sys_msg = {"role": "system", "content": "x"}
    p = tmp_path / "trace.json"
    p.write_text(json.dumps({"conversations": [[{"messages": [sys_msg], "prompt_tokens": 300},
                                                {"messages": [sys_msg], "prompt_tokens": 900}]]}))
    by, _ = replay("sglang_agentic", p, builder, 1)
    t0, t1 = by[("c0", "t0")], by[("c0", "t1")]
    assert t1.parents == ["t0"] and t1.scheduled_ns >= t0.done_ns
    assert (t0.expected_prompt_tokens, t1.expected_prompt_tokens) == (300, 900)
