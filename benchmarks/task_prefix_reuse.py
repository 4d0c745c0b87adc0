"""The prefix-cache hits a task workload's tree predicts, beside the engines' own counters.

For each run folder: every call's prompt as the replay built it, as segments (the tokens the
tokenizer adds, the prefix path's tree nodes, the context's messages and replies, its own
message), from ``requests.parquet`` (send order, lengths, replica) and the run's workload file
(each call's prefix path and own message).  A call finds in its replica's cache the longest
leading run of segments it shares with a call of that replica that had its first token before
this one was sent (its prefill done: the blocks are computed), at most its prompt less one
token, in whole blocks of ``--block-size`` tokens (vLLM's CPU default: 128): the low bound.
The high bound counts every call sent before it (the report's teaching assumption: every
request ready and its state kept), which an engine that prefills in chunks approaches (a call
sent with another finds the blocks the other's first chunks computed).  Generated tokens are
not counted as cached in either (an under-estimate where a reply's tokens would re-match).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/task_prefix_reuse.py RUN_OR_EXPERIMENT_DIR... [--block-size 128]

Prints, per run: predicted hit tokens / prompt tokens, the engines' hits / queries (their
counters over the run's window, ``summary.json``), and the seed's tree figure (each task's
prefix tokens on their own against the tree's).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pyarrow.parquet as pq
import yaml

from harness import results_io
from loadgen.workloads.table import path_segments
from loadgen.workloads.traces.readers import read_trace


def call_table(cfg: dict) -> dict:
    """(task, node) -> (prefix path, own message tokens) from the run's workload file."""
    w = cfg["workload"]
    t = read_trace(w["name"], w["path"], w.get("on_bad_line", "error"), w.get("model_filter"))
    names = t.task_names
    out = {}
    for i in range(len(t)):
        if t.task[i] >= 0:
            out[(str(names[t.task[i]]), str(t.node[i]))] = (str(t.prefix[i]), int(t.input_tokens[i]))
    return out, (t.prefix_tree or {}), (w.get("task") or {}).get("context", "ancestors")


def segments(r: dict, rows_of: dict, calls: dict, tree: dict, context: str) -> list[tuple[str, int]]:
    path, own = calls[(r["task_id"], r["node"])]
    segs = [(f"tree:{s}", int(tree[s])) for s in path_segments(path)] if path else []
    ctx = ancestors(r, rows_of) if context == "ancestors" else [rows_of[(r["task_id"], r["attempt"], p)]
                                                                 for p in r["parents"]]
    for c in ctx:
        key = f"{c['task_id']}:{c['node']}:{c['attempt']}"
        segs += [(f"msg:{key}", calls[(c["task_id"], c["node"])][1]), (f"reply:{key}", int(c["output_tokens"] or 0))]
    segs.append((f"msg:{r['task_id']}:{r['node']}:{r['attempt']}", own))
    return segs


def with_template(segs: list, prompt_tokens: int, lead: int) -> list:
    """The tokens the tokenizer adds (``lead``: the same for every prompt) first; what else the
    count says (a reply re-tokenised into more or fewer tokens) goes to the call's own part."""
    rest = prompt_tokens - lead - sum(n for _s, n in segs)
    return [("template", lead), *segs[:-1], (segs[-1][0], max(segs[-1][1] + rest, 0))]


def ancestors(r: dict, rows_of: dict) -> list[dict]:
    seen, stack = {}, list(r["parents"])
    while stack:
        p = stack.pop()
        if p not in seen:
            seen[p] = rows_of[(r["task_id"], r["attempt"], p)]
            stack += seen[p]["parents"]
    return sorted(seen.values(), key=lambda c: c["sent_ns"])


def shared(a: list, b: list) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += x[1]
    return n


def predict(run: Path, block: int) -> dict:
    cfg = yaml.safe_load((run / results_io.CONFIG).read_text())
    calls, tree, context = call_table(cfg)
    rows = [r for r in pq.read_table(run / results_io.REQUESTS).to_pylist() if r["task_id"] and r["sent_ns"]]
    rows_of = {(r["task_id"], r["attempt"], r["node"]): r for r in rows}
    cache: dict[str, list] = {}
    low = high = queries = 0
    prompt = {id(r): int(r["prompt_tokens"] or r["expected_prompt_tokens"] or 0) for r in rows}
    lead = min((prompt[id(r)] - sum(n for _s, n in segments(r, rows_of, calls, tree, context))
                for r in rows if not r["parents"]), default=0)
    for r in sorted(rows, key=lambda r: r["sent_ns"]):
        segs = with_template(segments(r, rows_of, calls, tree, context), prompt[id(r)], lead)
        total = sum(n for _s, n in segs)
        mine = cache.setdefault(r["replica"], [])
        done = max((shared(segs, s) for ft, s in mine if ft is not None and ft < r["sent_ns"]), default=0)
        sent = max((shared(segs, s) for _ft, s in mine), default=0)
        low += min(done, total - 1) // block * block
        high += min(sent, total - 1) // block * block
        queries += total
        mine.append((r["first_token_ns"], segs))
    s = json.loads((run / results_io.SUMMARY).read_text())
    tasks = {r["task_id"] for r in rows}
    independent = sum(sum(tree[p] for p in path_segments(calls[k][0])) for k in calls if k[0] in tasks and calls[k][0])
    on_tree = sum(tree[p] for p in {p for k in calls if k[0] in tasks and calls[k][0]
                                      for p in path_segments(calls[k][0])})
    rate = (lambda x: x / queries) if queries else (lambda x: float("nan"))
    return {"run": str(run), "calls": len(rows), "prompt_tokens": queries,
            "predicted_hit_tokens_low": low, "predicted_hit_tokens_high": high,
            "predicted_hit_rate_low": rate(low), "predicted_hit_rate_high": rate(high),
            "engine_hits": s.get("engine_prefix_cache_hits"), "engine_queries": s.get("engine_prefix_cache_queries"),
            "engine_hit_rate": s.get("engine_prefix_cache_hit_rate"),
            "tree_prefix_tokens_independent": independent, "tree_prefix_tokens_on_tree": on_tree}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dirs", nargs="+", type=Path)
    ap.add_argument("--block-size", type=int, default=128)
    a = ap.parse_args(argv)
    runs = sorted({p.parent for d in a.dirs for p in d.rglob(results_io.REQUESTS)})
    for run in runs:
        print(json.dumps(predict(run, a.block_size)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
