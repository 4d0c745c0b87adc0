"""Replay: the schedule of a trace after window/scale/rate transforms, stress variants, and
multi-turn sessions through the real Dispatcher with a client stand-in that records what
it was asked to send (the schedule is checked exactly, not by timing)."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
from omegaconf import OmegaConf

from loadgen.dispatch import Dispatcher, LoadSpec
from loadgen.records import RequestRecord
from loadgen.workloads.prompts import PromptBuilder, load_tokenizer
from loadgen.workloads.table import WorkloadTable
from loadgen.workloads.traces.replay import TraceWorkload, load_table
from loadgen.workloads.traces.transforms import burst, first_n, long_tail, mean_rate, sample, to_rate


@pytest.fixture(scope="module")
def builder():
    from engines.tiny_model import ensure_tiny_model

    return PromptBuilder(load_tokenizer(str(ensure_tiny_model())), seed=0)


class RecordingClient:
    """Answers at once with a known reply; fails the requests whose id is in ``fail``."""

    def __init__(self, fail=()):
        self.fail = set(fail)
        self.prompts: dict[str, str] = {}

    def body(self, prompt, max_tokens, model=None):
        return json.dumps({"prompt": prompt, "max_tokens": max_tokens, "model": model}).encode()

    async def send(self, rec: RequestRecord, payload: bytes):
        import time

        rec.sent_ns = time.perf_counter_ns()
        self.prompts[rec.request_id] = json.loads(payload)["prompt"]
        await asyncio.sleep(0.001)
        rec.done_ns = rec.end_ns = time.perf_counter_ns()
        if rec.request_id in self.fail:
            rec.status, rec.http_status = "http_error", 500
            return rec
        rec.status, rec.text = "ok", f" reply of {rec.request_id}"
        rec.output_tokens = rec.max_tokens
        return rec


class ListWriter:
    def __init__(self):
        self.rows: list[RequestRecord] = []

    def append(self, rec):
        self.rows.append(rec)


def run(items, spec, client=None):
    client = client or RecordingClient()
    w = ListWriter()
    d = Dispatcher(client, w, followup=getattr(items, "followup", None))
    stats = asyncio.run(d.run(items, spec))
    return w.rows, stats, client


def jsonl(tmp_path, rows, name="t.jsonl"):
    p = tmp_path / name
    p.write_text("\n".join(json.dumps(r) for r in rows))
    return str(p)


def test_trace_schedule_after_window_and_scale(tmp_path, builder):
    ts = [10.0, 10.5, 11.0, 13.0, 14.25, 20.0, 30.0]
    path = jsonl(tmp_path, [{"timestamp": t, "input_tokens": 20 + i, "output_tokens": 2} for i, t in enumerate(ts)])
    wcfg = OmegaConf.create({"name": "jsonl", "path": path, "window": [0.5, 10.5], "time_scale": 4.0})
    items = TraceWorkload(wcfg, builder, max_model_len=2048)
    rows, stats, _ = run(items, LoadSpec.of(kind="trace"))
    got = sorted((r.scheduled_ns - stats["start_ns"]) for r in rows)
    # offsets 0 .. 20 on the trace's clock; [0.5, 10.5) keeps 0.5 .. 10, shifted by 0.5, / 4
    expect = [int(off * 1e9) for off in ((np.array([0.5, 1.0, 3.0, 4.25, 10.0]) - 0.5) / 4.0)]
    assert got == expect
    assert sorted(r.expected_prompt_tokens for r in rows) == [21, 22, 23, 24, 25]


def test_target_rate_keeps_shape_and_max_requests(tmp_path):
    t = WorkloadTable(arrival_s=np.array([0.0, 1.0, 1.5, 9.0]), input_tokens=np.full(4, 10),
                      output_tokens=np.full(4, 2))
    r = to_rate(t, 3.0)
    assert mean_rate(r.arrival_s) == pytest.approx(3.0)
    np.testing.assert_allclose(r.arrival_s, t.arrival_s / 9.0)  # (4-1)/9 s = 1/3 req/s -> 9x faster
    assert first_n(t, 2).arrival_s.tolist() == [0.0, 1.0]


def test_sample_keeps_a_share_and_sessions_whole():
    n = 4000
    t = WorkloadTable(arrival_s=np.sort(np.random.default_rng(0).uniform(0, 400, n)), input_tokens=np.full(n, 10),
                      output_tokens=np.full(n, 2), session=np.repeat(np.arange(n // 2), 2),
                      turn=np.tile([0, 1], n // 2))
    s = sample(t, 0.25, seed=3)
    assert len(s) == pytest.approx(n / 4, rel=0.1)
    sessions, counts = np.unique(s.session, return_counts=True)
    assert (counts == 2).all()                                   # both turns of each kept session
    # the shape over time is kept: each quarter of the window keeps about a quarter of its requests
    assert np.histogram(s.arrival_s, bins=4, range=(0, 400))[0] == pytest.approx([n / 16] * 4, rel=0.25)
    assert sample(t, 1.0) is t and len(sample(t, 0.25, seed=3)) == len(s)
    with pytest.raises(ValueError, match="sample_fraction"):
        sample(t, 0.0)


def test_burst_and_long_tail():
    t = WorkloadTable(arrival_s=np.array([0.0, 1.0, 2.0, 3.0, 4.0]), input_tokens=np.arange(10, 15),
                      output_tokens=np.full(5, 2))
    b = burst(t, 3.0, 1.0, 3.0)
    # rows at 1 and 2 get two copies each, spread in the gap to the next arrival
    assert sorted(b.arrival_s.tolist()) == pytest.approx([0, 1, 1 + 1 / 3, 1 + 2 / 3, 2, 2 + 1 / 3, 2 + 2 / 3, 3, 4])
    assert sorted(b.input_tokens.tolist()) == [10, 11, 11, 11, 12, 12, 12, 13, 14]
    lt = long_tail(t, 0.4, "output", None, 999, seed=1)
    assert (lt.output_tokens == 999).sum() == 2 and (t.output_tokens == 2).all()


def test_stress_from_config(tmp_path, builder):
    path = jsonl(tmp_path, [{"timestamp": float(i), "input_tokens": 30, "output_tokens": 2} for i in range(10)])
    wcfg = OmegaConf.create({"name": "jsonl", "path": path,
                             "stress": {"burst": {"factor": 2.0, "start_s": 2.0, "end_s": 5.0},
                                        "long_tail": {"fraction": 0.5, "kind": "input", "input_tokens": 200}}})
    t = load_table(wcfg)
    assert len(t) == 13 and (t.input_tokens == 200).sum() == round(0.5 * 13)


SESSION_ROWS = [
    {"timestamp": 0.0, "input_tokens": 40, "output_tokens": 3, "session_id": "a", "turn": 0},
    {"timestamp": 5.0, "input_tokens": 30, "output_tokens": 3, "session_id": "a", "turn": 1, "think_s": 0.05},
    {"timestamp": 9.0, "input_tokens": 300, "output_tokens": 3, "session_id": "a", "turn": 2, "think_s": 0.02},
    {"timestamp": 0.01, "input_tokens": 25, "output_tokens": 2},
    {"timestamp": 0.02, "input_tokens": 50, "output_tokens": 4, "session_id": "b", "turn": 0},
    {"timestamp": 0.5, "input_tokens": 60, "output_tokens": 4, "session_id": "b", "turn": 1},
]


@pytest.mark.parametrize("kind", ["trace", "concurrency"])
def test_sessions_follow_previous_turn_with_real_history(tmp_path, builder, kind):
    path = jsonl(tmp_path, SESSION_ROWS)
    items = TraceWorkload(OmegaConf.create({"name": "jsonl", "path": path}), builder, max_model_len=2048)
    assert items.expected_turns == {"a": 3, "b": 2}
    spec = (LoadSpec.of(kind=kind, concurrency=2, requests_to_send=10) if kind == "concurrency"
            else LoadSpec.of(kind="trace"))
    rows, _, client = run(items, spec)
    assert len(rows) == 6
    by = {(r.session_id, r.turn): r for r in rows}
    a0, a1, a2 = by[("a", 0)], by[("a", 1)], by[("a", 2)]
    # a turn is scheduled think_s after the previous one ended (b: gap of its timestamps, 0.48 s)
    assert 0.05e9 <= a1.scheduled_ns - a0.done_ns < 0.05e9 + 20e6
    assert 0.02e9 <= a2.scheduled_ns - a1.done_ns < 0.02e9 + 20e6
    assert 0.48e9 <= by[("b", 1)].scheduled_ns - by[("b", 0)].done_ns < 0.48e9 + 20e6
    assert a1.sent_ns >= a1.scheduled_ns
    # the prompt carries the previous user messages and the real replies, as a chat client's
    p0, p1, p2 = (client.prompts[r.request_id] for r in (a0, a1, a2))
    assert p1.startswith(p0 + f" reply of {a0.request_id}")
    assert p2.startswith(p1 + f" reply of {a1.request_id}")
    # the trace's total input length is kept where the history fits in it
    assert builder.count(p2) == 300 and a2.expected_prompt_tokens == 300
    assert builder.count(p1) == a1.expected_prompt_tokens  # history (44 tok) > 30: history + 1 token


class MixedChunkClient(RecordingClient):
    """Answers with a chat stream whose 2nd chunk carries reasoning's end and the answer, and 3rd the
    answer's end and a tool call (``delta`` fields of vLLM's reasoning and tool parsers), read by the
    real stream reader."""

    async def send(self, rec: RequestRecord, payload: bytes):
        import time

        import orjson

        from loadgen.client.openai_stream import OpenAIStream, finish_text

        rec.sent_ns = time.perf_counter_ns()
        self.prompts[rec.request_id] = json.loads(payload)["prompt"]
        st = OpenAIStream(rec)
        call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": ""}}
        for d in ({"reasoning": "hmm "}, {"reasoning": "ok ", "content": "Sure. "},
                  {"content": "Calling ", "tool_calls": [call]}):
            ev = {"id": "x", "choices": [{"index": 0, "delta": d, "finish_reason": None}]}
            st.feed(b"data: " + orjson.dumps(ev) + b"\n\n", time.perf_counter_ns())
        st.feed(b"data: [DONE]\n\n", time.perf_counter_ns())
        rec.done_ns = time.perf_counter_ns()
        rec.status = st.outcome()[0]
        finish_text(rec)
        return rec


def test_the_next_turn_carries_every_kind_a_chunk_carried(tmp_path, builder):
    path = jsonl(tmp_path, SESSION_ROWS)
    items = TraceWorkload(OmegaConf.create({"name": "jsonl", "path": path}), builder, max_model_len=2048)
    rows, _, client = run(items, LoadSpec.of(kind="trace"), MixedChunkClient())
    by = {(r.session_id, r.turn): r for r in rows}
    a0, a1 = by[("a", 0)], by[("a", 1)]
    assert a0.text == "hmm ok Sure. Calling get_weather"       # reasoning, answer and the tool call, in order
    assert client.prompts[a1.request_id].startswith(client.prompts[a0.request_id] + a0.text)


def test_failed_turn_ends_session_and_summary(tmp_path, builder):
    from loadgen.records import RecordWriter, read_requests
    from metrics.slo import SLO
    from metrics.summary import summarize

    path = jsonl(tmp_path, SESSION_ROWS)
    items = TraceWorkload(OmegaConf.create({"name": "jsonl", "path": path}), builder, max_model_len=2048)
    fail_id = next(it for it in TraceWorkload(OmegaConf.create({"name": "jsonl", "path": path}), builder,
                                              max_model_len=2048) if it.session_id == "b").request_id
    rows, _, _ = run(items, LoadSpec.of(kind="trace"), RecordingClient(fail=[fail_id]))
    assert len(rows) == 5  # b's second turn is never sent
    w = RecordWriter(tmp_path / "requests.parquet")
    for r in rows:
        w.append(r)
    w.close()
    table = read_requests(tmp_path / "requests.parquet")
    cost = {"model": "rental", "hourly_per_gpu": 3600.0, "num_gpus": 1}
    s = summarize(table, SLO.from_config({}), 0, int(2e9), cost_cfg=cost, expected_turns=items.expected_turns)
    assert s["num_sessions"] == 2 and s["completed_sessions"] == 1 and s["session_completion_rate"] == 0.5
    assert s["cost_total"] == pytest.approx(2.0) and s["cost_per_completed_session"] == pytest.approx(2.0)
    # a planned session never sent (cut by the run's end) is not completed
    s = summarize(table, SLO.from_config({}), 0, int(2e9), expected_turns={**items.expected_turns, "c": 2})
    assert s["num_sessions"] == 3 and s["completed_sessions"] == 1


def test_load_trace_config_and_no_times(tmp_path, builder):
    from hydra import compose, initialize_config_module

    with initialize_config_module(config_module="conf", version_base="1.3"):
        cfg = compose("config", overrides=["load=trace", "workload=sharegpt"])
    assert cfg.load.kind == "trace" and cfg.load.num_requests is None
    LoadSpec.of(kind="trace").validate()  # no num_requests needed: the trace ends by itself
    p = tmp_path / "s.json"
    p.write_text(json.dumps([{"id": "c", "conversations": [{"from": "human", "value": "hi"},
                                                              {"from": "gpt", "value": "hello you"}]}]))
    items = TraceWorkload(OmegaConf.create({"name": "sharegpt", "path": str(p)}), builder, max_model_len=2048)
    with pytest.raises(ValueError, match="load=trace needs arrival times"):
        run(items, LoadSpec.of(kind="trace"))


def test_think_time_distribution(tmp_path, builder):
    from loadgen.workloads.sessions import SessionReplay
    from loadgen.workloads.traces.prompts import TracePrompts

    t = WorkloadTable(arrival_s=np.array([0.0]), input_tokens=np.array([5]), output_tokens=np.array([1]))
    r = SessionReplay(WorkloadTable(arrival_s=np.array([0.0, np.nan]), input_tokens=np.array([5, 9]),
                                    output_tokens=np.array([1, 1]), session=np.array([0, 0]),
                                    turn=np.array([0, 1], dtype=np.int32)),
                      TracePrompts(t, builder), default_think_s=2.0, think_dist="exponential", seed=4)
    draws = np.array([r.draw_think() for _ in range(20000)])
    assert draws.mean() == pytest.approx(2.0, rel=0.03) and draws.std() == pytest.approx(2.0, rel=0.05)
    # a trace without think times (ShareGPT) gets workload.think_s between turns
    sg = tmp_path / "sg.json"
    sg.write_text(json.dumps([{"id": "c", "conversations": [{"from": "human", "value": "hi there"},
                                                            {"from": "gpt", "value": "hello"},
                                                            {"from": "human", "value": "and again"},
                                                            {"from": "gpt", "value": "yes"}]}]))
    items = TraceWorkload(OmegaConf.create({"name": "sharegpt", "path": str(sg), "think_s": 0.2}), builder,
                          max_model_len=2048)
    rows, _, client = run(items, LoadSpec.of(kind="constant", rate=1.0, requests_to_send=2))
    a0, a1 = sorted(rows, key=lambda r: r.turn)
    assert 0.2e9 <= a1.scheduled_ns - a0.done_ns < 0.2e9 + 20e6
    assert client.prompts[a1.request_id] == f"hi there reply of {a0.request_id}and again"
    with pytest.raises(ValueError, match="think_dist"):
        SessionReplay(r.table, r.prompts, think_dist="gauss")
