"""deployment.backend=ray for real: the local two-node Ray cluster of the load generator's tests
(benchmarks/loadgen_fidelity.py ``local_ray_cluster``: a head and a second raylet on loopback).

Checked: STRICT_SPREAD puts two replicas on the two nodes (the router in a group of its own);
each replica is a real server process, started by its slot's actor on that node and answering
HTTP at the host:port the placer returned, its log read through the actor; a replica killed is
reported by ``poll``; an actor killed takes its engine with it; ``close`` leaves no actor, no
placement group and no process; a cluster that cannot hold the bundles fails within the timeout
naming them and what the cluster has.
"""

from __future__ import annotations

import importlib.util
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from conf.schema import Deployment, Placement
from engines.placement import PlacementError, make_placer
from tests.http_wait import wait_http

pytestmark = pytest.mark.integration
ray = pytest.importorskip("ray", reason="deployment.backend=ray needs the ray extra: pip install -e '.[ray]'")

from ray.util.placement_group import placement_group_table  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
PY = sys.executable
ENV = {"PYTHONPATH": str(REPO)}  # the actor's working directory is Ray's, not the repository


def _bench():
    spec = importlib.util.spec_from_file_location("loadgen_fidelity", REPO / "benchmarks" / "loadgen_fidelity.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def cluster():
    """Head + one more node, 2 CPUs each, on 127.0.0.1; shut down (its own processes only)."""
    c = _bench().local_ray_cluster(nodes=2, cpus_per_node=2)
    try:
        yield c
    finally:
        ray.shutdown()
        c.shutdown()


def dep(**kw) -> Deployment:
    return Deployment(backend="ray", placement=Placement(**kw.pop("placement", {})), **kw)


def fake_engine(host, port) -> list[str]:
    return [PY, "-m", "tests.fake_engine_process", "--host", host, "--port", str(port)]


def wait_gone(pids, timeout_s=15.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        if not alive:
            return []
        time.sleep(0.1)
    return alive


def actor_dead(actor) -> bool:
    try:
        ray.get(actor.poll.remote(), timeout=30)
    except ray.exceptions.RayActorError:
        return True
    return False


def test_strict_spread_two_replicas_on_two_nodes(cluster, tmp_path):
    t0 = time.monotonic()
    placer = make_placer(dep(kind="replicas", replicas=2,
                             placement={"ray_strategy": "STRICT_SPREAD", "ray_bundle": {"CPU": 1}}),
                         router=True, ready_timeout_s=60)
    procs, actors, groups = [], [], list(placer.groups)
    try:
        for slot in placer.slots:
            host, port = placer.reserve(slot, "ignored")
            procs.append(placer.launch(slot, fake_engine(host, port), ENV, tmp_path / f"{slot.name}.log"))
        r0, r1 = placer.slots
        assert r0.node != r1.node, "STRICT_SPREAD: one replica per node"
        assert {r0.node, r1.node} == {n["NodeID"] for n in ray.nodes() if n["Alive"]}
        for slot, proc in zip(placer.slots, procs):
            assert (proc.node_id, proc.node_ip) == (slot.node, slot.host)
            wait_http(f"http://{slot.host}:{slot.port}/health", proc)
            # the guard exec'd the engine: the remote pid is the server itself
            assert "fake_engine_process" in " ".join(psutil.Process(proc.pid).cmdline())
            assert proc.poll() is None and proc.stopped_pids() == []
            environ = psutil.Process(proc.pid).environ()
            # not Ray's OMP_NUM_THREADS=1 of a {CPU: 1} actor: what a local launch would get
            assert environ.get("OMP_NUM_THREADS") == os.environ.get("OMP_NUM_THREADS")
        r1_log = procs[1].tail(50)  # read on r1's node, through its actor
        assert f"fake engine {procs[1].pid} loading" in r1_log and f"serving on {r1.host}:{r1.port}" in r1_log
        rhost, rport = placer.reserve(placer.router_slot)
        router = placer.launch_router([PY, "-m", "http.server", "--bind", rhost, str(rport)], {},
                                      tmp_path / "router.log")
        wait_http(f"http://{rhost}:{rport}/", router)
        actors = list(placer.actors.values())
        prov = placer.provenance()
        assert [(s["name"], s["node"], s["port"]) for s in prov["slots"]] == [
            (s.name, s.node, s.port) for s in placer.slots]
        assert len(prov["placement_groups"]) == 2  # STRICT_SPREAD: the router in a group of its own
        pg = prov["placement_groups"][0]
        assert pg["strategy"] == "STRICT_SPREAD" and pg["bundles"] == [{"CPU": 1.0}, {"CPU": 1.0}]
        assert set(pg["bundle_nodes"].values()) == {r0.node, r1.node}
        assert prov["router"]["port"] == rport

        os.kill(procs[0].pid, signal.SIGKILL)
        deadline = time.monotonic() + 15
        while procs[0].poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert procs[0].poll() == -9
        assert procs[1].poll() is None
    finally:
        placer.close(grace_s=5)
    pids = [p.pid for p in [*procs, router]]
    assert wait_gone(pids) == []
    assert all(actor_dead(a) for a in actors)
    assert all(placement_group_table(g)["state"] == "REMOVED" for g in groups)
    print(f"\ntwo replicas and a router placed, served, killed and closed in {time.monotonic() - t0:.1f} s")


@pytest.mark.parametrize("how", ["ray.kill", "SIGKILL"])
def test_an_actor_killed_takes_its_engine_with_it(cluster, tmp_path, how):
    """ray.kill: as Ray ends the actors of a driver that is gone; SIGKILL of the actor's process
    (the OOM killer, a crash): no Ray code runs, the engine's death guard ends it."""
    placer = make_placer(dep(placement={"ray_strategy": "PACK"}), router=False)
    try:
        slot = placer.slots[0]
        host, port = placer.reserve(slot)
        proc = placer.launch(slot, fake_engine(host, port), ENV, tmp_path / "r0.log")
        wait_http(f"http://{host}:{port}/health", proc)
        if how == "ray.kill":
            ray.kill(placer.actors[slot.name], no_restart=True)
        else:
            os.kill(placer.info[slot.name]["actor_pid"], signal.SIGKILL)
        assert wait_gone([proc.pid]) == []
        assert proc.poll() == -9 and "gone" in proc.lost
    finally:
        placer.close(grace_s=5)


DRIVER = """
import faulthandler, signal, sys, time, ray
faulthandler.register(signal.SIGUSR1, all_threads=True)  # the test's dump of a driver that does not exit
from conf.schema import Deployment
from engines.placement import make_placer
ray.init(address=sys.argv[1], log_to_driver=False)
placer = make_placer(Deployment(backend="ray"), router=False)
slot = placer.slots[0]
host, port = placer.reserve(slot)
proc = placer.launch(slot, [sys.executable, "-m", "tests.fake_engine_process", "--host", host, "--port", str(port)],
                     {"PYTHONPATH": sys.argv[2]}, sys.argv[3])
print(proc.pid, host, port, flush=True)
time.sleep(300)
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["SIGINT", "SIGKILL"])
def test_a_driver_interrupted_or_killed_leaves_no_engine(cluster, tmp_path, sig):
    """Ctrl-C: the placer's atexit close stops the engine; a driver killed outright: Ray ends
    its actors, and their engines go with them."""
    err = open(tmp_path / "driver.err", "w")
    # As from a terminal: a suite started in the background (``cmd &`` in a script, as a CI runner
    # may) has SIGINT ignored, and its children inherit that; the driver would sleep through Ctrl-C.
    driver = subprocess.Popen([PY, "-c", DRIVER, cluster.address, str(REPO), str(tmp_path / "r0.log")],
                              stdout=subprocess.PIPE, stderr=err, text=True, cwd=REPO, env={**os.environ, **ENV},
                              preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        line = driver.stdout.readline().split()
        assert line, "the driver did not launch its replica"
        pid, host, port = int(line[0]), line[1], line[2]
        engine = psutil.Process(pid)
        wait_http(f"http://{host}:{port}/health", ForeignProcess(engine))
        driver.send_signal(sig)
        # the placer's close may wait out an actor's stop (grace 15 s + 30 s) before it kills
        # the actor, then Ray shuts down: 60 s was too close (a busy CI run overran it once)
        try:
            driver.wait(120)
        except subprocess.TimeoutExpired:
            driver.send_signal(signal.SIGUSR1)  # where it waits, on its stderr
            time.sleep(2)
            pytest.fail(f"the driver did not exit within 120 s of {sig.name}; its stderr's end:\n"
                        + (tmp_path / "driver.err").read_text()[-6000:])
        assert wait_gone([pid], timeout_s=60) == []
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait(10)
        err.close()


class ForeignProcess:
    """``poll`` and ``tail`` of a process this test did not start (for wait_http)."""

    def __init__(self, p: psutil.Process):
        self.p = p

    def poll(self):
        return None if self.p.is_running() and self.p.status() != psutil.STATUS_ZOMBIE else -1

    def tail(self):
        return ""


def test_a_taken_first_port_is_named(cluster):
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        placer = make_placer(dep(first_port=port), router=False)
        try:
            with pytest.raises(PlacementError, match=rf"deployment\.first_port={port}: port {port} \(replica r0"):
                placer.reserve(placer.slots[0])
        finally:
            placer.close(grace_s=5)


def test_bundles_the_cluster_cannot_hold_fail_by_name(cluster):
    t0 = time.monotonic()
    with pytest.raises(PlacementError) as e:
        make_placer(dep(kind="replicas", replicas=3, placement={"ray_strategy": "STRICT_SPREAD"}),
                    router=False, ready_timeout_s=3)
    msg = str(e.value)
    assert "3 replica bundle(s) of {'CPU': 1.0}" in msg and "ray_strategy=STRICT_SPREAD" in msg
    assert "2 node(s)" in msg and "'CPU'" in msg.split("available now:")[1]
    assert time.monotonic() - t0 < 30
    left = [g for g in placement_group_table().values() if g["state"] not in ("REMOVED",)]
    assert left == [], left


@pytest.mark.skipif(not (Path(sys.executable).parent / "vllm-router").exists(), reason="vllm-router is not installed")
def test_a_deployment_on_ray_serves_through_its_router_from_two_nodes(cluster, tmp_path):
    """deployment.backend=ray through the deployment itself: two replicas (fake engines naming
    themselves, as vLLM with the replica middleware) on the two nodes, the real vllm-router in
    its own bundle in front of them; requests through the router come back from both replicas;
    stop leaves no actor, group or process."""
    import json as js

    from conf.compose import compose_config
    from engines.deployment import Deployment as Served
    from engines.http import http_post

    cmd = ",".join([PY, "-m", "tests.fake_engine_process", "--host", "'{host}'", "--port", "'{port}'"])
    cfg = compose_config(["engine=vllm", f"engine.command=[{cmd}]", "engine.model=fake",
                          f"+engine.env.PYTHONPATH={REPO}", "deployment=replicas", "deployment.backend=ray",
                          f"deployment.placement.ray_address={cluster.address}",
                          "deployment.placement.ray_strategy=STRICT_SPREAD", "router=vllm",
                          "router.policy=round_robin"])
    d = Served(cfg, tmp_path)
    d.start(warm_up=False)
    try:
        seen = []
        for _ in range(4):
            status, body = http_post(d.base_url + "/v1/completions", {"model": "fake", "prompt": "hi", "max_tokens": 2},
                                     timeout=30)
            assert status == 200, body
            seen.append(js.loads(body)["id"])
        prov = d.provenance()
        slots = prov["deployment"]["placement"]["slots"]
        assert {s["name"] for s in slots} == {"r0", "r1"} and len({s["node"] for s in slots}) == 2
        assert prov["deployment"]["backend"] == "ray"
        assert all(r.process.poll() is None for r in d.replicas)
        pids = [r.process.pid for r in d.replicas]
    finally:
        d.stop()
    assert wait_gone(pids) == []
    assert all(pg["state"] == "REMOVED" for pg in placement_group_table().values())
