"""engines/routers.py against the real router binaries (vllm-router, sglang-router from PyPI) in
front of fake OpenAI workers (tests/fake_server.py): routing by policy, which worker answered,
prefill/decode mode, and the errors a user can cause.  The flags it emits are checked against
the routers' saved ``--help`` (tests/engines/data/)."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import sys
import urllib.error
import urllib.request
from pathlib import Path

import orjson
import psutil
import pytest
from omegaconf import OmegaConf

from engines.base import EngineError
from engines.routers import ROUTERS, make_router
from tests.fake_server import FakeServer, plain

DATA = Path(__file__).parent / "data"
HELP = {"vllm": DATA / "vllm-router-0.1.17.help.txt", "sglang": DATA / "sglang-router-0.3.2.help.txt"}
REPLICA = "x-tokenfactory-replica"


def cfg(name: str, **over):
    base = {"name": name, "policy": None, "host": "127.0.0.1", "port": None, "binary": None,
            "extra_args": [], "startup_timeout_s": 20.0}
    return OmegaConf.create({**base, **over})


def installed(name: str) -> bool:
    exe = ROUTERS[name].executable
    return (Path(sys.executable).parent / exe).exists() or shutil.which(exe) is not None


def needs(name: str):
    return pytest.mark.skipif(not installed(name), reason=f"{ROUTERS[name].package} is not installed")


BOTH = [pytest.param(n, marks=needs(n)) for n in ("vllm", "sglang")]


def post(url: str, prompt: str, stream: bool, rid: str | None = None) -> tuple[int, dict, bytes]:
    body = {"model": "fake", "prompt": prompt, "max_tokens": 4, "stream": stream,
            "fake": "n=2 gap_ms=0 ttft_ms=0"}
    headers = {"Content-Type": "application/json", **({"x-request-id": rid} if rid else {})}
    req = urllib.request.Request(url + "/v1/completions", data=json.dumps(body).encode(),  # noqa: S310 - loopback
                                 headers=headers)
    with urllib.request.urlopen(req, timeout=20) as r:  # noqa: S310 - a loopback http URL
        return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()


def completions(server: FakeServer) -> int:
    """The completions a fake worker answered (vllm-router's cache_aware also POSTs /render)."""
    return sum(p == "/v1/completions" for p in server.paths)


def help_flags(name: str) -> set[str]:
    return set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]*)", HELP[name].read_text()))


# --- the command line, against each router's --help ------------------------------------------
@pytest.mark.parametrize("name", ["vllm", "sglang"])
def test_every_flag_emitted_is_in_the_routers_help(name, tmp_path):
    r = make_router(cfg(name, policy="round_robin", binary="true"), tmp_path)
    plain_cmd = r.command(workers=["http://127.0.0.1:1", "http://127.0.0.1:2/"])
    pd_cmd = r.command(prefill=[("http://127.0.0.1:3", 8998), ("http://127.0.0.1:4", None)],
                       decode=["http://127.0.0.1:5"])
    known = help_flags(name)
    for argv in (plain_cmd, pd_cmd):
        emitted = {a for a in argv if a.startswith("--")}
        assert emitted <= known, emitted - known
    assert plain_cmd[plain_cmd.index("--worker-urls") + 1:][:2] == ["http://127.0.0.1:1", "http://127.0.0.1:2"]
    assert ROUTERS[name].pd_flag in pd_cmd
    i = pd_cmd.index("--prefill")
    assert pd_cmd[i:i + 6] == ["--prefill", "http://127.0.0.1:3", "8998", "--prefill", "http://127.0.0.1:4", "--decode"]
    if name == "sglang":
        assert plain_cmd[1] == "launch"


@pytest.mark.parametrize("name", ["vllm", "sglang"])
def test_policies_are_the_routers_own(name):
    text = HELP[name].read_text()
    choices = re.search(r"--policy \{([^}]*)\}", text).group(1).split(",")
    assert tuple(choices) == ROUTERS[name].policies
    assert re.search(r"\(default:\s+" + ROUTERS[name].default_policy + r"\)", text.replace("\n", " "))


@pytest.mark.parametrize("name", ["vllm", "sglang"])
def test_an_unknown_policy_is_refused_naming_router_policy(name, tmp_path):
    with pytest.raises(EngineError, match=r"router\.policy=least_cost .*round_robin.*cache_aware"):
        make_router(cfg(name, policy="least_cost"), tmp_path)


def test_an_unknown_router_is_refused_naming_router_name(tmp_path):
    with pytest.raises(EngineError, match=r"router\.name=nginx .*sglang, vllm"):
        make_router(cfg("nginx"), tmp_path)


def test_policy_used_is_the_default_when_unset(tmp_path):
    r = make_router(cfg("vllm", binary="/bin/true"), tmp_path)
    assert r.policy_used == "cache_aware"
    assert "--policy" not in r.command(workers=["http://127.0.0.1:1"])  # the router's default applies


def test_a_missing_binary_fails_with_a_clear_message(tmp_path):
    r = make_router(cfg("vllm", binary=str(tmp_path / "no-such-router")), tmp_path)
    with pytest.raises(EngineError, match=r"router\.binary=.*no-such-router is not found"):
        r.start(workers=["http://127.0.0.1:1"])


def test_a_taken_port_fails_naming_router_port(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        r = make_router(cfg("sglang", port=port, binary="/bin/true"), tmp_path)
        with pytest.raises(EngineError, match=rf"router\.port={port} is already in use"):
            r.start(workers=["http://127.0.0.1:1"])


@pytest.mark.slow  # starts the router's process
@needs("vllm")
def test_a_router_that_exits_at_start_is_reported_with_its_log(tmp_path):
    r = make_router(cfg("vllm", extra_args=["--log-level", "loud"]), tmp_path)
    exited = r"(?s)router=vllm exited with code \d+ before it was healthy.*invalid choice"
    with pytest.raises(EngineError, match=exited):
        r.start(workers=["http://127.0.0.1:1"])
    assert not r.alive()


# --- the real routers in front of two fake workers -------------------------------------------
@pytest.mark.slow  # the real router in front of fake workers
@pytest.mark.parametrize("name", BOTH)
def test_round_robin_alternates_and_the_workers_header_reaches_the_client(name, tmp_path):
    with FakeServer(response_headers={REPLICA: "a"}) as a, FakeServer(response_headers={REPLICA: "b"}) as b:
        r = make_router(cfg(name, policy="round_robin"), tmp_path)
        r.start(workers=[a.url, b.url])
        try:
            assert r.healthy_workers() == {a.url, b.url}
            seen = []
            for i in range(6):
                status, headers, body = post(r.base_url, f"hello {i}", stream=i % 2 == 0, rid=f"client-{i}")
                assert status == 200 and b"tok" in body
                seen.append(headers[REPLICA])
                assert headers["x-request-id"] == f"client-{i}"  # the client's id, not the worker's
            prov = r.provenance()
        finally:
            r.stop()
        assert seen in (list("ababab"), list("bababa"))
        assert (completions(a), completions(b)) == (3, 3)
        # the header names the worker that recorded the request, and the id reached it
        for server, tag in ((a, "a"), (b, "b")):
            ids = {h.get("x-request-id") for h, p in zip(server.headers, server.paths) if p == "/v1/completions"}
            assert ids == {f"client-{i}" for i, s in enumerate(seen) if s == tag}
    assert not r.alive()
    assert not psutil.pid_exists(r.process.pid) or psutil.Process(r.process.pid).status() == psutil.STATUS_ZOMBIE
    assert prov["router"] == name and prov["policy"] == "round_robin" and prov["router_version"]
    assert prov["workers"] == [a.url, b.url] and prov["command"][0].endswith(ROUTERS[name].executable)


@pytest.mark.slow  # the real router in front of fake workers
@pytest.mark.parametrize("name", BOTH)
def test_cache_aware_keeps_a_repeated_long_prompt_on_one_worker(name, tmp_path):
    with FakeServer() as a, FakeServer() as b:
        r = make_router(cfg(name, policy="cache_aware"), tmp_path)
        r.start(workers=[a.url, b.url])
        try:
            for _ in range(6):
                post(r.base_url, "a long shared system prompt about routing " * 40, stream=True)
        finally:
            r.stop()
        assert sorted((completions(a), completions(b))) == [0, 6]


@pytest.mark.slow  # the real router in front of fake workers
@pytest.mark.parametrize("name", BOTH)
def test_a_worker_added_gets_traffic_and_one_removed_gets_none(name, tmp_path):
    """Live autoscaling's router calls, against the real binary: a worker added while the
    router runs is routed to once ``add_worker`` returns; once ``remove_worker`` returns, none
    of the later requests reach it; the router's own counter counts every request routed."""
    with FakeServer(response_headers={REPLICA: "a"}) as a, FakeServer(response_headers={REPLICA: "b"}) as b:
        r = make_router(cfg(name, policy="round_robin"), tmp_path)
        r.start(workers=[a.url])
        try:
            assert r.requests_total() == 0
            before = [post(r.base_url, f"one {i}", stream=False)[1][REPLICA] for i in range(2)]
            r.add_worker(b.url + "/")
            assert r.workers == [a.url, b.url] and r.healthy_workers() == {a.url, b.url}
            both = [post(r.base_url, f"two {i}", stream=i % 2 == 0)[1][REPLICA] for i in range(4)]
            served_by_b = completions(b)
            r.remove_worker(b.url)
            assert r.workers == [a.url] and r.healthy_workers() == {a.url}
            after = [post(r.base_url, f"three {i}", stream=i % 2 == 0)[1][REPLICA] for i in range(4)]
            routed = r.requests_total()
        finally:
            r.stop()
    assert before == ["a", "a"] and sorted(both) == ["a", "a", "b", "b"] and after == ["a"] * 4
    assert served_by_b == 2 and completions(b) == 2  # nothing reached b once it was removed
    assert routed == 10


@pytest.mark.slow  # vllm-router holds the add open ~20 s before it gives up on the worker
@needs("vllm")
def test_a_worker_never_healthy_after_add_is_named_with_the_routers_log(tmp_path):
    r = make_router(cfg("vllm", policy="round_robin"), tmp_path)
    with FakeServer() as a:
        r.start(workers=[a.url])
        try:
            dead = f"http://127.0.0.1:{_closed_port()}"
            with pytest.raises(EngineError, match=rf"(?s)router=vllm.*worker {dead}.*last lines of .*router\.log"):
                r.add_worker(dead, timeout_s=3)
            assert dead not in r.workers
        finally:
            r.stop()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def prefill_script(body: dict, k: int) -> list:
    """A prefill worker: one non-streamed completion, with what a KV connector would return."""
    if "kv_transfer_params" not in body and "bootstrap_room" not in body:
        return [plain("404 Not Found", b"not found")]  # vllm-router's /render probe
    out = {"id": f"prefill-{k}", "object": "text_completion",
           "choices": [{"index": 0, "text": "x", "finish_reason": "length"}],
           "usage": {"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4},
           "kv_transfer_params": {"do_remote_prefill": True, "do_remote_decode": False,
                                  "remote_engine_id": "engine-p0", "remote_block_ids": [0, 1],
                                  "remote_host": "127.0.0.1", "remote_port": 5600, "tp_size": 1}}
    return [plain("200 OK", orjson.dumps(out), "application/json")]


@pytest.mark.slow  # the real router in front of fake workers
@pytest.mark.parametrize("name", BOTH)
def test_prefill_decode_mode_sends_each_pool_its_part(name, tmp_path):
    with FakeServer(prefill_script, response_headers={REPLICA: "p0"}) as p, \
            FakeServer(response_headers={REPLICA: "d0"}) as d:
        r = make_router(cfg(name, policy="round_robin"), tmp_path)
        r.start(prefill=[(p.url, 8998 if name == "sglang" else None)], decode=[d.url])
        try:
            assert r.healthy_workers() == {p.url, d.url}
            status, headers, body = post(r.base_url, "hello", stream=True)
        finally:
            r.stop()
    assert status == 200 and b"tok" in body and headers[REPLICA] == "d0"  # the decode worker answers
    pre = [b for b, path in zip(p.requests, p.paths) if path == "/v1/completions"]
    dec = [b for b, path in zip(d.requests, d.paths) if path == "/v1/completions"]
    assert len(pre) == len(dec) == 1
    if name == "vllm":
        # vLLM's NIXL protocol: a 1-token non-streamed prefill, whose kv_transfer_params the
        # decode request carries
        assert pre[0]["max_tokens"] == 1 and pre[0]["stream"] is False
        assert pre[0]["kv_transfer_params"]["do_remote_decode"] is True
        assert dec[0]["kv_transfer_params"]["remote_engine_id"] == "engine-p0"
        assert dec[0]["stream"] is True and dec[0]["max_tokens"] == 4
    else:
        # SGLang's bootstrap protocol: the same request to both, with the prefill's bootstrap
        # address and one room id
        for b in (pre[0], dec[0]):
            assert (b["bootstrap_host"], b["bootstrap_port"]) == ("127.0.0.1", 8998)
        assert pre[0]["bootstrap_room"] == dec[0]["bootstrap_room"]


@pytest.mark.parametrize("name", BOTH)
def test_version_is_the_installed_one(name, tmp_path):
    from importlib import metadata

    assert make_router(cfg(name), tmp_path).version() == metadata.version(ROUTERS[name].package)


@pytest.mark.slow
@pytest.mark.parametrize("name", BOTH)
def test_the_installed_help_still_has_every_flag_emitted(name, tmp_path):
    import subprocess

    r = make_router(cfg(name, policy="round_robin"), tmp_path)
    live = subprocess.run([r.binary(), *r.subcommand, "--help"], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "COLUMNS": "100"}).stdout
    argv = r.command(workers=["http://127.0.0.1:1"]) + r.command(prefill=[("http://127.0.0.1:2", 1)],
                                                                 decode=["http://127.0.0.1:3"])
    assert {a for a in argv if a.startswith("--")} <= set(re.findall(r"(--[a-z][a-z0-9-]*)", live))


@pytest.mark.slow
@pytest.mark.parametrize("name", BOTH)
def test_a_worker_failure_is_retried_on_another_unless_retries_are_disabled(name, tmp_path):
    """Why a deployment that must count failed requests passes --disable-retries: by default
    the router answers a worker's HTTP 500 with another worker's completion."""
    def broken(body, k):
        return [plain("500 Internal Server Error", b"boom")]

    for extra, want in (([], {200}), (["--disable-retries"], {200, 500})):
        with FakeServer(broken) as a, FakeServer() as b:
            r = make_router(cfg(name, policy="round_robin", extra_args=extra), tmp_path)
            r.start(workers=[a.url, b.url])
            codes = set()
            try:
                for i in range(4):
                    try:
                        codes.add(post(r.base_url, f"hi {i}", stream=False)[0])
                    except urllib.error.HTTPError as e:
                        codes.add(e.code)
            finally:
                r.stop()
            assert codes == want and len(a.requests) >= 2


@pytest.mark.slow
@pytest.mark.parametrize("name", BOTH)
def test_a_worker_that_never_answers_times_out_naming_it(name, tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))  # bound, never listening: connections are refused
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
        r = make_router(cfg(name, startup_timeout_s=2.0), tmp_path)
        with pytest.raises(EngineError, match=rf"router\.startup_timeout_s=2 .*not healthy in it: {dead}"):
            r.start(workers=[dead])
    assert not r.alive()
