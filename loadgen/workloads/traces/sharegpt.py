"""ShareGPT JSON: ``[{"id", "conversations": [{"from": "human"|"gpt", "value"}]}]``."""

from __future__ import annotations

import numpy as np

from loadgen.workloads.table import WorkloadTable
from loadgen.workloads.traces.common import BadLines, TraceError, check_file, empty_trace
from loadgen.workloads.traces.json_fields import json_document


def read_sharegpt(path, on_bad_line: str = "error") -> WorkloadTable:
    """ShareGPT JSON: each conversation a session, each human message a turn whose output
    length is the following gpt message (its text is kept; lengths are counted with the
    served model's tokenizer when prompts are built)."""
    path = check_file(path)
    bad = BadLines(path, on_bad_line)
    convs = json_document(path)
    if not isinstance(convs, list):
        raise TraceError(f"{path}: not a ShareGPT file: expected a JSON list of conversations")
    texts, outs_text, sess, turns, names = [], [], [], [], []
    for ci, conv in enumerate(convs):
        msgs = conv.get("conversations") if isinstance(conv, dict) else None
        if not isinstance(msgs, list):
            # located by its place in the list (one JSON document: no line of its own to name)
            bad(f"conversation {ci}", str(conv)[:200], "no 'conversations' list")
            continue
        k = 0
        for mi, m in enumerate(msgs):
            if not isinstance(m, dict) or m.get("from") not in ("human", "user") or not isinstance(m.get("value"), str):
                continue
            nxt = msgs[mi + 1] if mi + 1 < len(msgs) else None
            if not (isinstance(nxt, dict) and nxt.get("from") in ("gpt", "assistant", "chatgpt")
                    and isinstance(nxt.get("value"), str)):
                continue  # a question without an answer: no output length to replay
            texts.append(m["value"])
            outs_text.append(nxt["value"])
            sess.append(len(names))
            turns.append(k)
            k += 1
        if k:
            names.append(str(conv.get("id", ci)))
    if not texts:
        raise empty_trace(path, "conversations with a human turn and a reply")
    n = len(texts)
    turns = np.asarray(turns, dtype=np.int32)
    return WorkloadTable(arrival_s=np.full(n, np.nan), input_tokens=np.full(n, -1, dtype=np.int64),
                         output_tokens=np.full(n, -1, dtype=np.int64), source="sharegpt", path=path,
                         session=np.asarray(sess, dtype=np.int64), turn=turns,
                         think_s=np.full(n, np.nan), text=texts, output_text=outs_text,
                         line=np.arange(1, n + 1, dtype=np.int64), session_names=names, bad_lines=bad.count)
