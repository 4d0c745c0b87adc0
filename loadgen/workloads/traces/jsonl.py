"""tokenfactory's own JSON-lines trace: one request per line (see ``read_jsonl``)."""

from __future__ import annotations

import numpy as np

from loadgen.workloads.table import WorkloadTable
from loadgen.workloads.traces import common
from loadgen.workloads.traces.json_fields import json_lines, nonneg_int, number
from loadgen.workloads.traces.task_graph import flatten_prefix_tree, tasks_from_columns


def read_jsonl(path, on_bad_line: str = "error") -> WorkloadTable:
    """Our own JSON-lines trace: one request per line.

    Fields (``timestamp`` optional everywhere or nowhere):

    - ``timestamp``: seconds (any origin; replay starts at the earliest), optional.
    - ``input_tokens`` (int) or ``prompt`` (str, the user's message): one is required.
    - ``output_tokens`` (int): required.
    - ``session_id`` (str or int) and ``turn`` (int, from 0), optional: a multi-turn
      session; turns after the first are sent when the previous one ended plus
      ``think_s`` (seconds, default: the gap between the turns' timestamps, else 0).
    - ``prefix_group`` (str or int) and ``prefix_tokens`` (int), optional: requests of one
      group start with the same ``prefix_tokens`` tokens.
    - tasks (DAGs of calls, ``loadgen/workloads/tasks.py``): ``task_id`` (str or int), ``node``
      (str or int, unique in its task; default: its position, n0, n1, ...), ``parents`` (list
      of node names it waits for; default: none, a root), ``tool_s`` (seconds after its last
      parent ended; default ``workload.task.tool_s``), ``prefix`` (a path ``a/b`` in the
      prefix tree).  A task call's ``input_tokens`` is its own message; ``timestamp`` is the
      task's arrival, read on its roots only.  The prefix tree is declared once, on a line of
      its own: ``{"prefix_tree": {"sys": {"tokens": 1000, "children": {"docA": {"tokens":
      4000}}}}}`` (else ``workload.task.prefix_tree``).
    """
    path = common.check_file(path)
    bad = common.BadLines(path, on_bad_line)
    ts, ins, outs, lines, texts, sids, turns, thinks, groups, plens = ([] for _ in range(10))
    tids, nodes, parents, tools, prefixes = ([] for _ in range(5))
    tree = None
    any_text = False
    for lineno, raw, obj in json_lines(path, bad):
        if "prefix_tree" in obj:
            if len(obj) != 1:
                raise common.TraceError(f"{path}:{lineno}: a 'prefix_tree' line declares the tree and nothing else")
            if tree is not None:
                raise common.TraceError(f"{path}:{lineno}: a second 'prefix_tree' line (the tree is declared once)")
            tree = flatten_prefix_tree(obj["prefix_tree"], f"{path}:{lineno}")
            continue
        try:
            t = number(obj, "timestamp", required=False)
            prompt = obj.get("prompt")
            if prompt is not None and not isinstance(prompt, str):
                raise ValueError("'prompt' must be a string")
            a = nonneg_int(obj, "input_tokens", required=prompt is None)
            b = nonneg_int(obj, "output_tokens")
            if b < 1:
                raise ValueError("'output_tokens' must be >= 1")
            turn = nonneg_int(obj, "turn", required=False)
            think = number(obj, "think_s", required=False)
            plen = nonneg_int(obj, "prefix_tokens", required=False)
            grp = obj.get("prefix_group")
            if (grp is None) != (plen is None):
                raise ValueError("'prefix_group' and 'prefix_tokens' go together")
            if plen is not None and a is not None and plen > a:
                raise ValueError(f"'prefix_tokens'={plen} exceeds 'input_tokens'={a}")
            sid = obj.get("session_id")
            tid, node, ps, tool, pre = _task_fields(obj)
            if tid is not None and sid is not None:
                raise ValueError("a line is a session turn ('session_id') or a task call ('task_id'), not both")
            if tid is None and (node is not None or ps or tool is not None):
                raise ValueError("'node', 'parents' and 'tool_s' need a 'task_id'")
            if tid is not None and ps:
                t = None  # sent when its parents end: a call's own timestamp is not its arrival
        except ValueError as e:
            bad(lineno, raw.decode("utf-8", "replace"), str(e))
            continue
        any_text |= prompt is not None
        ts.append(np.nan if t is None else t)
        ins.append(-1 if a is None else a)
        outs.append(b)
        texts.append(prompt)
        sids.append("" if sid is None else str(sid))
        turns.append(turn)
        thinks.append(np.nan if think is None else think)
        groups.append("" if grp is None else str(grp))
        plens.append(0 if plen is None else plen)
        tids.append(tid)
        nodes.append(node)
        parents.append(ps)
        tools.append(tool)
        prefixes.append(pre)
        lines.append(lineno)
    if not lines:
        raise common.empty_trace(path)
    ts = np.asarray(ts, dtype=np.float64)
    timed = np.asarray([not p for p in parents], dtype=bool)  # a task's later calls have no arrival of their own
    missing = np.isnan(ts) & timed
    if missing.any() and not missing[timed].all():
        first = lines[int(np.flatnonzero(missing)[0])]
        raise common.TraceError(f"{path}:{first}: 'timestamp' missing here but present on other lines; give it on "
                         "every line or on none")
    table = WorkloadTable(arrival_s=ts - (np.nanmin(ts) if not np.isnan(ts).all() else 0.0),
                          input_tokens=np.asarray(ins, dtype=np.int64), output_tokens=np.asarray(outs, dtype=np.int64),
                          source="jsonl", path=path, line=np.asarray(lines, dtype=np.int64), bad_lines=bad.count,
                          text=texts if any_text else None)
    gnames = np.asarray(groups)
    if (gnames != "").any():
        uniq, codes = np.unique(gnames, return_inverse=True)
        codes = codes.astype(np.int64)
        if "" in uniq:
            e = int(np.searchsorted(uniq, ""))
            codes = np.where(codes == e, -1, codes - (codes > e))
        table.prefix_group, table.prefix_tokens = codes, np.asarray(plens, dtype=np.int64)
    sid = np.asarray(sids)
    if (sid != "").any():
        # Turn order: the explicit ``turn`` where given, else the timestamp, else line order.
        key = np.asarray([t if t is not None else np.nan for t in turns], dtype=np.float64)
        fallback = table.arrival_s if not np.isnan(table.arrival_s).all() else np.arange(len(table), dtype=np.float64)
        key = np.where(np.isnan(key), fallback, key)
        common.sessions_from_ids(table, sid, None, order_key=key)
        explicit = np.asarray(thinks)
        table.think_s = np.where(~np.isnan(explicit) & (table.turn > 0), explicit, table.think_s)
    if any(t is not None for t in tids):
        tasks_from_columns(table, tids, nodes, parents, tools, prefixes, tree)
    elif tree is not None or any(p is not None for p in prefixes):
        raise common.TraceError(f"{path}: 'prefix_tree' and 'prefix' belong to task calls; no line has a 'task_id'")
    return common.sorted_by_time(table)


def _task_fields(obj: dict):
    """(task_id, node, parents, tool_s, prefix) of a line, checked; None where absent."""
    tid = obj.get("task_id")
    if tid is not None and (isinstance(tid, bool) or not isinstance(tid, (str, int))):
        raise ValueError(f"'task_id' must be a string or an integer, got {tid!r}")
    node = obj.get("node")
    if node is not None and (isinstance(node, bool) or not isinstance(node, (str, int))):
        raise ValueError(f"'node' must be a string or an integer, got {node!r}")
    ps = obj.get("parents")
    if ps is not None and (not isinstance(ps, list) or any(isinstance(p, bool) or not isinstance(p, (str, int))
                                                             for p in ps)):
        raise ValueError(f"'parents' must be a list of node names, got {ps!r}")
    tool = number(obj, "tool_s", required=False)
    if tool is not None and tool < 0:
        raise ValueError(f"'tool_s' must be >= 0, got {tool}")
    pre = obj.get("prefix")
    if pre is not None and (not isinstance(pre, str) or not pre):
        raise ValueError(f"'prefix' must be a path in the prefix tree ('a/b'), got {pre!r}")
    return (None if tid is None else str(tid), None if node is None else str(node),
            [str(p) for p in ps or ()], tool, pre)
