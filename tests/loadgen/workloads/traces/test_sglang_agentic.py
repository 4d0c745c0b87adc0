"""SGLang's agentic trace read as tasks: whole-prompt lengths (task_input=total), errors named
by their place in the one JSON document."""

from __future__ import annotations

import json

import numpy as np
import pytest

from loadgen.workloads.traces.common import TraceError
from loadgen.workloads.traces.readers import read_trace
from loadgen.workloads.traces.sglang_agentic import OUTPUT_TOKENS


def _write(tmp_path, doc) -> str:
    p = tmp_path / "trace.json"
    p.write_text(json.dumps(doc, indent=1) if not isinstance(doc, str) else doc)
    return str(p)


SYS = {"role": "system", "content": "You are an agent."}


def test_conversations_read_as_chains_of_whole_prompts(tmp_path):
    p = _write(tmp_path, {"metadata": {"source": "openhands"}, "conversations": [
        [{"messages": [SYS, {"role": "user", "content": "fix it"}], "prompt_tokens": 73821},
         {"messages": [{"role": "tool", "content": "ok"}], "prompt_tokens": 74894},
         {"messages": [], "prompt_tokens": 75000},                     # no messages: SGLang skips it
         {"messages": [{"role": "user", "content": "next"}], "prompt_tokens": 75100}],
        [{"messages": [SYS], "prompt_tokens": 900}]]})
    t = read_trace("sglang_agentic", p)
    assert t.task_input == "total" and t.source == "sglang_agentic"
    assert t.task_names == ["c0", "c1"] and t.task.tolist() == [0, 0, 0, 1]
    assert t.node.tolist() == ["t0", "t1", "t2", "t0"]
    assert t.parents.tolist() == [(), ("t0",), ("t1",), ()]
    assert t.input_tokens.tolist() == [73821, 74894, 75100, 900]
    assert (t.output_tokens == OUTPUT_TOKENS).all() and np.isnan(t.arrival_s).all() and np.isnan(t.tool_s).all()
    assert any("220" in n for n in t.notes)


def test_a_bad_turn_is_named_by_its_place(tmp_path):
    p = _write(tmp_path, {"conversations": [[{"messages": [SYS], "prompt_tokens": 5}],
                                            [{"messages": [SYS]}]]})
    with pytest.raises(TraceError, match=rf"^{p}:conversations\[1\]\[0\]: missing 'prompt_tokens'"):
        read_trace("sglang_agentic", p)
    t = read_trace("sglang_agentic", p, "skip")
    assert t.bad_lines == 1 and t.task_names == ["c0"]


@pytest.mark.parametrize(("doc", "why"), [
    ('{"conversations": [[{"messages": 1,]]}', r":1: not JSON"),
    ("[]", "expected a JSON object with a 'conversations' list"),
    ({"conversations": []}, "no turns with messages"),
])
def test_a_file_that_is_not_the_format_says_so(tmp_path, doc, why):
    p = _write(tmp_path, doc)
    with pytest.raises(TraceError, match=rf"^{p}.*{why}"):
        read_trace("sglang_agentic", p)


def test_a_padded_build_gives_its_output_length_by_the_prompts_growth(tmp_path):
    # SGLang's agentic builder: prompt_tokens[k] = prompt_tokens[k-1] + subsequent_turn_length + output_len
    conv = [{"messages": [SYS], "prompt_tokens": 4000}, {"messages": [SYS], "prompt_tokens": 4000 + 500 + 300},
            {"messages": [SYS], "prompt_tokens": 4000 + 2 * (500 + 300)}]
    p = _write(tmp_path, {"metadata": {"padded": True, "subsequent_turn_length": 500}, "conversations": [conv, conv]})
    t = read_trace("sglang_agentic", p)
    assert (t.output_tokens == 300).all() and any("output length 300" in n for n in t.notes)
    # growth that does not fit one output length: SGLang's default
    conv[2]["prompt_tokens"] += 1
    t = read_trace("sglang_agentic", _write(tmp_path, {"metadata": {"subsequent_turn_length": 500},
                                                        "conversations": [conv]}))
    assert (t.output_tokens == OUTPUT_TOKENS).all()
