"""GuideLLM's conversation-graph dataset (its ``conversation_turns`` column: turns with node
and parent ids), read as tasks.

Schema (GuideLLM 0.8.1, github.com/vllm-project/guidellm): ``src/guidellm/data/schemas/
conversation_graph_data.py`` (``ConversationGraphData``, ``ConversationTurnData``,
``ConversationParentRef``), the per-turn settings ``src/guidellm/schemas/base/info.py``
(``RequestSettings``) and how the scheduler applies them, ``src/guidellm/scheduler/dag.py``;
its multi-turn guide (docs/guides/multiturn.md) says synthetic and branched data take this
shape, and ``data/deserializers/synthetic.py`` writes it.  This reader
takes JSON lines, one dataset row a line, its ``conversation_turns`` a JSON string (as
GuideLLM's synthetic generator writes it) or an object:

``{"graph_id": str|null, "turns": [{"node_id", "agent_id", "parents": [{"parent_node_id",
"history_context": "new"|"last"|"full"}], "columns": {"prompt_tokens_count_column": [n],
"output_tokens_count_column": [n], "text_column": [...], "prefix_column": [...]},
"settings": {"relative_timestamp": s, "requeue_delay": s}}]}``

Mapped: a graph is a task (named by ``graph_id``, else by its line), a turn a call
(``node_id``), its parents' ``parent_node_id`` its ``parents``; ``prompt_tokens_count_column``
(the turn's own message: GuideLLM sends it after the history, so ``task_input="message"``) and
``output_tokens_count_column`` (both required: this reader replays lengths, not text); a root's
``relative_timestamp`` (seconds) the task's start; ``requeue_delay`` (seconds a node's children
wait after it completes) the ``tool_s`` of its children; a child of several parents waits the
delay of the parent that completes last, which only a run knows: it takes the largest.
Not mapped: ``history_context`` per edge (tokenfactory's context is one rule for the whole
workload, ``workload.task.context``: ``ancestors`` matches ``full``, ``parents`` matches
``last``; ``new``, a sub-agent's fresh start, has no match and is counted in a note);
``prefix_column`` (a system prompt given as text without a token count: counted in a note, not
replayed); ``text_column``, ``tools_column``, ``tool_response_column``, ``turn_type_column``
(text and tool payloads; GuideLLM expands a client tool-call turn into a tool call and an
injection, which here stays one call); ``agent_id``; ``settings.trace_duration`` (a recorded
request's duration, for GuideLLM's idle-gap scheduling of traces).
"""

from __future__ import annotations

import numpy as np

from loadgen.workloads.table import WorkloadTable
from loadgen.workloads.traces.common import BadLines, check_file
from loadgen.workloads.traces.json_fields import json_lines, nonneg_int, number
from loadgen.workloads.traces.task_columns import Call, task_table

HISTORY_CONTEXTS = ("new", "last", "full")


def _column(columns: dict, key: str, where: str, required: bool):
    v = columns.get(key)
    if v is None:
        if required:
            raise ValueError(f"{where}: missing 'columns.{key}' (this reader replays token counts)")
        return None
    if isinstance(v, list):  # GuideLLM's columns hold a list of values, the first one used
        if not v:
            if required:
                raise ValueError(f"{where}: 'columns.{key}' is empty")
            return None
        v = v[0]
    return nonneg_int({key: v}, key, required=required)


def _graph(obj: dict):
    raw = obj.get("conversation_turns")
    if raw is None:
        raise ValueError("missing 'conversation_turns' (GuideLLM's conversation graph column)")
    if isinstance(raw, str):
        import orjson

        try:
            raw = orjson.loads(raw)
        except orjson.JSONDecodeError as e:
            raise ValueError(f"'conversation_turns' is not JSON ({e})") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("turns"), list) or not raw["turns"]:
        raise ValueError("'conversation_turns' must be an object with a non-empty 'turns' list")
    gid = raw.get("graph_id")
    if gid is not None and not isinstance(gid, str):
        raise ValueError("'conversation_turns.graph_id' must be a string")
    return gid, raw["turns"]


def _turn(t, i: int) -> dict:
    where = f"turns[{i}]"
    if not isinstance(t, dict):
        raise ValueError(f"{where} must be an object")
    node = t.get("node_id")
    if not isinstance(node, str) or not node:
        raise ValueError(f"{where}: 'node_id' must be a non-empty string")
    parents = t.get("parents", [])
    if not isinstance(parents, list):
        raise ValueError(f"{where}: 'parents' must be a list")
    refs = []
    for j, p in enumerate(parents):
        if not isinstance(p, dict) or not isinstance(p.get("parent_node_id"), str):
            raise ValueError(f"{where}.parents[{j}]: 'parent_node_id' must be a string")
        ctx = p.get("history_context", "full")
        if ctx not in HISTORY_CONTEXTS:
            raise ValueError(f"{where}.parents[{j}]: 'history_context' must be one of {HISTORY_CONTEXTS}, "
                             f"got {ctx!r}")
        refs.append((p["parent_node_id"], ctx))
    cols = t.get("columns", {})
    if not isinstance(cols, dict):
        raise ValueError(f"{where}: 'columns' must be an object")
    n_in = _column(cols, "prompt_tokens_count_column", where, True)
    n_out = _column(cols, "output_tokens_count_column", where, True)
    if n_out < 1:
        raise ValueError(f"{where}: 'columns.output_tokens_count_column' must be >= 1")
    settings = t.get("settings") or {}
    if not isinstance(settings, dict):
        raise ValueError(f"{where}: 'settings' must be an object")
    ts = number(settings, "relative_timestamp", required=False)
    delay = number(settings, "requeue_delay", required=False)
    for key, v in (("relative_timestamp", ts), ("requeue_delay", delay)):
        if v is not None and v < 0:
            raise ValueError(f"{where}: 'settings.{key}' must be >= 0, got {v}")
    return {"node": node, "parents": refs, "in": n_in, "out": n_out, "ts": ts, "delay": delay,
            "prefix": cols.get("prefix_column") not in (None, [], [None], "")}


def read_guidellm(path, on_bad_line: str = "error") -> WorkloadTable:
    """GuideLLM's ``conversation_turns`` graphs as tasks (see the module doc)."""
    path = check_file(path)
    bad = BadLines(path, on_bad_line)
    calls: list[Call] = []
    fresh = prefixed = 0
    seen: set[str] = set()
    for lineno, raw, obj in json_lines(path, bad):
        text = raw.decode("utf-8", "replace")
        try:
            gid, turns = _graph(obj)
            parsed = [_turn(t, i) for i, t in enumerate(turns)]
            name = gid if gid is not None else f"line{lineno}"
            if name in seen:
                raise ValueError(f"'graph_id' {name!r} is used by an earlier line")
        except ValueError as e:
            bad(lineno, text, str(e))
            continue
        seen.add(name)
        delay = {p["node"]: p["delay"] for p in parsed}
        for p in parsed:
            fresh += sum(ctx == "new" for _, ctx in p["parents"])
            prefixed += p["prefix"]
            waits = [delay.get(q) for q, _ in p["parents"]]
            waits = [w for w in waits if w is not None]
            calls.append(Call(task=name, node=p["node"], parents=tuple(dict.fromkeys(q for q, _ in p["parents"])),
                              input_tokens=p["in"], output_tokens=p["out"], line=lineno,
                              arrival_s=np.nan if p["ts"] is None else p["ts"],
                              tool_s=max(waits) if waits else np.nan))
    notes = []
    if fresh:
        notes.append(f"{fresh} edges have history_context=new (a sub-agent starting fresh): replayed with "
                     "workload.task.context, which has no such edge")
    if prefixed:
        notes.append(f"{prefixed} turns carry a prefix_column (a system prompt as text, no token count): "
                     "not replayed")
    return task_table(calls, bad, path, "guidellm", task_input="message", notes=notes)
