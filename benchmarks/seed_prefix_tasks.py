"""Writes the research report's shared-prefix tree as a task workload (our JSON lines).

The report's tree: a 1,000-token system prompt, under it documents of 4,000 (A) and 3,000 (B)
tokens, two 20-token questions on A and one on B.  Each task asks the three questions at
once (three roots, sent together at the task's arrival: q1 and q2 under ``sys/docA``, q3 under
``sys/docB``) and then, ``--tool-s`` after the last answer, one call under ``sys`` that joins
them (its prompt carries the three questions and their real replies).  On its own a task's
prompts are 3 x (prefix + question) + the join's; on the tree the prefixes are paid once.

    python benchmarks/seed_prefix_tasks.py OUT.jsonl --tasks 30 --rate 0.2 [--scale 0.5] [--seed 0]

``--scale`` multiplies the tree's lengths (not the questions'): the embedded tiny model's
positions end at 4,096 tokens, so on it the tree runs at half size (500, 2,000, 1,500).
``--documents N`` (default 2: the report's tree) puts N documents under the system prompt,
4,000 and 3,000 tokens in turn; each task asks q1 and q2 on one and q3 on another, drawn at
random: with more documents than a replica has seen, where a router sends a call matters.

Arrivals are Poisson at ``--rate`` tasks/s (``load=trace`` replays them); with ``load=poisson``
the file's times are ignored and ``load.rate`` counts tasks.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

TREE = {"sys": {"tokens": 1000, "children": {"docA": {"tokens": 4000}, "docB": {"tokens": 3000}}}}
QUESTION_TOKENS = 20


def scaled(tree: dict, scale: float) -> dict:
    return {k: {"tokens": max(int(round(v["tokens"] * scale)), 1),
                **({"children": scaled(v["children"], scale)} if "children" in v else {})} for k, v in tree.items()}


def doc_name(k: int) -> str:
    return "doc" + (chr(ord("A") + k) if k < 26 else str(k))


def tree(documents: int) -> dict:
    if documents == 2:
        return TREE
    sizes = [4000, 3000]
    return {"sys": {"tokens": 1000, "children": {doc_name(k): {"tokens": sizes[k % 2]} for k in range(documents)}}}


def rows(tasks: int, rate: float, tool_s: float, output_tokens: int, seed: int, scale: float = 1.0,
         documents: int = 2) -> list[dict]:
    if documents < 2:
        raise SystemExit(f"--documents must be >= 2, got {documents}")
    rng = np.random.default_rng(seed)
    t = np.concatenate([[0.0], np.cumsum(rng.exponential(1.0 / rate, size=tasks - 1))])
    out: list[dict] = [{"prefix_tree": scaled(tree(documents), scale)}]
    for k in range(tasks):
        tid = f"task{k:04d}"
        a, b = (0, 1) if documents == 2 else rng.choice(documents, size=2, replace=False)
        for node, path in (("q1", f"sys/{doc_name(a)}"), ("q2", f"sys/{doc_name(a)}"), ("q3", f"sys/{doc_name(b)}")):
            out.append({"timestamp": round(float(t[k]), 6), "task_id": tid, "node": node, "prefix": path,
                        "input_tokens": QUESTION_TOKENS, "output_tokens": output_tokens})
        out.append({"task_id": tid, "node": "answer", "parents": ["q1", "q2", "q3"], "tool_s": tool_s,
                    "prefix": "sys", "input_tokens": QUESTION_TOKENS, "output_tokens": output_tokens})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--tasks", type=int, default=30)
    ap.add_argument("--rate", type=float, default=0.2, help="tasks per second (Poisson)")
    ap.add_argument("--tool-s", type=float, default=0.1, help="tool time before the joining call")
    ap.add_argument("--output-tokens", type=int, default=16)
    ap.add_argument("--scale", type=float, default=1.0, help="multiplies the tree's lengths")
    ap.add_argument("--documents", type=int, default=2, help="documents under the system prompt")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args(argv)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    with open(a.out, "w") as f:
        for r in rows(a.tasks, a.rate, a.tool_s, a.output_tokens, a.seed, a.scale, a.documents):
            f.write(json.dumps(r) + "\n")
    print(f"{a.out}: {a.tasks} tasks, 4 calls each, at {a.rate} tasks/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
