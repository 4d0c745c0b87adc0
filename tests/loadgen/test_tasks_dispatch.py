"""A task workload through the real dispatcher and client against the fake server, which records
when each call arrived and when it wrote its last bytes: no call reaches the server before all
its parents ended there plus its tool time (the server's own clock, CLOCK_MONOTONIC like ours)."""

from __future__ import annotations

import asyncio
import json
import time

import pyarrow.parquet as pq
import pytest
from omegaconf import OmegaConf

from loadgen.client import ClientConfig, StreamingClient
from loadgen.dispatch import Dispatcher, LoadSpec
from loadgen.records import RecordWriter
from loadgen.workloads.traces.replay import TraceWorkload
from tests.fake_server import FakeServer, openai_script
from tests.loadgen.test_trace_replay import builder  # noqa: F401

TOOL = {"root": 0.0, "a": 0.03, "b": 0.0, "c": 0.06, "join": 0.02, "final": 0.01}


def dag_rows(n_tasks: int) -> list[dict]:
    rows = [{"prefix_tree": {"sys": {"tokens": 60, "children": {"doc": {"tokens": 120}}}}}]
    for t in range(n_tasks):
        tid = f"task{t}"
        rows.append({"timestamp": 0.0, "task_id": tid, "node": "root", "input_tokens": 10, "output_tokens": 4,
                     "prefix": "sys/doc"})
        for n in ("a", "b", "c"):
            rows.append({"task_id": tid, "node": n, "parents": ["root"], "tool_s": TOOL[n], "input_tokens": 8,
                         "output_tokens": 4, "prefix": "sys/doc"})
        rows.append({"task_id": tid, "node": "join", "parents": ["a", "b", "c"], "tool_s": TOOL["join"],
                     "input_tokens": 6, "output_tokens": 4})
        rows.append({"task_id": tid, "node": "final", "parents": ["join"], "tool_s": TOOL["final"],
                     "input_tokens": 6, "output_tokens": 4})
    return rows


def recording_script():
    """The fake engine, stamping each request's arrival and the moment before it writes [DONE] (a
    call is over at its last event; the body's end follows in a write of its own)."""
    truth: dict = {}
    inner = openai_script(truth)
    seen: dict = {}

    def script(body: dict, k: int) -> list:
        arrived = time.perf_counter_ns()
        before = set(truth)
        steps = inner(body, k)
        rid = (set(truth) - before).pop()
        seen[rid] = {"arrived_ns": arrived}
        last = seen[rid]
        assert steps[-2].endswith(b"data: [DONE]\n\n\r\n")
        return steps[:-2] + [lambda: last.__setitem__("ended_ns", time.perf_counter_ns()), *steps[-2:]]

    return script, seen


@pytest.mark.parametrize("max_concurrency", [None, 3])
def test_no_call_reaches_the_server_before_its_parents_plus_tool_time(tmp_path, builder, max_concurrency):  # noqa: F811
    path = tmp_path / "tasks.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in dag_rows(6)))
    items = TraceWorkload(OmegaConf.create({"name": "jsonl", "path": str(path)}), builder, max_model_len=4096)
    script, seen = recording_script()
    out = tmp_path / "requests.parquet"
    with FakeServer(script) as srv:
        w = RecordWriter(out)

        async def go():
            async with StreamingClient(ClientConfig(base_url=srv.base_url, model="fake", continuous_usage=True)) as c:
                d = Dispatcher(c, w, followup=items.followup)
                return await d.run(items, LoadSpec.of(kind="poisson", rate=20, requests_to_send=6, seed=3,
                                                   max_concurrency=max_concurrency))

        asyncio.run(go())
        w.close()
    t = pq.read_table(out).to_pylist()
    assert len(t) == 6 * 6 and {r["status"] for r in t} == {"ok"}
    by = {(r["task_id"], r["node"]): r for r in t}
    for r in t:
        truth = seen[r["response_id"]]
        assert truth["arrived_ns"] >= r["sent_ns"]  # (the server's clock and ours are one)
        if not r["parents"]:
            continue
        parents_end = max(seen[by[(r["task_id"], p)]["response_id"]]["ended_ns"] for p in r["parents"])
        # the ground truth: sent only after every parent ended, plus its tool time
        assert truth["arrived_ns"] >= parents_end + TOOL[r["node"]] * 1e9, (r["task_id"], r["node"])
        assert r["tool_s"] == TOOL[r["node"]]
    if max_concurrency:
        assert srv.max_in_flight <= max_concurrency  # the cap counts calls, a task's fan-out too



def test_tasks_over_worker_processes(tmp_path, builder):  # noqa: F811
    """client.workers: a task's calls run in the worker that sent its roots (its replay state
    was forked with it); every call still waits for its parents plus its tool time."""
    from loadgen.workers import run_workers

    path = tmp_path / "tasks.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in dag_rows(4)))
    items = TraceWorkload(OmegaConf.create({"name": "jsonl", "path": str(path)}), builder, max_model_len=4096)
    out = tmp_path / "requests.parquet"
    with FakeServer() as srv:
        w = RecordWriter(out)
        cfg = ClientConfig(base_url=srv.base_url, model="fake", continuous_usage=True)
        run_workers(2, cfg, items, LoadSpec.of(kind="poisson", rate=20, requests_to_send=4, seed=1), w,
                    followup=items.followup)
        w.close()
        with pytest.raises(ValueError, match="load=concurrency does not run a task workload"):
            run_workers(2, cfg, items, LoadSpec.of(kind="concurrency", concurrency=2, requests_to_send=4), RecordWriter(
                tmp_path / "x.parquet"), followup=items.followup)
    t = pq.read_table(out).to_pylist()
    assert len(t) == 4 * 6 and {r["status"] for r in t} == {"ok"}
    by = {(r["task_id"], r["node"]): r for r in t}
    for r in t:
        assert len({by[(r["task_id"], n)]["worker"] for n in TOOL}) == 1  # one worker per task
        for p in r["parents"]:
            assert r["scheduled_ns"] >= by[(r["task_id"], p)]["done_ns"] + TOOL[r["node"]] * 1e9
