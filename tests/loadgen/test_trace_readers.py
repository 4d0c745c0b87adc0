"""Trace readers on small fixtures written here, odd cases included."""

from __future__ import annotations

import json

import numpy as np
import pytest

from loadgen.workloads.traces.azure import parse_timestamp_ns, read_azure
from loadgen.workloads.traces.burstgpt import read_burstgpt
from loadgen.workloads.traces.common import TraceError
from loadgen.workloads.traces.jsonl import read_jsonl
from loadgen.workloads.traces.mooncake import read_mooncake
from loadgen.workloads.traces.readers import read_trace
from loadgen.workloads.traces.sharegpt import read_sharegpt


def write(tmp_path, name, text):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


AZURE_2023 = ("TIMESTAMP,ContextTokens,GeneratedTokens\n"
              "2023-11-16 18:17:03.9799600,4808,10\n"
              "2023-11-16 18:17:04.0319600,3180,8\n"
              "2023-11-16 18:17:05.5,110,27")  # no trailing newline, mixed precision


def test_azure_2023_seven_digits_no_trailing_newline(tmp_path):
    t = read_azure(write(tmp_path, "a.csv", AZURE_2023))
    assert len(t) == 3
    np.testing.assert_allclose(t.arrival_s, [0.0, 0.052, 1.52004], atol=1e-9)
    assert t.input_tokens.tolist() == [4808, 3180, 110]
    assert t.output_tokens.tolist() == [10, 8, 27]
    assert t.line.tolist() == [2, 3, 4]


def test_azure_2024_zone_and_no_fraction(tmp_path):
    text = ("TIMESTAMP,ContextTokens,GeneratedTokens\r\n"
            "2024-05-10 00:00:00+00:00,1,2\r\n"
            "2024-05-10 00:00:00.009930+00:00,3,4\r\n"
            "2024-05-10 00:00:02.5+00:00,5,6\r\n")
    t = read_azure(write(tmp_path, "b.csv", text))
    np.testing.assert_allclose(t.arrival_s, [0.0, 0.00993, 2.5], atol=1e-12)


def test_azure_slow_path_same_as_fast(tmp_path):
    # A non-zero zone offset is not handled by the vectorised path: the line parser converts it.
    text = ("TIMESTAMP,ContextTokens,GeneratedTokens\n"
            "2024-05-10 02:00:00+02:00,1,2\n"
            "2024-05-10 00:00:01.25Z,3,4\n")
    t = read_azure(write(tmp_path, "c.csv", text))
    np.testing.assert_allclose(t.arrival_s, [0.0, 1.25])
    assert parse_timestamp_ns("1970-01-01 00:00:01.5") == 1_500_000_000


def test_azure_bad_line_error_and_skip(tmp_path):
    text = ("TIMESTAMP,ContextTokens,GeneratedTokens\n"
            "2023-11-16 18:17:03.9799600,4808,10\n"
            "2023-11-16 18:17:04.0319600,abc,8\n"
            "2023-11-16 18:17:05,7,8,9\n"
            "2023-11-16 18:17:06,7,8\n")
    p = write(tmp_path, "bad.csv", text)
    with pytest.raises(TraceError) as e:
        read_azure(p)
    msg = str(e.value)
    assert f"{p}:3:" in msg and "abc" in msg and "ContextTokens" in msg
    t = read_azure(p, on_bad_line="skip")
    assert len(t) == 2 and t.bad_lines == 2
    assert t.line.tolist() == [2, 5]
    np.testing.assert_allclose(t.arrival_s, [0.0, 2.02004])


def test_empty_and_unknown(tmp_path):
    with pytest.raises(TraceError, match="has no requests"):
        read_azure(write(tmp_path, "e.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n"))
    with pytest.raises(TraceError, match="has no requests"):
        read_azure(write(tmp_path, "e2.csv", ""))
    with pytest.raises(TraceError, match="not a Azure|not an Azure|lacks ContextTokens"):
        read_azure(write(tmp_path, "x.csv", "time,a,b\n1,2,3\n"))
    with pytest.raises(TraceError, match="unknown trace format"):
        read_trace("parquetish", "x")
    with pytest.raises(TraceError, match="no such file"):
        read_azure(str(tmp_path / "missing.csv"))
    with pytest.raises(TraceError, match="has no requests"):
        read_mooncake(write(tmp_path, "m.jsonl", "\n\n"))


BURST_R1 = ("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
            "5,ChatGPT,472,18,490,Conversation log\n"
            "45,ChatGPT,1087,0,1087,Conversation log\n"
            "118,GPT-4,417,30,447,API log\n"
            "125,ChatGPT,100,20,120,API log")


def test_burstgpt_release1_model_filter(tmp_path):
    p = write(tmp_path, "b1.csv", BURST_R1)
    t = read_burstgpt(p)
    assert len(t) == 3  # the 0-response row is dropped and noted
    assert any("0 response tokens" in n for n in t.notes)
    np.testing.assert_allclose(t.arrival_s, [0, 113, 120])
    g = read_burstgpt(p, model_filter="ChatGPT")
    assert g.input_tokens.tolist() == [472, 100]
    assert read_trace("burstgpt", p, "error", "ChatGPT").input_tokens.tolist() == [472, 100]  # via the registry
    np.testing.assert_allclose(g.arrival_s, [0, 120])
    with pytest.raises(TraceError, match="matches no row"):
        read_burstgpt(p, model_filter="Llama")
    assert not t.has_sessions


def test_burstgpt_release3_sessions(tmp_path):
    text = ("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type,Session ID,Elapsed time\n"
            "0,ChatGPT,100,10,110,Conversation log,s1,2.0\n"
            "1,ChatGPT,50,5,55,API log,,0.5\n"
            "10,ChatGPT,300,20,320,Conversation log,s1,3.0\n"
            "20,ChatGPT,500,30,530,Conversation log,s1,1.0\n"
            "4,ChatGPT,70,7,77,Conversation log,s2,1.0\n")
    t = read_burstgpt(write(tmp_path, "b3.csv", text))
    assert t.has_sessions
    s1 = t.session_names.index("s1")
    rows = np.flatnonzero(t.session == s1)
    order = rows[np.argsort(t.turn[rows])]
    assert t.turn[order].tolist() == [0, 1, 2]
    # think = gap - the previous turn's elapsed time
    np.testing.assert_allclose(t.think_s[order[1:]], [10 - 0 - 2.0, 20 - 10 - 3.0])
    assert np.isnan(t.arrival_s[order[1:]]).all() and t.arrival_s[order[0]] == 0
    assert (t.session[t.input_tokens == 50] == -1).all()


MOON = [{"timestamp": 0, "input_length": 1024, "output_length": 5, "hash_ids": [0, 1]},
        {"timestamp": 1500, "input_length": 1100, "output_length": 7, "hash_ids": [0, 1, 2]},
        {"timestamp": 2500, "input_length": 600, "output_length": 9, "hash_ids": [3, 4]}]


def test_mooncake(tmp_path):
    text = "\n".join(json.dumps(x) for x in MOON)  # no trailing newline
    t = read_mooncake(write(tmp_path, "m.jsonl", text))
    np.testing.assert_allclose(t.arrival_s, [0, 1.5, 2.5])
    assert t.hashes(1).tolist() == [0, 1, 2] and t.hashes(2).tolist() == [3, 4]
    assert t.output_tokens.tolist() == [5, 7, 9]


def test_mooncake_bad_lines(tmp_path):
    lines = [json.dumps(MOON[0]), "{not json", json.dumps({"timestamp": 1, "input_length": 9000,
                                                          "output_length": 1, "hash_ids": [1]}), json.dumps(MOON[2])]
    p = write(tmp_path, "m.jsonl", "\n".join(lines) + "\n")
    with pytest.raises(TraceError) as e:
        read_mooncake(p)
    assert f"{p}:2:" in str(e.value) and "{not json" in str(e.value)
    t = read_mooncake(p, on_bad_line="skip")
    assert len(t) == 2 and t.bad_lines == 2 and t.line.tolist() == [1, 4]


def test_sharegpt_turns(tmp_path):
    data = [{"id": "c1", "conversations": [{"from": "human", "value": "hello there"},
                                           {"from": "gpt", "value": "hi, how can I help"},
                                           {"from": "human", "value": "tell me a story"},
                                           {"from": "gpt", "value": "once upon a time"}]},
            {"id": "c2", "conversations": [{"from": "gpt", "value": "unprompted"},
                                           {"from": "human", "value": "question"},
                                           {"from": "gpt", "value": "answer"},
                                           {"from": "human", "value": "dangling, no answer"}]},
            {"id": "c3", "conversations": []}]
    t = read_sharegpt(write(tmp_path, "s.json", json.dumps(data)))
    assert t.text == ["hello there", "tell me a story", "question"]
    assert t.output_text == ["hi, how can I help", "once upon a time", "answer"]
    assert t.session.tolist() == [0, 0, 1] and t.turn.tolist() == [0, 1, 0]
    assert t.session_names == ["c1", "c2"]
    p = write(tmp_path, "bad.json", '[{"id": 1,\n "conversations": [}]')
    with pytest.raises(TraceError, match=r"bad.json:2: not JSON"):
        read_sharegpt(p)


def test_jsonl_own_format(tmp_path):
    rows = [{"timestamp": 100.0, "input_tokens": 50, "output_tokens": 5, "prefix_group": "sys", "prefix_tokens": 20},
            {"timestamp": 100.5, "prompt": "what is up", "output_tokens": 3},
            {"timestamp": 101.0, "input_tokens": 60, "output_tokens": 6, "session_id": "u1", "turn": 0},
            {"timestamp": 103.0, "input_tokens": 90, "output_tokens": 6, "session_id": "u1", "turn": 1, "think_s": 0.7},
            {"timestamp": 107.0, "input_tokens": 40, "output_tokens": 4, "prefix_group": "sys", "prefix_tokens": 20}]
    t = read_jsonl(write(tmp_path, "o.jsonl", "\n".join(json.dumps(r) for r in rows)))
    assert t.input_tokens.tolist() == [50, -1, 60, 90, 40]
    assert t.text[1] == "what is up" and t.text[0] is None
    assert t.prefix_group.tolist() == [0, -1, -1, -1, 0] and t.prefix_tokens[0] == 20
    assert t.session.tolist() == [-1, -1, 0, 0, -1] and t.turn.tolist()[2:4] == [0, 1]
    assert t.think_s[3] == pytest.approx(0.7)
    assert t.arrival_s[0] == 0 and t.arrival_s[2] == pytest.approx(1.0) and np.isnan(t.arrival_s[3])
    bad = write(tmp_path, "bad.jsonl", json.dumps({"timestamp": 1, "output_tokens": 3}) + "\n")
    with pytest.raises(TraceError, match=r"bad.jsonl:1: missing 'input_tokens'"):
        read_jsonl(bad)
    mixed = write(tmp_path, "mixed.jsonl",
                  json.dumps(rows[0]) + "\n" + json.dumps({"input_tokens": 3, "output_tokens": 1}))
    with pytest.raises(TraceError, match=r"mixed.jsonl:2: 'timestamp' missing"):
        read_jsonl(mixed)


def test_bad_trace_fails_before_the_engine_starts(tmp_path):
    from hydra import compose, initialize_config_module

    from harness.errors import UserError
    from protocols.registry import protocol_experiment

    def experiment(path, *extra):
        with initialize_config_module(config_module="conf", version_base="1.3"):
            cfg = compose("config", overrides=["engine=openai", "engine.base_url=http://127.0.0.1:9", "engine.model=m",
                                               "engine.max_model_len=2048", "load=trace", "protocol.load_points=[]",
                                               "workload=azure", f"workload.path={path}", *extra])
        return protocol_experiment(cfg)

    bad = write(tmp_path, "bad.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 00:00:00,1,x\n")
    with pytest.raises(UserError, match=r"bad.csv:2: bad GeneratedTokens 'x'"):
        experiment(bad)
    long = write(tmp_path, "long.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 00:00:00,1,2\n"
                                       "2024-05-10 00:00:01,5000,20\n")
    with pytest.raises(UserError, match=r"1 of 2 requests exceed .*max_model_len=2048.*long.csv:3.* 5000 \+ 20"):
        experiment(long)
    experiment(long, "workload.on_too_long=skip")  # accepted
    empty = write(tmp_path, "empty.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n")
    with pytest.raises(UserError, match="the trace has no requests"):
        experiment(empty)


def test_burstgpt_bad_lines_and_empty_field(tmp_path):
    p = write(tmp_path, "b.csv", BURST_R1 + "\n130,ChatGPT,-5,20,15,API log\n140,ChatGPT,10,20,30,API log\n")
    with pytest.raises(TraceError, match=r"b.csv:6: bad Request tokens '-5'"):
        read_burstgpt(p)
    t = read_burstgpt(p, on_bad_line="skip")
    assert t.bad_lines == 1 and t.input_tokens.tolist() == [472, 417, 100, 10]
    # An empty field in the fast path: the line parser names it.
    a = write(tmp_path, "a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 00:00:00,,3\n")
    with pytest.raises(TraceError, match=r"a.csv:2: bad ContextTokens ''"):
        read_azure(a)


def test_burstgpt_a_count_past_int64_names_its_line(tmp_path):
    """Found by the bytes fuzz test: a token count of 2e19 read as a Python int, then cast to int64 in a
    numpy array (OverflowError, or wrapped to a negative count the table kept); now the line is named."""
    text = "Timestamp,Model,Request tokens,Response tokens,,,,\n0,,20000000000000000003,7,,,,\n"
    p = write(tmp_path, "big.csv", text)
    with pytest.raises(TraceError, match=r"big.csv:2: bad Request tokens '20000000000000000003' \(too large"):
        read_burstgpt(p)
    big = write(tmp_path, "big2.csv", BURST_R1 + "\n140,ChatGPT,10000000000000000000,20,30,API log\n")
    t = read_burstgpt(big, on_bad_line="skip")
    assert t.bad_lines == 1 and t.input_tokens.tolist() == [472, 417, 100]
    a = write(tmp_path, "a.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 00:00:00,9223372036854775808,3\n")
    with pytest.raises(TraceError, match=r"a.csv:2: bad ContextTokens '9223372036854775808' \(too large"):
        read_azure(a)


def test_burstgpt_a_header_name_with_spaces_around_it(tmp_path):
    """Found by the bytes fuzz test: `` Response tokens`` (the header's names are read stripped) made
    pyarrow's fast pass raise ArrowKeyError, not a line-named error; now the line-by-line pass reads it."""
    p = write(tmp_path, "s.csv", "Timestamp,Model,Request tokens, Response tokens\n0,m,5,7\n1,m,6,8\n")
    t = read_burstgpt(p)
    assert t.input_tokens.tolist() == [5, 6] and t.output_tokens.tolist() == [7, 8]
