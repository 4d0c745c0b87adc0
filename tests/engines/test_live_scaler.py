"""engines/live_scaler.py: the live loop's decisions against a deployment that records what is done
to it (a replica on its way is not started twice; a replica scaled down leaves the router, is
drained, then stopped; never the last one), the counter window of the utilisation signal, and
the whole loop against fake workers behind the real vllm-router.  No timing assertions: the
loop's ticks are called directly, or waited on by what they do."""

from __future__ import annotations

import threading
import time

import pytest
from omegaconf import OmegaConf

from conf.schema import Autoscale, typed
from engines.autoscale_policy import ScalingPolicy
from engines.live_scaler import CounterWindow, LiveScaler, in_flight
from tests.engines.test_routers import REPLICA, cfg, completions, needs, post
from tests.fake_server import FakeServer

S = 1_000_000_000


class Replica:
    def __init__(self, name: str, in_flight: float = 0.0):
        self.replica = name
        self.base_url = f"http://{name}"
        self.server_metric_map = {"running": ("vllm:num_requests_running", None)}
        self.running = in_flight
        self.page_up = True  # False: its /metrics does not answer (server_metrics gives {})
        self.started_ns = self.healthy_ns = self.ready_ns = None

    def server_metrics(self) -> dict:
        return {"running": self.running, "waiting": 0.0} if self.page_up else {}


class Deployment:
    """What ``LiveScaler`` uses of ``engines.deployment.Deployment``, each call logged in ``log``;
    ``start_gate``: a new replica's start waits on it (a cold start in progress)."""

    def __init__(self, replicas: int = 1):
        self.replicas = [Replica(f"r{i}") for i in range(replicas)]
        self.starting: list[Replica] = []
        self.retired: list[Replica] = []
        self.lock = threading.Lock()
        self.log: list[tuple[str, str]] = []
        self.start_gate = threading.Event()
        self.start_gate.set()
        self.next = replicas
        self.router = None

    def new_replica(self, name: str | None = None) -> Replica:
        if name is None:
            name = f"r{self.next}"
            self.next += 1
        eng = Replica(name)
        self.starting.append(eng)
        self.log.append(("new", eng.replica))
        return eng

    def slot(self, name):
        from engines.placement import ReplicaSlot

        return ReplicaSlot(name=name, role="replica", index=0)

    def start_replica(self, eng) -> None:
        self.start_gate.wait(30)
        eng.started_ns = eng.healthy_ns = eng.ready_ns = time.perf_counter_ns()
        self.log.append(("started", eng.replica))

    def join(self, eng) -> None:
        self.starting.remove(eng)
        self.replicas.append(eng)
        self.log.append(("join", eng.replica))

    def leave(self, eng) -> None:
        self.replicas.remove(eng)
        self.log.append(("leave", eng.replica))

    def drain(self, eng, timeout_s: float) -> bool:
        while eng.running > 0:  # the test lets its requests finish
            time.sleep(0.01)
        self.log.append(("drained", eng.replica))
        return True

    def retire(self, eng) -> None:
        self.retired.append(eng)
        self.log.append(("stopped", eng.replica))

    def cancel(self, eng) -> None:
        self.starting.remove(eng)
        self.retire(eng)


def queue_policy(**kw) -> ScalingPolicy:
    return ScalingPolicy(Autoscale(**{"signal": "queue", "target": 2.0, "window_s": 10.0, "interval_s": 1.0,
                                      "scale_down_delay_s": 0.0, "min_replicas": 1, "max_replicas": 3, **kw}))


def wait_for(cond, what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s:g} s: {what}")
        time.sleep(0.01)


def test_a_replica_on_its_way_is_not_started_twice():
    dep = Deployment(1)
    dep.start_gate.clear()  # the new replica's cold start lasts until the test says
    queue = [5.0]
    sc = LiveScaler(dep, queue_policy(max_replicas=2), queue=lambda: queue[0])
    sc.origin_ns = 0
    try:
        assert sc.tick(1 * S) == 2  # 5 in flight / 2 per replica: 3, clamped to max_replicas=2
        assert sc.tick(2 * S) == 2  # asked for, made or not yet: counted
        wait_for(lambda: dep.starting, "the scale-up began")
        assert sc.tick(3 * S) == 2  # one serving + one starting: nothing more
        assert [e for e in dep.log if e[0] == "new"] == [("new", "r1")]
        assert [(d["from"], d["starting"]) for d in sc.decisions[1:]] == [(2, 1), (2, 1)]
        dep.start_gate.set()
        wait_for(lambda: len(dep.replicas) == 2, "r1 joined")
    finally:
        dep.start_gate.set()
        sc.stop()
    assert dep.log == [("new", "r1"), ("started", "r1"), ("join", "r1")]
    start = sc.starts[0]
    assert start["replica"] == "r1" and start["requested_ns"] == 1 * S
    assert start["process_started_ns"] and start["added_ns"] >= start["ready_ns"]


def test_scale_down_leaves_the_router_then_drains_then_stops():
    dep = Deployment(2)
    r1 = dep.replicas[1]
    r1.running = 3  # three requests in flight on the replica that goes
    queue = [0.0]
    sc = LiveScaler(dep, queue_policy(), queue=lambda: queue[0])
    sc.origin_ns = 0
    try:
        assert sc.tick(1 * S) == 1
        wait_for(lambda: ("leave", "r1") in dep.log, "r1 left the router")
        assert sc.tick(2 * S) == 1  # r1 is going: not counted, not taken again, r0 is the last one
        assert ("stopped", "r1") not in dep.log  # still draining
        r1.running = 0
        wait_for(lambda: ("stopped", "r1") in dep.log, "r1 stopped")
    finally:
        sc.stop()
    assert dep.log == [("leave", "r1"), ("drained", "r1"), ("stopped", "r1")]
    assert [r.replica for r in dep.replicas] == ["r0"]
    stop = sc.stops[0]
    assert stop["replica"] == "r1" and stop["drained"] is True
    assert stop["removed_ns"] <= stop["drained_ns"] <= stop["stopped_ns"]


def test_the_newest_replica_goes_first_and_never_below_min_replicas():
    dep = Deployment(3)
    sc = LiveScaler(dep, queue_policy(min_replicas=2), queue=lambda: 0.0)
    sc.origin_ns = 0
    try:
        assert sc.tick(1 * S) == 2
        wait_for(lambda: ("stopped", "r2") in dep.log, "r2 stopped")
        assert sc.tick(2 * S) == 2
    finally:
        sc.stop()
    assert [r.replica for r in dep.replicas] == ["r0", "r1"]
    assert [e for e in dep.log if e[0] == "leave"] == [("leave", "r2")]


def test_a_scale_up_that_fails_is_recorded_and_its_replica_stopped():
    from engines.base import EngineError

    dep = Deployment(1)

    def broken(eng):
        raise EngineError("engine=vllm exited with code 1 before it was healthy")

    dep.start_replica = broken
    sc = LiveScaler(dep, queue_policy(max_replicas=2), queue=lambda: 4.0)
    sc.origin_ns = 0
    sc.tick(1 * S)
    sc.stop()
    assert dep.starting == [] and [r.replica for r in dep.retired] == ["r1"]
    assert "exited with code 1" in sc.starts[0]["error"] and sc.errors


class Router:
    """A router's request counter as ``Router.requests_read`` (and ``requests_total``) give it."""

    def __init__(self):
        self.reading: tuple[float | None, str | None] = (0.0, None)

    def requests_read(self):
        return self.reading

    def requests_total(self):
        return self.reading[0]


def test_a_failed_scrape_holds_the_decision_and_backs_off():
    dep = Deployment(2)
    dep.replicas[1].page_up = False  # r1's /metrics does not answer: in flight is unknown, not 0
    sc = LiveScaler(dep, queue_policy(interval_s=1.0))
    sc.origin_ns = 0
    try:
        assert [sc.tick(k * S) for k in (1, 2, 3, 4)] == [2, 2, 2, 2]  # held: no scale-down
        assert not [e for e in dep.log if e[0] == "leave"]
        # the k-th failure in a row waits interval_s x 2^k, at most 8 intervals
        assert [f["retry_in_s"] for f in sc.failed_reads] == [2.0, 4.0, 8.0, 8.0]
        assert sc.read_at_ns == 4 * S + 8 * S
        assert "replica r1" in sc.failed_reads[0]["error"] and sc.failed_reads[0]["signal"] == "queue"
        assert all(d["held"] and d["value"] is None and d["to"] == d["from"] == 2 for d in sc.decisions)
        dep.replicas[1].page_up = True  # read again: 0 in flight, one replica is enough
        assert sc.tick(12 * S) == 1 and sc.read_failures == 0 and "held" not in sc.decisions[-1]
        wait_for(lambda: ("stopped", "r1") in dep.log, "r1 stopped")
    finally:
        sc.stop()
    assert [e["t_ns"] for e in sc.record()["failed_reads"]] == [S, 2 * S, 3 * S, 4 * S]


def test_a_missing_router_counter_is_a_failed_read_not_zero_arrivals():
    dep = Deployment(1)
    dep.router = Router()
    sc = LiveScaler(dep, ScalingPolicy(Autoscale(signal="utilisation", target=1.0, capacity_rps=1.0, window_s=10.0,
                                       interval_s=1.0, max_replicas=2)))
    sc.origin_ns = 0
    absent = (0.0, "router=vllm metrics page has no vllm_router_requests_total series")
    dep.router.reading = absent  # the first reading, before anything is routed: a zero, the window's base
    assert sc.tick(0) == 1 and sc.failed_reads == []
    assert sc.tick(1 * S) == 1  # still absent once the load runs: renamed, not "no arrivals"
    assert sc.failed_reads[0]["error"] == absent[1] and sc.decisions[-1]["held"] == absent[1]
    dep.router.reading = (None, "router=vllm metrics page: HTTP 503")
    assert sc.tick(2 * S) == 1 and sc.failed_reads[-1]["error"].endswith("HTTP 503")
    assert [f["retry_in_s"] for f in sc.failed_reads] == [2.0, 4.0]
    dep.router.reading = (30.0, None)  # 30 routed in 3 s: 10 req/s, more than 2 replicas' capacity
    assert sc.tick(3 * S) == 2 and sc.read_failures == 0
    sc.stop()


def test_a_failed_scale_up_is_retried_under_its_name_after_a_back_off():
    from engines.base import EngineError

    dep = Deployment(1)
    tries = []

    def start(eng):
        tries.append(eng.replica)
        if len(tries) == 1:
            raise EngineError("engine=vllm exited with code 1 before it was healthy")
        eng.started_ns = eng.healthy_ns = eng.ready_ns = time.perf_counter_ns()

    dep.start_replica = start
    sc = LiveScaler(dep, queue_policy(max_replicas=2, interval_s=10.0), queue=lambda: 4.0)
    sc.origin_ns = 0
    try:
        t1 = time.perf_counter_ns()
        assert sc.tick(t1) == 2
        wait_for(lambda: sc.starts and "failed_ns" in sc.starts[0], "the first start failed")
        failed = sc.starts[0]
        assert failed["replica"] == "r1" and failed["retry_in_s"] == 20.0  # 2 x interval_s
        assert sc.up_at_ns == failed["failed_ns"] + 20 * S
        # paid from the decision until it failed, not to the window's end
        assert sc.paid_intervals(end_ns=failed["failed_ns"] + 3600 * S)[0] == [(t1, failed["failed_ns"])]
        assert sc.tick(failed["failed_ns"] + 1) == 1  # within the back-off: held, nothing started
        assert "backing off" in sc.decisions[-1]["held"] and sc.decisions[-1]["wanted"] == 2
        assert len(sc.starts) == 1
        assert sc.tick(sc.up_at_ns) == 2  # the back-off is over: the same replica again
        wait_for(lambda: len(dep.replicas) == 2, "r1 joined")
    finally:
        sc.stop()
    assert tries == ["r1", "r1"] and [r.replica for r in dep.replicas] == ["r0", "r1"]
    assert [e for e in dep.log if e[0] == "new"] == [("new", "r1"), ("new", "r1")]
    assert sc.starts[1]["retry"] == 1 and sc.up_failures == 0


def test_the_decisions_and_counts_are_reported():
    dep = Deployment(1)
    counts = []
    sc = LiveScaler(dep, queue_policy(max_replicas=2), queue=lambda: 0.0,
                    on_count=lambda t, serving, wanted: counts.append((t, serving, wanted)))
    sc.origin_ns = 0
    sc.tick(1 * S)
    sc.tick(2 * S)
    sc.stop()
    assert counts == [(1 * S, 1, 1), (2 * S, 1, 1)]
    assert [(d["t_ns"], d["from"], d["to"], d["value"]) for d in sc.decisions] == [(S, 1, 1, 0.0), (2 * S, 1, 1, 0.0)]
    rec = sc.record()
    assert rec["policy"]["signal"] == "queue" and rec["policy"]["max_replicas"] == 2


def test_in_flight_sums_running_and_waiting_over_the_replicas_serving():
    dep = Deployment(2)
    dep.replicas[0].running, dep.replicas[1].running = 2, 3
    assert in_flight(dep) == 5


def test_the_counter_window_differences_over_the_trailing_window():
    w = CounterWindow(10.0)
    assert w.rate() == 0.0
    w.add(0.0, 100.0)
    w.add(5.0, 110.0)
    assert w.rate() == pytest.approx(2.0)  # not yet a full window: over the 5 s elapsed
    for t in range(6, 31):
        w.add(float(t), 110.0 + 3 * (t - 5))
    assert w.rate() == pytest.approx(3.0)  # the last 10 s only
    w.add(31.0, 4.0)  # the router restarted: its counter began again
    assert w.rate() > 0


# --- the whole loop: fake workers behind the real vllm-router --------------------------------
@pytest.mark.slow  # the real router in front of fake workers
@needs("vllm")
def test_the_loop_scales_a_real_router_up_on_arrivals_and_traffic_reaches_the_new_worker(tmp_path):
    """The utilisation signal read from the router's own counter: arrivals push it over
    target x capacity, the scaler adds a worker, the router sends it traffic."""
    from engines.routers import make_router

    with FakeServer(response_headers={REPLICA: "r0"}) as a, FakeServer(response_headers={REPLICA: "r1"}) as b:
        router = make_router(cfg("vllm", policy="round_robin"), tmp_path)
        router.start(workers=[a.url])
        dep = Deployment(1)
        dep.router = router
        dep.replicas[0].base_url = a.url

        def new_replica():
            eng = Replica("r1")
            eng.base_url = b.url
            dep.starting.append(eng)
            return eng

        def join(eng):
            router.add_worker(eng.base_url)
            dep.starting.remove(eng)
            dep.replicas.append(eng)

        dep.new_replica, dep.join = new_replica, join
        policy = ScalingPolicy(Autoscale(signal="utilisation", target=0.5, capacity_rps=1.0, window_s=60.0,
                                         interval_s=1.0, scale_down_delay_s=60.0, min_replicas=1, max_replicas=2))
        sc = LiveScaler(dep, policy)
        try:
            sc.tick(time.perf_counter_ns())  # the counter's first reading: the window's start
            for i in range(6):
                post(router.base_url, f"load {i}", stream=False)
            sc.tick(time.perf_counter_ns())  # 6 arrivals over a second or so: over 0.5 x 1 req/s
            wait_for(lambda: len(dep.replicas) == 2, "the scaler added r1 to the router")
            seen = {post(router.base_url, f"more {i}", stream=False)[1][REPLICA] for i in range(4)}
        finally:
            sc.stop()
            router.stop()
    assert sc.decisions[-1]["from"] == 1 and sc.decisions[-1]["to"] == 2 and sc.decisions[-1]["value"] > 0.5
    assert seen == {"r0", "r1"} and completions(b) == 2


def test_live_scaler_reads_the_policy_from_config():
    node = OmegaConf.create({"signal": "queue", "target": 4, "capacity_rps": None, "window_s": 30, "interval_s": 5,
                             "scale_down_delay_s": 120, "min_replicas": 1, "max_replicas": 2, "provision_s": 0,
                             "cold_start_s": None})
    sc = LiveScaler(Deployment(1), ScalingPolicy(typed(node, Autoscale)))
    assert sc.autoscale.signal == "queue" and sc.autoscale.target == 4.0 and sc.wanted == 1
