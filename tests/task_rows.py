"""Hand-built request tables of task calls (times in ms from 0) for the task-metric tests, and the
seed's A/B example as runs: config A costs 0.08 per attempt and needs one per task, B costs 0.05
per attempt and needs two (its first attempt fails its check)."""

import pyarrow as pa

from loadgen.records import COLUMNS, SCHEMA, RequestRecord
from metrics.slo import SLO
from metrics.summary import summarize

MS = 1_000_000
S = 1_000_000_000


def call(task, node, attempt, sent_ms, end_ms, parents=(), calls=1, status="ok", check=None, out=10,
         warmup=False, done_ms=None):
    """One task call's row; ``end_ms`` None: no token came (``done_ms`` says when it ended)."""
    done = done_ms if done_ms is not None else end_ms
    return RequestRecord(request_id=f"{task}/{attempt}/{node}", scheduled_ns=int(sent_ms * MS),
                         sent_ns=int(sent_ms * MS), end_ns=None if end_ms is None else int(end_ms * MS),
                         done_ns=None if done is None else int(done * MS), status=status, output_tokens=out,
                         warmup=warmup, task_id=task, node=node, parents=list(parents), attempt=attempt,
                         task_calls=calls, check_ok=check)


def plain(i, sent_ms, end_ms, warmup=False):
    """A request that is no task's (attempt 0)."""
    return RequestRecord(request_id=f"p{i}", scheduled_ns=int(sent_ms * MS), sent_ns=int(sent_ms * MS),
                         end_ns=int(end_ms * MS), done_ns=int(end_ms * MS), status="ok", output_tokens=5,
                         warmup=warmup)


def table(records) -> pa.Table:
    return pa.Table.from_pylist([{c: getattr(r, c) for c in COLUMNS} for r in records], schema=SCHEMA)


# 3.6 per hour = 0.001 per second of window
RENTAL = {"model": "rental", "currency": "USD", "num_gpus": 1, "hourly_per_gpu": 3.6, "num_hosts": 0}

TASKS = 4  # per run
B_PER_ATTEMPT = {0: 0.05, 1: 0.052, 2: 0.048}  # by block: a noisy host in blocks 1 and 2


def ab_run(config: str, block: int) -> dict:
    """One run of the A/B example as a runs.parquet row: its config, block and summary scalars.
    Each task is one call (100 ms); B's first attempt fails its check and the second, sent 100 ms
    after, passes."""
    rows = []
    for i in range(TASKS):
        t0 = 1000 * i
        if config == "A":
            rows.append(call(f"{config}{block}-{i}", "a", 1, t0, t0 + 100, check=True))
        else:
            rows += [call(f"{config}{block}-{i}", "a", 1, t0, t0 + 100, check=False),
                     call(f"{config}{block}-{i}", "a", 2, t0 + 200, t0 + 300, check=True)]
    per_attempt = 0.08 if config == "A" else B_PER_ATTEMPT[block]
    attempts = TASKS * (1 if config == "A" else 2)
    # the window whose rental cost (0.001 per second) is per_attempt x attempts: A 320 s, B 400/416/384 s
    window_s = per_attempt * attempts / 0.001
    s = summarize(table(rows), SLO(), 0, round(window_s * S), cost_cfg=RENTAL)
    return {"config": config, "block": block, "role": "point", "label": "tasks", "offered_load": 1.0,
            **{k: v for k, v in s.items() if v is None or isinstance(v, (bool, int, float, str))}}


