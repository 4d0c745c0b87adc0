"""Deployments (engines/deployment.py) through the harness: real replica processes (the fake
engine of tests/fake_engine_process.py, which names its replica in every response as vLLM
with tokenfactory's middleware does) behind the real vllm-router, launched, measured per
replica, priced over every replica, stopped; and a replica killed mid-run, named and counted
while the other serves on."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import psutil
import pyarrow.parquet as pq
import pytest

from engines.base import EngineError
from engines.tiny_model import ensure_tiny_model

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable
ROUTER = Path(sys.executable).parent / "vllm-router"
needs_router = pytest.mark.skipif(not ROUTER.exists() and shutil.which("vllm-router") is None,
                                  reason="vllm-router is not installed (pip install vllm-router)")


def compose(overrides):
    from conf.compose import compose_config

    return compose_config(overrides)


# ------------------------------------------------------------------------------ what is built
def test_a_router_needs_replicas_and_replicas_need_a_router(tmp_path):
    from engines.deployment import make_served

    with pytest.raises(EngineError, match="router=vllm routes between replicas"):
        make_served(compose(["router=vllm"]), tmp_path)
    with pytest.raises(EngineError, match="deployment=replicas needs a router"):
        make_served(compose(["deployment=replicas"]), tmp_path)
    one = make_served(compose([]), tmp_path)
    assert one.replica == "r0" and not hasattr(one, "members")  # deployment=single: today's adapter


def test_a_config_with_only_an_engine_section_is_one_engine(tmp_path):
    """A partial config (a tool's, a test's: ``engine`` alone) gets the schemas' defaults for the
    groups it lacks: deployment=single, router=none, so it is the engine's adapter, as before."""
    from omegaconf import OmegaConf

    from engines.deployment import make_served
    from harness.experiment_record import topology_text
    from tests.engine_cfg import engine_cfg

    partial = OmegaConf.create({"engine": engine_cfg("vllm", model="m")})
    one = make_served(partial, tmp_path)
    assert type(one).__name__ == "VLLM" and one.replica == "r0" and not hasattr(one, "members")
    assert topology_text(partial) == "one vllm engine"
    plain = OmegaConf.create({"engine": {"name": "vllm", "model": "m", "features": {"tensor_parallel_size": 2}}})
    assert topology_text(plain) == "one vllm engine, TP=2"  # a plain mapping: typed by its engine.name
    with pytest.raises(EngineError, match="engine.name='nope' is not a known engine"):
        make_served(compose(["engine.name=nope"]), tmp_path)


def test_replicas_get_their_names_ports_flags_and_logs(tmp_path):
    from engines.deployment import Deployment

    cfg = compose(["engine=vllm", "deployment=replicas", "deployment.replicas=3", "router=vllm",
                   "router.policy=round_robin", f"engine.model={ensure_tiny_model()}"])
    d = Deployment(cfg, tmp_path)
    try:
        d.prepare()
        assert [r.replica for r in d.replicas] == ["r0", "r1", "r2"]
        assert len({r.port for r in d.replicas} | {d.router.port}) == 4  # every process its own port
        for r in d.replicas:
            argv = r.full_command()
            assert argv[argv.index("--port") + 1] == str(r.port)
            assert "--middleware" in argv and "tokenfactory_replica_header.ReplicaHeader" in argv
            assert "--enable-scale-out" in argv  # vllm-router's cache_aware tokenizes through the workers
            env = {**r.launch_env(), **r.replica_env}
            assert env["TOKENFACTORY_REPLICA"] == r.replica and "server_plugins" in env["PYTHONPATH"]
            assert r.log_name == f"engine-{r.replica}.log"
        assert d.topology()["router_policy"] == "round_robin" and d.topology()["replicas"] == 3
    finally:
        d.stop()


def test_a_missing_router_binary_is_named_before_any_replica_starts(tmp_path, monkeypatch):
    """The router starts once every replica has loaded: its binary is checked first, or a
    missing one is found only after every model has loaded."""
    from engines.deployment import Deployment

    cfg = compose(["engine=vllm", "deployment=replicas", "deployment.replicas=2", "router=vllm",
                   "router.binary=/nonexistent/vllm-router", f"engine.model={ensure_tiny_model()}"])
    d = Deployment(cfg, tmp_path)
    started = []
    for r in d.replicas:
        monkeypatch.setattr(r, "start", lambda warm_up=True, r=r: started.append(r.replica))
    try:
        with pytest.raises(EngineError, match="router.binary=/nonexistent/vllm-router is not found"):
            d.start()
    finally:
        d.stop()
    assert started == []


def test_disaggregated_replicas_get_the_kv_connector_of_their_role(tmp_path):
    from engines.deployment import Deployment

    cfg = compose(["engine=vllm", "deployment=disaggregated", "deployment.prefill=1", "deployment.decode=2",
                   "deployment.kv_connector=ExampleConnector", "+deployment.kv_connector_extra.shared_storage_path=/x",
                   "router=vllm", f"engine.model={ensure_tiny_model()}"])
    d = Deployment(cfg, tmp_path)
    try:
        d.prepare()
        roles = {r.replica: json.loads(r.full_command()[r.full_command().index("--kv-transfer-config") + 1])
                 for r in d.replicas}
        assert set(roles) == {"p0", "d0", "d1"}
        assert roles["p0"]["kv_role"] == "kv_producer" and roles["d1"]["kv_role"] == "kv_consumer"
        assert roles["d0"]["kv_connector_extra_config"] == {"shared_storage_path": "/x"}
        assert d.topology()["prefill_decode"] == "1:2"
        # the pools metrics.replicas splits the load shares by, under the names the telemetry uses
        assert d.roles() == {"p0": "prefill", "d0": "decode", "d1": "decode"}
        assert [n for n, _ in d.metrics_endpoints()] == ["p0", "d0", "d1"]
    finally:
        d.stop()


def test_the_record_names_the_topology():
    from harness.experiment_record import topology_text

    assert topology_text(compose([])) == "one transformers engine"
    text = topology_text(compose(["engine=vllm", "deployment=replicas", "router=vllm", "router.policy=cache_aware",
                                  "deployment.placement.cpus=[0,1]"]))
    assert text == "2 x vllm behind router=vllm (policy cache_aware); placement local, cores ['0', '1']"


# ------------------------------------------------------------------------------ through the harness
def _cli(tmp_path, *overrides, fake_args=(), timeout=240):
    tok = str(ensure_tiny_model())
    cmd = ",".join([PY, "-m", "tests.fake_engine_process", "--port", "'{port}'", *fake_args])
    argv = [PY, "-m", "harness.cli", "run", "engine=vllm", f"engine.command=[{cmd}]", "engine.model=fake",
            f"engine.tokenizer={tok}", "engine.continuous_usage=false", "engine.health_interval_s=0.5",
            "deployment=replicas", "deployment.replicas=2", "router=vllm", "router.policy=round_robin",
            "workload.input_tokens=32", "workload.output_tokens=8", "load.warmup_requests=0",
            "mlflow.enabled=false", "progress=false", "report.enabled=false", "telemetry.idle_baseline_s=0",
            *overrides]
    # every process the run starts inherits the tag: _no_process_left finds this test's own, not
    # those of a test running beside it (pytest -n) or of other work on the machine
    env = {**os.environ, "PYTHONPATH": str(REPO), RUN_TAG: str(tmp_path)}
    return subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=timeout)


RUN_TAG = "TOKENFACTORY_TEST_RUN"


def _tagged(p: psutil.Process, tag: str) -> bool:
    try:
        return p.environ().get(RUN_TAG) == tag
    except (psutil.Error, OSError):  # gone, or not ours to read
        return False


def _no_process_left(out: Path) -> None:
    mine = [p for p in psutil.process_iter(["cmdline"])
            if (any(str(out) in a for a in (p.info["cmdline"] or [])) or _tagged(p, str(out.parent)))
            and p.pid != os.getpid()]
    assert not [p for p in mine if p.status() != psutil.STATUS_ZOMBIE]


@needs_router
@pytest.mark.slow
def test_two_replicas_behind_vllm_router_measured_per_replica(tmp_path):
    out = tmp_path / "out"
    # periodic: the replicas' gauges (the pool's queue below) are read inside the window (at auto a local
    # engine with no GPU is sampled at the window's edges only: metrics.telemetry.sampling)
    p = _cli(tmp_path, "load=constant", "load.num_requests=40", "protocol.load_points=[20]",
             f"output_dir={out}", "cost.hourly_per_host=1.0", "+cost.extra_hourly.router=0.5",
             "telemetry.sampling=periodic")
    assert p.returncode == 0, p.stdout + p.stderr
    run = next(out.glob("00-*"))
    rows = pq.read_table(run / "requests.parquet").to_pylist()
    served = [r["replica"] for r in rows if r["status"] == "ok"]
    assert len(served) == 40 and served.count("r0") == served.count("r1") == 20  # round robin, named by the replica
    m = json.loads((run / "summary.json").read_text())
    assert m["replicas"]["r0"]["requests"] == m["replicas"]["r1"]["requests"] == 20
    assert m["replica_load_imbalance"] == pytest.approx(1.0)
    pool = m["pools"]["replica"]  # the pool's bottleneck line: its replicas, batch and queue
    assert pool["replicas"] == ["r0", "r1"] and pool["waiting_mean"] == pytest.approx(0.0)
    # the bill: two replicas' hosts and the router's line over the whole window
    assert m["cost_replicas"] == 2
    assert m["cost_lines"]["rental_hosts"] == pytest.approx(2 * m["window_s"] / 3600)
    assert m["cost_lines"]["extra.router"] == pytest.approx(0.5 * m["window_s"] / 3600)
    prov = json.loads((run / "provenance.json").read_text())["engine"]
    assert prov["deployment"]["router"] == "vllm" and prov["deployment"]["router_policy"] == "round_robin"
    assert prov["router"]["router_version"] == "0.1.17" and set(prov["replicas"]) == {"r0", "r1"}
    assert all("tokenfactory_replica_header.ReplicaHeader" in r["command"] for r in prov["replicas"].values())
    for log in ("engine-r0.log", "engine-r1.log", "router.log"):
        assert (out / log).exists(), log
    exp = json.loads((out / "experiment.json").read_text())
    step3 = next(s for s in exp["steps"] if s["step"] == 3)
    assert "2 x vllm behind router=vllm (policy round_robin)" in step3["how"]
    tel = pq.read_table(run / "telemetry.parquet").to_pylist()
    assert {r["source"] for r in tel if r["source"].startswith("engine:")} == {"engine:r0", "engine:r1"}
    _no_process_left(out)


@needs_router
@pytest.mark.faults
def test_a_replica_killed_mid_run_is_named_and_counted_and_the_other_serves_on(tmp_path):
    out = tmp_path / "out"
    p = _cli(tmp_path, "load=constant", "load.num_requests=60", "protocol.load_points=[10]",
             "scenario.kill_at_s=2", "scenario.kill_replica=r1", f"output_dir={out}",
             fake_args=("--gap-ms", "40"))
    text = p.stdout + p.stderr
    assert p.returncode == 0, text
    assert "scenario: vllm replica r1 sent SIGKILL 2 s into the load" in text
    assert "engine=vllm replica r1 was killed by SIGKILL" in text and "serves on with r0" in text
    run = next(out.glob("00-*"))
    m = json.loads((run / "summary.json").read_text())
    assert m["point_failed"] is False and m["replicas_lost"] == ["r1"]
    fault = m["replica_faults"][0]
    assert fault["replica"] == "r1" and fault["kind"] == "killed" and fault["injected"] is True
    rows = pq.read_table(run / "requests.parquet").to_pylist()
    failed = [r for r in rows if r["status"] != "ok"]
    named = [r for r in failed if "replica r1" in (r["error"] or "")]
    assert m["requests_failed_by_fault"] == len(named) >= 1  # the streams r1 was serving when it died
    late_ok = [r for r in rows if r["status"] == "ok" and r["sent_ns"] > max(x["end_ns"] or 0 for x in named)]
    assert late_ok and all(r["replica"] == "r0" for r in late_ok)  # the router sent the rest to r0
    _no_process_left(out)


def test_an_endpoint_that_is_already_a_deployment_is_scraped_per_replica(tmp_path):
    """engine=openai with engine.replica_metrics_urls: driven as one endpoint, each replica's
    page labelled r0, r1 in the order given, the engine's series found from the first page."""
    import http.server
    import threading

    from engines.deployment import make_served
    from engines.vllm import VLLM

    page = b"# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name=\"m\"} 3\n"

    class Metrics(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(page)

        def log_message(self, *a):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{srv.server_port}/metrics"
        served = make_served(compose(["engine=openai", "engine.base_url=http://127.0.0.1:9", "engine.model=m",
                                      f"engine.replica_metrics_urls=[{url},{url}]"]), tmp_path)
        assert served.metrics_endpoints() == [("r0", url), ("r1", url)]
        assert served.server_metric_map is VLLM.server_metric_map
        assert served.topology()["replicas"] == 2 and served.base_url == "http://127.0.0.1:9"
    finally:
        srv.shutdown()


@pytest.mark.slow  # starts the router and two fake engines
@needs_router
def test_replicas_already_up_get_the_harness_router_and_are_left_running(tmp_path):
    """engine.replica_urls with engine.launch=false: only the router is launched, in front of
    the replicas given; stopping the deployment stops the router, not the replicas."""
    from engines.deployment import Deployment
    from engines.http import http_post
    from engines.process import EngineProcess, free_port
    from tests.http_wait import wait_http

    procs, urls = [], []
    for i in range(2):
        port = free_port()
        p = EngineProcess([PY, "-m", "tests.fake_engine_process", "--port", str(port)], tmp_path / f"up{i}.log",
                          env={"PYTHONPATH": str(REPO)})
        p.start()
        procs.append(p)
        urls.append(f"http://127.0.0.1:{port}")
    try:
        for p, u in zip(procs, urls):
            wait_http(u + "/health", p)
        cfg = compose(["engine=vllm", "engine.launch=false", "engine.model=fake",
                       f"engine.replica_urls=[{urls[0]},{urls[1]}]", "deployment=replicas", "router=vllm",
                       "router.policy=round_robin"])
        d = Deployment(cfg, tmp_path)
        d.start(warm_up=False)
        try:
            for _ in range(2):
                status, _ = http_post(d.base_url + "/v1/completions", {"model": "fake", "prompt": "x", "max_tokens": 1},
                                      timeout=30)
                assert status == 200
            assert d.topology()["backend"] == "external" and d.replica_names()[urls[1]] == "r1"
            assert [m.replica for m in d.members()] == [None]  # only the router is ours to watch
        finally:
            d.stop()
        assert all(p.poll() is None for p in procs)  # not ours to stop
    finally:
        for p in procs:
            p.stop()


@needs_router
@pytest.mark.faults
def test_a_pools_last_replica_killed_fails_the_point_naming_it(tmp_path):
    """With no replica left in its pool the deployment is down: the point fails naming the
    replica that died (not the router or replicas the harness then stopped), resumably."""
    out = tmp_path / "out"
    p = _cli(tmp_path, "deployment.replicas=1", "load=constant", "load.num_requests=40", "protocol.load_points=[10]",
             "scenario.kill_at_s=1", "scenario.kill_replica=r0", f"output_dir={out}", fake_args=("--gap-ms", "40"))
    text = p.stdout + p.stderr
    assert p.returncode == 2, text
    assert "constant rate=10 failed: engine=vllm replica r0 was killed by SIGKILL" in text
    assert "router" not in text.split("failed:", 1)[1].splitlines()[0]
    m = json.loads((next(out.glob("00-*")) / "summary.json").read_text())
    assert m["point_failed"] is True and m["replicas_lost"] == ["r0"] and m["engine_faults"] == 1
    _no_process_left(out)


# ------------------------------------------------------------------------------ live autoscaling
AUTO = ["deployment.autoscale.enabled=true", "deployment.autoscale.capacity_rps=2"]


@pytest.mark.parametrize("overrides, message", [
    (["deployment=replicas", "router=vllm", "engine.replica_urls=[http://127.0.0.1:1]", "engine.launch=false"],
     r"starts and stops replicas itself: not with engine\.replica_urls"),
    (["deployment=single"], r"scales the replicas of deployment=replicas, not deployment=single"),
    (["deployment=disaggregated", "router=vllm"], r"not deployment=disaggregated"),
    (["deployment=replicas", "router=none"], r"behind a router: set router=vllm or router=sglang"),
    (["deployment=replicas", "router=vllm", "deployment.autoscale.capacity_rps=null"],
     r"signal=utilisation needs deployment\.autoscale\.capacity_rps"),
    (["deployment=replicas", "router=vllm", "deployment.replicas=3", "deployment.autoscale.max_replicas=2"],
     r"deployment\.replicas=3 \(the replicas it starts with\) is outside deployment\.autoscale\.min_replicas=1 \.\. "
     r"max_replicas=2"),
    (["deployment=replicas", "router=vllm", "deployment.replicas=1", "deployment.autoscale.max_replicas=2",
      "deployment.placement.cpus=[0]"],
     r"deployment\.placement\.cpus has 1 entries but deployment\.autoscale\.max_replicas=2"),
    (["deployment=replicas", "router=vllm", "deployment.backend=ray"], r"deployment\.backend=ray is not supported"),
])
def test_autoscaling_what_it_cannot_scale_is_refused_naming_the_key(tmp_path, overrides, message):
    from engines.deployment import make_served

    with pytest.raises(EngineError, match=message):
        make_served(compose(["engine=vllm", f"engine.model={ensure_tiny_model()}", *AUTO, *overrides]), tmp_path)


def test_an_autoscaled_replica_is_prepared_as_the_first_ones(tmp_path):
    from engines.deployment import Deployment

    cfg = compose(["engine=vllm", "deployment=replicas", "deployment.replicas=1", "router=vllm", *AUTO,
                   "deployment.autoscale.max_replicas=2", "deployment.placement.cpus=[0,0]",
                   f"engine.model={ensure_tiny_model()}"])
    d = Deployment(cfg, tmp_path)
    try:
        d.prepare()
        eng = d.new_replica()
        assert eng.replica == "r1" and eng.log_name == "engine-r1.log" and d.starting == [eng]
        assert eng.port not in {d.replicas[0].port, d.router.port}
        argv = eng.full_command()
        assert argv[:3] == ["taskset", "-c", "0"] or "taskset" not in d.replicas[0].full_command()
        assert "tokenfactory_replica_header.ReplicaHeader" in argv and "--enable-scale-out" in argv
        assert {**eng.launch_env(), **eng.replica_env}["TOKENFACTORY_REPLICA"] == "r1"
        with pytest.raises(EngineError, match=r"max_replicas=2: every replica slot is in use"):
            d.new_replica()
        d.cancel(eng)  # never started: its slot is free again, its name is not reused
        assert d.starting == [] and d.retired == [eng] and d.new_replica().replica == "r2"
        assert set(d.replica_names()) >= {"r0", "r1", "r2"}
        assert d.topology()["autoscale"] == {"min_replicas": 1, "max_replicas": 2, "started_with": 1,
                                             "replicas_run": ["r0", "r1"]}
    finally:
        d.stop()


SGLANG_ROUTER = Path(sys.executable).parent / "sglang-router"
needs_sglang_router = pytest.mark.skipif(not SGLANG_ROUTER.exists() and shutil.which("sglang-router") is None,
                                         reason="sglang-router is not installed (pip install sglang-router)")
ROUTERS = [pytest.param("vllm", marks=needs_router), pytest.param("sglang", marks=needs_sglang_router)]


@pytest.mark.slow
@pytest.mark.parametrize("router", ROUTERS)
def test_an_autoscaled_deployment_scales_up_and_down_during_the_load(tmp_path, router):
    """One replica at first; a fast point makes the scaler add r1 (the router sends it traffic);
    a slow one lets it go again (drained, stopped); autoscale.json, the summary's keys, the
    telemetry series and the cost over replica-seconds say so."""
    out = tmp_path / "out"
    p = _cli(tmp_path, "deployment.replicas=1", "load=constant", "load.num_requests=null", "load.duration_s=8",
             "protocol.load_points=[8,0.5]", f"router={router}", "router.policy=round_robin",
             f"output_dir={out}", "cost.hourly_per_host=1.0", *AUTO, "deployment.autoscale.target=0.5",
             "deployment.autoscale.window_s=2", "deployment.autoscale.interval_s=0.5",
             "deployment.autoscale.scale_down_delay_s=2", "deployment.autoscale.max_replicas=2", timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    fast, slow = sorted(out.glob("0*-*"))
    a = json.loads((fast / "autoscale.json").read_text())
    assert a["policy"]["capacity_rps"] == 2.0 and a["policy"]["max_replicas"] == 2
    up = next(e for e in a["starts"] if e["replica"] == "r1")
    assert up["requested_s"] <= up["process_started_s"] <= up["healthy_s"] <= up["added_s"]
    assert any(d["from"] == 1 and d["to"] == 2 for d in a["decisions"])
    m = json.loads((fast / "summary.json").read_text())
    assert m["autoscale_scale_ups"] >= 1 and m["replicas_max"] == 2
    assert m["replicas"]["r1"]["requests"] >= 1  # the router sent the new replica traffic
    assert m["paid_replica_seconds"] == pytest.approx(a["paid_replica_seconds"])
    assert a["paid_replica_seconds"] == pytest.approx(a["starting_replica_seconds"] + a["serving_replica_seconds"]
                                                      + a["draining_replica_seconds"])
    # r1's cold start is paid (each figure rounded to the ns in autoscale.json: CI drew a start
    # paid exactly, 0.557688936 against 1.057855656 - 0.50016672 = 0.5576889360000001)
    assert a["starting_replica_seconds"] >= up["added_s"] - up["requested_s"] - 1e-6
    assert 0 < a["load"]["paid_replica_seconds"] <= a["paid_replica_seconds"] and a["load"]["replicas_max"] == 2
    assert 1.0 <= m["replicas_mean"] <= 2.0
    assert m["cost_lines"]["rental_hosts"] == pytest.approx(m["paid_replica_seconds"] / 3600)
    b = json.loads((slow / "autoscale.json").read_text())
    down = [e for e in b["stops"] if e.get("stopped_s") is not None]
    assert down and all(e["removed_s"] <= e["drained_s"] <= e["stopped_s"] for e in down)
    assert json.loads((slow / "summary.json").read_text())["autoscale_scale_downs"] >= 1
    tel = pq.read_table(slow / "telemetry.parquet").to_pylist()
    names = {r["name"] for r in tel if r["source"] == "deployment"}
    assert names == {"replicas_serving", "replicas_wanted"}
    assert (out / "engine-r1.log").exists()
    prov = json.loads((slow / "provenance.json").read_text())["engine"]
    assert prov["router"]["router"] == router
    assert prov["replicas"]["r1"]["stopped"] is True and "r1" in prov["deployment"]["autoscale"]["replicas_run"]
    _no_process_left(out)
