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
