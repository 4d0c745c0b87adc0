"""AIPerf's multi-turn Mooncake trace, the file ``aiperf synthesize agentic-code`` writes
(``dataset.jsonl``), read as tasks: each session a chain of calls.

Schema (AIPerf 0.13.0): ``aiperf/dataset/loader/models.py`` ``MooncakeTrace`` and the writer
``aiperf/dataset/agentic_code_gen/writer.py`` in github.com/ai-dynamo/aiperf; documented at
https://docs.nvidia.com/aiperf/v0.13.0/tutorials/datasets-inputs/agentic-code-dataset-generator.
One JSON object per line:

- ``session_id`` (str, optional): the lines of one session, in file order, are its turns;
  a line without one is a session of its own (AIPerf gives it a fresh id).
- ``input_length`` (int): the turn's *new* tokens.  AIPerf's writer says so ("Mooncake uses
  input_length for per-row incremental tokens"): the prompt of turn k is the turns before it,
  their replies, and these new tokens, so ``task_input="message"``.
- ``output_length`` (int): the reply's tokens.
- ``hash_ids`` (list of int): the blocks of the new tokens, 512 tokens each.
- ``timestamp`` (ms, on a session's first turn): the session's start.
- ``delay`` (ms, on later turns): "milliseconds to wait before sending the turn", after the
  previous turn ended: the call's ``tool_s`` (AIPerf draws it as agent tool time or human
  think time; both are time the task spends off the engine).
- ``group_id``, ``is_restart`` (written by agentic-code): not used (below).

Mapped: each session is a task whose turn k is node ``t{k}`` with parent ``t{k-1}``; the
first turns' ``hash_ids`` become the prefix tree (``block_prefix_tree``): the leading blocks
a session's first turn shares with another's (agentic-code's L1 tools and system prompt, then
its L1.5 group context) are ``prefix`` paths, and every turn of the session carries that
path, as the session's prompt does; the first turn's ``input_tokens`` is what is left of its
``input_length``.  Not mapped: ``group_id`` (the shared blocks already say which sessions
share a context, and how much); ``is_restart`` (a session continuing an earlier one after a
reset: read as a task of its own, its shared prefix kept, the earlier session's history not
carried); later turns' ``hash_ids`` (fresh blocks of history, checked to cover
``input_length`` only); ``timestamp`` on a later turn (its parent and ``delay`` decide when it
is sent); ``text_input``, ``messages``, ``payload`` (prompts given as text or whole request
bodies: an error, this reader replays lengths).
"""

from __future__ import annotations

import numpy as np

from loadgen.workloads.table import WorkloadTable
from loadgen.workloads.traces.block_prefix_tree import shared_prefixes
from loadgen.workloads.traces.common import BadLines, check_file
from loadgen.workloads.traces.json_fields import json_lines, nonneg_int, number
from loadgen.workloads.traces.task_columns import Call, task_table

BLOCK_TOKENS = 512  # AIPerf's default --isl-block-size, and agentic-code's block_size
TEXT_MODES = ("text_input", "messages", "payload")


def read_aiperf(path, on_bad_line: str = "error") -> WorkloadTable:
    """AIPerf's multi-turn Mooncake trace as tasks (see the module doc)."""
    path = check_file(path)
    bad = BadLines(path, on_bad_line)
    calls: list[Call] = []
    first_hashes: dict[str, list[int]] = {}
    turns: dict[str, int] = {}
    timed_later = 0
    for lineno, raw, obj in json_lines(path, bad):
        try:
            for key in TEXT_MODES:
                if obj.get(key) is not None:
                    raise ValueError(f"{key!r} is not supported: this reader replays token lengths "
                                     "(give 'input_length')")
            n_in = nonneg_int(obj, "input_length")
            n_out = nonneg_int(obj, "output_length")
            if n_out < 1:
                raise ValueError("'output_length' must be >= 1")
            h = obj.get("hash_ids", [])
            if not isinstance(h, list) or not all(isinstance(x, int) and not isinstance(x, bool) for x in h):
                raise ValueError("'hash_ids' must be a list of integers")
            if len(h) * BLOCK_TOKENS < n_in:
                raise ValueError(f"{len(h)} hash_ids of {BLOCK_TOKENS} tokens cannot cover input_length={n_in}")
            t = number(obj, "timestamp", required=False)
            delay = number(obj, "delay", required=False)
            if delay is not None and delay < 0:
                raise ValueError(f"'delay' must be >= 0, got {delay}")
            sid = obj.get("session_id")
            if sid is not None and not isinstance(sid, (str, int)) or isinstance(sid, bool):
                raise ValueError("'session_id' must be a string")
        except ValueError as e:
            bad(lineno, raw.decode("utf-8", "replace"), str(e))
            continue
        task = f"line{lineno}" if sid is None else str(sid)
        k = turns.get(task, 0)
        turns[task] = k + 1
        if k == 0:
            first_hashes[task] = h
        elif t is not None:
            timed_later += 1
        calls.append(Call(task=task, node=f"t{k}", parents=(f"t{k - 1}",) if k else (), input_tokens=n_in,
                          output_tokens=n_out, line=lineno,
                          arrival_s=np.nan if t is None or k else t / 1e3,
                          tool_s=np.nan if delay is None or not k else delay / 1e3))
    notes = []
    if timed_later:
        notes.append(f"{timed_later} later turns carry a timestamp: not used (a turn is sent when the one "
                     "before it ended, plus its delay)")
    roots = [c for c in calls if not c.parents]
    tree, paths, shared = shared_prefixes([first_hashes[c.task] for c in roots], [c.input_tokens for c in roots],
                                          BLOCK_TOKENS)
    path_of = {c.task: p for c, p in zip(roots, paths)}
    for c, n in zip(roots, shared):
        c.input_tokens -= n  # the first turn's message: what its shared prefix leaves
    for c in calls:
        c.prefix = path_of.get(c.task, "")
    if calls and all(np.isnan(c.arrival_s) for c in calls if not c.parents):
        notes.append("no session carries a timestamp: tasks start as load= says")
    table = task_table(calls, bad, path, "aiperf", task_input="message", prefix_tree=tree or None, notes=notes)
    table.block_tokens = BLOCK_TOKENS
    return table
