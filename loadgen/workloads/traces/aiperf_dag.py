"""AIPerf's DAG conversations (``--custom-dataset-type dag_jsonl``: a turn branches into
conversations that run in parallel and join back), read as tasks.

Schema (AIPerf 0.13.0, github.com/ai-dynamo/aiperf): ``aiperf/dataset/loader/dag_jsonl_models.py``
(``DagConversation``, ``DagTurn``, ``DagFork``, ``DagSpawn``) and its loader
``aiperf/dataset/loader/dag_jsonl.py``; guide:
https://docs.nvidia.com/aiperf/v0.13.0/benchmark-modes/conversation-dag-benchmarks.  One
conversation a line::

    {"session_id": "plan", "turns": [
        {"messages": [{"role": "system", ...}, {"role": "user", "content": "..."}], "max_tokens": 200,
         "spawns": ["search", {"children": ["review"], "join_at": 2}]},
        {"messages": [...], "max_tokens": 100, "delay": 1500},
        {"messages": [...], "max_tokens": 300, "forks": ["write"]}]}

Mapped: a conversation no branch names (a root) is a task; its turn k is node ``plan:k``,
after turn k-1.  A turn's ``spawns`` start their child conversations after it (node
``plan:0>search:0`` and on: a spawned conversation is a template, instantiated once per
spawn) and its turn ``join_at`` (default: the next turn) waits for each child's last turn;
``forks`` start their children after it too, with no join (a bare fork ends the parent, so
AIPerf allows it only on a conversation's last turn; ``background: true`` lets the parent go
on).  ``delay`` (ms before the turn is dispatched) is its ``tool_s``; ``max_tokens`` its output
length (required here: this reader replays lengths it is given); the text of its
``messages`` its own message (``input_tokens`` -1: counted with the served model's tokenizer;
``task_input="message"``: AIPerf appends each turn's messages to the conversation's history).
Not mapped: a SPAWN child starts with a fresh context and a FORK child inherits its parent's,
while tokenfactory's context is one rule for the workload (``workload.task.context``: spawns
are counted in a note); ``model``, ``tools``, ``extra`` (request fields); ``context_mode``
(counted in a note); orchestrator conversations (``orchestrator``, ``rounds``,
``think_time_*``) and ``pre_session_spawns``: an error naming the field.
"""

from __future__ import annotations

from loadgen.workloads.table import WorkloadTable
from loadgen.workloads.traces.common import BadLines, TraceError, check_file
from loadgen.workloads.traces.json_fields import json_lines, nonneg_int, number
from loadgen.workloads.traces.task_columns import Call, task_table

CONVERSATION_KEYS = {"session_id", "turns", "orchestrator", "spawns", "think_time_ms", "think_time_sigma",
                     "think_time_min_ms", "think_time_max_ms", "rounds", "context_mode", "pre_session_spawns"}
UNSUPPORTED = ("orchestrator", "rounds", "think_time_ms", "think_time_sigma", "think_time_min_ms",
               "think_time_max_ms", "pre_session_spawns")
TURN_KEYS = {"messages", "model", "max_tokens", "tools", "extra", "forks", "spawns", "delay"}
MAX_CALLS = 1_000_000  # spawned conversations are templates: a file that multiplies past this is refused


def _text(messages, where: str) -> str:
    if not isinstance(messages, list) or not messages:
        raise ValueError(f"{where}: 'messages' must be a non-empty list")
    parts = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or "role" not in m:
            raise ValueError(f"{where}: message {i} must be an object with a 'role'")
        c = m.get("content")
        if isinstance(c, str):
            parts.append(c)
        elif isinstance(c, list):  # content parts: their text only (images and audio are not replayed)
            parts.extend(p["text"] for p in c if isinstance(p, dict) and isinstance(p.get("text"), str))
        elif c is not None:
            raise ValueError(f"{where}: message {i}: 'content' must be a string or a list of parts")
    return "\n".join(parts)


def _branches(turn: dict, where: str) -> tuple[list[tuple[str, bool]], list[tuple[list[str], int | None]]]:
    """(forks: [(child, background)], spawns: [(children, join_at)]) of one turn."""
    forks, spawns = [], []
    for j, f in enumerate(turn.get("forks") or []):
        if isinstance(f, str) and f:
            forks.append((f, False))
        elif isinstance(f, dict) and isinstance(f.get("child"), str) and f["child"] and set(f) <= {"child",
                                                                                               "background"}:
            if not isinstance(f.get("background", False), bool):
                raise ValueError(f"{where}: forks[{j}].background must be true or false")
            forks.append((f["child"], bool(f.get("background", False))))
        else:
            raise ValueError(f"{where}: forks[{j}] must be a session id or {{'child', 'background'}}")
    for j, s in enumerate(turn.get("spawns") or []):
        if isinstance(s, str) and s:
            spawns.append(([s], None))
        elif (isinstance(s, dict) and isinstance(s.get("children"), list) and s["children"]
              and all(isinstance(c, str) and c for c in s["children"]) and set(s) <= {"children", "join_at"}):
            join = s.get("join_at")
            if join is not None and (isinstance(join, bool) or not isinstance(join, int)):
                raise ValueError(f"{where}: spawns[{j}].join_at must be an integer")
            spawns.append((list(s["children"]), join))
        else:
            raise ValueError(f"{where}: spawns[{j}] must be a session id or {{'children', 'join_at'}}")
    return forks, spawns


def _conversation(obj: dict) -> dict:
    extra = set(obj) - CONVERSATION_KEYS
    if extra:
        raise ValueError(f"unknown key {sorted(extra)[0]!r} (AIPerf rejects it too)")
    for key in UNSUPPORTED:
        if obj.get(key) not in (None, False, []):
            raise ValueError(f"{key!r} (an orchestrator conversation or pre-session spawns) is not supported by "
                             "this reader")
    if obj.get("spawns"):
        raise ValueError("conversation-level 'spawns' is only valid on an orchestrator conversation")
    sid = obj.get("session_id")
    if not isinstance(sid, str) or not sid:
        raise ValueError("'session_id' must be a non-empty string")
    turns = obj.get("turns")
    if not isinstance(turns, list) or not turns:
        raise ValueError("'turns' must be a non-empty list")
    parsed = []
    for k, t in enumerate(turns):
        where = f"turns[{k}]"
        if not isinstance(t, dict):
            raise ValueError(f"{where} must be an object")
        bad_key = set(t) - TURN_KEYS
        if bad_key:
            raise ValueError(f"{where}: unknown key {sorted(bad_key)[0]!r} (AIPerf rejects it too)")
        text = _text(t.get("messages"), where)
        try:
            n_out = nonneg_int(t, "max_tokens")
            delay = number(t, "delay", required=False)
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None
        if n_out < 1:
            raise ValueError(f"{where}: 'max_tokens' must be >= 1")
        if delay is not None and delay < 0:
            raise ValueError(f"{where}: 'delay' must be >= 0, got {delay}")
        forks, spawns = _branches(t, where)
        if k < len(turns) - 1 and any(not bg for _, bg in forks):
            raise ValueError(f"{where}: a fork without background=true ends its conversation: only its last turn "
                             "may have one (AIPerf's rule)")
        for _, join in spawns:
            if join is not None and not k < join < len(turns):
                raise ValueError(f"{where}: join_at={join} must be after this turn and within the conversation's "
                                 f"{len(turns)} turns")
        parsed.append({"text": text, "out": n_out, "delay": delay, "forks": forks, "spawns": spawns})
    return {"sid": sid, "turns": parsed, "context_mode": obj.get("context_mode")}


def read_aiperf_dag(path, on_bad_line: str = "error") -> WorkloadTable:
    """AIPerf's DAG conversations as tasks (see the module doc)."""
    path = check_file(path)
    bad = BadLines(path, on_bad_line)
    convs: dict[str, dict] = {}
    for lineno, raw, obj in json_lines(path, bad):
        text = raw.decode("utf-8", "replace")
        try:
            c = _conversation(obj)
            if c["sid"] in convs:
                raise ValueError(f"'session_id' {c['sid']!r} is used by line {convs[c['sid']]['line']}")
        except ValueError as e:
            bad(lineno, text, str(e))
            continue
        convs[c["sid"]] = {**c, "line": lineno, "raw": text}
    named = {ch for c in convs.values() for t in c["turns"] for ch in
             [f for f, _ in t["forks"]] + [x for kids, _ in t["spawns"] for x in kids]}
    calls: list[Call] = []
    counts = {"spawned": 0, "isolated": 0}
    for sid, c in convs.items():
        if sid in named:
            continue  # a child: instantiated where a branch names it
        task_calls: list[Call] = []
        try:
            _expand(convs, sid, "", (), sid, task_calls, [sid], counts)
        except ValueError as e:
            bad(c["line"], c["raw"], str(e))
            continue
        calls.extend(task_calls)
    if not calls and convs:
        raise TraceError(f"{path}: every conversation is a branch of another: no root conversation to start a "
                         "task from")
    notes = []
    if counts["spawned"]:
        notes.append(f"{counts['spawned']} spawned conversations start fresh in AIPerf; here their first call "
                     "carries context as workload.task.context says")
    if counts["isolated"]:
        notes.append(f"{counts['isolated']} conversations set context_mode: not replayed (workload.task.context "
                     "applies)")
    return task_table(calls, bad, path, "aiperf_dag", task_input="message", notes=notes)


def _expand(convs: dict, sid: str, prefix: str, entry: tuple, task: str, out: list[Call], stack: list[str],
            counts: dict) -> str:
    """Add the calls of one instance of conversation ``sid`` (its turn 0 after ``entry``) to ``out``;
    returns its last node."""
    c = convs.get(sid)
    if c is None:
        raise ValueError(f"branch target {sid!r} is not a session_id of this file")
    counts["isolated"] += c["context_mode"] is not None
    joins: dict[int, list[str]] = {}
    prev = None
    for k, t in enumerate(c["turns"]):
        node = f"{prefix}{sid}:{k}"
        parents = (entry if k == 0 else (prev,)) + tuple(joins.pop(k, []))
        out.append(Call(task=task, node=node, parents=parents, input_tokens=-1, output_tokens=t["out"],
                        line=c["line"], text=t["text"],
                        tool_s=float("nan") if t["delay"] is None or not parents else t["delay"] / 1e3))
        if len(out) > MAX_CALLS:
            raise ValueError(f"the task from {task!r} expands past {MAX_CALLS} calls")
        for child, _ in t["forks"]:
            _branch(convs, child, f"{node}>", (node,), task, out, stack, counts)
        for children, join in t["spawns"]:
            for child in children:
                counts["spawned"] += 1
                last = _branch(convs, child, f"{node}>", (node,), task, out, stack, counts)
                at = k + 1 if join is None else join
                if at < len(c["turns"]):  # a spawn on the last turn joins nothing: it runs on its own
                    joins.setdefault(at, []).append(last)
        prev = node
    return prev


def _branch(convs, child, prefix, entry, task, out, stack, counts) -> str:
    if child in stack:
        raise ValueError(f"conversations branch in a cycle: {' -> '.join([*stack, child])}")
    stack.append(child)
    try:
        return _expand(convs, child, prefix, entry, task, out, stack, counts)
    finally:
        stack.pop()
