"""Run Dynamo's offline replay (the mocker's scheduler) over some traces; run by the Dynamo
venv's Python as a script, so it imports only the standard library, numpy and ``dynamo``
(``protocols.plan.scheduler`` starts it and reads what it writes).

    python replay_worker.py --serve      # long-lived: one job a line on stdin, one answer a line on stdout
    python replay_worker.py JOB.json     # one-shot: every job of the file, then exit

A job: ``{"engine_args": {mocker engine args: planner_profile_data, max_num_seqs, ...},
"router_mode": "round_robin", "trace": PATH, "report": PATH, "records": PATH, "num_workers": 1,
"trace_block_size": 16}`` (the tokens each of the trace's ``hash_ids`` stands for: the replay's
own default is Mooncake's 512, under which one shared id of a 16-token block covers 512 tokens)
(JOB.json: ``{"engine_args", "router_mode", "jobs": [{"trace", "report", "records", ...}]}``).
The replay's per-request records go to ``report`` (``report_jsonl_path``); with ``records``,
their fields the plan reads are also saved there as a float64 ``.npy`` array, one row a record
in the report's order: arrival_time_ms, input_length, requested_output_length, ttft_ms,
e2e_latency_ms (NaN where null), completed (1.0 where ``terminal_status`` is completed or
absent).  Answer: one line of JSON, ``{"ok": true, "wall_s": [...]}`` or ``{"ok": false,
"error": "..."}``; ``--serve`` ends at the end of its stdin (its parent gone).
"""

import json
import os
import sys
import time

# the harness's knobs (protocols.plan.scheduler.KNOBS) and the profile: the replay CLI's own
# parser (_load_engine_args) passes these through unchanged, so they go straight to
# MockEngineArgs and the 4 s import of dynamo.replay.main is paid only for anything else
PLAIN = {"max_num_seqs", "max_num_batched_tokens", "enable_chunked_prefill", "enable_prefix_caching",
         "block_size", "num_gpu_blocks", "planner_profile_data"}
FIELDS = ("arrival_time_ms", "input_length", "requested_output_length", "ttft_ms", "e2e_latency_ms")


def engine_args(raw: dict):
    if set(raw) <= PLAIN and str(raw.get("planner_profile_data", ".npz")).endswith(".npz"):
        from dynamo.mocker import MockEngineArgs
        return MockEngineArgs.from_json(json.dumps(raw))
    from dynamo.replay.main import _load_engine_args  # the CLI's own parser of --extra-engine-args
    return _load_engine_args(json.dumps(raw))


def save_records(report: str, out: str) -> None:
    """The report's fields the plan reads (module doc) as an .npy array."""
    import numpy as np
    rows = []
    nan = float("nan")
    with open(report, "rb") as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                rows.append([nan if r.get(k) is None else r[k] for k in FIELDS]
                            + [1.0 if r.get("terminal_status", "completed") == "completed" else 0.0])
    np.save(out, np.array(rows, dtype=np.float64).reshape(len(rows), len(FIELDS) + 1))


def run(job: dict, cache: dict) -> float:
    from dynamo.replay import run_trace_replay

    key = json.dumps(job.get("engine_args") or {}, sort_keys=True)
    if key not in cache:
        cache[key] = engine_args(job.get("engine_args") or {})
    t0 = time.perf_counter()
    run_trace_replay(job["trace"], extra_engine_args=cache[key], num_workers=int(job.get("num_workers", 1)),
                     router_mode=job.get("router_mode", "round_robin"), report_jsonl_path=job["report"],
                     trace_block_size=job.get("trace_block_size"))
    if job.get("records"):
        save_records(job["report"], job["records"])
    return time.perf_counter() - t0


def die_with_parent() -> None:
    """Linux: SIGTERM to this worker when the process that started it ends, however it ends
    (killed in the middle of a replay, it would not read the end of its stdin until the
    replay is over)."""
    try:
        import ctypes
        import signal
        ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM))   # PR_SET_PDEATHSIG
    except (OSError, AttributeError):      # not Linux: the end of stdin still stops it
        pass


def serve() -> int:
    die_with_parent()
    cache: dict = {}
    answers = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)          # anything else written to stdout (the replay's logs) goes to stderr
    sys.stdout = sys.stderr
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            answer = {"ok": True, "wall_s": [run(json.loads(line), cache)]}
        except Exception as e:  # noqa: BLE001 - the parent reports it; the worker keeps serving
            answer = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        answers.write(json.dumps(answer) + "\n")
        answers.flush()
    return 0


def main(argv: list[str]) -> int:
    if argv[1:] == ["--serve"]:
        return serve()
    with open(argv[1], encoding="utf-8") as f:
        spec = json.load(f)
    cache: dict = {}
    walls = [run({"engine_args": spec.get("engine_args"), "router_mode": spec.get("router_mode", "round_robin"),
                  **j}, cache) for j in spec["jobs"]]
    print(json.dumps({"wall_s": walls}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
