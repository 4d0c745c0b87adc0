import sys
import time

from engines.process import EngineProcess, _group_alive

# The leader dies on SIGTERM at once; the worker it forked ignores SIGTERM (as a stuck
# engine core would) and must still not outlive stop().
LEADER = ("import subprocess, sys, time\n"
          "subprocess.Popen([sys.executable, '-c', 'import signal, time; signal.signal(signal.SIGTERM, "
          "signal.SIG_IGN); print(\"worker up\", flush=True); time.sleep(120)'])\n"
          "time.sleep(120)\n")


def test_stop_kills_workers_that_outlive_their_leader(tmp_path):
    p = EngineProcess([sys.executable, "-c", LEADER], tmp_path / "engine.log")
    p.start()
    deadline = time.monotonic() + 20
    while "worker up" not in p.tail() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "worker up" in p.tail()
    t0 = time.monotonic()
    p.stop(grace_s=1.0)
    took = time.monotonic() - t0
    assert not _group_alive(p.pid)
    assert 1.0 <= took < 8.0  # waited out the grace for the worker, then killed it


# A program that starts an engine and has no SIGTERM handler of its own (pytest, a script that
# drives an adapter): it prints the engine's pid, then waits to be stopped.
DRIVER = ("import sys, time\n"
          "from engines.process import EngineProcess\n"
          "p = EngineProcess([sys.executable, '-c', 'import time; time.sleep(120)'], sys.argv[1])\n"
          "p.start()\n"
          "print(p.pid, flush=True)\n"
          "time.sleep(120)\n")


def test_sigterm_to_the_program_that_started_an_engine_stops_the_engine(tmp_path):
    import os
    import signal
    import subprocess
    from pathlib import Path

    import psutil

    repo = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": repo}
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, str(tmp_path / "engine.log")], stdout=subprocess.PIPE,
                              text=True, env=env)
    engine_pid = int(driver.stdout.readline())
    try:
        assert psutil.pid_exists(engine_pid)
        driver.send_signal(signal.SIGTERM)
        assert driver.wait(20) == -signal.SIGTERM  # it still ends as SIGTERM ends a program
        deadline = time.monotonic() + 5
        while psutil.pid_exists(engine_pid) and time.monotonic() < deadline:  # reparented, then reaped
            time.sleep(0.02)
        assert not psutil.pid_exists(engine_pid)
    finally:
        if psutil.pid_exists(engine_pid):
            os.kill(engine_pid, signal.SIGKILL)


class _Handle:
    """A started process as its holders read it: ``poll`` None while it runs, its code after."""

    def __init__(self, code):
        self.code = code

    def poll(self):
        return self.code


def _holders(tmp_path):
    """An engine, a Dynamo engine, one of its workers and a router: each holds one process."""
    from omegaconf import OmegaConf

    from engines.dynamo import Worker
    from engines.registry import make_engine
    from engines.routers import make_router
    from tests.engine_cfg import engine_cfg

    router_cfg = OmegaConf.create({"name": "vllm", "policy": None, "host": "127.0.0.1", "port": None,
                                   "binary": None, "extra_args": [], "startup_timeout_s": 20.0})
    return {"engine": make_engine(engine_cfg("vllm", model="/models/tiny"), tmp_path),
            "dynamo": make_engine(engine_cfg("dynamo", model="/models/tiny"), tmp_path),
            "worker": Worker("r0", "replica", "127.0.0.1"),
            "router": make_router(router_cfg, tmp_path)}


def test_alive_means_the_same_for_every_holder_of_a_launched_process(tmp_path):
    holders = _holders(tmp_path)
    # launched by tokenfactory and not started (or its start failed before a process): not alive
    assert {k: h.alive() for k, h in holders.items()} == dict.fromkeys(holders, False)
    for h in holders.values():
        h.process = _Handle(None)
    assert {k: h.alive() for k, h in holders.items()} == dict.fromkeys(holders, True)
    for h in holders.values():
        h.process = _Handle(-9)
    assert {k: h.alive() for k, h in holders.items()} == dict.fromkeys(holders, False)


def test_an_endpoint_tokenfactory_did_not_launch_is_not_judged_dead_by_its_process(tmp_path):
    from engines.registry import make_engine
    from tests.engine_cfg import engine_cfg

    external = make_engine(engine_cfg("openai", base_url="http://127.0.0.1:1", model="m"), tmp_path)
    assert not external.launched and external.process is None
    assert external.alive() is True  # its health checks judge it, not a process
