"""Reasoning, tool-call and multi-token (speculative) streams through the streaming client, against
the fake server in each engine's documented format: vLLM >= 0.11's ``delta.reasoning``, the older
``delta.reasoning_content``, ``delta.tool_calls``, and one chunk per engine step carrying k tokens."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pyarrow.parquet as pq
import pytest

from conf.schema import ClientTimeouts
from loadgen.client import ClientConfig, StreamingClient
from loadgen.client.openai_stream import OpenAIStream, finish_text
from loadgen.records import RecordWriter, RequestRecord
from metrics.request_metrics import complete_record
from metrics.slo import SLO
from metrics.summary import summarize
from tests.fake_server import FakeServer


@pytest.fixture(scope="module")
def server():
    with FakeServer() as s:
        yield s


def _send(base_url, prompt, slo=None):
    cfg = ClientConfig(base_url=base_url, model="fake", api="chat", timeouts=ClientTimeouts(), continuous_usage=True)

    async def go():
        async with StreamingClient(cfg) as c:
            rec = RequestRecord(request_id="r1", scheduled_ns=0, expected_prompt_tokens=7, max_tokens=16)
            await c.send(rec, c.body(prompt, 16))
            return rec

    rec = asyncio.run(go())
    complete_record(rec, slo=slo)
    return rec


@pytest.mark.parametrize("field", ["reasoning", "reasoning_content"])
def test_reasoning_deltas_counted_apart_and_time_to_first_answer(server, field):
    rec = _send(server.base_url, f"mode:reasoning field={field} r=3 k=2 n=5 gap_ms=40 ttft_ms=20")
    assert rec.status == "ok", rec.error
    assert rec.output_tokens == 10 and rec.chunk_tokens == [2] * 5
    assert rec.reasoning_tokens == 6 and rec.tool_call_tokens == 0
    assert rec.chunk_kind == ["reasoning"] * 3 + ["answer"] * 2
    # TTFT: the first token of any kind (a reasoning one); TTFA: the 4th chunk, the first answer
    assert rec.first_token_ns == rec.chunk_ns[0] and rec.first_answer_ns == rec.chunk_ns[3]
    assert rec.ttfa_s == pytest.approx(rec.ttft_s + (rec.chunk_ns[3] - rec.chunk_ns[0]) / 1e9, abs=1e-9)
    assert rec.ttfa_s - rec.ttft_s >= 3 * 0.040  # three gaps of 40 ms in between
    assert rec.text == "tok " * 10


def test_ttfa_slo_holds_or_misses_per_request(server):
    # TTFT ~20 ms, TTFA ~20 + 3 x 40 ms: a 100 ms TTFT limit holds, a 100 ms TTFA limit misses
    prompt = "mode:reasoning r=3 n=5 gap_ms=40 ttft_ms=20"
    assert _send(server.base_url, prompt, SLO(ttft_ms=100)).slo_ok is True
    assert _send(server.base_url, prompt, SLO(ttfa_ms=100)).slo_ok is False
    assert _send(server.base_url, prompt, SLO(ttfa_ms=5000)).slo_ok is True


def test_tool_call_deltas_are_output(server):
    rec = _send(server.base_url, "mode:tool_call n=4 gap_ms=5 ttft_ms=20")
    # on a stream with only tool-call deltas, nothing else is output: without them it reads as empty
    assert rec.status == "ok", rec.error
    assert rec.output_tokens == 4 and rec.tool_call_tokens == 4 and rec.reasoning_tokens == 0
    assert rec.chunk_kind == ["tool_call"] * 4
    assert rec.first_token_ns == rec.first_answer_ns == rec.chunk_ns[0]
    assert rec.ttfa_s == rec.ttft_s
    assert rec.text == "get_weather" + "tok " * 3


def test_plain_content_has_no_reasoning_and_ttfa_equals_ttft(server):
    rec = _send(server.base_url, "mode:ok n=3")
    assert rec.reasoning_tokens == 0 and rec.tool_call_tokens == 0
    assert rec.ttfa_s == rec.ttft_s


def test_engine_steps_of_k_tokens_give_tokens_per_step(server):
    # one chunk per engine step: the prefill's token, then steps of 1 + accepted draft tokens
    from metrics.speculative import spec_summary  # (here: the module is new, the other tests run without it)

    rec = _send(server.base_url, "mode:ok ks=1.3.2.4.1.4 n=6 gap_ms=5")
    assert rec.status == "ok" and rec.tokens_source == "usage_continuous"
    assert rec.chunk_tokens == [1, 3, 2, 4, 1, 4] and rec.output_tokens == 15
    s = spec_summary([rec.chunk_tokens], [rec.tokens_source])
    assert s["spec_decode_steps"] == 5
    assert s["spec_tokens_per_step_mean"] == pytest.approx(14 / 5)
    assert s["spec_tokens_per_step_p50"] == 3.0
    assert s["spec_tokens_per_step_hist"] == {"1": 1, "2": 1, "3": 1, "4": 2}


def _events(*deltas) -> RequestRecord:
    rec = RequestRecord(request_id="r")
    st = OpenAIStream(rec)
    for i, d in enumerate(deltas):
        st.feed(b"data: " + orjson.dumps({"id": "x", "choices": [{"index": 0, "delta": d}]}) + b"\n\n",
                100 + i)
    return rec


def words(text: str) -> int:
    """The test's tokenizer: one token a whitespace-separated word."""
    return len(text.split())


def _usage_stream(*deltas_and_counts, final: int) -> RequestRecord:
    """A chat stream with ``continuous_usage_stats``: each (delta, cumulative completion_tokens) an event
    at 100, 101 ...; then the final usage; then ``complete_record`` with the words tokenizer."""
    rec = RequestRecord(request_id="r", sent_ns=0, expected_prompt_tokens=5)
    st = OpenAIStream(rec)
    for i, (d, cum) in enumerate(deltas_and_counts):
        ev = {"id": "x", "choices": [{"index": 0, "delta": d, "finish_reason": None}],
              "usage": {"prompt_tokens": 5, "completion_tokens": cum}}
        st.feed(b"data: " + orjson.dumps(ev) + b"\n\n", 100 + i)
    last = {"id": "x", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": final}}
    st.feed(b"data: " + orjson.dumps(last) + b"\n\ndata: [DONE]\n\n", 200)
    rec.status = st.outcome()[0]
    finish_text(rec)
    complete_record(rec, count_tokens=words)
    return rec


def _summary(tmp_path, *recs) -> dict:
    w = RecordWriter(tmp_path / "requests.parquet")
    for r in recs:
        w.append(r)
    w.close()
    return summarize(pq.read_table(tmp_path / "requests.parquet"), SLO(), 0, 10**9)


def test_a_think_end_chunk_keeps_its_reasoning_and_its_answer_with_their_shares_of_its_tokens(tmp_path):
    # vLLM's reasoning parser at </think> when several tokens come at once: the reasoning's end and
    # the answer's start in one delta.  Chunk 2 carries 5 tokens ("over", </think>, "The answer is"):
    # split 1 : 3 by its parts' token counts, 1.25 and 3.75, the spare token to the larger remainder
    rec = _usage_stream(({"role": "assistant"}, 0), ({"reasoning": "Let me think "}, 3),
                        ({"reasoning": "over ", "content": "The answer is "}, 8), ({"content": "4."}, 9), final=9)
    assert rec.status == "ok" and rec.chunk_tokens == [3, 5, 1] and rec.output_tokens == 9
    assert rec.chunk_text == ["Let me think ", "over The answer is ", "4."]
    assert rec.chunk_kind == ["reasoning", (("reasoning", "over "), ("answer", "The answer is ")), "answer"]
    assert rec.reasoning_tokens == 3 + 1 and rec.tool_call_tokens == 0     # answer tokens: 9 - 4 = 5
    assert rec.text == "Let me think over The answer is 4."                 # the multi-turn text, whole
    # the client's count of the whole text, 8 words, within one token of the server's 9 (</think>)
    assert rec.client_output_tokens == 8 and rec.server_output_tokens == 9
    assert rec.first_token_ns == 101 and rec.first_answer_ns == 102         # the answer starts in chunk 2
    # the older field name, the same split
    old = _usage_stream(({"reasoning_content": "Let me think "}, 3),
                        ({"reasoning_content": "over ", "content": "The answer is "}, 8), ({"content": "4."}, 9),
                        final=9)
    assert old.reasoning_tokens == 4 and old.text == rec.text
    s = _summary(tmp_path, rec)
    assert s["total_reasoning_tokens"] == 4 and s["good_answer_tokens"] == 5
    assert s["token_mismatch_rate"] == 0.0 and s["token_counts_disagree"] is False


def test_a_chunk_with_content_and_a_tool_call_keeps_both(tmp_path):
    # content and the tool call's start in one delta (a multi-token step), then the arguments
    call = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": ""}}
    args = {"index": 0, "function": {"arguments": '{"city": "Paris"}'}}
    rec = _usage_stream(({"content": "Sure. "}, 1), ({"content": "Calling ", "tool_calls": [call]}, 3),
                        ({"tool_calls": [args]}, 5), final=5)
    assert rec.chunk_tokens == [1, 2, 2] and rec.chunk_text == ["Sure. ", "Calling get_weather", '{"city": "Paris"}']
    assert rec.chunk_kind[1] == (("answer", "Calling "), ("tool_call", "get_weather"))
    assert rec.tool_call_tokens == 1 + 2 and rec.reasoning_tokens == 0     # 1 : 1 in chunk 2
    assert rec.text == 'Sure. Calling get_weather{"city": "Paris"}'        # the next turn's assistant message
    assert rec.client_output_tokens == 4 and rec.server_output_tokens == 5  # (name and arguments join: one word)
    assert rec.first_answer_ns == rec.first_token_ns == 100
    s = _summary(tmp_path, rec)
    assert s["total_tool_call_tokens"] == 3 and s["good_answer_tokens"] == 5 and s["token_mismatch_rate"] == 0.0


def test_tool_call_fragment_without_function_text_is_not_output():
    rec = _events({"tool_calls": [{"index": 0, "id": "call_1"}]},
                  {"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]})
    assert rec.chunk_text == ["{}"] and rec.first_token_ns == 101


def test_tool_calls_of_the_wrong_type_are_named():
    with pytest.raises(ValueError, match="choices\\[0\\].delta.tool_calls is dict"):
        _events({"tool_calls": {"index": 0}})


FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"


def test_dynamo_mocker_reasoning_stream_as_captured():
    # Dynamo 1.4.2: frontend + `dynamo.mocker --reasoning '{"start_thinking_token_id": 3,
    # "end_thinking_token_id": 4, "thinking_ratio": 0.5}'` on the tiny model, max_tokens=12. The
    # mocker registers no reasoning parser, so its thinking span reaches the stream as content; its
    # start/end thinking tokens (special tokens here) come as role-only chunks that carry a usage count.
    rec = RequestRecord(request_id="r", sent_ns=0, expected_prompt_tokens=12)
    st = OpenAIStream(rec)
    st.feed((FIXTURES / "dynamo_1.4.2_mocker_reasoning_chat.sse").read_bytes(), 1000)
    assert st.outcome() == ("ok", None)
    complete_record(rec)
    assert rec.output_tokens == 12 and rec.tokens_source == "usage_continuous"
    assert rec.chunk_tokens == [2, 1, 1, 1, 2, 1, 1, 1, 1, 1]  # a special token's count goes to the next text
    assert rec.reasoning_tokens == 0 and rec.chunk_kind == ["answer"] * 10
    assert rec.first_answer_ns == rec.first_token_ns == 1000
