"""SGLang's server (``python -m sglang.launch_server``), launched from the interpreter the
config names.

Health is ``/health_generate`` (it runs one decode step, so "healthy" means "serves");
provenance comes from ``/server_info`` (``/get_server_info`` on older releases), which holds
the effective server arguments, the KV pool size and the version; ``/flush_cache`` empties
the radix cache (refused while requests run, so it is retried); ``--enable-metrics`` turns
on ``/metrics``.  Its OpenAI routes accept ``ignore_eos`` and
``stream_options.continuous_usage_stats`` as vLLM's do.
"""

from __future__ import annotations

from engines.base import EngineAdapter, interpreter_package_version
from engines.features import SHARED_KNOBS

# The shared speculative methods under SGLang's names for them.
SPEC_METHODS = {"eagle": "EAGLE", "eagle3": "EAGLE3", "nextn": "NEXTN", "mtp": "NEXTN", "ngram": "NGRAM",
                "draft_model": "STANDALONE", "standalone": "STANDALONE"}


class SGLang(EngineAdapter):
    name = "sglang"
    health_path = "/health_generate"
    liveness_path = "/health"  # under load: /health_generate would queue a generation every check
    module = "sglang.launch_server"
    supported_features = SHARED_KNOBS
    launch_flags = {"model": "--model-path", "served_model_name": "--served-model-name",
                    "max_model_len": "--context-length", "revision": "--revision", "device": "--device",
                    "seed": "--random-seed"}
    # --enable-cache-report: usage.prompt_tokens_details.cached_tokens (requests.parquet's cached_tokens)
    always_flags = ("--enable-metrics", "--enable-cache-report")
    takes_exact_output = True
    reset_path = "/flush_cache"   # refused (HTTP 400) while requests run or wait: retried
    server_metric_map = {
        "running": ("sglang:num_running_reqs", None),
        "waiting": ("sglang:num_queue_reqs", None),
        "kv_cache_usage": ("sglang:token_usage", None),
        "prefix_cache_hit_rate": ("sglang:cache_hit_rate", None),
        # prompt tokens looked up and found in the radix cache: the same pair vLLM counts
        "prefix_cache_queries": ("sglang:prompt_tokens_total", None),
        "prefix_cache_hits": ("sglang:cached_tokens_total", None),
        "preemptions": ("sglang:num_retracted_requests_total", None),
        "prompt_tokens": ("sglang:prompt_tokens_total", None),
        "generation_tokens": ("sglang:generation_tokens_total", None),
        "spec_decode_accept_rate": ("sglang:spec_accept_rate", None),
        "spec_decode_accept_length": ("sglang:spec_accept_length", None),
    }

    # --- launch --------------------------------------------------------------------------
    def feature_flags(self) -> list[str]:
        f = self.features()
        argv: list[str] = []
        if f.get("prefix_caching") is False:
            argv.append("--disable-radix-cache")
        if "chunked_prefill" in f:
            if f["chunked_prefill"]:
                argv += ["--chunked-prefill-size", str(f.get("max_num_batched_tokens") or 8192)]
            else:
                argv += ["--chunked-prefill-size", "-1"]
                if "max_num_batched_tokens" in f:
                    argv += ["--max-prefill-tokens", str(f["max_num_batched_tokens"])]
        elif "max_num_batched_tokens" in f:
            argv += ["--chunked-prefill-size", str(f["max_num_batched_tokens"])]
        if f.get("enforce_eager"):
            argv.append("--disable-cuda-graph")
        for knob, flag in (("max_num_seqs", "--max-running-requests"), ("kv_cache_dtype", "--kv-cache-dtype"),
                           ("quantization", "--quantization"), ("tensor_parallel_size", "--tp-size"),
                           ("attention_backend", "--attention-backend"), ("dtype", "--dtype")):
            if knob in f:
                argv += [flag, str(f[knob])]
        if "speculative" in f:
            argv += self.speculative_flags(f["speculative"])
        return argv

    def disaggregation_flags(self, role: str, deployment, bootstrap_port: int | None = None) -> list[str]:
        """SGLang's documented P/D flags: ``--disaggregation-mode prefill|decode``, the transfer
        backend (``deployment.kv_connector``: mooncake, its default, or nixl) and, on a prefill
        replica, the bootstrap port the router names beside its URL."""
        argv = ["--disaggregation-mode", role]
        if deployment.kv_connector:
            argv += ["--disaggregation-transfer-backend", str(deployment.kv_connector)]
        if role == "prefill" and bootstrap_port is not None:
            argv += ["--disaggregation-bootstrap-port", str(bootstrap_port)]
        return argv

    @staticmethod
    def speculative_flags(spec: dict) -> list[str]:
        method = str(spec["method"])
        algo = SPEC_METHODS.get(method.lower(), method.upper())
        argv = ["--speculative-algorithm", algo]
        if spec.get("draft_model"):
            argv += ["--speculative-draft-model-path", str(spec["draft_model"])]
        if spec.get("num_tokens"):
            argv += ["--speculative-num-draft-tokens", str(int(spec["num_tokens"]))]
        for k, v in spec.items():  # SGLang's own keys, e.g. num_steps, eagle_topk
            if k not in ("method", "draft_model", "num_tokens"):
                argv += [f"--speculative-{k.replace('_', '-')}", str(v)]
        return argv

    # --- what it is ----------------------------------------------------------------------
    def server_info(self) -> dict | None:
        """``/server_info`` (``/get_server_info`` on older releases), or None."""
        for path in ("/server_info", "/get_server_info"):
            info = self.get_json(path, timeout=30)
            if info is not None:
                return info
        return None

    def version(self) -> str | None:
        info = self.server_info()
        if info and info.get("version"):
            return str(info["version"])
        if self.launched:
            return interpreter_package_version(self.python(), "sglang")
        return None

    def provenance(self) -> dict:
        p = super().provenance()
        info = self.server_info()
        if info:
            p["effective"] = effective_config(info)
            p["server_info"] = info
            if info.get("version"):
                p["engine_version"] = str(info["version"])
        else:
            p["effective"] = {"note": "/server_info and /get_server_info unavailable"}
        return p


def effective_config(info: dict) -> dict:
    """What a comparison needs from SGLang's server info: model, dtype, parallelism, KV budget."""
    states = info.get("internal_states") or [{}]
    st = states[0] if isinstance(states, list) and states and isinstance(states[0], dict) else {}

    def get(k):
        return info.get(k, st.get(k))

    return {
        "model": get("model_path"), "revision": get("revision"), "tokenizer": get("tokenizer_path"),
        "dtype": get("dtype"), "max_model_len": get("context_length"), "quantization": get("quantization"),
        "enforce_eager": get("disable_cuda_graph"), "seed": get("random_seed"),
        "tensor_parallel_size": get("tp_size"), "pipeline_parallel_size": get("pp_size"),
        "data_parallel_size": get("dp_size"), "expert_parallel_size": get("ep_size"),
        "context_parallel_size": get("attn_cp_size"),
        "enable_prefix_caching": (not get("disable_radix_cache")) if get("disable_radix_cache") is not None else None,
        "kv_cache_dtype": get("kv_cache_dtype"), "page_size": get("page_size"),
        "kv_cache_tokens": get("max_total_num_tokens"), "mem_fraction_static": get("mem_fraction_static"),
        "max_num_seqs": get("max_running_requests"), "chunked_prefill_size": get("chunked_prefill_size"),
        "max_prefill_tokens": get("max_prefill_tokens"), "attention_backend": get("attention_backend"),
        "speculative_algorithm": get("speculative_algorithm"),
        "speculative_draft_model": get("speculative_draft_model_path"),
        "speculative_num_draft_tokens": get("speculative_num_draft_tokens"),
    }
