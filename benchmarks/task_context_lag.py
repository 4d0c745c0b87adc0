"""A task call's prompt build and schedule lag when its context runs to ~70k tokens.

SGLang's agentic trace has prompts near 70k tokens; a task call carries its ancestors' messages
and replies (``workload.task.context=ancestors``), and where they exceed ``engine.max_model_len``
the oldest exchanges are dropped (``TracePrompts.task_call``).  Two figures, under the embedded
tiny model's tokenizer (completions prompts):

1. build: one call whose context is ``--exchanges`` (message, reply) pairs of ``--message`` +
   ``--reply`` tokens (100 x 700 = 70,000 by default), built under each ``--max-model-len``:
   the exchanges dropped, the prompt's tokens and the build time (min and median of
   ``--repeats``), also as a multiple of one encode of the whole context (other tenants' noise
   moves both alike: the multiple is the work).
2. lag: ``--tasks`` tasks (one a second) through the real ``Dispatcher``, each ``--exchanges``
   roots answered at once with a ``--reply``-token text by an in-process answerer (no server:
   the lag is the client's own), then one call that joins them ``--tool-s`` after the last
   root ended, its prompt built then off the send loop from the 70k-token context.  Prints the
   join calls' schedule lag (``sent_ns - scheduled_ns``): a build longer than the tool time
   shows up there.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/task_context_lag.py
    PYTHONPATH=$PWD .venv/bin/python benchmarks/task_context_lag.py --max-model-len 32768 65536 --tasks 3

Run it with another checkout first on PYTHONPATH to compare builds (the script only uses
``task_call`` and the ``Dispatcher``, which every version has).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import tempfile
import time
from pathlib import Path

from omegaconf import OmegaConf

from engines.tiny_model import ensure_tiny_model
from loadgen.dispatch import Dispatcher, LoadSpec
from loadgen.workloads.prompts import PromptBuilder, load_tokenizer
from loadgen.workloads.traces.replay import TraceWorkload


class Answerer:
    """Answers every call at once with the same ``reply`` text (the client side of a run, no server)."""

    timestamp_source = "read"

    def __init__(self, reply: str, reply_tokens: int):
        self.reply, self.reply_tokens = reply, reply_tokens

    def body(self, prompt, max_tokens) -> bytes:
        return json.dumps({"prompt": prompt, "max_tokens": max_tokens}).encode()

    async def send(self, rec, payload):
        rec.sent_ns = time.perf_counter_ns()
        await asyncio.sleep(0)
        rec.first_token_ns = rec.end_ns = rec.done_ns = time.perf_counter_ns()
        rec.status, rec.text, rec.output_tokens = "ok", self.reply, self.reply_tokens
        return rec


class Writer:
    def __init__(self):
        self.rows = []

    def append(self, rec):
        self.rows.append(rec)


def task_file(path: Path, tasks: int, exchanges: int, message: int, reply: int, tool_s: float) -> str:
    lines = []
    for t in range(tasks):
        roots = [f"q{j}" for j in range(exchanges)]
        lines += [{"timestamp": float(t), "task_id": f"t{t}", "node": r, "input_tokens": message,
                   "output_tokens": reply} for r in roots]
        lines.append({"task_id": f"t{t}", "node": "join", "parents": roots, "tool_s": tool_s,
                      "input_tokens": message, "output_tokens": reply})
    path.write_text("\n".join(json.dumps(x) for x in lines))
    return str(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--exchanges", type=int, default=100)
    ap.add_argument("--message", type=int, default=500, help="tokens of each call's own message")
    ap.add_argument("--reply", type=int, default=200, help="tokens of each reply")
    ap.add_argument("--max-model-len", type=int, nargs="+", default=[131072, 65536, 32768])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tasks", type=int, default=3, help="tasks of the lag run (0: skip it)")
    ap.add_argument("--tool-s", type=float, default=0.1)
    ap.add_argument("--lag-max-model-len", type=int, default=32768)
    a = ap.parse_args()

    b = PromptBuilder(load_tokenizer(str(ensure_tiny_model())), seed=0)
    reply = b.text_of(a.reply)
    tmp = Path(tempfile.mkdtemp(prefix="task-context-lag-"))
    path = task_file(tmp / "tasks.jsonl", max(a.tasks, 1), a.exchanges, a.message, a.reply, a.tool_s)
    context = [(b.text_of(a.message), reply) for _ in range(a.exchanges)]
    ctx_tokens = b.count("".join(u + r for u, r in context))
    print(f"context: {a.exchanges} exchanges of {a.message} + {a.reply} tokens = {ctx_tokens:,} tokens")
    whole = "".join(u + r for u, r in context)
    enc = []
    for _ in range(a.repeats):
        t = time.perf_counter()
        b.count(whole)
        enc.append(time.perf_counter() - t)
    # the machine's noise moves both alike: the ratio to one encode of the context is the work
    print(f"one encode of the whole context: {min(enc) * 1e3:.1f} ms (min of {a.repeats})")
    print(f"{'max_model_len':>13} {'dropped':>8} {'prompt tokens':>14} {'build ms (min / median)':>24} "
          f"{'in context encodes':>19}")
    for mml in a.max_model_len:
        items = TraceWorkload(OmegaConf.create({"name": "jsonl", "path": path}), b, max_model_len=mml)
        join = next(i for i in range(len(items.table)) if items.table.node[i] == "join")
        times = []
        for _ in range(a.repeats):
            t = time.perf_counter()
            prompt, n, _text = items.prompts.task_call(join, "", context)
            times.append(time.perf_counter() - t)
        kept = sum(1 for u, _r in context if u in prompt)
        ms = f"{min(times) * 1e3:.1f} / {statistics.median(times) * 1e3:.1f}"
        print(f"{mml:>13} {a.exchanges - kept:>8} {n:>14,} {ms:>24} {min(times) / min(enc):>19.1f}")

    if a.tasks:
        items = TraceWorkload(OmegaConf.create({"name": "jsonl", "path": path}), b,
                              max_model_len=a.lag_max_model_len)
        w = Writer()
        d = Dispatcher(Answerer(reply, a.reply), w, followup=items.followup)
        asyncio.run(d.run(items, LoadSpec.of(kind="trace")))
        lag = sorted((r.sent_ns - r.scheduled_ns) / 1e6 for r in w.rows if r.node == "join")
        print(f"lag run: {a.tasks} tasks, max_model_len={a.lag_max_model_len}, tool_s={a.tool_s}: join calls' "
              f"schedule lag (ms) " + ", ".join(f"{x:.1f}" for x in lag))


if __name__ == "__main__":
    main()
