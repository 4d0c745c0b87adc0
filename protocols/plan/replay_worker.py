"""Run Dynamo's offline replay (the mocker's scheduler) over some traces; run by the Dynamo
venv's Python as a script, so it imports only the standard library and ``dynamo``
(``protocols.plan.scheduler`` starts it and reads what it writes).

    python replay_worker.py JOB.json

JOB.json: ``{"engine_args": {mocker engine args: planner_profile_data, max_num_seqs, ...},
"router_mode": "round_robin", "jobs": [{"trace": PATH, "report": PATH, "num_workers": 1}]}``.
Each job's per-request records go to its ``report`` (``report_jsonl_path``); one line of JSON
on stdout: the wall time of each job in seconds.
"""

import json
import sys
import time


def main(argv: list[str]) -> int:
    from dynamo.replay import run_trace_replay
    from dynamo.replay.main import _load_engine_args  # the CLI's own parser of --extra-engine-args

    with open(argv[1], encoding="utf-8") as f:
        job = json.load(f)
    args = _load_engine_args(json.dumps(job.get("engine_args") or {}))
    walls = []
    for j in job["jobs"]:
        t0 = time.perf_counter()
        run_trace_replay(j["trace"], extra_engine_args=args, num_workers=int(j.get("num_workers", 1)),
                         router_mode=job.get("router_mode", "round_robin"), report_jsonl_path=j["report"])
        walls.append(time.perf_counter() - t0)
    print(json.dumps({"wall_s": walls}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
