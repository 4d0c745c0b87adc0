"""The proxy's process placement (``proxy.cpus``, ``proxy.nice``, ``proxy.realtime``) and its
garbage-collector settings, applied for real in child processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conf.schema import Proxy
from harness.proxy.runtime import GC_THRESHOLDS, check_placement, parse_cpus, place
from tests.fake_server import FakeServer
from tests.harness.test_proxy import ok_script

ROOT = Path(__file__).resolve().parents[2]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}


def _child(code: str) -> dict:
    """Run ``code`` in a fresh interpreter; it prints one JSON object."""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=ENV, cwd=ROOT, timeout=60)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_cpu_lists_parse_as_taskset_writes_them():
    assert parse_cpus("1") == {1}
    assert parse_cpus("0,2") == {0, 2}
    assert parse_cpus("2-4, 7") == {2, 3, 4, 7}
    for bad in ("one", "3-1", "-2", ""):
        with pytest.raises(ValueError, match=r"proxy.cpus="):
            parse_cpus(bad)


def test_placement_errors_name_the_key():
    with pytest.raises(ValueError, match=r"proxy.cpus='4096': none of these CPUs is available"):
        check_placement(Proxy(cpus="4096"))
    with pytest.raises(ValueError, match=r"proxy.realtime and proxy.nice: give one"):
        check_placement(Proxy(realtime=5, nice=-5))
    check_placement(Proxy(cpus=None, nice=None, realtime=None))


def test_a_refused_realtime_priority_is_an_error_naming_the_key(monkeypatch):
    def refuse(*_a):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "sched_setscheduler", refuse)
    with pytest.raises(ValueError, match=r"proxy.realtime=10: SCHED_FIFO needs CAP_SYS_NICE"):
        place(Proxy(realtime=10))


def test_cpus_and_nice_are_applied_to_the_process_and_the_collector_is_quieted():
    cpu = min(os.sched_getaffinity(0))
    got = _child(
        "import gc, json, os\n"
        "from conf.schema import Proxy\nfrom harness.proxy.runtime import place, quiet_gc\n"
        f"done = place(Proxy(cpus='{cpu}', nice=3))\n"
        "quiet_gc()\n"
        "print(json.dumps({'done': done, 'cpus': sorted(os.sched_getaffinity(0)), "
        "'nice': os.getpriority(os.PRIO_PROCESS, 0), 'thr': gc.get_threshold(), 'frozen': gc.get_freeze_count()}))")
    assert got["done"] == [f"cpus {cpu}", "nice 3"]
    assert got["cpus"] == [cpu] and got["nice"] == 3
    assert tuple(got["thr"]) == GC_THRESHOLDS and got["frozen"] > 1000


@pytest.mark.skipif(os.geteuid() != 0, reason="SCHED_FIFO needs CAP_SYS_NICE")
def test_realtime_puts_the_process_in_sched_fifo():
    got = _child("import json, os\nfrom conf.schema import Proxy\nfrom harness.proxy.runtime import place\n"
                 "done = place(Proxy(realtime=3))\n"
                 "print(json.dumps({'done': done, 'policy': os.sched_getscheduler(0), "
                 "'prio': os.sched_getparam(0).sched_priority}))")
    assert got == {"done": ["SCHED_FIFO 3"], "policy": os.SCHED_FIFO, "prio": 3}


@pytest.mark.slow
def test_the_proxy_command_places_itself(tmp_path):
    cpu = min(os.sched_getaffinity(0))
    with FakeServer(ok_script("i")) as inc:
        proc = subprocess.Popen([sys.executable, "-m", "harness.cli", "proxy", f"proxy.incumbent={inc.url}",
                                 "proxy.mode=rollback", "proxy.port=0", f"proxy.cpus={cpu}", "proxy.nice=2",
                                 f"output_dir={tmp_path}"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                text=True, env=ENV, cwd=ROOT)
        try:
            line = proc.stdout.readline()
            assert "proxy on" in line and f"cpus {cpu}, nice 2" in line, line
            assert os.sched_getaffinity(proc.pid) == {cpu}
            assert os.getpriority(os.PRIO_PROCESS, proc.pid) == 2
        finally:
            proc.terminate()
            proc.communicate(timeout=60)


@pytest.mark.slow  # starts the proxy's process
def test_a_proxy_process_that_cannot_place_itself_says_why(tmp_path):
    from harness.proxy.process import ProxyProcess

    p = ProxyProcess({"incumbent": "http://127.0.0.1:1", "mode": "rollback", "cpus": "4096"}, {},
                     str(tmp_path / "requests.parquet"))
    with pytest.raises(RuntimeError, match=r"did not start: proxy.cpus='4096': none of these CPUs"):
        p.start()
    assert not (tmp_path / "requests.parquet.partial").exists()
