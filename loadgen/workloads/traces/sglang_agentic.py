"""SGLang's agentic trace (``bench_serving --dataset-name agentic-trace``: OpenHands /
SWE-smith style multi-turn traces), read as tasks: each conversation a chain of calls.

Schema: the loader's docstring, ``python/sglang/benchmark/datasets/agentic_trace.py``
(``AgenticTraceDataset``) in github.com/sgl-project/sglang, its only documentation.  One JSON
document::

    {"metadata": {...},
     "conversations": [[{"messages": [...], "prompt_tokens": 73821},
                        {"messages": [...], "prompt_tokens": 74894}, ...], ...]}

Mapped: conversation i is task ``c{i}``, its turn k node ``t{k}`` with parent ``t{k-1}``;
``prompt_tokens`` (required here) is the turn's whole prompt, history included (it grows turn
by turn), so ``task_input="total"``: the replayed call's own message fills what its context
leaves.  Turns without ``messages`` are dropped, as SGLang's loader drops them.
The output length is not a field.  A file SGLang's padded builder wrote
(``python/sglang/benchmark/datasets/agentic.py``, ``--dataset-name agentic``: its
``metadata.subsequent_turn_length`` set) grows each later prompt by that many new tokens plus
the build's output length, so where every step of every conversation gives the same
``prompt_tokens[k] - prompt_tokens[k-1] - subsequent_turn_length`` (>= 1), that is the output
length of every call; otherwise it is 220, SGLang's default for this trace ("the ~220-token
average assistant reply of OpenHands-style agentic traces"; ``workload.max_output_tokens``
caps it lower).  A note says which.
Not mapped: ``messages`` (the text of each turn's new messages: this reader replays lengths);
times: the trace has none, so
tasks start as ``load=`` says and no call waits a tool time of its own (``workload.task.tool_s``
applies); ``metadata``.  A turn's location in messages is ``conversations[i][k]`` (one JSON
document: no line of its own).
"""

from __future__ import annotations

from loadgen.workloads.table import WorkloadTable
from loadgen.workloads.traces.common import BadLines, TraceError, check_file, empty_trace
from loadgen.workloads.traces.json_fields import json_document, nonneg_int
from loadgen.workloads.traces.task_columns import Call, task_table

OUTPUT_TOKENS = 220  # SGLang's DEFAULT_AGENTIC_OUTPUT_LEN


def read_sglang_agentic(path, on_bad_line: str = "error") -> WorkloadTable:
    """SGLang's agentic trace as tasks (see the module doc)."""
    path = check_file(path)
    bad = BadLines(path, on_bad_line)
    doc = json_document(path)
    convs = doc.get("conversations") if isinstance(doc, dict) else None
    if not isinstance(convs, list):
        raise TraceError(f"{path}: not an SGLang agentic trace: expected a JSON object with a 'conversations' list")
    calls: list[Call] = []
    ordinal = 0
    for ci, conv in enumerate(convs):
        if not isinstance(conv, list):
            bad(f"conversations[{ci}]", str(conv)[:200], "a conversation must be a list of turns")
            continue
        k = 0
        for ti, turn in enumerate(conv):
            where = f"conversations[{ci}][{ti}]"
            try:
                if not isinstance(turn, dict):
                    raise ValueError("a turn must be an object")
                msgs = turn.get("messages")
                if not msgs:
                    continue  # SGLang's loader skips a turn without messages
                if not isinstance(msgs, list):
                    raise ValueError("'messages' must be a list")
                n_in = nonneg_int(turn, "prompt_tokens")
                if n_in < 1:
                    raise ValueError("'prompt_tokens' must be >= 1")
            except ValueError as e:
                bad(where, str(turn)[:200], str(e))
                continue
            ordinal += 1
            calls.append(Call(task=f"c{ci}", node=f"t{k}", parents=(f"t{k - 1}",) if k else (), input_tokens=n_in,
                              output_tokens=OUTPUT_TOKENS, line=ordinal))
            k += 1
    if not calls:
        raise empty_trace(path, "turns with messages and prompt_tokens")
    built = _built_output_tokens(doc.get("metadata"), calls)
    if built is not None:
        for c in calls:
            c.output_tokens = built
        notes = [f"output length {built} for every call, from the prompts' growth (SGLang's padded build: "
                 "metadata.subsequent_turn_length)"]
    else:
        notes = [f"the trace gives no output lengths: every call asks for {OUTPUT_TOKENS} tokens, as SGLang's "
                 "bench_serving does"]
    return task_table(calls, bad, path, "sglang_agentic", task_input="total", notes=notes)


def _built_output_tokens(metadata, calls: list[Call]) -> int | None:
    """The build's output length where SGLang's padded builder's prompt growth says it (module doc)."""
    if not isinstance(metadata, dict):
        return None
    try:
        sub = nonneg_int(metadata, "subsequent_turn_length")
    except ValueError:
        return None
    steps = {b.input_tokens - a.input_tokens - sub for a, b in zip(calls, calls[1:]) if b.parents}
    if len(steps) == 1 and (out := steps.pop()) >= 1:
        return out
    return None
