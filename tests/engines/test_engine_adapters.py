"""vLLM, SGLang and OpenAI adapters against a fake server that answers with recorded pages:
health, provenance, metrics scrape, cache reset, and SGLang's recorded response streams."""

import asyncio
import json

import pytest

from engines.base import EngineError
from engines.registry import make_engine
from loadgen.client import ClientConfig, StreamingClient
from loadgen.records import RequestRecord
from metrics.token_attribution import attribute_tokens
from tests.engine_cfg import FIXTURES, engine_cfg
from tests.fake_engine import FakeEngine


def _external(name, url, tmp_path, **over):
    return make_engine(engine_cfg(name, launch=False, base_url=url, model="tiny", **over), tmp_path)


def _warm_up_route(fake):
    # start() sends one short request before any load (engines that load lazily).
    fake.route("POST", "/v1/completions", (200, {"choices": [{"index": 0, "text": " x", "finish_reason": "length"}]}))


def test_vllm_provenance_metrics_and_reset(tmp_path):
    with FakeEngine() as fake:
        fake.route("GET", "/health", (200, ""))
        _warm_up_route(fake)
        fake.route("GET", "/version", (200, {"version": "0.32.0"}))
        fake.route("GET", "/server_info?config_format=json",
                   (200, json.loads((FIXTURES / "vllm_0.32.0_server_info.json").read_text())))
        fake.route("GET", "/metrics", (200, (FIXTURES / "vllm_0.32.0_metrics.txt").read_text()))
        fake.route("GET", "/v1/models", (200, {"data": [{"id": "tiny", "max_model_len": 2048}]}))
        # vLLM refuses a reset while blocks are held, then succeeds.
        fake.route("POST", "/reset_prefix_cache", (200, {"success": False}), (200, {"success": True}))
        e = _external("vllm", fake.url, tmp_path)
        e.start()
        m = e.server_metrics()
        assert m["prefix_cache_hits"] == 18432.0 and m["prefix_cache_queries"] == 25607.0
        assert m["generation_tokens"] == 644.0 and m["running"] == 0.0 and "spec_decode_drafts" not in m
        p = e.provenance()
        assert p["engine_version"] == "0.32.0"
        eff = p["effective"]
        assert eff["dtype"] == "torch.bfloat16" and eff["tensor_parallel_size"] == 1
        assert eff["pipeline_parallel_size"] == 1 and eff["block_size"] == 128
        assert eff["kv_cache_tokens"] == 524288 and eff["kv_cache_memory_bytes"] == 1073741824
        assert eff["enable_prefix_caching"] is True and eff["max_num_seqs"] == 128
        assert p["cache_config_info"]["num_gpu_blocks"] == "4096"
        assert e.reset_cache() is True
        resets = [c for c in fake.calls if c[1] == "/reset_prefix_cache"]
        assert len(resets) == 2


def test_vllm_reset_without_dev_mode_is_a_clear_error(tmp_path):
    with FakeEngine() as fake:
        e = _external("vllm", fake.url, tmp_path)
        with pytest.raises(EngineError, match="VLLM_SERVER_DEV_MODE=1"):
            e.reset_cache()


def test_sglang_provenance_metrics_and_flush(tmp_path):
    with FakeEngine() as fake:
        fake.route("GET", "/health_generate", (503, ""), (200, ""))
        _warm_up_route(fake)
        # An older SGLang: /server_info is missing, /get_server_info answers.
        fake.route("GET", "/get_server_info", (200, json.loads((FIXTURES / "sglang_get_server_info.json").read_text())))
        fake.route("GET", "/metrics", (200, (FIXTURES / "sglang_metrics.txt").read_text()))
        fake.route("POST", "/flush_cache", (400, "Cache flushed.\nPlease check backend logs"), (200, "Cache flushed."))
        e = _external("sglang", fake.url, tmp_path, startup_timeout_s=10)
        e.start()
        p = e.provenance()
        assert p["engine_version"] == "0.5.6"
        eff = p["effective"]
        assert eff["tensor_parallel_size"] == 2 and eff["kv_cache_tokens"] == 412160
        assert eff["enable_prefix_caching"] is True and eff["max_num_seqs"] == 64 and eff["dtype"] == "bfloat16"
        m = e.server_metrics()
        assert m == {"running": 23.0, "waiting": 3.0, "kv_cache_usage": 0.28,
                     "prefix_cache_hit_rate": 0.007507552643049313, "prefix_cache_queries": 8.128902e6,
                     "prefix_cache_hits": 2.5e6, "preemptions": 4.0, "prompt_tokens": 8.128902e6,
                     "generation_tokens": 7.557572e6, "spec_decode_accept_rate": 0.0}
        assert e.reset_cache() is True
        assert [c[1] for c in fake.calls].count("/flush_cache") == 2
        assert [c[1] for c in fake.calls].count("/health_generate") == 2


def _stream(fake, tmp_path, fixture):
    fake.streams["/v1/completions"] = (FIXTURES / fixture).read_bytes()
    e = _external("sglang", fake.url, tmp_path)
    d = e.dialect()
    cfg = ClientConfig(base_url=fake.url, model="tiny", extra_body=d["extra_body"],
                       continuous_usage=d["continuous_usage"])

    async def go():
        async with StreamingClient(cfg) as c:
            rec = RequestRecord(request_id="r0", scheduled_ns=0, expected_prompt_tokens=12, max_tokens=6)
            return await c.send(rec, c.body("hello", 6))

    rec = asyncio.run(go())
    attribute_tokens(rec)  # the metrics' rule, as the dispatcher applies it
    return rec


def test_sglang_recorded_stream_multi_token_chunks(tmp_path):
    with FakeEngine() as fake:
        rec = _stream(fake, tmp_path, "sglang_completions_stream.txt")
        body = json.loads(fake.calls[-1][2])
    assert body["ignore_eos"] is True and "min_tokens" not in body and body["max_tokens"] == 6
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert rec.status == "ok" and rec.finish_reason == "length"
    assert rec.response_id == "5c0f1e2d3b4a49b7a1d2c3e4f5a6b7c8"
    assert rec.output_tokens == 6 and rec.prompt_tokens == 12
    assert rec.chunk_tokens == [1, 2, 1, 2] and rec.tokens_source == "usage_continuous"
    # Each chunk was received after the fake sent it (ground truth), in order.
    assert len(rec.chunk_ns) == 4
    assert all(got >= sent for got, sent in zip(rec.chunk_ns, fake.sent_ns[:4]))


def test_sglang_recorded_abort_is_invalid_response(tmp_path):
    with FakeEngine() as fake:
        rec = _stream(fake, tmp_path, "sglang_completions_abort_stream.txt")
    assert rec.status == "invalid_response"
    assert "KV cache pool is full" in rec.error and rec.output_tokens == 1


def test_openai_records_models_and_version(tmp_path):
    with FakeEngine() as fake:
        fake.route("GET", "/v1/models", (200, {"object": "list", "data": [{"id": "served-x"}]}))
        fake.route("GET", "/version", (200, {"version": "9.9.9"}))
        _warm_up_route(fake)
        e = _external("openai", fake.url, tmp_path)
        e.start()
        p = e.provenance()
    assert p["v1_models"]["data"][0]["id"] == "served-x" and p["engine_version"] == "9.9.9"
    assert e.server_metrics() == {}


def test_transformers_recorded_stream_without_text_names_the_generated_tokens(tmp_path):
    # transformers serve 5.24.0, tiny model v1, synthetic request r0000299 (seed 0): 64 tokens
    # generated, each an unfinished UTF-8 byte, so the only event is the final one with no text.
    with FakeEngine() as fake:
        fake.streams["/v1/completions"] = (FIXTURES / "transformers_serve_completions_no_text_stream.txt").read_bytes()
        cfg = ClientConfig(base_url=fake.url, model="tiny", continuous_usage=False)

        async def go():
            async with StreamingClient(cfg) as c:
                rec = RequestRecord(request_id="r0000299", scheduled_ns=0, expected_prompt_tokens=128, max_tokens=64)
                return await c.send(rec, c.body("hello", 64))

        rec = asyncio.run(go())
    attribute_tokens(rec)
    assert rec.status == "invalid_response" and rec.finish_reason == "length"
    assert "usage.completion_tokens=64" in rec.error and rec.chunk_ns == []
    assert rec.output_tokens == 64 and rec.prompt_tokens == 128
