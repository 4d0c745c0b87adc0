"""A fake of Dynamo's replay for the scheduler replica model's tests: a ``dynamo`` package
(``replay.run_trace_replay``, ``replay.main._load_engine_args``, ``mocker.MockEngineArgs``) on
the path of a Python that ``replay_worker.py`` runs in, answering every request with a TTFT of
50 ms and 10 ms a further token."""

import sys
import textwrap
from pathlib import Path

FAKE_REPLAY = textwrap.dedent('''
    import json, os
    LOG = os.path.join(os.path.dirname(__file__), "..", "..", "..", "log")
    with open(LOG, "a") as f:
        f.write(f"start {os.getpid()}\\n")

    def run_trace_replay(trace, extra_engine_args=None, num_workers=1, router_mode="round_robin",
                         report_jsonl_path=None, trace_block_size=None):
        assert extra_engine_args["planner_profile_data"]
        assert trace_block_size == extra_engine_args.get("block_size", 16)   # the writer's ids, one a block
        rows = [json.loads(x) for x in open(trace)]
        ttft = ttft_ms(extra_engine_args, rows)
        if rows[0]["input_length"] == 13:
            raise ValueError("a replay that fails")
        if rows[0]["input_length"] == 7:
            import time
            time.sleep(60)            # a long replay
        with open(LOG, "a") as f:
            f.write(f"replay {os.getpid()} {len(rows)} {num_workers} {router_mode}\\n")
        print("a log line on stdout")      # as Rust's logging may write there
        os.system("echo a log line on stdout from a child")
        t0 = rows[0]["timestamp"]
        with open(report_jsonl_path, "w") as f:
            for r in reversed(rows):   # a request: TTFT 50 ms, 10 ms a further token
                e2e = ttft + 10.0 * (r["output_length"] - 1)
                f.write(json.dumps({"arrival_time_ms": r["timestamp"] - t0, "input_length": r["input_length"],
                                    "requested_output_length": r["output_length"], "ttft_ms": ttft,
                                    "e2e_latency_ms": e2e, "terminal_status": "completed"}) + "\\n")
        return {}
''')
FAKE_MOCKER = textwrap.dedent('''
    import json

    class MockEngineArgs:
        @staticmethod
        def from_json(text):
            return json.loads(text)
''')


TTFT_50 = """
def ttft_ms(engine_args, rows):
    return 50.0
"""


def python(tmp_path: Path, ttft: str = TTFT_50) -> Path:
    """A Python whose ``dynamo`` is a fake replay (TTFT by ``ttft``, the source of a function
    ``ttft_ms(engine_args, rows)``: 50 ms unless given; TPOT 10 ms): it logs each process start
    and each replay (with its request count) to ``tmp_path / "log"``."""
    root = tmp_path / "fake"
    for mod, text in (("dynamo/__init__.py", ""), ("dynamo/replay/__init__.py", FAKE_REPLAY + textwrap.dedent(ttft)),
                      ("dynamo/replay/main.py", "import json\ndef _load_engine_args(t):\n    return json.loads(t)\n"),
                      ("dynamo/mocker/__init__.py", FAKE_MOCKER)):
        (root / mod).parent.mkdir(parents=True, exist_ok=True)
        (root / mod).write_text(text)
    py = tmp_path / "py.sh"
    py.write_text(f'#!/bin/sh\nPYTHONPATH="{root}" exec "{sys.executable}" "$@"\n')
    py.chmod(0o755)
    return py


def log(tmp_path: Path) -> tuple[int, list[int]]:
    """(processes started, request count of each replay) of the fake replay."""
    lines = (tmp_path / "log").read_text().split("\n") if (tmp_path / "log").is_file() else []
    return (sum(x.startswith("start") for x in lines),
            [int(x.split()[2]) for x in lines if x.startswith("replay")])


def layouts(tmp_path: Path) -> list[tuple[int, str]]:
    """(workers, router mode) each replay of the fake was asked for."""
    lines = (tmp_path / "log").read_text().split("\n") if (tmp_path / "log").is_file() else []
    return [(int(x.split()[3]), x.split()[4]) for x in lines if x.startswith("replay")]
