"""engine=dynamo without Dynamo: the frontend's and workers' argument lists, the worker set a
deployment makes, what is refused by name, the emulation label, provenance, and a recorded
Dynamo 1.4.2 stream and worker metrics page (the worker that served a row, per-worker metrics)."""

from __future__ import annotations

import asyncio
import sys

import pytest
from omegaconf import OmegaConf

from conf.schema import Deployment
from engines.base import EngineError, emulation
from engines.deployment import make_served
from engines.dynamo import Dynamo, Worker, emulation_of, timing_source
from engines.registry import make_engine
from loadgen.client import ClientConfig, StreamingClient
from loadgen.records import RequestRecord
from metrics.token_attribution import attribute_tokens
from tests.engine_cfg import FIXTURES, engine_cfg
from tests.fake_engine import FakeEngine

PY = "/opt/dynamo/bin/python"


def _dynamo(tmp_path, deployment=None, router="none", **over) -> Dynamo:
    e = make_engine(engine_cfg("dynamo", **{"python": PY, "model": "/models/tiny", **over}), tmp_path)
    dep = OmegaConf.structured(Deployment(**(deployment or {})))
    e.configure(dep, router)
    return e


def test_frontend_and_mocker_commands_are_argument_lists(tmp_path):
    e = _dynamo(tmp_path, router_mode="kv", workers=2, frontend_args=["--migration-limit", "2"],
                **{"features.prefix_caching": False, "features.max_num_seqs": 8, "mocker.speedup_ratio": 4.0})
    e.prepare()
    front = e.full_command()
    assert front == [PY, "-m", "dynamo.frontend", "--http-host", "127.0.0.1", "--http-port", str(e.port),
                     "--router-mode", "kv", "--discovery-backend", "file", "--request-plane", "tcp",
                     "--event-plane", "zmq", "--migration-limit", "2"]
    assert [w.replica for w in e.workers] == ["r0", "r1"] and {w.role for w in e.workers} == {"replica"}
    ports = {w.system_port for w in e.workers}
    assert len(ports) == 2 and all(20000 <= p < 32768 for p in ports)  # Dynamo reads the port as an i16
    argv = e.worker_command("replica")
    assert argv[:5] == [PY, "-m", "dynamo.mocker", "--model-path", "/models/tiny"]
    assert argv[argv.index("--engine-type") + 1] == "vllm" and argv[argv.index("--speedup-ratio") + 1] == "4"
    assert argv[argv.index("--max-model-len") + 1] == "2048"
    assert "--no-enable-prefix-caching" in argv and argv[argv.index("--max-num-seqs") + 1] == "8"
    assert "--disaggregation-mode" not in argv and "--aic-perf-model" not in argv
    env = e.worker_env(e.workers[1])
    assert env["DYN_SYSTEM_PORT"] == str(e.workers[1].system_port) and env["DYN_SYSTEM_HOST"] == "127.0.0.1"
    assert env["DYN_TCP_RPC_HOST"] == "127.0.0.1" and env["DYN_TCP_RESPONSE_STREAM_HOST"] == "lo"
    # the dialect asks the frontend to name the worker in every response, beside exact outputs
    body = e.dialect()["extra_body"]
    assert body == {"ignore_eos": True, "nvext": {"extra_fields": ["worker_id"]}}


def test_timing_sources_and_their_flags(tmp_path):
    poly = _dynamo(tmp_path)
    assert timing_source(poly.cfg.mocker) == "mocker-polynomial"
    prof = _dynamo(tmp_path, **{"mocker.planner_profile_data": "/prof/h200"})
    assert prof.emulation()["timing_source"] == "mocker-profile:/prof/h200"
    argv = prof.worker_command("replica")
    assert argv[argv.index("--planner-profile-data") + 1] == "/prof/h200"
    aic = _dynamo(tmp_path, **{"mocker.aic_system": "h200_sxm", "mocker.aic_backend_version": "0.19.0",
                               "mocker.engine_type": "sglang",
                               "mocker": {"reasoning": {"start_thinking_token_id": 1, "end_thinking_token_id": 2,
                                                        "thinking_ratio": 0.5}}})
    assert aic.emulation() == {"emulated": True, "timing_source": "mocker-aic:h200_sxm/sglang/0.19.0",
                               "emulator": "dynamo.mocker", "emulated_engine": "sglang", "speedup_ratio": 1.0}
    argv = aic.worker_command("replica")
    assert argv[argv.index("--aic-system") + 1] == "h200_sxm" and "--aic-perf-model" in argv
    assert argv[argv.index("--reasoning") + 1] == ('{"end_thinking_token_id": 2, "start_thinking_token_id": 1, '
                                                   '"thinking_ratio": 0.5}')
    # a real worker kind is measured; so is every other engine
    real = _dynamo(tmp_path, worker="vllm")
    assert real.emulation() == {"emulated": False, "timing_source": "measured"}
    assert real.worker_command("replica")[:5] == [PY, "-m", "dynamo.vllm", "--model", "/models/tiny"]
    assert emulation_of(engine_cfg("vllm")) == {"emulated": False, "timing_source": "measured"}
    assert emulation(make_engine(engine_cfg("vllm"), tmp_path)) == {"emulated": False, "timing_source": "measured"}


def test_a_disaggregated_deployment_is_prefill_and_decode_mocker_workers(tmp_path):
    e = _dynamo(tmp_path, deployment={"kind": "disaggregated", "prefill": 1, "decode": 2})
    e.prepare()
    assert e.roles() == {"p0": "prefill", "d0": "decode", "d1": "decode"}
    assert e.worker_command("prefill")[-2:] == ["--disaggregation-mode", "prefill"]
    assert e.topology()["prefill_decode"] == "1:2" and e.topology()["router"] == "dynamo-frontend"

    class Running:  # a process handle that is still running
        def poll(self):
            return None

    for w in e.workers:
        w.process = Running()
    assert e.survivors("d0") == ["d1"] and e.survivors("p0") == []
    assert [m.replica for m in e.members()] == ["p0", "d0", "d1", None]  # the frontend is the router


def test_make_served_returns_the_adapter_with_its_worker_set(tmp_path):
    from hydra import compose, initialize_config_module

    with initialize_config_module("conf", version_base="1.3"):
        cfg = compose("config", overrides=["engine=dynamo", "engine.workers=3"])
    e = make_served(cfg, tmp_path)
    assert isinstance(e, Dynamo) and e.counts == {"replica": 3}


@pytest.mark.parametrize("over, deployment, router, needle", [
    ({}, None, "vllm", "Dynamo's frontend is the router"),
    ({}, {"kind": "replicas", "replicas": 2}, "none", "engine.workers=N"),
    ({"worker": "vllm"}, {"kind": "disaggregated"}, "none", "mocker workers only"),
])
def test_a_worker_set_dynamo_cannot_be_is_named(tmp_path, over, deployment, router, needle):
    with pytest.raises(EngineError, match=needle):
        _dynamo(tmp_path, deployment=deployment, router=router, **over)


@pytest.mark.parametrize("over, needle", [
    ({"planner": True}, "engine.planner=true"),
    ({"worker": "sglang", "features.max_num_seqs": 4}, "engine.worker_args"),
    ({"features.quantization": "fp8"}, "does not support engine.features.quantization"),
    ({"launch": False, "base_url": "http://127.0.0.1:9"}, "engine=openai"),
    ({"command": ["x"]}, "engine.frontend_args"),
    ({"python": None}, r"engine.python=/path/to/dynamo-venv/bin/python"),  # the harness's venv has no Dynamo
])
def test_what_engine_dynamo_refuses_is_named(tmp_path, over, needle):
    e = _dynamo(tmp_path, **over)
    with pytest.raises(EngineError, match=needle):
        e.prepare()


def test_provenance_holds_versions_and_every_process_flags(tmp_path):
    e = _dynamo(tmp_path, python=sys.executable, workers=2)  # this interpreter has no Dynamo: versions None
    e.prepare()
    e.workers[0].instance_id = "42"
    p = e.provenance()
    assert p["engine"] == "dynamo" and p["versions"] == {"ai-dynamo": None, "ai-dynamo-runtime": None}
    assert p["emulation"]["emulated"] is True and p["emulation"]["timing_source"] == "mocker-polynomial"
    assert p["router"]["router_mode"] == "round-robin" and p["planner"] is False
    assert set(p["replicas"]) == {"r0", "r1"} and p["replicas"]["r0"]["instance_id"] == "42"
    assert p["replicas"]["r1"]["metrics_url"] == f"http://127.0.0.1:{e.workers[1].system_port}/metrics"
    assert "nvext.worker_id" in p["how_rows_name_workers"]
    assert e.replica_names() == {"42": "r0"}


def test_worker_pages_give_instance_ids_and_summed_metrics(tmp_path):
    page = (FIXTURES / "dynamo_1.4.2_worker_metrics.txt").read_text()
    with FakeEngine() as fake:
        fake.route("GET", "/metrics", *([(200, page)] * 8))
        port = int(fake.url.rsplit(":", 1)[1])
        e = _dynamo(tmp_path, workers=2)
        for name in ("r0", "r1"):
            w = Worker(name, "replica", "127.0.0.1")
            w.system_port = port
            e.workers.append(w)
        # the page's worker_id label is hex; the frontend writes the same id in decimal
        assert e.workers[0].read_instance_id() == "8349049440173630377" == str(0x73ddc83b0db923a9)
        m = e.server_metrics()
    assert m["worker_requests"] == 2.0 and m["running"] == 0.0 and m["kv_cache_usage"] == 0.0
    assert e.metrics_endpoints() == [("r0", f"{fake.url}/metrics"), ("r1", f"{fake.url}/metrics")]


def _recorded(fake, names: dict):
    fake.streams["/v1/completions"] = (FIXTURES / "dynamo_1.4.2_completions_stream.txt").read_bytes()
    cfg = ClientConfig(base_url=fake.url, model="tiny", continuous_usage=True, replica_names=names,
                       default_replica="unknown")

    async def go():
        async with StreamingClient(cfg) as c:
            rec = RequestRecord(request_id="q0", scheduled_ns=0, expected_prompt_tokens=6, max_tokens=4)
            return await c.send(rec, c.body("hello there", 4))

    rec = asyncio.run(go())
    attribute_tokens(rec)
    return rec


def test_a_recorded_dynamo_stream_names_its_worker(tmp_path):
    with FakeEngine() as fake:
        rec = _recorded(fake, {"13305612797827928535": "r1", "8349049440173630377": "r0"})
    assert rec.status == "ok" and rec.finish_reason == "length"
    assert rec.output_tokens == 4 and rec.prompt_tokens == 6 and rec.chunk_tokens == [1, 1, 1, 1]
    assert rec.replica == "r1"
    with FakeEngine() as fake:  # an id no worker of ours has: kept as Dynamo said it
        assert _recorded(fake, {}).replica == "13305612797827928535"


def test_mocker_reasoning_is_set_from_the_command_line():
    # as +engine.request_extra.KEY: an Optional[Dict] defaulting to None took no key (OmegaConf:
    # "Unexpected type for root: NoneType"), nor a whole dict ("'NoneType' object has no attribute 'get'")
    from hydra import compose, initialize_config_module

    from conf.schema import DynamoEngine, typed

    with initialize_config_module("conf", version_base="1.3"):
        cfg = compose("config", overrides=[
            "engine=dynamo", "+engine.mocker.reasoning.start_thinking_token_id=3",
            "+engine.mocker.reasoning.end_thinking_token_id=4", "+engine.mocker.reasoning.thinking_ratio=0.5"])
    assert dict(cfg.engine.mocker.reasoning) == {"start_thinking_token_id": 3, "end_thinking_token_id": 4,
                                                 "thinking_ratio": 0.5}
    assert typed(cfg.engine, DynamoEngine).mocker.reasoning["thinking_ratio"] == 0.5


def test_the_frontend_page_is_the_router_page_sampled_beside_the_workers(tmp_path):
    from engines.dynamo import FRONTEND_METRICS

    e = _dynamo(tmp_path, workers=2)
    e.prepare()
    assert e.router_metrics() == (f"http://127.0.0.1:{e.port}/metrics", FRONTEND_METRICS)
    vllm = make_engine(engine_cfg("vllm", model="/models/tiny"), tmp_path)
    assert vllm.router_metrics() is None  # one engine, no router in front of it
