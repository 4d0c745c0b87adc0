"""engines/placement.py on this machine, with the slots it places (engines/slots.py): slot names
and order from the deployment config, the placement lists' checks, addresses from first_port or
free ports, and replicas launched as real processes pinned with taskset (read back from /proc),
given CUDA_VISIBLE_DEVICES, and stopped or killed with nothing left behind."""

from __future__ import annotations

import os
import socket
import sys
from pathlib import Path

import psutil
import pytest
from omegaconf import OmegaConf

from conf.schema import Deployment, Placement
from engines.base import EngineError
from engines.placement import LocalPlacer, make_placer
from engines.slots import PlacementError, parse_cores, plan_slots
from tests.http_wait import wait_http

PY = sys.executable
REPO = Path(__file__).resolve().parents[2]
SLEEPER = [PY, "-c", "import time; time.sleep(120)"]


def dep(**kw) -> Deployment:
    placement = kw.pop("placement", {})
    return Deployment(placement=Placement(**placement), **kw)


def test_slot_names_and_order():
    assert [(s.name, s.role, s.index) for s in plan_slots(dep())] == [("r0", "replica", 0)]
    assert [s.name for s in plan_slots(dep(kind="replicas", replicas=3))] == ["r0", "r1", "r2"]
    slots = plan_slots(dep(kind="disaggregated", prefill=2, decode=1, replicas=5))
    assert [(s.name, s.role, s.index) for s in slots] == [("p0", "prefill", 0), ("p1", "prefill", 1),
                                                         ("d0", "decode", 2)]
    # deployment=single is one engine whatever deployment.replicas says
    assert len(plan_slots(dep(kind="single", replicas=4))) == 1


def test_a_config_node_is_typed_once():
    node = OmegaConf.create({"kind": "disaggregated", "prefill": 1, "decode": 1,
                             "placement": {"cpus": ["0", "1"], "devices": ["0", "1"]}})
    slots = plan_slots(node)
    assert [(s.name, s.cpus, s.devices) for s in slots] == [("p0", "0", "0"), ("d0", "1", "1")]


@pytest.mark.parametrize("key", ["cpus", "devices"])
def test_a_placement_list_needs_one_entry_per_replica(key):
    with pytest.raises(PlacementError, match=rf"deployment\.placement\.{key} has 3 entries for 2 replica") as e:
        plan_slots(dep(kind="replicas", replicas=2, placement={key: ["0", "1", "0"]}))
    assert isinstance(e.value, EngineError)
    with pytest.raises(PlacementError, match=r"has 1 entries for 3 replica.*1 prefill \+ 2 decode"):
        plan_slots(dep(kind="disaggregated", prefill=1, decode=2, placement={key: ["0"]}))
    assert [getattr(s, key) for s in plan_slots(dep(kind="replicas", replicas=2))] == [None, None]


def test_core_lists():
    assert parse_cores("0") == {0}
    assert parse_cores("2-3,8") == {2, 3, 8}
    for bad in ("a", "3-1", "1-", "", "0,,1"):
        with pytest.raises(ValueError):
            parse_cores(bad)
    with pytest.raises(PlacementError, match=r"deployment\.placement\.cpus\[1\]='x-y'"):
        plan_slots(dep(kind="replicas", replicas=2, placement={"cpus": ["0", "x-y"]}))


def test_cores_this_machine_lacks_are_refused_by_name():
    missing = max(os.sched_getaffinity(0)) + 1000
    d = dep(kind="replicas", replicas=2, placement={"cpus": [str(min(os.sched_getaffinity(0))), str(missing)]})
    plan_slots(d)  # pure: the machine is not looked at
    with pytest.raises(PlacementError,
                       match=rf"cpus\[1\]='{missing}' \(replica r1\): this machine has no core {missing}"):
        make_placer(d)


def held_second_of_a_free_pair() -> tuple[int, socket.socket]:
    """A port ``base`` free a moment ago and ``base + 1`` held (listening) by this test from the
    moment it is found free, never let go before the placer's check: the test once took
    ``base + 1`` for free without looking, and CI found another process (pytest-xdist) on it."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base >= 65535:        # no port after it
            continue
        held = socket.socket()
        try:
            held.bind(("127.0.0.1", base + 1))
        except OSError:
            held.close()
            continue
        held.listen()
        return base, held
    raise AssertionError("no free port followed by a free one in 100 tries")


def test_first_port_plus_index_and_a_taken_one():
    base, held = held_second_of_a_free_pair()
    with held:
        placer = make_placer(dep(kind="replicas", replicas=2, first_port=base))
        assert isinstance(placer, LocalPlacer)
        r0, r1 = placer.slots
        assert placer.reserve(r0, "127.0.0.1") == ("127.0.0.1", base)
        assert (r0.host, r0.port, r0.node) == ("127.0.0.1", base, socket.gethostname())
        with pytest.raises(PlacementError, match=rf"deployment\.first_port={base}: port {base + 1} \(replica r1"):
            placer.reserve(r1, "127.0.0.1")


def test_free_ports_differ():
    placer = make_placer(dep(kind="disaggregated", prefill=2, decode=2), router=True)
    ports = [placer.reserve(s, "127.0.0.1")[1] for s in [*placer.slots, placer.router_slot]]
    assert len(set(ports)) == 5
    prov = placer.provenance()
    assert prov["backend"] == "local"
    assert [(s["name"], s["role"], s["port"]) for s in prov["slots"]] == [
        ("p0", "prefill", ports[0]), ("p1", "prefill", ports[1]), ("d0", "decode", ports[2]),
        ("d1", "decode", ports[3])]
    assert prov["router"]["port"] == ports[4]


def cpus_allowed(pid: int) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return line.split(":", 1)[1].strip()
    raise AssertionError("no Cpus_allowed_list")


def test_a_replica_runs_pinned_with_its_devices_and_stops(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)  # python -m tests.fake_engine_process
    core = str(max(os.sched_getaffinity(0)))
    placer = make_placer(dep(kind="replicas", replicas=1, placement={"cpus": [core], "devices": ["3"]}),
                         router=False)
    slot = placer.slots[0]
    try:
        host, port = placer.reserve(slot, "127.0.0.1")
        proc = placer.launch(slot, [PY, "-m", "tests.fake_engine_process", "--port", str(port)],
                             {"TF_MARK": "x"}, tmp_path / "r0.log")
        assert proc.argv[:3] == ["taskset", "-c", core]
        wait_http(f"http://{host}:{port}/health", proc)
        # taskset exec'd the engine: the pid is the engine's, pinned, with its devices
        assert cpus_allowed(proc.pid) == core
        assert "fake_engine_process" in " ".join(psutil.Process(proc.pid).cmdline())
        environ = Path(f"/proc/{proc.pid}/environ").read_bytes().split(b"\0")
        assert b"CUDA_VISIBLE_DEVICES=3" in environ and b"TF_MARK=x" in environ
        assert proc.poll() is None and proc.stopped_pids() == []
        proc.stop(5)
        assert proc.poll() is not None and not psutil.pid_exists(proc.pid)
    finally:
        placer.close(grace_s=5)


def test_kill_and_close_leave_no_process(tmp_path):
    placer = make_placer(dep(kind="replicas", replicas=2), router=True)
    procs = []
    try:
        for slot in placer.slots:
            placer.reserve(slot, "127.0.0.1")
            procs.append(placer.launch(slot, SLEEPER, None, tmp_path / f"{slot.name}.log"))
        placer.reserve(placer.router_slot, "127.0.0.1")
        router = placer.launch_router(SLEEPER, {}, tmp_path / "router.log", "0.0.0.0")
        assert placer.provenance()["router"]["host"] == "0.0.0.0"
        assert "taskset" not in router.argv
        procs[0].kill()
        assert procs[0].poll() == -9 and not psutil.pid_exists(procs[0].pid)
        assert procs[1].poll() is None
    finally:
        placer.close(grace_s=5)
    for p in [*procs, router]:
        assert p.poll() is not None and not psutil.pid_exists(p.pid)


def test_launch_needs_an_address_first(tmp_path):
    placer = make_placer(dep(), router=False)
    with pytest.raises(RuntimeError, match="reserve"):
        placer.launch(placer.slots[0], SLEEPER, None, tmp_path / "r0.log")
    with pytest.raises(RuntimeError, match="without a router"):
        placer.launch_router(SLEEPER, None, tmp_path / "router.log")


def test_a_ray_actor_takes_exactly_its_bundle():
    from engines.placement import actor_options

    assert actor_options({"CPU": 2.0, "GPU": 1.0, "memory": 2e9, "accel": 1.0}) == {
        "num_cpus": 2.0, "num_gpus": 1.0, "memory": 2e9, "resources": {"accel": 1.0}}
    assert actor_options({"CPU": 1.0}) == {"num_cpus": 1.0, "num_gpus": 0}


# --- live autoscaling: one placement entry per replica up to max_replicas ------------------------
def scaled(replicas=1, max_replicas=2, first_port=None, **placement) -> Deployment:
    from conf.schema import Autoscale

    return Deployment(kind="replicas", replicas=replicas, placement=Placement(**placement), first_port=first_port,
                      autoscale=Autoscale(enabled=True, capacity_rps=1.0, max_replicas=max_replicas))


def test_autoscaling_lists_a_placement_entry_per_replica_up_to_max_replicas():
    from engines.slots import plan_slot

    slots = plan_slots(scaled(cpus=["0", "1"], devices=["0", "1"]))
    assert [(s.name, s.cpus, s.devices) for s in slots] == [("r0", "0", "0")]  # started with 1
    added = plan_slot(scaled(cpus=["0", "1"]), 1, "r5")
    assert (added.name, added.index, added.cpus) == ("r5", 1, "1")  # the name is the scaler's, the entry its own
    with pytest.raises(PlacementError, match=r"deployment\.placement\.cpus has 1 entries but "
                                             r"deployment\.autoscale\.max_replicas=2"):
        plan_slots(scaled(cpus=["0"]))
    assert plan_slots(scaled(cpus=["0", "1", "2"]))[0].cpus == "0"  # more than max_replicas: the rest unused


def test_a_released_slot_gives_its_port_back():
    placer = LocalPlacer(scaled(first_port=_free_pair()), router=False)
    slot = placer.add_slot(1, "r1")
    host, port = placer.reserve(slot)
    placer.release(slot)
    again = placer.add_slot(1, "r2")
    assert placer.reserve(again) == (host, port)  # first_port + 1 again, once r1 let it go
    assert [s.name for s in placer.slots] == ["r0", "r1", "r2"]


def _free_pair() -> int:
    """A port p with p + 1 free too (first_port for two replicas)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            p = s.getsockname()[1]
        if p < 65000:
            with socket.socket() as a, socket.socket() as b:
                try:
                    a.bind(("127.0.0.1", p))
                    b.bind(("127.0.0.1", p + 1))
                except OSError:
                    continue
            return p
    raise RuntimeError("no two free ports in a row")


def test_the_ray_placer_connects_with_client_ray_typed(monkeypatch):
    """``client.ray`` reaches the Ray placer as conf.schema's ``ClientRay`` (typed once by the
    deployment); none given: its defaults (a local cluster, no runtime_env)."""
    pytest.importorskip("ray")
    from conf.schema import ClientRay, Deployment
    from engines import ray_cluster
    from engines.placement import PlacementError, make_placer

    seen = []

    def refuse(address, runtime_env, key):
        seen.append((address, runtime_env, key))
        raise ValueError(f"{key}: refused here")

    monkeypatch.setattr(ray_cluster, "connect", refuse)
    ray_cfg = ClientRay(address="ray://head:10001", runtime_env={"pip": ["x"]})
    with pytest.raises(PlacementError, match="client.ray.address: refused here"):
        make_placer(Deployment(backend="ray"), router=False, client_ray=ray_cfg)
    with pytest.raises(PlacementError):
        make_placer(Deployment(backend="ray"), router=False)
    assert seen == [("ray://head:10001", {"pip": ["x"]}, "client.ray.address"), (None, {}, "client.ray.address")]
