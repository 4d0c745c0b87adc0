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
Not mapped: ``messages`` (the text of each turn's new messages: this reader replays lengths);
the output length, which the trace does not give: SGLang uses ``--sharegpt-output-len`` or 220
tokens ("the ~220-token average assistant reply of OpenHands-style agentic traces"), and so
does this reader (``workload.max_output_tokens`` caps it lower); times: the trace has none, so
tasks start as ``load=`` says and no call waits a tool time of its own (``workload.task.tool_s``
applies); ``metadata``.  A turn's location in messages is ``conversations[i][k]`` (one JSON
document: no line of its own).
"""

from __future__ import annotations

from loadgen.workloads.table import WorkloadTable
from loadgen.workloads.traces.common import BadLines, TraceError, check_file, empty_trace
from loadgen.workloads.traces.json_fields import nonneg_int
from loadgen.workloads.traces.task_columns import Call, task_table

OUTPUT_TOKENS = 220  # SGLang's DEFAULT_AGENTIC_OUTPUT_LEN


def read_sglang_agentic(path, on_bad_line: str = "error") -> WorkloadTable:
    """SGLang's agentic trace as tasks (see the module doc)."""
    import orjson

    path = check_file(path)
    bad = BadLines(path, on_bad_line)
    with open(path, "rb") as f:
        data = f.read()
    if not data.strip():
        raise empty_trace(path)
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        pos = getattr(e, "pos", 0) or 0
        lineno = data[:pos].count(b"\n") + 1
        lines = data.splitlines()
        line = lines[lineno - 1] if lineno <= len(lines) else b""
        raise TraceError(f"{path}:{lineno}: not JSON ({e}): {line[:200].decode('utf-8', 'replace')!r}") from None
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
                              output_tokens=OUTPUT_TOKENS, line=ordinal, raw=str(turn)[:200], where=where))
            k += 1
    if not calls:
        raise empty_trace(path, "turns with messages and prompt_tokens")
    notes = [f"the trace gives no output lengths: every call asks for {OUTPUT_TOKENS} tokens, as SGLang's "
             "bench_serving does"]
    return task_table(calls, bad, path, "sglang_agentic", task_input="total", notes=notes)
