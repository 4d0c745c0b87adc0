"""How a router placed a Mooncake trace's shared prefixes: for each run of a deployment, the
requests that repeat a prefix of an earlier request (at least ``--min-blocks`` leading hash
blocks, within the clipped prompt) and the share of them served by the replica that served
the earliest request with that prefix, the hit rate that placement predicts (the
tokens of each prompt that repeat a prefix an earlier request brought to the same replica),
beside the run's prefix-cache hit rate from the engines' counters and its TTFT p50.

Round robin over N replicas sends a repeat to that replica 1/N of the time; a cache-aware
router should approach 1.  Request ids are ``r<index>`` of the replayed rows, in the trace's
order (the first ``workload.max_requests`` rows of the window).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/deployment_affinity.py RESULTS_DIR \\
        --trace ../shared/traces/mooncake_fast25/conversation_trace.jsonl
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pyarrow.parquet as pq

from harness import results_io

BLOCK = 512  # tokens per Mooncake hash id


def affinity(run: Path, trace: list[dict], blocks: int, min_blocks: int) -> tuple[int, int, float]:
    """(repeats, those sent to the first holder's replica, predicted hit rate): the share of
    prompt tokens that repeat a prefix an earlier request brought to the same replica (the
    hash blocks it shares, clipped to its prompt), with this run's placement of requests."""
    rows = [r for r in pq.read_table(run / results_io.REQUESTS).to_pylist() if not r["warmup"]]
    index = {r["request_id"]: int(re.findall(r"\d+", r["request_id"])[-1]) for r in rows}
    owner: dict[tuple, str] = {}
    cached: dict[str, set] = {}
    repeats = same = 0
    reused = total = 0
    for r in sorted(rows, key=lambda r: index[r["request_id"]]):
        h = tuple(trace[index[r["request_id"]]]["hash_ids"][:blocks])
        holder = None
        for k in range(min_blocks, len(h) + 1):
            if h[:k] in owner:
                holder = owner[h[:k]]
        if holder is not None:
            repeats += 1
            same += holder == r["replica"]
        mine = cached.setdefault(r["replica"], set())
        k = max((k for k in range(1, len(h) + 1) if h[:k] in mine), default=0)
        tokens = int(r["prompt_tokens"] or 0)
        reused += min(k * BLOCK, tokens)
        total += tokens
        for k in range(1, len(h) + 1):
            owner.setdefault(h[:k], r["replica"])
            mine.add(h[:k])
    return repeats, same, reused / total if total else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", type=Path)
    ap.add_argument("--trace", type=Path, required=True)
    ap.add_argument("--blocks", type=int, default=4, help="hash blocks of 512 tokens a clipped prompt keeps")
    ap.add_argument("--min-blocks", type=int, default=2, help="a repeat shares at least this many blocks")
    a = ap.parse_args()
    trace = [json.loads(line) for line in a.trace.open()]
    print(f"{'run':28s} {'repeats':>7s} {'same replica':>12s} {'predicted hit':>13s} {'engines hit':>11s} "
          f"{'TTFT p50 ms':>11s}")
    for summary in sorted(a.results.rglob(results_io.SUMMARY)):
        run = summary.parent
        m = json.loads(summary.read_text())
        repeats, same, predicted = affinity(run, trace, a.blocks, a.min_blocks)
        share = same / repeats if repeats else float("nan")
        print(f"{str(run.relative_to(a.results)):28s} {repeats:7d} {share:12.3f} {predicted:13.3f} "
              f"{m.get('engine_prefix_cache_hit_rate', float('nan')):11.3f} {m.get('p50_ttft_ms', float('nan')):11.1f}")


if __name__ == "__main__":
    main()
