"""Task workloads (DAGs of calls) through the real Dispatcher: when each call is sent, what its
prompt carries, retries, and the JSON-lines reader's task fields and errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
from omegaconf import OmegaConf

from loadgen.dispatch import LoadSpec
from loadgen.workloads.tasks import TaskCheck
from loadgen.workloads.traces.common import TraceError
from loadgen.workloads.traces.replay import TraceWorkload
from loadgen.workloads.traces.task_graph import flatten_prefix_tree
from metrics.tasks import task_summary
from tests.loadgen.test_trace_replay import RecordingClient, builder, jsonl, run  # noqa: F401
from tests.task_rows import table

TREE = {"prefix_tree": {"sys": {"tokens": 100, "children": {"docA": {"tokens": 400}, "docB": {"tokens": 300}}}}}
ROWS = [
    TREE,
    {"timestamp": 0.0, "task_id": "t1", "node": "plan", "input_tokens": 20, "output_tokens": 3, "prefix": "sys/docA"},
    {"task_id": "t1", "node": "q1", "parents": ["plan"], "tool_s": 0.05, "input_tokens": 10, "output_tokens": 3,
     "prefix": "sys/docA"},
    {"task_id": "t1", "node": "q2", "parents": ["plan"], "tool_s": 0.02, "input_tokens": 10, "output_tokens": 3,
     "prefix": "sys/docA"},
    {"task_id": "t1", "node": "join", "parents": ["q1", "q2"], "tool_s": 0.01, "input_tokens": 5, "output_tokens": 3},
    {"timestamp": 0.1, "task_id": "t2", "node": "a", "input_tokens": 12, "output_tokens": 2, "prefix": "sys/docB"},
    {"timestamp": 0.1, "task_id": "t2", "node": "b", "input_tokens": 12, "output_tokens": 2, "prefix": "sys/docB"},
]


def workload(tmp_path, builder, rows=ROWS, **task):  # noqa: F811
    cfg = {"name": "jsonl", "path": jsonl(tmp_path, rows)}
    if task:
        cfg["task"] = task
    return TraceWorkload(OmegaConf.create(cfg), builder, max_model_len=2048)


def test_calls_follow_their_parents_plus_tool_time(tmp_path, builder):  # noqa: F811
    items = workload(tmp_path, builder)
    rows, _, client = run(items, LoadSpec.of(kind="trace"))
    by = {(r.task_id, r.node): r for r in rows}
    assert set(by) == {("t1", "plan"), ("t1", "q1"), ("t1", "q2"), ("t1", "join"), ("t2", "a"), ("t2", "b")}
    plan, q1, q2, join = (by[("t1", n)] for n in ("plan", "q1", "q2", "join"))
    # sent its tool time after its last parent ended, never earlier
    assert q1.scheduled_ns >= plan.done_ns + 0.05e9 and q1.sent_ns >= q1.scheduled_ns
    assert q2.scheduled_ns >= plan.done_ns + 0.02e9
    last = max(q1.done_ns, q2.done_ns)
    assert last + 0.01e9 <= join.scheduled_ns < last + 0.01e9 + 20e6
    # a task's roots go together, at the task's arrival
    assert by[("t2", "a")].scheduled_ns == by[("t2", "b")].scheduled_ns
    assert by[("t2", "a")].scheduled_ns - plan.scheduled_ns == pytest.approx(0.1e9, abs=1e6)
    # the record's task columns
    assert (join.parents, join.attempt, join.task_calls, join.tool_s) == (["q1", "q2"], 1, 4, 0.01)
    assert plan.check_ok is None and join.check_ok is True and by[("t2", "a")].check_ok is True
    # the prompt: the prefix path's tokens, then its ancestors' messages and real replies
    p = {n: client.prompts[by[("t1", n)].request_id] for n in ("plan", "q1", "q2", "join")}
    lead = p["plan"][:len(p["plan"]) - 40]
    assert p["q1"].startswith(p["plan"] + f" reply of {plan.request_id}")
    assert p["q2"].startswith(p["plan"] + f" reply of {plan.request_id}")
    assert p["q1"][:len(lead)] == lead
    for n in ("q1", "q2"):
        assert f" reply of {by[('t1', n)].request_id}" in p["join"]
    # exact counts: the prefix path (100 + 400) and the own message (20) in the first call
    assert builder.count(p["plan"]) == plan.expected_prompt_tokens == 500 + 20 + builder.overhead
    assert builder.count(p["q1"]) == q1.expected_prompt_tokens


def test_the_same_prefix_path_is_the_same_tokens(tmp_path, builder):  # noqa: F811
    items = workload(tmp_path, builder)
    ids = items.prompts.tree_prefix_ids("sys/docA")
    assert ids.size == 500
    np.testing.assert_array_equal(ids[:100], items.prompts.tree_prefix_ids("sys/docB")[:100])  # the shared root
    assert not np.array_equal(ids[100:400], items.prompts.tree_prefix_ids("sys/docB")[100:400])


def test_failed_call_fails_the_attempt_and_the_task_is_retried(tmp_path, builder):  # noqa: F811
    items = workload(tmp_path, builder, max_attempts=2)
    q1_row = next(i for i in range(len(items.table)) if items.table.node[i] == "q1")
    client = RecordingClient(fail={f"r{q1_row:07d}"})
    rows, _, _ = run(items, LoadSpec.of(kind="trace"), client)
    t1 = sorted((r for r in rows if r.task_id == "t1"), key=lambda r: r.scheduled_ns)
    first = [r for r in t1 if r.attempt == 1]
    second = [r for r in t1 if r.attempt == 2]
    assert {r.node for r in first} == {"plan", "q1", "q2"}  # the join never went: q1 failed
    assert {r.node for r in second} == {"plan", "q1", "q2", "join"}
    assert all(r.request_id.endswith(".2") for r in second)
    # the new attempt starts once the failed one has nothing in flight
    assert min(r.scheduled_ns for r in second) >= max(r.done_ns for r in first)


def test_success_rule_rate_retries_until_out_of_attempts(tmp_path, builder):  # noqa: F811
    items = workload(tmp_path, builder, max_attempts=3, success="rate", success_rate=0.5)
    rows, _, _ = run(items, LoadSpec.of(kind="trace"))
    check = TaskCheck("rate", 0.5, None, 0)
    for task in ("t1", "t2"):
        attempts = sorted({r.attempt for r in rows if r.task_id == task})
        verdicts = []
        for a in attempts:
            sinks = [r for r in rows if r.task_id == task and r.attempt == a and r.check_ok is not None]
            assert len({r.check_ok for r in sinks}) == 1  # one verifier draw per attempt
            verdicts.append(sinks[0].check_ok)
            assert sinks[0].check_ok == check(sinks[0])
        # retried while failing, stopped at the first pass or the third attempt
        assert verdicts == [False] * (len(verdicts) - 1) + [verdicts[-1]]
        assert verdicts[-1] or len(verdicts) == 3


def test_task_workload_refuses_closed_loop(tmp_path, builder):  # noqa: F811
    items = workload(tmp_path, builder)
    with pytest.raises(ValueError, match="load=concurrency does not run a task workload"):
        run(items, LoadSpec.of(kind="concurrency", concurrency=2, requests_to_send=2))


def test_poisson_arrivals_are_per_task_and_num_requests_counts_tasks(tmp_path, builder):  # noqa: F811
    items = workload(tmp_path, builder)
    rows, _, _ = run(items, LoadSpec.of(kind="poisson", rate=50, requests_to_send=2))
    assert {r.task_id for r in rows} == {"t1", "t2"} and len(rows) == 6


@pytest.mark.parametrize("rows, match", [
    ([{"task_id": "t", "node": "a", "input_tokens": 5, "output_tokens": 1},
      {"task_id": "t", "node": "a", "input_tokens": 5, "output_tokens": 1}],
     r"t\.jsonl:2: task 't' has node 'a' twice"),
    ([{"task_id": "t", "node": "a", "parents": ["z"], "input_tokens": 5, "output_tokens": 1}],
     r"t\.jsonl:1: parent 'z' of node 'a' is not a node of task 't'"),
    ([{"task_id": "t", "node": "r", "input_tokens": 5, "output_tokens": 1},
      {"task_id": "t", "node": "a", "parents": ["b"], "input_tokens": 5, "output_tokens": 1},
      {"task_id": "t", "node": "b", "parents": ["a"], "input_tokens": 5, "output_tokens": 1}], "has a cycle"),
    ([TREE, {"task_id": "t", "prefix": "sys/docC", "input_tokens": 5, "output_tokens": 1}],
     r"t\.jsonl:2: 'prefix' 'sys/docC' is not a path of the prefix tree"),
    ([{"task_id": "t", "prefix": "sys", "input_tokens": 5, "output_tokens": 1}], "no prefix tree is declared"),
    ([{"task_id": "t", "session_id": "s", "input_tokens": 5, "output_tokens": 1}], "not both"),
    ([{"node": "a", "input_tokens": 5, "output_tokens": 1}], "need a 'task_id'"),
    ([{"task_id": "t", "parents": "a", "input_tokens": 5, "output_tokens": 1}], "'parents' must be a list"),
    ([{"task_id": "t", "tool_s": -1, "input_tokens": 5, "output_tokens": 1}], "'tool_s' must be >= 0"),
    ([{"prefix_tree": {"sys": {"tokens": 0}}}, {"task_id": "t", "input_tokens": 5, "output_tokens": 1}],
     r"t\.jsonl:1: prefix tree node 'sys': 'tokens' must be an integer >= 1"),
])
def test_bad_task_lines_name_file_and_line(tmp_path, builder, rows, match):  # noqa: F811
    with pytest.raises((TraceError, ValueError), match=match):
        workload(tmp_path, builder, rows)


def test_prefix_tree_from_config_and_flattening(tmp_path, builder):  # noqa: F811
    assert flatten_prefix_tree(TREE["prefix_tree"], "x") == {"sys": 100, "sys/docA": 400, "sys/docB": 300}
    rows = [{"task_id": "t", "prefix": "sys/docB", "input_tokens": 5, "output_tokens": 1}]
    items = workload(tmp_path, builder, rows, prefix_tree=TREE["prefix_tree"])
    it = next(items)
    assert it.prompt_tokens == 400 + 5 + builder.overhead


def test_context_parents_only(tmp_path, builder):  # noqa: F811
    items = workload(tmp_path, builder, context="parents")
    rows, _, client = run(items, LoadSpec.of(kind="trace"))
    by = {(r.task_id, r.node): r for r in rows}
    join = client.prompts[by[("t1", "join")].request_id]
    assert f" reply of {by[('t1', 'plan')].request_id}" not in join  # a grandparent: not in its context
    assert f" reply of {by[('t1', 'q1')].request_id}" in join


def test_tasks_stay_whole_under_caps_and_samples(tmp_path, builder):  # noqa: F811
    from loadgen.workloads.traces.replay import load_table

    path = jsonl(tmp_path, ROWS)
    t = load_table(OmegaConf.create({"name": "jsonl", "path": path, "max_requests": 1}))
    assert sorted(set(t.node.tolist())) == ["join", "plan", "q1", "q2"]
    json.dumps(t.notes)


def test_task_errors_are_found_before_the_engine_starts(tmp_path):
    from loadgen.workloads.traces.replay import check_workload

    rows = [{"task_id": "t", "prefix": "sys/nope", "input_tokens": 5, "output_tokens": 1}]
    cfg = OmegaConf.create({"name": "jsonl", "path": jsonl(tmp_path, rows),
                            "task": {"prefix_tree": TREE["prefix_tree"]}})
    with pytest.raises(TraceError, match=r"t\.jsonl:1: 'prefix' 'sys/nope' is not a path"):
        check_workload(cfg, 2048)
    cfg.task = {"success": "regex", "success_regex": "("}
    cfg.path = jsonl(tmp_path, [{"task_id": "t", "input_tokens": 5, "output_tokens": 1}], "u.jsonl")
    with pytest.raises(ValueError, match="success_regex"):
        check_workload(cfg, 2048)


def test_a_call_too_long_for_the_model_fails_its_attempt(tmp_path, builder):  # noqa: F811
    rows = [{"prefix_tree": {"big": {"tokens": 190}}},
            {"task_id": "t", "node": "a", "input_tokens": 10, "output_tokens": 4},
            {"task_id": "t", "node": "b", "parents": ["a"], "prefix": "big", "input_tokens": 20, "output_tokens": 4}]
    items = TraceWorkload(OmegaConf.create({"name": "jsonl", "path": jsonl(tmp_path, rows),
                                            "task": {"max_attempts": 2}}), builder, max_model_len=200)
    rows_, _, _ = run(items, LoadSpec.of(kind="poisson", rate=10, requests_to_send=1))
    # b never fits (its prefix and message alone are over the limit): each attempt ends at a, twice
    assert [(r.node, r.attempt) for r in rows_] == [("a", 1), ("a", 2)]
    assert items.tasks.unbuildable == 2
    from harness.workload_describe import summary_keys

    assert summary_keys({}, items)["workload_unbuildable_calls"] == 2


# "long" starts at 0 and its second call is due 0.3 s after its first ended, past the run's 0.1 s
CUT_ROWS = [{"timestamp": 0.0, "task_id": "long", "node": "a", "input_tokens": 10, "output_tokens": 2},
            {"task_id": "long", "node": "b", "parents": ["a"], "tool_s": 0.3, "input_tokens": 10, "output_tokens": 2},
            {"timestamp": 0.0, "task_id": "short", "node": "a", "input_tokens": 10, "output_tokens": 2}]


@pytest.mark.parametrize("drain_s, calls, completed, censored, rate", [
    (5.0, 3, 2, 0, 1.0),    # the drain lets the started task finish
    (0.05, 2, 1, 1, 1.0),   # its call is due after the drain's end (0.1 + 0.05 s): censored, not failed
])
def test_a_task_started_before_the_end_finishes_in_the_drain_or_is_censored(tmp_path, builder, drain_s, calls,  # noqa: F811
                                                                            completed, censored, rate):
    items = workload(tmp_path, builder, rows=CUT_ROWS)
    rows, _, _ = run(items, LoadSpec.of(kind="trace", duration_s=0.1, drain_timeout_s=drain_s))
    assert len(rows) == calls
    s = task_summary(table(rows))
    assert (s["num_tasks"], s["completed_tasks"], s["censored_tasks"]) == (2, completed, censored)
    assert s["task_completion_rate"] == rate and s["task_censored_rate"] == censored / 2


class CountingTokenizer:
    """The tiny model's tokenizer, counting every token it encodes (its Rust fast path hidden, so
    every encode goes through ``__call__``)."""

    backend_tokenizer = None

    def __init__(self, tok):
        self.tok, self.tokens = tok, 0

    def __getattr__(self, name):
        return getattr(self.tok, name)

    def __call__(self, text, **kw):
        out = self.tok(text, **kw)
        ids = out["input_ids"]
        self.tokens += sum(map(len, ids)) if ids and isinstance(ids[0], list) else len(ids)
        return out


def test_dropping_old_exchanges_tokenizes_the_context_a_bounded_number_of_times(tmp_path, builder):  # noqa: F811
    from loadgen.workloads.prompts import PromptBuilder

    counting = CountingTokenizer(builder.tok)
    b = PromptBuilder(counting, seed=0)
    rows = [{"task_id": "t", "node": "a", "input_tokens": 20, "output_tokens": 4}]
    items = TraceWorkload(OmegaConf.create({"name": "jsonl", "path": jsonl(tmp_path, rows)}), b, max_model_len=600)
    # 60 exchanges of 40 + 10 tokens: a 3,000-token context, of which ~50 exchanges must go
    context = [(b.text_of(40), b.text_of(10)) for _ in range(60)]
    ctx_tokens = sum(builder.count(u + a) for u, a in context)
    counting.tokens = 0
    prompt, n, text = items.prompts.task_call(0, "", context)
    spent = counting.tokens
    assert n + 4 <= 600 and builder.count(prompt) == n
    # as few exchanges dropped as fit: the one before the first kept would not have fitted
    kept = next(j for j in range(60) if prompt.startswith(context[j][0]))
    assert builder.count("".join(u + a for u, a in context[kept - 1:]) + text) + 4 > 600
    assert prompt == "".join(u + a for u, a in context[kept:]) + text
    # linear: the context is tokenized a bounded number of times, not once per dropped exchange
    # (main: ~50 whole-prompt counts, ~90,000 tokens)
    assert spent <= 5 * ctx_tokens, (spent, ctx_tokens)


class Backtracking(RecordingClient):
    """Replies with 31 a's and a b: ``(a|aa)+$`` backtracks through ~1.6^31 paths on it."""

    async def send(self, rec, payload):
        await super().send(rec, payload)
        rec.text = "a" * 31 + "b"
        return rec


def test_a_backtracking_success_regex_does_not_stall_the_event_loop(tmp_path, builder):  # noqa: F811
    import asyncio
    import time

    from loadgen.dispatch import Dispatcher
    from tests.loadgen.test_trace_replay import ListWriter

    rows = [{"timestamp": 0.0, "task_id": "t", "node": "a", "input_tokens": 10, "output_tokens": 2}]
    items = workload(tmp_path, builder, rows=rows, success="regex", success_regex="(a|aa)+$",
                     success_regex_timeout_s=0.01)
    w = ListWriter()

    async def go() -> float:
        gaps, done = [0.0], asyncio.Event()

        async def tick():  # the loop's responsiveness: how late a 5 ms timer fires
            last = time.perf_counter()
            while not done.is_set():
                await asyncio.sleep(0.005)
                now = time.perf_counter()
                gaps.append(now - last)
                last = now
        ticker = asyncio.ensure_future(tick())
        await Dispatcher(Backtracking(), w, followup=items.followup).run(items, LoadSpec.of(kind="trace"))
        done.set()
        await ticker
        return max(gaps)

    worst = asyncio.run(go())
    (rec,) = w.rows
    # the match is cut after its bound (~0.01 s; re, unbounded, takes ~1 s here) and fails the check
    assert rec.status == "ok" and rec.check_ok is False
    assert "workload.task.success_regex_timeout_s=0.01" in rec.error
    assert worst < 0.3, worst
