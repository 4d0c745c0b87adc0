"""The numbers that characterise a workload (``workload.json``), from its table alone.

Definitions (requests in replay order; a session's later turns count as requests):

- ``input_tokens``/``output_tokens``: the prompt and output lengths replayed; for a text
  trace, the text's tokens under the served model's tokenizer (a later turn of a session
  carries all previous user messages and replies, as replayed).
- ``duration_s`` = last - first arrival time; ``mean_rate_rps`` = (n - 1) / duration, over
  requests with an arrival time (single requests and sessions' first turns).
- ``interarrival_cv`` = std / mean of the gaps between consecutive arrivals (population
  std, ddof 0): 1 for Poisson, 0 for constant gaps, > 1 bursty.
- ``rate_timeline``: arrivals per bin of ``bin_s`` seconds (about 100 bins, >= 1 s).
- ``prefix_reuse_share`` = (prompt tokens that repeat a prefix of an earlier request) /
  (all prompt tokens).  A request repeats the longest leading run of hash blocks (x block
  size, at most its input) that an earlier request started with, or its prefix group's
  ``prefix_tokens`` once the group was seen, or, for a session's later turn, the previous
  turn's prompt and reply (at most its own input).
- sessions: count, turns per session (mean, max), share of requests in multi-turn
  sessions, mean think time.
- ``tasks``: the shape of a task workload (depth, fan-out, calls per task, tool time, the
  prefix tree's reuse), defined in ``loadgen/workloads/task_shape.py``.  A task call's
  ``input_tokens`` here is as the table counts it (``tasks.task_input``: its own message,
  or its whole prompt): the prefix path and context a replay adds are not in these lengths,
  so ``prefix_reuse_share`` is NaN for a table with tasks; the prefix tree's reuse is
  ``tasks.prefix_tree``.
"""

from __future__ import annotations

import math

import numpy as np

from loadgen.workloads.distribution import distribution
from loadgen.workloads.table import WorkloadTable
from loadgen.workloads.task_shape import task_shape


def replay_lengths(table: WorkloadTable, count=None) -> tuple[np.ndarray, np.ndarray]:
    """(prompt tokens, output tokens) of each row as replayed; ``count(text) -> int`` is
    the tokenizer, needed only for text traces."""
    ins = table.input_tokens.astype(np.int64).copy()
    outs = table.output_tokens.astype(np.int64).copy()
    if (ins < 0).any() or (outs < 0).any():
        if count is None:
            raise ValueError("a text trace needs the served model's tokenizer to count its tokens")
        for i in np.flatnonzero(ins < 0).tolist():
            ins[i] = count(table.text[i])
        for i in np.flatnonzero(outs < 0).tolist():
            outs[i] = max(count(table.output_text[i]), 1)
        if table.has_sessions and table.text is not None:
            # Text turns carry the whole conversation before them.
            own = ins.copy()
            for rows in _session_rows(table).values():
                carried = 0
                for i in rows.tolist():
                    if (table.input_tokens[i] < 0):
                        ins[i] = carried + own[i]
                    carried = ins[i] + outs[i]
    return ins, outs


def _session_rows(table: WorkloadTable) -> dict[int, np.ndarray]:
    s = table.session
    rows = np.flatnonzero(s >= 0)
    order = rows[np.lexsort((table.turn[rows], s[rows]))]
    out: dict[int, np.ndarray] = {}
    if order.size:
        cuts = np.flatnonzero(np.diff(s[order])) + 1
        for a, b in zip(np.r_[0, cuts], np.r_[cuts, order.size]):
            out[int(s[order[a]])] = order[a:b]
    return out


def repeated_prefix_tokens(table: WorkloadTable, ins: np.ndarray, outs: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Per row: prompt tokens repeating a prefix of an earlier request (see module doc)."""
    rep = np.zeros(len(table), dtype=np.int64)
    if table.has_hashes:
        children: dict[tuple[int, int], int] = {}  # (parent chain, block hash) -> chain id
        bt = table.block_tokens
        for i in order.tolist():
            parent, run, matching = 0, 0, True
            for h in table.hashes(i).tolist():
                key = (parent, h)
                cid = children.get(key)
                if cid is None:
                    matching = False
                    cid = children[key] = len(children) + 1
                elif matching:
                    run += 1
                parent = cid
            rep[i] = min(run * bt, ins[i])
    if table.prefix_group is not None:
        seen: set[int] = set()
        for i in order.tolist():
            g = int(table.prefix_group[i])
            if g < 0:
                continue
            if g in seen:
                rep[i] = max(rep[i], min(int(table.prefix_tokens[i]), ins[i]))
            seen.add(g)
    if table.has_sessions:
        for rows in _session_rows(table).values():
            for a, b in zip(rows[:-1].tolist(), rows[1:].tolist()):
                rep[b] = max(rep[b], min(ins[a] + outs[a], ins[b]))
    return rep


def characterise(table: WorkloadTable, count=None, bins: int = 100, lengths=None) -> dict:
    """``workload.json``'s content for ``table`` (see the module doc for every definition);
    ``lengths``: the (prompt, output) tokens from ``replay_lengths`` when already known."""
    from loadgen.workloads.traces.transforms import replay_order

    ins, outs = lengths if lengths is not None else replay_lengths(table, count)
    order = replay_order(table)
    a = np.sort(table.arrival_s[np.isfinite(table.arrival_s)])
    out: dict = {"source": table.source, "path": table.path, "requests": len(table),
                 "bad_lines_skipped": int(table.bad_lines), "notes": list(table.notes),
                 "input_tokens": distribution(ins), "output_tokens": distribution(outs)}
    gaps = np.diff(a)
    out["timed_requests"] = int(a.size)
    out["duration_s"] = float(a[-1] - a[0]) if a.size else math.nan
    out["mean_rate_rps"] = (a.size - 1) / out["duration_s"] if a.size > 1 and out["duration_s"] > 0 else math.nan
    out["interarrival_cv"] = float(gaps.std() / gaps.mean()) if gaps.size and gaps.mean() > 0 else math.nan
    out["interarrival_s"] = distribution(gaps)
    if a.size:
        span = max(out["duration_s"], 1e-9)
        bin_s = max(1.0, float(np.ceil(span / bins)))
        counts = np.bincount(((a - a[0]) // bin_s).astype(np.int64))
        out["rate_timeline"] = {"bin_s": bin_s, "counts": counts.tolist(),
                                "peak_rps": float(counts.max() / bin_s),
                                "mean_rps_in_bins": float(counts.mean() / bin_s)}
    rep = repeated_prefix_tokens(table, ins, outs, order)
    kinds = [k for k, on in (("hash_ids", table.has_hashes), ("prefix_groups", table.prefix_group is not None),
                             ("sessions", table.has_sessions), ("prefix_tree", bool(table.prefix_tree)),
                             ("tasks", table.has_tasks)) if on]
    out["prefix_info"] = "+".join(kinds) or "none"
    if not kinds:
        out["notes"].append("the workload carries no prefix information: replayed prompts share no prefix")
    total = float(ins.sum())
    out["prefix_reuse_tokens"] = int(rep.sum())
    out["prefix_reuse_share"] = float(rep.sum() / total) if total > 0 else math.nan
    if table.has_tasks:
        # a task call's prompt is built at replay (prefix path, context, message): its lengths here are
        # not what is sent, so a share of them would mislead
        out["prefix_reuse_share"] = math.nan
        out["notes"].append("tasks: prefix_reuse_share is not defined (a call's prompt is built at replay); "
                            "the prefix tree's reuse is under tasks.prefix_tree")
    if table.has_sessions:
        rows = _session_rows(table)
        turns = np.array([r.size for r in rows.values()], dtype=np.int64)
        think = table.think_s[(table.session >= 0) & (table.turn > 0)] if table.think_s is not None else np.empty(0)
        think = think[np.isfinite(think)]
        in_sess = int((table.session >= 0).sum())
        out["sessions"] = {"count": int(turns.size), "turns_mean": float(turns.mean()) if turns.size else math.nan,
                           "turns_max": int(turns.max()) if turns.size else 0,
                           "turns_hist": np.bincount(turns).tolist() if turns.size else [],
                           "requests_in_multi_turn_share": float(turns[turns > 1].sum() / len(table)),
                           "requests_in_sessions": in_sess,
                           "think_s_mean": float(think.mean()) if think.size else math.nan}
    else:
        out["sessions"] = {"count": 0}
    out["tasks"] = task_shape(table, ins)
    return out
