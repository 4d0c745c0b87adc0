"""Bad input, fuzzed (issue 17, item 4): every trace reader, our JSON-lines format, and config
values of the wrong type or range.

Property: whatever the bytes, a reader returns a table or raises ``TraceError`` naming the
file (``PATH: ...``) and, for a bad line, the line (``PATH:LINE: ...``); under
``workload.on_bad_line=skip`` it returns a table that counts what it skipped, or says why
there is nothing to replay.  Never another exception: at the command line that would be a
traceback.  A config override of any value either composes and validates, or fails with an
error that names the key.

Inputs are not only random bytes (those rarely get past a CSV header): each format has a
generator of plausible files (a valid header, rows made of valid and wrong field values,
stray quotes, NUL bytes, invalid UTF-8, CRLF, a BOM, huge numbers) and raw bytes are
mixed in.  Example counts are modest so the suite stays fast (``HYPOTHESIS_PROFILE=long``
runs ten times as many).
"""

from __future__ import annotations

import os
import random
import tempfile

import numpy as np
import orjson
import pytest
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from loadgen.workloads.traces.common import TraceError
from loadgen.workloads.traces.readers import FORMATS, read_trace

pytestmark = pytest.mark.faults
settings.register_profile("default", max_examples=40, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.register_profile("long", max_examples=400, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

# ----------------------------------------------------------------------------------- generators
WEIRD = st.sampled_from(["", " ", "-1", "0", "1.5", "1e309", "-1e309", "nan", "inf", "NaN", "99999999999999999999999",
                         "abc", '"', '""', "\x00", "\ufeff", "1,2", "\u00e9", "  7  ", "0x10", "1_000", "-0", "\t"])
NUMBER = st.one_of(st.integers(-10, 10 ** 6).map(str), st.floats(allow_nan=True, allow_infinity=True).map(repr))
FIELD = st.one_of(WEIRD, NUMBER, st.text(max_size=8))
JSON_VALUE = st.recursive(st.none() | st.booleans() | st.integers(-2 ** 63, 2 ** 63 - 1) | st.floats(allow_nan=False)
                          | st.text(max_size=8), lambda c: st.lists(c, max_size=3)
                          | st.dictionaries(st.text(max_size=6), c, max_size=3), max_leaves=6)
RAW_LINE = st.binary(max_size=40)
# JSON that a generator's encoder would not write: numbers past 64 bits or a double's range, NaN
NASTY_JSON = st.sampled_from([
    b'{"timestamp": 1, "input_tokens": 123456789012345678901234567890, "output_tokens": 5}',
    b'{"timestamp": 1e400, "input_tokens": 5, "output_tokens": 5}',
    b'{"timestamp": 0, "input_length": 1e400, "output_length": 5, "hash_ids": [1]}',
    b'{"timestamp": 0, "input_length": 5, "output_length": -1e400, "hash_ids": []}',
    b'{"timestamp": NaN, "input_tokens": 5, "output_tokens": 5}',
    b'{"timestamp": 0, "input_tokens": 5, "output_tokens": 5, "turn": 99999999999999999999999, "session_id": "s"}',
    b'{"timestamp": 0, "input_tokens": 5.0, "output_tokens": 5.5}',
    b'{"timestamp": 0, "input_tokens": 5, "output_tokens": 5, "think_s": -1, "session_id": 1, "turn": 1}',
    b'{"a": 1, "a": 2}', b'[{"timestamp": 0}]', b'"just a string"', b'{"timestamp": 0,}', b'\xef\xbb\xbf{}'])
LINE_END = st.sampled_from([b"\n", b"\r\n", b""])


def _csv(header: str, good_row, n_fields: int):
    row = st.one_of(good_row, st.lists(FIELD, min_size=n_fields - 1, max_size=n_fields + 1).map(",".join))
    lines = st.lists(st.one_of(row.map(str.encode), RAW_LINE), max_size=8)
    return st.tuples(st.sampled_from([b"", b"\xef\xbb\xbf"]), st.just(header.encode()), lines, LINE_END).map(
        lambda t: t[0] + t[1] + b"".join(b"\n" + ln for ln in t[2]) + t[3])


AZURE = _csv("TIMESTAMP,ContextTokens,GeneratedTokens",
             st.tuples(st.sampled_from(["2023-11-16 18:17:03.9799600", "2024-05-10 00:00:01+00:00",
                                        "2023-11-16 18:17:04", "2023-13-45 99:99:99", "yesterday"]),
                       NUMBER, NUMBER).map(",".join), 3)
BURSTGPT = st.one_of(
    _csv("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type",
         st.tuples(NUMBER, st.sampled_from(["ChatGPT", "GPT-4", ""]), NUMBER, NUMBER, NUMBER,
                   st.sampled_from(["Conversation log", "API log"])).map(",".join), 6),
    _csv("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type,Session ID,Elapsed time",
         st.tuples(NUMBER, st.just("ChatGPT"), NUMBER, NUMBER, NUMBER, st.just("Conversation log"),
                   st.sampled_from(["s1", "s2", "", "nan"]), NUMBER).map(",".join), 8))


def _json_lines(good: st.SearchStrategy) -> st.SearchStrategy:
    line = st.one_of(good.map(orjson.dumps), JSON_VALUE.map(orjson.dumps), NASTY_JSON, RAW_LINE)
    return st.tuples(st.lists(line, max_size=8), LINE_END).map(lambda t: b"\n".join(t[0]) + t[1])


def _mutated(base: dict) -> st.SearchStrategy:
    """``base`` with some fields dropped, and others given values of any type."""
    keys = list(base)
    changes = st.dictionaries(st.sampled_from(keys), JSON_VALUE, max_size=3)
    return st.tuples(st.sets(st.sampled_from(keys)), changes).map(
        lambda t: {**{k: v for k, v in base.items() if k not in t[0]}, **t[1]})


MOONCAKE = _json_lines(st.one_of(
    st.builds(lambda t, i, o: {"timestamp": t, "input_length": i, "output_length": o, "hash_ids": [1, 2]},
              st.integers(0, 10 ** 7), st.integers(0, 10 ** 5), st.integers(1, 10 ** 4)),
    _mutated({"timestamp": 0, "input_length": 10, "output_length": 5, "hash_ids": [1]})))
JSONL = _json_lines(st.one_of(
    st.builds(lambda t, i, o: {"timestamp": t, "input_tokens": i, "output_tokens": o},
              st.floats(0, 1e6), st.integers(0, 10 ** 5), st.integers(1, 10 ** 4)),
    _mutated({"timestamp": 1.5, "prompt": "hi", "output_tokens": 3, "session_id": "u7", "turn": 0, "think_s": 1.0}),
    _mutated({"input_tokens": 812, "output_tokens": 64, "prefix_group": "sys", "prefix_tokens": 500})))
MESSAGE = st.one_of(st.builds(lambda f, v: {"from": f, "value": v}, st.sampled_from(["human", "gpt", "user", "x"]),
                              st.text(max_size=10)), JSON_VALUE)
CONVERSATION = st.builds(lambda c: {"id": "c", "conversations": c}, st.lists(MESSAGE, max_size=4))
SHAREGPT = st.one_of(
    st.lists(st.one_of(CONVERSATION, JSON_VALUE), max_size=4).map(orjson.dumps),
    JSON_VALUE.map(orjson.dumps),
    st.sampled_from([b'[{"id": 1e400, "conversations": [{"from": "human", "value": "q"}, {"from": "gpt", '
                     b'"value": "a"}]}]',
                     b'[{"conversations": [{"from": "human", "value": 123456789012345678901234567890}]}]',
                     b'{"conversations": []}', b'[]', b'[[]]', b'null']),
    # an indented file broken somewhere: the error must name the line
    st.lists(CONVERSATION, max_size=3).map(lambda v: orjson.dumps(v, option=orjson.OPT_INDENT_2)).flatmap(
        lambda b: st.integers(0, len(b)).map(lambda i: b[:i] + b"}" + b[i:])))
AIPERF = _json_lines(st.one_of(
    st.builds(lambda s, i, o, d: {"session_id": s, "input_length": i, "output_length": o, "hash_ids": [0, 1, 2],
                                  "delay": d}, st.sampled_from(["a", "b", "c"]), st.integers(0, 1536),
              st.integers(1, 10 ** 4), st.floats(0, 1e5)),
    _mutated({"session_id": "s", "input_length": 600, "output_length": 5, "hash_ids": [0, 1], "timestamp": 0.0,
              "group_id": 3})))
GUIDELLM_TURN = st.one_of(
    st.builds(lambda n, p, i, o: {"node_id": n, "parents": [{"parent_node_id": q} for q in p],
                                  "columns": {"prompt_tokens_count_column": [i], "output_tokens_count_column": [o]}},
              st.sampled_from(["a", "b", "c"]), st.lists(st.sampled_from(["a", "b", "c"]), max_size=2),
              st.integers(0, 100), st.integers(0, 100)),
    _mutated({"node_id": "a", "parents": [], "columns": {"prompt_tokens_count_column": [3]},
              "settings": {"relative_timestamp": 1.0, "requeue_delay": 0.5}}), JSON_VALUE)
GUIDELLM = _json_lines(st.one_of(
    st.builds(lambda g, t: {"conversation_turns": {"graph_id": g, "turns": t}},
              st.sampled_from([None, "g", 7]), st.lists(GUIDELLM_TURN, max_size=4)),
    st.builds(lambda t: {"conversation_turns": orjson.dumps({"turns": t}).decode()}, st.lists(GUIDELLM_TURN,
                                                                                              max_size=3))))
SGLANG_TURN = st.one_of(st.builds(lambda m, n: {"messages": m, "prompt_tokens": n},
                                  st.sampled_from([[{"role": "user"}], [], None, "x"]), JSON_VALUE), JSON_VALUE)
SGLANG_AGENTIC = st.one_of(
    st.builds(lambda c: {"conversations": c}, st.lists(st.one_of(st.lists(SGLANG_TURN, max_size=3), JSON_VALUE),
                                                       max_size=3)).map(orjson.dumps),
    JSON_VALUE.map(orjson.dumps))
DAG_TURN = st.one_of(
    st.builds(lambda m, n, sp, fk: {"messages": m, "max_tokens": n, "spawns": sp, "forks": fk},
              st.sampled_from([[{"role": "user", "content": "hi"}], [], [{"content": "x"}], "x"]),
              st.integers(0, 100), st.lists(st.one_of(st.sampled_from(["a", "b", "r"]),
                                                      st.builds(lambda c, j: {"children": c, "join_at": j},
                                                                st.lists(st.sampled_from(["a", "b"]), max_size=2),
                                                                JSON_VALUE)), max_size=2),
              st.lists(st.one_of(st.sampled_from(["a", "b"]), st.builds(lambda c, b: {"child": c, "background": b},
                                                                        st.sampled_from(["a", "b"]), JSON_VALUE)),
                       max_size=1)),
    _mutated({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "delay": 10.0}), JSON_VALUE)
AIPERF_DAG = _json_lines(st.one_of(
    st.builds(lambda s, t: {"session_id": s, "turns": t}, st.sampled_from(["r", "a", "b", ""]),
              st.lists(DAG_TURN, max_size=3)),
    _mutated({"session_id": "r", "turns": [{"messages": [{"role": "user", "content": "x"}], "max_tokens": 2}],
              "orchestrator": False})))
PLAUSIBLE = {"azure": AZURE, "burstgpt": BURSTGPT, "mooncake": MOONCAKE, "sharegpt": SHAREGPT, "jsonl": JSONL,
             "aiperf": AIPERF, "aiperf_dag": AIPERF_DAG, "guidellm": GUIDELLM, "sglang_agentic": SGLANG_AGENTIC}


# ----------------------------------------------------------------------------------- the property
def _read(fmt: str, data: bytes, policy: str):
    with tempfile.NamedTemporaryFile(suffix=f".{fmt}", delete=False) as f:
        f.write(data)
        path = f.name
    try:
        return path, read_trace(fmt, path, policy)
    except TraceError as e:
        return path, e
    finally:
        os.unlink(path)


def _check(fmt: str, data: bytes, policy: str) -> None:
    path, got = _read(fmt, data, policy)  # anything but a table or a TraceError fails the test here
    if isinstance(got, TraceError):
        msg = str(got)
        assert msg.startswith(path + ":") or msg.startswith(f"workload.path={path}"), msg
        if fmt == "sharegpt" and msg.startswith(f"{path}:conversation "):  # one JSON document: by its place
            return
        if fmt == "sglang_agentic" and msg.startswith(f"{path}:conversations["):
            return
        if policy == "error" and msg.startswith(path + ":") and msg[len(path) + 1:].split(":", 1)[0].isdigit():
            lineno = int(msg[len(path) + 1:].split(":", 1)[0])
            assert 1 <= lineno <= max(data.count(b"\n") + 1, 1), msg
        return
    t = got
    n = len(t)
    assert n > 0 and len(t.output_tokens) == n and len(t.input_tokens) == n
    arr = t.arrival_s[np.isfinite(t.arrival_s)]
    assert (arr >= 0).all() and (np.diff(arr) >= 0).all()
    assert ((t.input_tokens >= 0) | (t.input_tokens == -1)).all()
    if policy == "error":
        assert t.bad_lines == 0
    if fmt in ("mooncake", "jsonl") and policy == "skip":  # one request a non-blank line, or one skipped
        assert n + t.bad_lines == sum(1 for ln in data.split(b"\n") if ln.strip())


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("policy", ["error", "skip"])
def test_any_bytes_give_records_or_a_file_line_error(fmt, policy):
    @settings(suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                     HealthCheck.function_scoped_fixture])
    @given(data=st.one_of(PLAUSIBLE[fmt], st.binary(max_size=300)))
    def prop(data):
        _check(fmt, data, policy)

    prop()


# ----------------------------------------------------------------------------------- config values
def _leaves(node, prefix=""):
    from omegaconf import DictConfig

    for k in node:
        v = node._get_node(k)
        key = f"{prefix}{k}"
        if isinstance(v, DictConfig):
            yield from _leaves(v, key + ".")
        else:
            yield key


@pytest.fixture(scope="module")
def config_keys():
    from conf.compose import compose_config

    cfg = compose_config([])
    return sorted(k for k in _leaves(cfg) if not k.startswith(("hydra", "engine.env", "engine.request_extra")))


ODD_VALUES = ["-1", "0", "1e309", "nan", "inf", "-inf", "abc", "''", "null", "true", "[1,2]", "{a: 1}", "1.5",
              "99999999999999999999", "-0.0", "[]", "'x y'", "~"]
VALUE = st.one_of(st.sampled_from(ODD_VALUES), st.integers(-10 ** 6, 10 ** 6).map(str),
                  st.floats(allow_nan=False, allow_infinity=False).map(repr))
# Each example is a whole Hydra compose and check_config (0.2-0.7 s on the 2-core host), and a drawn
# protocol.repeats builds its plan, one validated load a run (16 ms each: 100 repeats 3 s, 10**6 never
# ends). The draws are seeded, so the suite takes the same time every run (157 s in the CI log of
# 2026-12-06 from an unseeded draw, docs/measured/test-times.md): every odd value once on a seeded key,
# then CONFIG_EXAMPLES random ones. TOKENFACTORY_CONFIG_FUZZ_SEED draws another sample.
CONFIG_SEED = int(os.environ.get("TOKENFACTORY_CONFIG_FUZZ_SEED", "42"))
CONFIG_EXAMPLES = 24 * (10 if os.environ.get("HYPOTHESIS_PROFILE") == "long" else 1)


def _compose_or_name_the_key(key: str, value: str) -> None:
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from conf.schema import ConfigError
    from protocols.experiment import check_config, compose_config

    override = f"{key}={value}"
    try:
        cfg = compose_config([override])
    except (HydraException, OmegaConfBaseException) as e:
        text = f"{e} {e.__cause__ or ''}"
        assert key in text or key.rsplit(".", 1)[-1] in text or value in text, (override, text)
        return
    try:
        check_config(cfg)  # validate, the plan, the cost profile, the workload, the load
    except ConfigError as e:
        assert key in str(e), (override, str(e))
    except ValueError:
        pass  # another setting's check (a cross-field rule) may speak first; it is still an error
    # a UserError at the command line; anything else (TypeError, KeyError) is a traceback: fails here


def test_config_values_of_any_type_compose_or_name_their_key(config_keys):
    rng = random.Random(CONFIG_SEED)
    for value in ODD_VALUES:
        _compose_or_name_the_key(rng.choice(config_keys), value)

    @seed(CONFIG_SEED)
    @settings(max_examples=CONFIG_EXAMPLES, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
    @given(key=st.sampled_from(config_keys), value=VALUE)
    def prop(key, value):
        _compose_or_name_the_key(key, value)

    prop()
