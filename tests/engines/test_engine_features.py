"""The shared knob vocabulary, translated by each adapter into its own flags."""

import json

import pytest

from engines.base import EngineError, redact_argv
from engines.registry import make_engine
from tests.engine_cfg import engine_cfg

ALL_ON = {"features.prefix_caching": True, "features.chunked_prefill": True,
          "features.max_num_batched_tokens": 4096, "features.max_num_seqs": 32, "features.kv_cache_dtype": "fp8",
          "features.quantization": "awq", "features.tensor_parallel_size": 2, "features.enforce_eager": True,
          "features.attention_backend": "FLASHINFER", "features.dtype": "bfloat16",
          "features.speculative": {"method": "draft_model", "draft_model": "/m/draft", "num_tokens": 4}}


def _engine(name, tmp_path, **over):
    return make_engine(engine_cfg(name, **{"python": "/venv/bin/python", "model": "/m/tiny", "port": 8123, **over}),
                       tmp_path)


def test_vllm_translates_every_knob(tmp_path):
    e = _engine("vllm", tmp_path, **ALL_ON)
    flags = e.feature_flags()
    assert flags[:3] == ["--enable-prefix-caching", "--enable-chunked-prefill", "--enforce-eager"]
    pairs = dict(zip(flags[3:-2:2], flags[4:-2:2]))
    assert pairs == {"--max-num-batched-tokens": "4096", "--max-num-seqs": "32", "--kv-cache-dtype": "fp8",
                     "--quantization": "awq", "--tensor-parallel-size": "2", "--attention-backend": "FLASHINFER",
                     "--dtype": "bfloat16"}
    assert flags[-2] == "--speculative-config"
    assert json.loads(flags[-1]) == {"method": "draft_model", "model": "/m/draft", "num_speculative_tokens": 4}
    argv = e.full_command()
    assert argv[:3] == ["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    assert argv[argv.index("--model") + 1] == "/m/tiny" and argv[argv.index("--port") + 1] == "8123"
    assert argv[argv.index("--max-model-len") + 1] == "2048"


def test_vllm_off_switches_and_defaults(tmp_path):
    e = _engine("vllm", tmp_path, **{"features.prefix_caching": False, "features.chunked_prefill": "false",
                                     "extra_args": ["--block-size", "16"]})
    assert e.feature_flags() == ["--no-enable-prefix-caching", "--no-enable-chunked-prefill"]
    assert e.full_command()[-2:] == ["--block-size", "16"]
    # Knobs left null leave the engine's own defaults: no flag at all.
    assert _engine("vllm", tmp_path).feature_flags() == []
    assert e.launch_env()["VLLM_SERVER_DEV_MODE"] == "1"
    assert e.launch_env()["VLLM_CPU_KVCACHE_SPACE"] == "1"


def test_sglang_translates_every_knob(tmp_path):
    e = _engine("sglang", tmp_path, **{**ALL_ON, "features.prefix_caching": False,
                                       "features.speculative": {"method": "eagle", "draft_model": "/m/eagle",
                                                                "num_tokens": 4, "num_steps": 3}})
    flags = e.feature_flags()
    assert flags == ["--disable-radix-cache", "--chunked-prefill-size", "4096", "--disable-cuda-graph",
                     "--max-running-requests", "32", "--kv-cache-dtype", "fp8", "--quantization", "awq",
                     "--tp-size", "2", "--attention-backend", "FLASHINFER", "--dtype", "bfloat16",
                     "--speculative-algorithm", "EAGLE", "--speculative-draft-model-path", "/m/eagle",
                     "--speculative-num-draft-tokens", "4", "--speculative-num-steps", "3"]
    argv = e.full_command()
    assert argv[:3] == ["/venv/bin/python", "-m", "sglang.launch_server"]
    assert "--enable-metrics" in argv and argv[argv.index("--context-length") + 1] == "2048"
    assert argv[argv.index("--model-path") + 1] == "/m/tiny"


def test_sglang_chunked_prefill_off_keeps_the_batch_budget(tmp_path):
    e = _engine("sglang", tmp_path, **{"features.chunked_prefill": False, "features.max_num_batched_tokens": 2048,
                                       "features.prefix_caching": True})
    assert e.feature_flags() == ["--chunked-prefill-size", "-1", "--max-prefill-tokens", "2048"]


def _compose_error(overrides: list[str]) -> str:
    """The message a user sees for these overrides: composition (OmegaConf) or range (conf.schema)."""
    from hydra import compose, initialize_config_module

    from conf.schema import validate

    try:
        with initialize_config_module("conf", version_base="1.3"):
            validate(compose("config", overrides=overrides))
    except Exception as e:  # noqa: BLE001 - whichever layer caught it, the message must name the key
        return f"{e} {e.__cause__ or ''}"
    raise AssertionError(f"{overrides} composed without error")


def test_unsupported_knob_names_engine_and_knob(tmp_path):
    # Typed engines refuse a knob they lack while the config is composed, naming the full key ...
    msg = _compose_error(["engine=transformers", "engine.features.prefix_caching=true"])
    assert "engine.features.prefix_caching" in msg and "TransformersFeatures" in msg
    msg = _compose_error(["engine=vllm", "+engine.features.continuous_batching=true"])
    assert "engine.features.continuous_batching: not a field of SharedFeatures" in msg
    # ... and the adapter names engine and knob for configs that reach it otherwise.
    o = make_engine(engine_cfg("openai", base_url="http://127.0.0.1:1", model="m",
                               **{"features.max_num_seqs": 4}), tmp_path)
    with pytest.raises(EngineError, match="engine=openai does not support engine.features.max_num_seqs"):
        o.prepare()


def test_transformers_takes_the_shared_names_it_has(tmp_path):
    e = _engine("transformers", tmp_path, **{"features.attention_backend": "sdpa",
                                             "features.max_num_batched_tokens": 512})
    e.check_features()
    f = e.feature_flags()
    assert f[f.index("--attn-implementation") + 1] == "sdpa" and f[f.index("--cb-max-batch-tokens") + 1] == "512"


@pytest.mark.parametrize("knob,value,msg", [
    ("speculative", "ngram", "speculative must be a mapping"),
    ("speculative", {"num_tokens": 3}, "speculative.method is required"),
])
def test_bad_knob_values_are_named(tmp_path, knob, value, msg):
    e = _engine("vllm", tmp_path, **{f"features.{knob}": value})
    with pytest.raises(EngineError, match=f"engine=vllm: engine.features.{msg}"):
        e.feature_flags()


@pytest.mark.parametrize("override,msg", [
    ("engine.features.prefix_caching=maybe", "engine.features.prefix_caching"),
    ("engine.features.max_num_seqs=0", "engine.features.max_num_seqs=0: must be >= 1"),
    ("engine.features.max_num_seqs=lots", "engine.features.max_num_seqs"),
])
def test_bad_knob_values_are_named_at_composition(override, msg):
    assert msg in _compose_error(["engine=vllm", override])


def test_dialects_ask_for_exact_output_and_continuous_usage(tmp_path):
    for name in ("vllm", "sglang"):
        d = _engine(name, tmp_path).dialect()
        assert d["extra_body"] == {"ignore_eos": True} and d["continuous_usage"] is True
        d = _engine(name, tmp_path, exact_output=False, continuous_usage=False).dialect()
        assert d["extra_body"] == {} and d["continuous_usage"] is False


def test_credentials_never_reach_recorded_commands():
    argv = ["python", "-m", "x", "--api-key", "sk-1", "--hf-token=hf_2", "--port", "1"]
    assert redact_argv(argv) == ["python", "-m", "x", "--api-key", "***redacted***", "--hf-token=***redacted***",
                                 "--port", "1"]
    # words that merely contain "token" or "key" are not credentials
    assert redact_argv(["--max-num-batched-tokens", "512", "--ssl-keyfile", "k.pem"]) == [
        "--max-num-batched-tokens", "512", "--ssl-keyfile", "k.pem"]
    from harness.experiment_record import _redact_override
    assert _redact_override("workload.input_tokens=512") == "workload.input_tokens=512"
    assert _redact_override("engine.api_key=sk-1") == "engine.api_key=***redacted***"


def test_engines_always_ask_for_cached_prompt_tokens(tmp_path):
    """requests.parquet's cached_tokens needs the server to report usage.prompt_tokens_details:
    vLLM only with --enable-prompt-tokens-details, SGLang only with --enable-cache-report."""
    assert _engine("vllm", tmp_path).launch_command().count("--enable-prompt-tokens-details") == 1
    assert _engine("sglang", tmp_path).launch_command().count("--enable-cache-report") == 1
