"""The ``engine`` group: one schema per adapter family (conf/engine/*.yaml)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from omegaconf import MISSING

from conf.schema.rules import checked


@dataclass
class SharedFeatures:
    """``engine.features.*`` for vLLM and SGLang (engines/features.py says what each means)."""
    prefix_caching: Optional[bool] = None
    chunked_prefill: Optional[bool] = None
    max_num_batched_tokens: Optional[int] = checked(None, ge=1)
    max_num_seqs: Optional[int] = checked(None, ge=1)
    kv_cache_dtype: Optional[str] = None
    quantization: Optional[str] = None
    speculative: Any = None  # {method, draft_model, num_tokens, ...}: checked by engines/features.py
    lora: Any = None  # {adapters: {NAME: PATH}, max_rank: R}: LoRA adapters served beside the model (vLLM)
    tensor_parallel_size: Optional[int] = checked(None, ge=1)
    enforce_eager: Optional[bool] = None
    attention_backend: Optional[str] = None
    dtype: Optional[str] = None


@dataclass
class TransformersFeatures:
    """``engine.features.*`` for ``transformers serve``."""
    continuous_batching: Optional[bool] = True
    attn_implementation: Optional[str] = None
    compile: Optional[bool] = None
    quantization: Optional[str] = None
    max_batch_tokens: Optional[int] = checked(None, ge=1)
    kv_cache_blocks: Optional[int] = checked(None, ge=1)
    dtype: Optional[str] = None
    attention_backend: Optional[str] = None       # the shared vocabulary's names for two of the above
    max_num_batched_tokens: Optional[int] = checked(None, ge=1)


@dataclass
class EngineBase:
    name: str = MISSING  # the adapter: transformers | vllm | sglang | dynamo | openai (engine=NAME)
    # false: drive a server already up at base_url (scraped, reset, described; not started or stopped)
    launch: bool = True
    model: Optional[str] = None              # null: the embedded tiny random-weight Llama, built once and cached
    tokenizer: Optional[str] = None          # tokenizer used to build prompts; null: the model's
    served_model_name: Optional[str] = None
    revision: Optional[str] = None
    python: Optional[str] = None             # interpreter to launch the engine with; null: this one
    command: Optional[List[str]] = None      # the full argument list instead of the built one ({host}, {port} filled)
    extra_args: List[str] = field(default_factory=list)  # flags appended to the built command
    # environment of the engine's process (+engine.env.OMP_NUM_THREADS=1)
    env: Dict[str, str] = field(default_factory=dict)
    host: str = "127.0.0.1"
    port: Optional[int] = checked(None, ge=1, le=65535)
    base_url: Optional[str] = None            # http(s)://HOST:PORT of the endpoint; null: the launched engine's
    device: Optional[str] = None
    api: str = checked("completions", choices=("completions", "chat"))  # which OpenAI route to drive
    api_key: Optional[str] = None            # prefer api_key_env: a key given here is redacted everywhere
    api_key_env: Optional[str] = None         # read the API key from $VAR (keys never reach files, MLflow or reports)
    # fields added to every request body (+engine.request_extra.temperature=0)
    request_extra: Dict[str, Any] = field(default_factory=dict)
    exact_output: bool = True                # ignore_eos where the engine takes it: outputs run to max_tokens
    continuous_usage: bool = False           # stream_options.continuous_usage_stats
    max_model_len: Optional[int] = checked(None, ge=1)  # prompt + output limit; longer requests: workload.on_too_long
    seed: Optional[int] = None
    startup_timeout_s: float = checked(600.0, gt=0)  # how long health waits for a launched engine
    reset_timeout_s: float = checked(30.0, gt=0)
    # warm: as the previous run left it; cold: emptied before each run; primed: emptied, then one
    # request per shared prefix (workload.prefix_groups) before the load (harness/scenarios.py)
    cache_state: str = checked("warm", choices=("warm", "cold", "primed"))
    # The watchdog (engines/watchdog.py) of a launched engine: a look every health_interval_s
    # (0: none); /health unanswered for hang_timeout_s is a hang.  A failed engine fails its
    # load point; then the sweep stops (resumable) or restarts the engine for the next point.
    health_interval_s: float = checked(2.0, ge=0)
    hang_timeout_s: float = checked(30.0, gt=0)
    on_failure: str = checked("stop", choices=("stop", "restart"))
    # An endpoint that is already a deployment (an llm-d or Dynamo gateway, a router): each
    # replica's own /metrics page, scraped and labelled per replica (engine=openai, launch=false)
    replica_metrics_urls: List[str] = field(default_factory=list)
    # Replicas already up (http://HOST:PORT each) that the harness puts its own router in front
    # of (router=vllm|sglang; engine.launch=false); their /metrics are scraped per replica too
    replica_urls: List[str] = field(default_factory=list)


@dataclass
class SharedEngine(EngineBase):
    features: SharedFeatures = field(default_factory=SharedFeatures)


@dataclass
class TransformersEngine(EngineBase):
    features: TransformersFeatures = field(default_factory=TransformersFeatures)


@dataclass
class OpenAIEngine(EngineBase):
    # No knobs: an endpoint we do not launch; any key given is refused by the adapter by name.
    features: Dict[str, Any] = field(default_factory=dict)


@dataclass
class DynamoMocker:
    """``engine.mocker.*``: how Dynamo's mocker workers (``python -m dynamo.mocker``) emulate an
    engine and time it; null leaves the mocker's own default (engines/dynamo.py)."""
    engine_type: str = checked("vllm", choices=("vllm", "sglang", "trtllm"))  # whose scheduler it emulates
    speedup_ratio: float = checked(1.0, ge=0)  # emulated time / this (0: no delays at all)
    decode_speedup_ratio: Optional[float] = checked(None, gt=0)
    # timing: a measured profile's folder (--planner-profile-data), else aiconfigurator's model
    # (--aic-perf-model, needs aiconfigurator-core beside Dynamo) for aic_system, else Dynamo's polynomial
    planner_profile_data: Optional[str] = None
    aic_system: Optional[str] = None          # e.g. h200_sxm
    aic_backend: Optional[str] = checked(None, choices=("vllm", "sglang", "trtllm"))
    aic_backend_version: Optional[str] = None
    aic_tp_size: Optional[int] = checked(None, ge=1)
    num_gpu_blocks: Optional[int] = checked(None, ge=1)  # KV blocks per worker (--num-gpu-blocks-override)
    block_size: Optional[int] = checked(None, ge=1)
    preemption_mode: Optional[str] = checked(None, choices=("lifo", "fifo"))
    startup_time_s: Optional[float] = checked(None, ge=0)  # an emulated engine start (--startup-time)
    kv_transfer_bandwidth: Optional[float] = checked(None, ge=0)  # GB/s, disaggregated (0: no transfer delay)
    # reasoning output: {start_thinking_token_id, end_thinking_token_id, thinking_ratio}; {}: none
    # (a dict default, not None: OmegaConf cannot merge a command-line dict into a None node)
    reasoning: Dict[str, Any] = field(default_factory=dict)


@dataclass
class DynamoEngine(EngineBase):
    """``engine=dynamo``: Dynamo's frontend and its workers, each a process (engines/dynamo.py)."""
    features: SharedFeatures = field(default_factory=SharedFeatures)
    worker: str = checked("mocker", choices=("mocker", "vllm", "sglang", "trtllm"))  # python -m dynamo.<worker>
    workers: int = checked(1, ge=1)           # aggregated workers (deployment=disaggregated: its prefill/decode)
    router_mode: str = checked("round-robin", choices=("round-robin", "random", "power-of-two", "kv", "least-loaded"))
    planner: bool = False                     # Dynamo's planner (refused: not driven by tokenfactory yet)
    frontend_args: List[str] = field(default_factory=list)  # flags appended to the frontend's command
    worker_args: List[str] = field(default_factory=list)    # flags appended to every worker's command
    mocker: DynamoMocker = field(default_factory=DynamoMocker)
