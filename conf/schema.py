"""The typed schema of every config group: one dataclass per group (stored in Hydra's
ConfigStore as ``<group>/schema``), so OmegaConf checks types and unknown keys while Hydra
composes, naming the full key (``load.rate``, ``engine.features.max_num_seqs``).

Each YAML file of a group starts from its schema (``defaults: [schema, _self_]``) and
writes only what differs from it: a key is defined once, here.  What types cannot say
(ranges, a choice among names) is in each field's metadata and checked by ``validate``
right after composition, with the same full key in the message:

- ``ge`` / ``gt`` / ``le`` / ``lt``: bounds of a number, which must also be finite (None
  passes: the field is unset);
- ``choices``: the allowed values of a string;
- ``folder``: a name that becomes a folder (``results/<experiment>/``): relative, no ``..``;
- ``each``: rules for every value of a mapping or list field.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, TypeVar

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, ListConfig, OmegaConf

T = TypeVar("T")


class ConfigError(ValueError):
    """A config value outside what its field allows; the message names the full key."""


def _f(default=None, *, factory=None, **rules):
    """A field with checks for ``validate`` (``ge``, ``gt``, ``le``, ``lt``, ``choices``)."""
    if factory is not None:
        return field(default_factory=factory, metadata=rules)
    return field(default=default, metadata=rules)


# ------------------------------------------------------------------------------------ engine
@dataclass
class SharedFeatures:
    """``engine.features.*`` for vLLM and SGLang (engines/features.py says what each means)."""
    prefix_caching: Optional[bool] = None
    chunked_prefill: Optional[bool] = None
    max_num_batched_tokens: Optional[int] = _f(None, ge=1)
    max_num_seqs: Optional[int] = _f(None, ge=1)
    kv_cache_dtype: Optional[str] = None
    quantization: Optional[str] = None
    speculative: Any = None  # {method, draft_model, num_tokens, ...}: checked by engines/features.py
    lora: Any = None  # {adapters: {NAME: PATH}, max_rank: R}: LoRA adapters served beside the model (vLLM)
    tensor_parallel_size: Optional[int] = _f(None, ge=1)
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
    max_batch_tokens: Optional[int] = _f(None, ge=1)
    kv_cache_blocks: Optional[int] = _f(None, ge=1)
    dtype: Optional[str] = None
    attention_backend: Optional[str] = None       # the shared vocabulary's names for two of the above
    max_num_batched_tokens: Optional[int] = _f(None, ge=1)


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
    port: Optional[int] = _f(None, ge=1, le=65535)
    base_url: Optional[str] = None            # http(s)://HOST:PORT of the endpoint; null: the launched engine's
    device: Optional[str] = None
    api: str = _f("completions", choices=("completions", "chat"))  # which OpenAI route to drive
    api_key: Optional[str] = None            # prefer api_key_env: a key given here is redacted everywhere
    api_key_env: Optional[str] = None         # read the API key from $VAR (keys never reach files, MLflow or reports)
    # fields added to every request body (+engine.request_extra.temperature=0)
    request_extra: Dict[str, Any] = field(default_factory=dict)
    exact_output: bool = True                # ignore_eos where the engine takes it: outputs run to max_tokens
    continuous_usage: bool = False           # stream_options.continuous_usage_stats
    max_model_len: Optional[int] = _f(None, ge=1)  # prompt + output limit; longer requests: workload.on_too_long
    seed: Optional[int] = None
    startup_timeout_s: float = _f(600.0, gt=0)  # how long health waits for a launched engine
    reset_timeout_s: float = _f(30.0, gt=0)
    # warm: as the previous run left it; cold: emptied before each run; primed: emptied, then one
    # request per shared prefix (workload.prefix_groups) before the load (harness/scenarios.py)
    cache_state: str = _f("warm", choices=("warm", "cold", "primed"))
    # The watchdog (engines/watchdog.py) of a launched engine: a look every health_interval_s
    # (0: none); /health unanswered for hang_timeout_s is a hang.  A failed engine fails its
    # load point; then the sweep stops (resumable) or restarts the engine for the next point.
    health_interval_s: float = _f(2.0, ge=0)
    hang_timeout_s: float = _f(30.0, gt=0)
    on_failure: str = _f("stop", choices=("stop", "restart"))
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
    engine_type: str = _f("vllm", choices=("vllm", "sglang", "trtllm"))  # whose scheduler it emulates
    speedup_ratio: float = _f(1.0, ge=0)      # emulated time / this (0: no delays at all)
    decode_speedup_ratio: Optional[float] = _f(None, gt=0)
    # timing: a measured profile's folder (--planner-profile-data), else aiconfigurator's model
    # (--aic-perf-model, needs aiconfigurator-core beside Dynamo) for aic_system, else Dynamo's polynomial
    planner_profile_data: Optional[str] = None
    aic_system: Optional[str] = None          # e.g. h200_sxm
    aic_backend: Optional[str] = _f(None, choices=("vllm", "sglang", "trtllm"))
    aic_backend_version: Optional[str] = None
    aic_tp_size: Optional[int] = _f(None, ge=1)
    num_gpu_blocks: Optional[int] = _f(None, ge=1)   # KV blocks per worker (--num-gpu-blocks-override)
    block_size: Optional[int] = _f(None, ge=1)
    preemption_mode: Optional[str] = _f(None, choices=("lifo", "fifo"))
    startup_time_s: Optional[float] = _f(None, ge=0)  # an emulated engine start (--startup-time)
    kv_transfer_bandwidth: Optional[float] = _f(None, ge=0)  # GB/s, disaggregated (0: no transfer delay)
    # reasoning output: {start_thinking_token_id, end_thinking_token_id, thinking_ratio}; {}: none
    # (a dict default, not None: OmegaConf cannot merge a command-line dict into a None node)
    reasoning: Dict[str, Any] = field(default_factory=dict)


@dataclass
class DynamoEngine(EngineBase):
    """``engine=dynamo``: Dynamo's frontend and its workers, each a process (engines/dynamo.py)."""
    features: SharedFeatures = field(default_factory=SharedFeatures)
    worker: str = _f("mocker", choices=("mocker", "vllm", "sglang", "trtllm"))  # python -m dynamo.<worker>
    workers: int = _f(1, ge=1)                # aggregated workers (deployment=disaggregated: its prefill/decode)
    router_mode: str = _f("round-robin", choices=("round-robin", "random", "power-of-two", "kv", "least-loaded"))
    planner: bool = False                     # Dynamo's planner (refused: not driven by tokenfactory yet)
    frontend_args: List[str] = field(default_factory=list)  # flags appended to the frontend's command
    worker_args: List[str] = field(default_factory=list)    # flags appended to every worker's command
    mocker: DynamoMocker = field(default_factory=DynamoMocker)


# ------------------------------------------------------------------------------------ deployment
@dataclass
class Placement:
    """Where each replica runs (engines/placement.py).  Lists give one entry per replica, in
    the order prefill replicas then decode replicas (deployment=disaggregated)."""
    cpus: List[str] = field(default_factory=list)     # CPU cores per replica ("0", "1", "2-3"): the process is pinned
    devices: List[str] = field(default_factory=list)  # CUDA_VISIBLE_DEVICES per replica ("0", "1", "2,3")
    # deployment.backend=ray: one placement-group bundle per replica (and one for the router)
    ray_address: Optional[str] = None                 # null: client.ray.address, else a local cluster
    ray_strategy: str = _f("SPREAD", choices=("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"))
    ray_bundle: Dict[str, float] = field(default_factory=lambda: {"CPU": 1.0})  # resources per replica


@dataclass
class Autoscale:
    """How a deployment=replicas grows and shrinks with its load (engines/autoscale_policy.py): the
    same policy drives the harness's live scaling of real replicas (``enabled``) and the fleet
    simulation of ``tokenfactory plan``, so a plan can be checked against a real replay."""
    enabled: bool = False                     # live: the harness starts and stops replicas during the load
    # utilisation: arrivals over the trailing window / (replicas x capacity_rps);
    # queue: requests in flight (sent, not finished) per replica
    signal: str = _f("utilisation", choices=("utilisation", "queue"))
    target: float = _f(0.7, gt=0)             # utilisation kept (share of capacity), or in flight per replica
    # one replica's capacity (requests/s); null: plan takes the measured max load under the SLO
    capacity_rps: Optional[float] = _f(None, gt=0)
    window_s: float = _f(30.0, gt=0)          # the signal's trailing window
    interval_s: float = _f(5.0, gt=0)         # how often the policy decides
    # plan: seconds from the decision to a new replica serving; null: the measured cold start
    # (engine_startup_s).  Live: the real start of a real replica (this is not added).
    cold_start_s: Optional[float] = _f(None, ge=0)
    provision_s: float = _f(0.0, ge=0)        # before the replica's process starts (a node to acquire): live and plan
    # scale down to the most replicas the policy asked for over this trailing window (HPA's
    # stabilisation window), so a dip shorter than it stops no replica
    scale_down_delay_s: float = _f(120.0, ge=0)
    min_replicas: int = _f(1, ge=1)
    max_replicas: int = _f(4, ge=1)
    # live: a replica scaled down is stopped once its requests in flight are done, or this long
    # after it left the router (its requests still running then fail with it)
    drain_timeout_s: float = _f(60.0, ge=0)


@dataclass
class Deployment:
    """What serves the load: one engine (single), N replicas behind a router (replicas), or
    prefill and decode pools with the KV cache moved between them (disaggregated)."""
    kind: str = _f("single", choices=("single", "replicas", "disaggregated"))
    replicas: int = _f(1, ge=1)               # deployment=replicas: engine processes behind the router
    prefill: int = _f(1, ge=1)                # deployment=disaggregated: prefill replicas
    decode: int = _f(1, ge=1)                 # deployment=disaggregated: decode replicas
    backend: str = _f("local", choices=("local", "ray"))  # local processes, or Ray placement groups across nodes
    placement: Placement = field(default_factory=Placement)
    # deployment=disaggregated: the engine's KV connector (vLLM --kv-transfer-config kv_connector;
    # SGLang --disaggregation-transfer-backend); null: the engine's documented default
    kv_connector: Optional[str] = None
    kv_connector_extra: Dict[str, Any] = field(default_factory=dict)  # vLLM kv_connector_extra_config
    prefill_args: List[str] = field(default_factory=list)  # flags only prefill replicas get
    decode_args: List[str] = field(default_factory=list)   # flags only decode replicas get
    # The response header that names the replica which served a request (harness-launched vLLM
    # replicas set it; a gateway may set its own); absent: the row's replica is `unknown`
    replica_header: str = "x-tokenfactory-replica"
    first_port: Optional[int] = _f(None, ge=1, le=65535)  # replica i listens on first_port + i; null: free ports
    autoscale: Autoscale = field(default_factory=Autoscale)


@dataclass
class Router:
    """The router in front of the replicas (engines/routers.py): a real process from its PyPI
    package (vllm-router, sglang-router); `none` for a single engine."""
    name: str = _f("none", choices=("none", "vllm", "sglang"))
    policy: Optional[str] = None              # the router's own policy name (its --policy); null: its default
    host: str = "127.0.0.1"
    port: Optional[int] = _f(None, ge=1, le=65535)  # null: a free port
    binary: Optional[str] = None              # the router's executable; null: next to this Python, else on PATH
    extra_args: List[str] = field(default_factory=list)  # flags appended to the router's command
    startup_timeout_s: float = _f(60.0, gt=0)


# ------------------------------------------------------------------------------------ workload
@dataclass
class LengthDist:
    # lengths around the mean: fixed, uniform (min, max), normal (std), lognormal (sigma)
    kind: str = _f("fixed", choices=("fixed", "uniform", "normal", "lognormal"))
    min: Optional[int] = _f(None, ge=1)
    max: Optional[int] = _f(None, ge=1)
    std: Optional[float] = _f(None, gt=0)
    sigma: Optional[float] = _f(None, gt=0)


@dataclass
class PrefixGroups:
    count: int = _f(0, ge=0)                 # 0: no shared prefixes
    prefix_tokens: int = _f(0, ge=0)
    popularity: str = _f("uniform", choices=("uniform", "zipf"))
    zipf_s: float = _f(1.0, gt=0)


@dataclass
class LongTail:
    fraction: float = _f(0.0, ge=0, le=1)
    kind: str = _f("input", choices=("input", "output"))
    input_tokens: Optional[int] = _f(None, ge=1)
    output_tokens: Optional[int] = _f(None, ge=1)


@dataclass
class Burst:
    factor: float = _f(1.0, ge=1)
    start_s: Optional[float] = None
    end_s: Optional[float] = None


@dataclass
class SyntheticStress:
    long_tail: LongTail = field(default_factory=LongTail)


@dataclass
class TraceStress:
    burst: Burst = field(default_factory=Burst)
    long_tail: LongTail = field(default_factory=LongTail)


@dataclass
class LoraMix:
    """``workload.lora``: which LoRA adapter each request names as its ``model`` (the names the
    engine serves them under: vLLM's ``--lora-modules NAME=PATH``); loadgen/workloads/lora.py."""
    adapters: List[str] = field(default_factory=list)  # empty: every request to the base model
    shares: Optional[List[float]] = None     # one weight per adapter (normalised); null: from dist
    dist: str = _f("uniform", choices=("uniform", "zipf"))  # zipf: share of rank r (from 1) ~ 1 / r^zipf_s
    zipf_s: float = _f(1.0, gt=0)


@dataclass
class SyntheticWorkload:
    name: str = "synthetic"
    input_tokens: int = _f(128, ge=1)         # exact prompt length, in tokens of engine.tokenizer
    output_tokens: int = _f(64, ge=1)         # output length (max_tokens; exact where the engine takes ignore_eos)
    input_dist: LengthDist = field(default_factory=LengthDist)
    output_dist: LengthDist = field(default_factory=LengthDist)
    prefix_groups: PrefixGroups = field(default_factory=PrefixGroups)
    stress: SyntheticStress = field(default_factory=SyntheticStress)
    lora: LoraMix = field(default_factory=LoraMix)
    seed: int = 0


@dataclass
class TaskRule:
    """Tasks (DAGs of calls, loadgen/workloads/tasks.py): how an attempt is judged and retried,
    the tool time where the trace gives none, what a call's prompt carries."""
    max_attempts: int = _f(1, ge=1)          # an attempt that fails its check is run again, up to this many
    # success of an attempt (every call ok, and then): ok (nothing more) | rate (a verifier that
    # passes each attempt with success_rate, drawn from workload.seed) | regex (every sink's reply
    # matches success_regex)
    success: str = _f("ok", choices=("ok", "rate", "regex"))
    success_rate: float = _f(1.0, gt=0, le=1)
    success_regex: Optional[str] = None
    # the longest a success_regex match may run on one reply (it runs on the send loop: a
    # backtracking pattern would stall every send); over it the check fails, saying so in `error`
    success_regex_timeout_s: float = _f(0.01, gt=0)
    tool_s: float = _f(0.0, ge=0)            # tool time before a call whose line gives no tool_s
    tool_dist: str = _f("fixed", choices=("fixed", "exponential"))  # exponential: mean tool_s
    # a call's prompt: its prefix path, then the messages and replies of its ancestors (every call
    # it depends on, in the task's order) or of its parents only, then its own message
    context: str = _f("ancestors", choices=("ancestors", "parents"))
    # the shared prefix tree, declared once: {name: {tokens: N, children: {...}}}; a call's
    # `prefix` is a path in it (a tree in the trace file's first line wins over this one)
    prefix_tree: Optional[Any] = None


@dataclass
class TraceWorkload:
    name: str = MISSING
    path: Optional[str] = None               # the trace file (required: the reader says so)
    model_filter: Optional[str] = None       # burstgpt: keep one model's rows
    # a malformed line: error (file:line and text) | skip (counted in the summary)
    on_bad_line: str = _f("error", choices=("error", "skip"))
    # input + output over engine.max_model_len: error | clip | skip
    on_too_long: str = _f("error", choices=("error", "clip", "skip"))
    max_output_tokens: Optional[int] = _f(None, ge=1)  # cap every output (a small engine replaying a big trace)
    window: Optional[List[float]] = None     # [start_s, end_s] on the trace's own clock (0 = its first request)
    # keep each request (a session whole) with this probability, drawn from workload.seed: a trace
    # thinned to what an engine can take, its shape over time kept
    sample_fraction: Optional[float] = _f(None, gt=0, le=1)
    max_requests: Optional[int] = _f(None, ge=1)       # the first N requests (replay order) after the window
    time_scale: float = _f(1.0, gt=0)        # speed-up of the trace's clock (2: twice as fast; think times too)
    target_rate: Optional[float] = _f(None, gt=0)      # rescale time to this mean rate, keeping the burst shape
    think_s: float = _f(0.0, ge=0)           # think time between session turns where the trace gives none
    think_dist: str = _f("fixed", choices=("fixed", "exponential"))  # exponential: mean think_s
    task: TaskRule = field(default_factory=TaskRule)  # task workloads (task_id on the lines)
    stress: TraceStress = field(default_factory=TraceStress)  # burst: factor x rate over [start_s, end_s)
    lora: LoraMix = field(default_factory=LoraMix)
    seed: int = 0


# ------------------------------------------------------------------------------------ load
LOAD_KINDS = ("poisson", "constant", "gamma", "concurrency", "trace")


@dataclass
class Load:
    # arrival process (load=NAME): poisson | constant | gamma (open loop), concurrency (closed), trace
    kind: str = _f(MISSING, choices=LOAD_KINDS)
    rate: Optional[float] = _f(None, gt=0)            # open loop: requests/s
    concurrency: Optional[int] = _f(None, ge=1)       # closed loop: users
    burstiness: float = _f(1.0, gt=0)                 # gamma shape (1: Poisson)
    num_requests: Optional[int] = _f(None, ge=1)      # measured requests (warm-up on top)
    duration_s: Optional[float] = _f(None, gt=0)      # alternative: stop sending after this long
    warmup_requests: int = _f(2, ge=0)                # inside the cost window, outside latency statistics
    max_concurrency: Optional[int] = _f(None, ge=1)   # cap on requests in flight
    drain_timeout_s: float = _f(120.0, ge=0)          # after duration_s, how long in-flight requests may finish
    # open loop: stop a point whose backlog grows without bound; null: on, but off where
    # deployment.autoscale.enabled (an overload while a replica starts is what that run measures)
    stop_when_saturated: Optional[bool] = None
    seed: int = 0


# ------------------------------------------------------------------------------------ protocol
@dataclass
class SweepProtocol:
    name: str = "sweep"
    load_points: List[Any] = field(default_factory=list)  # numbers (rate or concurrency) or load mappings
    repeats: int = _f(1, ge=1)                # runs of each load point, its replicates (one label; `repeat` says which)
    dry_run: bool = False                     # print the plan and stop (the command line's --dry-run)
    # Step 4, adaptive (protocols/sweep/load_search.py): a probe of closed-loop runs at rising
    # concurrency finds the saturation and places num_points load points up to and past it ...
    probe: bool = False
    probe_max_concurrency: int = _f(256, ge=1)
    probe_requests_per_user: int = _f(8, ge=1)
    spacing: str = _f("geometric", choices=("linear", "geometric", "mlperf"))
    num_points: int = _f(6, ge=2)
    # ... and search=slo finds the highest load at which the SLO holds (bisection, per session)
    search: str = _f("none", choices=("none", "slo"))
    search_low: Optional[float] = _f(None, gt=0)    # default: the smallest load point (or probe x 0.1)
    search_high: Optional[float] = _f(None, gt=0)   # default: the largest load point (or probe x 1.2)
    search_tolerance: float = _f(0.1, gt=0, lt=1)   # stop when (first fail - last pass) <= this x last pass
    search_max_probes: int = _f(8, ge=2)
    # a miss below the bracket's upper end is re-measured this many times before it counts (a host
    # stall fails a small probe far below the knee: docs/measured/verdicts.md); 0: off
    search_recheck: int = _f(1, ge=0)


COMPARED_METRICS = ["output_throughput", "goodput_rps", "good_output_throughput", "slo_attainment",
                    "cost_per_mtok_good", "p50_ttft_ms", "p99_ttft_ms", "p50_tpot_ms", "p99_tpot_ms",
                    "p99_itl_ms", "error_rate",
                    # a run with tasks (metrics.tasks); a comparison of runs without leaves them out
                    "task_completion_rate", "p50_task_time_ms", "p99_task_time_ms", "attempts_per_completed_task",
                    "task_slo_attainment", "cost_per_completed_task", "cost_per_task_attempt",
                    "cost_per_mtok_good_task"]


@dataclass
class CompareProtocol(SweepProtocol):
    """Named configs (each a list of override strings) run in blocks: in each block every config
    is launched fresh and run over every load point, in an order drawn from ``seed``."""
    name: str = "compare"
    # name -> list of override strings; untyped so a command line can give the whole mapping
    # (a typed mapping only merges keys into what the YAML has); checked by protocols.compare.plan
    configs: Any = None
    baseline: Optional[str] = None            # the config the others are compared with (default: the first)
    repeats: int = _f(3, ge=1)                # blocks
    max_repeats: Optional[int] = _f(None, ge=1)          # with target_rel_halfwidth: add blocks up to this
    target_rel_halfwidth: Optional[float] = _f(None, gt=0, lt=1)  # e.g. 0.05: every interval within +-5 %
    converge_metrics: List[str] = field(default_factory=lambda: ["output_throughput", "p99_ttft_ms"])
    metrics: List[str] = field(default_factory=lambda: list(COMPARED_METRICS))
    min_effect: float = _f(0.02, ge=0, lt=1)  # smallest relative difference that counts as a winner
    confidence: float = _f(0.95, gt=0, lt=1)
    # the verdicts of one load point are a family: bonferroni holds `confidence` for all of them
    # together (each difference's interval at 1 - (1 - confidence)/number of metrics); the default
    # since none gave a false winner in 2 of 3 comparisons of identical engines (docs/measured/verdicts.md)
    adjust: str = _f("bonferroni", choices=("none", "bonferroni"))
    # an emulated config (engine=dynamo with mocker workers) beside a measured one: refused unless true
    allow_emulated: bool = False


@dataclass
class AblationProtocol(SweepProtocol):
    """Step 5: a baseline (overrides) and named optimisations (name -> overrides); arms are the
    baseline, each optimisation alone, the chosen pairs (or the full factorial) and all together,
    run in blocks like a comparison's configs (protocols/ablation/plan.py, metrics/ablation.py)."""
    name: str = "ablation"
    baseline: Any = None                      # overrides every arm starts from
    optimisations: Any = None                 # name -> overrides that turn it on
    factorial: bool = False                   # every combination, not only singles and all
    pairs: Any = None                         # [[a, b], ...]: combinations to run besides
    repeats: int = _f(3, ge=1)                # blocks
    max_repeats: Optional[int] = _f(None, ge=1)
    target_rel_halfwidth: Optional[float] = _f(None, gt=0, lt=1)
    converge_metrics: List[str] = field(default_factory=lambda: ["output_throughput", "p99_ttft_ms"])
    metrics: List[str] = field(default_factory=lambda: list(COMPARED_METRICS))
    min_effect: float = _f(0.02, ge=0, lt=1)
    confidence: float = _f(0.95, gt=0, lt=1)
    adjust: str = _f("bonferroni", choices=("none", "bonferroni"))  # as protocol=compare's
    allow_emulated: bool = False              # as protocol=compare's: an emulated arm beside measured ones


TUNE_OBJECTIVES = ("cost_per_mtok_good", "goodput_per_dollar")


@dataclass
class TuneProtocol(SweepProtocol):
    """Search the knob space for the cheapest config that meets the SLO (protocols/tune/plan.py,
    protocols/tune/run.py): an Optuna study suggests configs; each trial is a sweep with
    ``search=slo`` in ``OUT/trials/<n>/``, judged at its max load under the SLO."""
    name: str = "tune"
    # knob -> [choices] or {low, high, log, step}; untyped so a command line can give the whole
    # mapping; checked by protocols.tune.plan.parse_space
    space: Any = None
    trials: int = _f(8, ge=1)                 # the sampler's budget of suggestions
    objective: str = _f("cost_per_mtok_good", choices=TUNE_OBJECTIVES)
    sampler: str = _f("tpe", choices=("tpe", "grid", "random"))
    startup_trials: Optional[int] = _f(None, ge=1)  # tpe: random suggestions first; null: 3
    seed: Optional[int] = None                # the sampler's seed; null: the root seed
    search: str = _f("slo", choices=("slo",))  # every trial finds its max load under the SLO
    # the quality gate's reference: overrides on top of the command's (default: none, the config with
    # no knob set); every trial's greedy outputs are judged against its
    reference: Any = None
    # model: rank every config of the space's grid on the engine's scheduler model first and measure
    # only the `finalists` best by the modelled objective, then the winner again to confirm it
    # (protocols/tune/screen.py); none: the Optuna study measures every suggestion
    screen: str = _f("none", choices=("none", "model"))
    finalists: int = _f(3, ge=1)              # screen=model: configs measured after the screen
    base_experiment: Optional[str] = None     # screen=model: a finished sweep of the config with no knob set
    # screen=model: a tokenfactory profile (its folder or perf_data.npz); null: perf_data.npz in base_experiment
    profile: Optional[str] = None
    # screen=model: the Dynamo venv's Python; null: $TOKENFACTORY_DYNAMO_PYTHON, else ~/.cache/tokenfactory/dynamo-venv
    dynamo_python: Optional[str] = None
    screen_requests: int = _f(200, ge=10)     # screen=model: requests replayed at each rate of the ladder
    confirm: bool = True                      # screen=model: measure the winner a second time (a fresh engine)
    # screen=model: the model's residuals (a JSON file as protocol=plan's protocol.residuals); its
    # scheduler cases bound the model's disagreement with a finalist's measurement; null: the shipped
    # protocols/plan/residuals.json (no scheduler case in it: "not validated")
    residuals: Optional[str] = None


# ------------------------------------------------------------------------------------ promotion (step 7)
# A stated diurnal curve (relative request rate per hour, 00:00 .. 23:00): low at night, a
# morning rise, a midday plateau and an evening fall, peak / trough = 4.  An assumption to be
# replaced by the user's own curve (protocol.traffic.rate_curve) or a day-long trace.
DIURNAL_CURVE = [0.30, 0.25, 0.25, 0.25, 0.30, 0.40, 0.55, 0.75, 0.90, 1.00, 1.00, 0.95,
                 0.95, 1.00, 1.00, 0.95, 0.90, 0.85, 0.80, 0.75, 0.65, 0.55, 0.45, 0.35]


@dataclass
class PlanTraffic:
    """The traffic a fleet is planned for (protocols/plan/traffic.py): the composed workload's
    requests (any trace the readers take: times, prompt and output lengths, after
    workload.window/time_scale/target_rate), replayed as they are, or tiled over
    ``duration_s`` with the request rate following ``rate_curve``."""
    diurnal: bool = False                     # a day: rate_curve = DIURNAL_CURVE over 86400 s unless set
    # relative rate of equal slices of duration_s (24 values over a day: hourly); empty: the
    # trace's own times, once
    rate_curve: List[float] = field(default_factory=list, metadata={"each": {"ge": 0}})
    duration_s: Optional[float] = _f(None, gt=0)   # with rate_curve: the planned window (86400: a day)
    mean_rps: Optional[float] = _f(None, gt=0)     # the curve's mean rate; null: the trace's own mean rate
    peak_rps: Optional[float] = _f(None, gt=0)     # or its highest slice's rate (not both)


@dataclass
class PlanEstimate:
    """A config whose capacity comes from a performance model, NVIDIA's aiconfigurator, instead of
    measured runs (protocols/plan/estimates.py): hardware not at hand.  Its points are marked
    estimated wherever they appear; a replica is one deployment unit (one TP x PP group, or one
    prefill/decode set); each concurrency gives one point."""
    name: str = MISSING                       # its name in the plan (measured runs of that name: the estimate's error)
    # aiconfigurator's model name (meta-llama/Meta-Llama-3.1-8B, Qwen/Qwen3-8B, ...) or a folder with config.json
    model: str = MISSING
    system: str = MISSING                     # aiconfigurator's GPU system: h100_sxm, h200_sxm, b200_sxm, ...
    backend: str = _f("vllm", choices=("vllm", "sglang", "trtllm"))
    version: Optional[str] = None             # the backend's version in aiconfigurator's data; null: its current one
    isl: int = _f(1024, ge=1)                 # prompt tokens of every request
    osl: int = _f(256, ge=2)                  # output tokens of every request
    tp: int = _f(1, ge=1)                     # tensor parallel size of a worker (prefill and decode workers unless set)
    pp: int = _f(1, ge=1)                     # pipeline parallel size of a worker
    disaggregated: bool = False               # true: a replica is a prefill/decode set
    prefill_workers: int = _f(1, ge=1)        # disaggregated: prefill workers in a set
    decode_workers: int = _f(1, ge=1)         # disaggregated: decode workers in a set (concurrencies: multiples)
    prefill_tp: Optional[int] = _f(None, ge=1)  # disaggregated: null = tp
    decode_tp: Optional[int] = _f(None, ge=1)   # disaggregated: null = tp
    prefill_batch_size: int = _f(1, ge=1)     # disaggregated: prompts a prefill worker batches
    # requests in flight per replica, one point each
    concurrencies: List[int] = _f(factory=lambda: [1, 4, 16, 64], each={"ge": 1})
    requests: int = _f(50, ge=1)              # requests each point holds (all alike: a model gives means)
    cost: Optional[str] = None                # the cost profile (conf/cost/NAME) a replica is priced with
    cold_start_s: float = _f(MISSING, ge=0)   # a replica's start time: an assumption to state, nothing measures it
    hardware: Optional[str] = None            # conf/hardware profile of the roofline; null: from system (h200_sxm)
    compare_with: Optional[str] = None        # the measured config its error is computed against; null: same name


@dataclass
class PlanModelled:
    """A config never run: a measured candidate (``base``) with other engine knobs, served by the
    engine's scheduler model with them (protocols/plan/modelled.py; needs the scheduler model:
    protocol.profile and the Dynamo venv).  Marked modelled wherever it appears, with the model's
    validated error beside it (the scheduler's cases in protocol.residuals, else the plan's own
    protocol.validate of a candidate on the scheduler, else "not validated")."""
    name: str = MISSING                       # its name in the plan
    base: str = MISSING                       # the measured candidate it changes (a name in the plan)
    # the mocker's knob (max_num_seqs, max_num_batched_tokens, enable_chunked_prefill,
    # enable_prefix_caching, block_size, num_gpu_blocks) or its config key -> the modelled value
    knobs: Dict[str, Any] = field(default_factory=dict)


@dataclass
class PlanProtocol:
    """``tokenfactory plan``: size and price a fleet for a traffic source from finished
    experiments' measured capacity, by a discrete-event simulation of the deployment's
    autoscaling policy (deployment.autoscale) over the whole window (protocols/plan/)."""
    name: str = "plan"
    load_points: List[Any] = field(default_factory=list)  # (unused: a plan runs no engine)
    repeats: int = _f(1, ge=1)
    dry_run: bool = False
    experiments: List[str] = field(default_factory=list)  # finished experiments' folders: their configs the candidates
    configs: List[str] = field(default_factory=list)      # keep these (NAME or EXPERIMENT_FOLDER_NAME:NAME); empty: all
    traffic: PlanTraffic = field(default_factory=PlanTraffic)
    # further SLOs planned side by side with slo.* (each a mapping of slo fields: {ttft_ms: 500})
    slos: List[Any] = field(default_factory=list)
    # name -> deployment.autoscale overrides planned beside the base policy
    # ({fast_start: ["cold_start_s=10"], no_headroom: ["target=1.0"]})
    variants: Any = None
    routing: str = _f("round_robin", choices=("round_robin", "least_loaded"))  # the simulated router
    # config name -> cost profile (conf/cost/NAME); unlisted: the profile its runs were measured with
    # (untyped so a command line can give the whole mapping, as protocol.configs)
    costs: Any = None
    resamples: int = _f(200, ge=0)            # block bootstrap of the capacity measurements (0: point estimate only)
    confidence: float = _f(0.95, gt=0, lt=1)
    min_effect: float = _f(0.02, ge=0, lt=1)  # smallest relative cost difference that picks a cheapest config
    workers: int = _f(0, ge=0)                # simulation processes (0: one per core)
    # calibrate each candidate's slowdown curve so that simulating its runs reproduces their mean
    # TTFT and TPOT (protocols/plan/fleet.py calibrate); false: the curve as measured
    calibrate: bool = True
    # a replica's model: scheduler (each replica's requests replayed by the engine's scheduler,
    # Dynamo's replay, timed by protocol.profile), processor_sharing (the fitted slowdown curve), or
    # auto: scheduler where a profile and the Dynamo venv are at hand, else processor sharing
    replica_model: str = _f("auto", choices=("auto", "scheduler", "processor_sharing"))
    profile: Optional[str] = None             # a tokenfactory profile folder or its perf_data.npz
    # the Dynamo venv's Python; null: $TOKENFACTORY_DYNAMO_PYTHON, else ~/.cache/tokenfactory/dynamo-venv
    dynamo_python: Optional[str] = None
    # the scheduler model below 1: an APPROXIMATION, a stratified sample of this fraction of each
    # replica's stretches replayed, the others given their stratum's replayed latencies
    # (protocols/plan/stretches.py; labelled in plan.json and the page); 1: exact replay
    replay_sample: float = _f(1.0, gt=0, le=1)
    replay_stretch_s: float = _f(300.0, gt=0)   # the stretches the approximation samples
    replay_lead_s: float = _f(120.0, ge=0)      # requests replayed before each sampled stretch, records dropped
    # a real replay's run folder (load=trace, deployment.autoscale.enabled): the plan's error against it
    validate: Optional[str] = None
    # fold the model's held-out error (protocol.residuals) into the cheapest-config verdict beside the
    # capacity's block resamples; false: the capacity's resamples alone
    model_error: bool = True
    # the model's residuals on validation cases (a JSON file, docs/protocols/plan.md); null: the shipped
    # protocols/plan/residuals.json (the two validation replays of docs/measured/plan.md)
    residuals: Optional[str] = None
    seed: int = 0
    # configs whose capacity aiconfigurator estimates (hardware not at hand), beside the measured ones
    estimates: List[PlanEstimate] = field(default_factory=list)
    estimator_python: Optional[str] = None    # aiconfigurator's Python; null: ~/.cache/tokenfactory/aiconfigurator-venv
    # configs never run: a measured candidate with other knobs, on the scheduler model ({name, base, knobs})
    modelled: List[PlanModelled] = field(default_factory=list)


@dataclass
class ProfileProtocol:
    """``protocol=profile``: an engine's prefill time against prompt length and decode step time
    against batch size and context length, through its API (protocols/profile/; the formulas:
    metrics/profile.py).  Writes profile.json and the Dynamo mocker's perf_data.npz."""
    name: str = "profile"
    load_points: List[Any] = field(default_factory=list)  # (unused: the ladders are the load points)
    repeats: int = _f(1, ge=1)                # (unused: each length's requests are its repeats)
    dry_run: bool = False
    # prefill ladder: prompt lengths, each at concurrency 1 with one output token
    prefill_lengths: List[int] = _f(factory=lambda: [64, 128, 256, 512, 1024, 1792], each={"ge": 1})
    prefill_requests: int = _f(4, ge=1)       # requests at each length, one at a time
    # decode ladders: every prompt length at every concurrency, outputs of decode_output_tokens
    decode_prompt_lengths: List[int] = _f(factory=lambda: [128, 1024], each={"ge": 1})
    decode_concurrency: List[int] = _f(factory=lambda: [1, 2, 4, 8, 16], each={"ge": 1})
    decode_output_tokens: int = _f(64, ge=2)
    decode_waves: int = _f(2, ge=1)           # requests at each concurrency: concurrency x waves
    warmup_requests: int = _f(1, ge=0)        # each run's warm-up requests (outside its figures)
    # mixed ladder: each prefill length with mixed_concurrency requests in a closed loop, outputs
    # spread over mixed_output_tokens/2 .. 3/2 of it, so each prefill shares a step with the
    # others' decodes: what a prefill adds to that step (the scheduler model's prefill cost); 0: none
    mixed_concurrency: int = _f(4, ge=0)
    mixed_requests: int = _f(40, ge=1)
    mixed_output_tokens: int = _f(32, ge=4)
    resolution: int = _f(50, ge=2)            # points per axis of the mocker's tables
    # whose figures the mocker's tables come from: the client's (TTFT, ITL: what a user waits
    # for, the serving path included) or the engine's phase histograms (vLLM; the serving path
    # left out, for an emulator behind a frontend of its own).  Both are fitted where both exist.
    source: str = _f("client", choices=("client", "engine"))


@dataclass
class TrackProtocol:
    """``tokenfactory track NAME``: a tracked benchmark's history (every experiment run with
    ``track=NAME`` into the MLflow store, mlflow.tracking_uri), the newest against its baseline
    metric by metric, and a regression gate (protocols/track/); track.json and track.html go to
    output_dir (default: results/track/NAME)."""
    name: str = "track"
    track: str = MISSING                      # the tracked benchmark (its experiments ran with track=NAME)
    gate: bool = False                        # exit 1 on a regression beyond the margin, 3 when one cannot be judged
    baseline: str = "previous"                # previous, window:N (the N accepted before the newest, pooled), or a name
    keep_rejected: bool = False               # window:N pools the experiments the gate rejected too
    at: Optional[str] = None                  # judge this experiment as the history stood then; null: the newest
    metrics: List[str] = field(default_factory=list)  # empty: the usual set (COMPARED_METRICS the runs have)
    # smallest relative change that counts; where a side's mean is 0, the smallest absolute one (points for a rate)
    margin: float = _f(0.02, ge=0, lt=1)
    confidence: float = _f(0.95, gt=0, lt=1)  # level of the intervals
    # bonferroni: the confidence holds for every verdict judged together (metrics x load points); none: for each
    adjust: str = _f("bonferroni", choices=("bonferroni", "none"))
    allow: List[str] = field(default_factory=list)  # track conditions allowed to differ


@dataclass
class PromoteStage:
    """One stage of a promotion (protocols/promote/plan.py): the proxy's mode and the candidate's share
    while it lasts; its gate runs once it has ``min_requests`` candidate requests and
    ``min_duration_s``, and is retried until ``max_duration_s`` (no decision by then: roll back)."""
    name: str = ""                            # default: shadow, or canary_<share in %>
    mode: str = _f("canary", choices=("shadow", "canary"))
    share: float = _f(0.0, ge=0, le=1)        # canary: the candidate's share of callers (sticky)
    mirror: float = _f(0.0, ge=0, le=1)       # canary: share of candidate-served requests also run on the incumbent
    min_requests: int = _f(64, ge=1)          # candidate requests before the gate (64: enough for a p90)
    min_duration_s: float = _f(60.0, ge=0)
    max_duration_s: float = _f(600.0, gt=0)


def _default_stages() -> list:
    # mirror: at 1-5 % every candidate-served request is also run on the incumbent (pairs for the
    # agreement, at little cost); at 100 % too, so the incumbent carries the same load (a like-for-like
    # latency comparison) and stays warm for a rollback
    return [PromoteStage("shadow", "shadow", 0.0, 0.0, 200), PromoteStage("canary_1", "canary", 0.01, 1.0),
            PromoteStage("canary_5", "canary", 0.05, 1.0), PromoteStage("canary_25", "canary", 0.25, 0.2),
            PromoteStage("full", "canary", 1.0, 1.0)]


# Gated metrics -> margin.  Rates (slo_attainment, error_rate, token_agreement) are compared in
# absolute terms, latencies and cost relative to the incumbent (metrics/promotion_gate.py).
# p90, not p99: a stage judges p99 only with 662 requests a side (metrics/promotion_gate.py).
GATE_MARGINS = {"slo_attainment": 0.02, "error_rate": 0.01, "p50_ttft_ms": 0.10, "p90_ttft_ms": 0.25,
                "p50_tpot_ms": 0.10, "p90_tpot_ms": 0.25, "cost_per_mtok_good": 0.05}


@dataclass
class PromoteGate:
    confidence: float = _f(0.95, gt=0, lt=1)
    margins: Dict[str, Optional[float]] = _f(factory=lambda: dict(GATE_MARGINS), each={"ge": 0})  # null: not gated
    blocks: int = _f(10, ge=2)                # time blocks a stage is cut into: the bootstrap resamples them
    resamples: int = _f(2000, ge=100)
    min_agreement: float = _f(0.9, ge=0, le=1)  # lower bound of the mean greedy token agreement
    min_pairs: int = _f(10, ge=1)             # fewer compared pairs in a stage: agreement not gated there (said so)
    candidate_cost_factor: float = _f(1.0, gt=0)  # the candidate's hourly cost over the incumbent's


@dataclass
class PromoteGuard:
    """Checked every ``interval_s`` over the last ``window_s``: a trip rolls back at once."""
    interval_s: float = _f(1.0, gt=0)
    window_s: float = _f(15.0, gt=0)
    min_requests: int = _f(5, ge=1)           # candidate requests in the window before a rate guard can trip
    max_error_rate_increase: float = _f(0.05, ge=0, le=1)
    max_attainment_drop: float = _f(0.10, ge=0, le=1)
    max_ttft_ratio: float = _f(3.0, gt=1)     # candidate p90 TTFT over the incumbent's, same window ...
    ttft_floor_ms: float = _f(50.0, ge=0)     # ... or over this, whichever is larger (noise on tiny latencies)
    min_latency_requests: int = _f(30, ge=1)  # TTFTs on each side in the window before the latency guard can trip
    stall_s: float = _f(10.0, gt=0)           # a candidate request without a first token for this long


@dataclass
class PromoteFault:
    """A rehearsal's fault: make a candidate that the promotion launched worse mid-run."""
    kind: str = _f("none", choices=("none", "kill", "pause"))  # pause: SIGSTOP (a hung engine)
    at_s: float = _f(60.0, ge=0)              # seconds after the start of `stage` (default: the first request)
    stage: Optional[str] = None


@dataclass
class PromoteProtocol(SweepProtocol):
    """Step 7: shadow, then canary shares, each stage gated against the incumbent on the same
    period; guards roll back mid-stage (protocols/promote/run.py, protocols/promote/plan.py)."""
    name: str = "promote"
    load_points: List[Any] = field(default_factory=list)
    stages: List[PromoteStage] = field(default_factory=_default_stages)
    gate: PromoteGate = field(default_factory=PromoteGate)
    guard: PromoteGuard = field(default_factory=PromoteGuard)
    traffic: str = _f("loadgen", choices=("loadgen", "live"))  # our load generator through the proxy, or callers
    incumbent: Any = None                     # override list: launch the incumbent (else proxy.incumbent, a URL)
    candidate: Any = None                     # override list: launch the candidate (else proxy.candidate)
    after_s: float = _f(10.0, ge=0)           # keep recording after the final decision (the timeline's tail)
    fault: PromoteFault = field(default_factory=PromoteFault)


# ------------------------------------------------------------------------------------ slo, cost, hardware
@dataclass
class Slo:
    ttft_ms: Optional[float] = _f(None, gt=0)  # per-request SLO for goodput (inclusive); null: not checked
    tpot_ms: Optional[float] = _f(None, gt=0)  # per-request SLO for goodput (inclusive); null: not checked
    e2el_ms: Optional[float] = _f(None, gt=0)  # per-request SLO for goodput (inclusive); null: not checked
    ttfa_ms: Optional[float] = _f(None, gt=0)  # time to first answer token (reasoning left out), as ttft_ms
    task_s: Optional[float] = _f(None, gt=0)   # per-task SLO: a completed task's time (inclusive); null: not checked
    # run-level check: the SLO holds when this percentile of each metric is within it
    percentile: float = _f(99.0, gt=0, lt=100)
    min_attainment: Optional[float] = _f(None, gt=0, le=1)  # a run meets the SLO only with this share good


@dataclass
class CostBase:
    model: str = MISSING
    currency: str = "USD"
    description: Optional[str] = None
    assumptions: Optional[str] = None
    num_gpus: int = _f(0, ge=0)
    extra_hourly: Dict[str, float] = _f(factory=dict, each={"ge": 0})  # every line: hours x rate


@dataclass
class RentalCost(CostBase):
    model: str = _f("rental", choices=("rental",))
    hourly_per_gpu: float = _f(0.0, ge=0)     # the rental price of one GPU hour
    num_hosts: int = _f(1, ge=0)
    hourly_per_host: float = _f(0.0, ge=0)


@dataclass
class OwnedCost(CostBase):
    model: str = _f("owned", choices=("owned",))
    hardware_price: float = _f(0.0, ge=0)
    depreciation_years: float = _f(3.0, gt=0)
    electricity_per_kwh: float = _f(0.0, ge=0)
    pue: float = _f(1.0, ge=1)
    ops_hourly: float = _f(0.0, ge=0)
    unmeasured_power_w: float = _f(0.0, ge=0)


@dataclass
class Hardware:
    """What the run's hardware is: provenance, and the roofline's peak rates."""
    name: str = MISSING
    accelerator: str = "none"
    num_accelerators: int = _f(0, ge=0)
    peak_tflops: Dict[str, float] = field(default_factory=dict)  # dense, per precision (bf16, fp8, ...)
    memory_bandwidth_gbs: Optional[float] = _f(None, gt=0)       # per accelerator
    memory_gb: Optional[float] = _f(None, gt=0)                  # per accelerator
    interconnect_gbs: Optional[float] = _f(None, gt=0)           # per accelerator, one direction
    source: Optional[str] = None                                 # where the figures come from


# ------------------------------------------------------------------------------------ client
@dataclass
class ClientTimeouts:
    connect_s: float = _f(10.0, gt=0)         # TCP connect
    ttft_s: float = _f(300.0, gt=0)           # request sent -> first output chunk
    idle_s: float = _f(60.0, gt=0)            # between chunks once output started
    total_s: float = _f(900.0, gt=0)          # whole request


@dataclass
class ClientRay:
    """``client.backend=ray``: the workers as Ray actors on a cluster (loadgen/ray_workers.py)."""
    address: Optional[str] = None                 # ray.init's: null = $RAY_ADDRESS, else a local one; "auto"
    num_cpus: float = _f(1.0, ge=0)               # CPUs each worker reserves (its event loop needs a core)
    resources: Dict[str, float] = _f(factory=dict, each={"ge": 0})  # per worker, e.g. {loadgen: 1}
    placement: str = _f("spread", choices=("spread", "pack"))  # workers over as many nodes as can be, or few
    clock_samples: int = _f(16, ge=1)             # round trips per offset measurement (the shortest wins)
    clock_every_s: float = _f(2.0, gt=0)          # each worker's offset measured again this often
    start_margin_ms: float = _f(300.0, gt=0)      # from the start order to t0 (reaching every worker)
    placement_timeout_s: float = _f(60.0, gt=0)   # waiting for the cluster to place every worker
    runtime_env: Dict[str, Any] = field(default_factory=dict)  # ray.init's runtime_env (pip, working_dir)


@dataclass
class Client:
    timeouts: ClientTimeouts = field(default_factory=ClientTimeouts)
    max_schedule_lag_ms: float = _f(10.0, ge=0)   # p99 send lag above this flags the run as client-limited
    workers: int = _f(1, ge=1)                    # load-generator processes sharing one schedule
    backend: str = _f("local", choices=("local", "ray"))  # workers forked here, or Ray actors (client.ray)
    max_clock_error_ms: float = _f(1.0, gt=0)     # ray: a worker's clock error above this flags client-limited
    # metrics.token_accounting: a request's server usage.completion_tokens against the tokenizer's count of its text
    token_mismatch_tolerance: int = _f(1, ge=0)          # tokens the two may differ by (an EOS never sent as text)
    token_mismatch_threshold: float = _f(0.01, ge=0, le=1)  # share of requests past it that flags the run
    ray: ClientRay = field(default_factory=ClientRay)
    # Requests are prepared off the send loop (loadgen/prepare.py): all before the window opens,
    # streamed by a producer thread prepare_ahead_s ahead, or auto: all while within prepare_max_mb.
    prepare: str = _f("auto", choices=("auto", "all", "stream"))
    prepare_ahead_s: float = _f(10.0, gt=0)
    prepare_max_mb: float = _f(2048.0, gt=0)
    prepare_cache: bool = True                    # keep built requests on disk, keyed by a hash of their inputs
    # A burst opens connections past the prewarmed pool; once idle this long, those above the
    # prewarmed count are closed (never one with a request in flight). 0 or null: keep them all.
    idle_close_s: Optional[float] = _f(30.0, ge=0)


# ------------------------------------------------------------------------------------ root
@dataclass
class Nvml:
    enabled: bool = True
    devices: Optional[List[int]] = None       # NVML indices to sample; null: every GPU


@dataclass
class Dcgm:
    url: Optional[str] = None                 # a DCGM exporter, e.g. http://127.0.0.1:9400/metrics
    timeout_s: float = _f(2.0, gt=0)


@dataclass
class Rapl:
    enabled: bool = True
    root: str = "/sys/class/powercap"


@dataclass
class EngineScrape:
    enabled: bool = True                      # sample the engine's own /metrics page every interval_s


@dataclass
class Telemetry:
    interval_s: float = _f(0.5, gt=0)         # background sampling period (host, GPUs, engine /metrics)
    idle_baseline_s: float = _f(5.0, ge=0)    # engine up, no load: seconds of idle power (where measured)
    engine: EngineScrape = field(default_factory=EngineScrape)
    nvml: Nvml = field(default_factory=Nvml)
    dcgm: Dcgm = field(default_factory=Dcgm)
    rapl: Rapl = field(default_factory=Rapl)


@dataclass
class Mlflow:
    enabled: bool = True
    tracking_uri: Optional[str] = None        # null: $MLFLOW_TRACKING_URI, else sqlite:///results/mlflow.db


@dataclass
class Export:
    """Where each run's summary goes besides MLflow (harness/otlp_export.py): OpenTelemetry metrics
    to an OTLP endpoint, with the experiment, config and engine version as attributes."""
    otlp_endpoint: Optional[str] = None       # e.g. http://collector:4318 (OTLP/HTTP); null: no export
    otlp_headers: Dict[str, str] = field(default_factory=dict)  # e.g. an API key header
    otlp_timeout_s: float = _f(10.0, gt=0)


@dataclass
class Report:
    enabled: bool = True
    # PNG/SVG/PDF of every figure (kaleido + the system's Chromium); null: when both are found
    static: Optional[bool] = None


@dataclass
class Quality:
    """The quality gate (step 1 of the seed's protocol; harness/quality_gate.py, metrics/quality_gate.py): greedy
    outputs on a fixed prompt set, taken at the end of every engine session, compared with the
    baseline config's; optionally an external evaluation command's score."""

    enabled: Optional[bool] = None             # null: on for compare, ablation and tune, off for a sweep
    num_prompts: int = _f(16, ge=1, le=10000)
    prompt_tokens: int = _f(64, ge=1)
    max_tokens: int = _f(32, ge=1)
    prompts_path: Optional[str] = None         # JSON lines with a "prompt" field; default: built from seed
    min_agreement: float = _f(0.9, ge=0.0, le=1.0)  # mean token agreement with the baseline to pass
    eval_command: Optional[List[str]] = None   # argv; {base_url} {model} {tokenizer} {out} {conf} substituted
    eval_cwd: Optional[str] = None             # the command's working directory (same fields substituted)
    eval_score_path: Optional[str] = None      # JSON file (a glob: the newest match) the command writes ...
    eval_score_key: Optional[str] = None       # ... and the dotted key of its score in it
    eval_score_regex: Optional[str] = None     # or a regex whose group 1 in the command's stdout is the score
    eval_max_drop: float = _f(0.02, ge=0.0)    # pass while score >= baseline's - this (absolute)
    eval_timeout_s: float = _f(1800.0, gt=0)


@dataclass
class Scenario:
    """Scenarios beside steady state (harness/scenarios.py; metrics/recovery.py, metrics/cold_start.py)."""
    # failure recovery: the engine is killed this long after each point's load started, restarted
    # by the harness while the load goes on; null: no kill
    kill_at_s: Optional[float] = _f(None, ge=0)
    kill_signal: str = _f("SIGKILL", choices=("SIGKILL", "SIGSTOP", "SIGTERM"))
    # a deployment: kill this replica only (r1, p0 ...), not restarted; the rest serve on and the
    # requests it ended are named and counted
    kill_replica: Optional[str] = None
    recovery_window: int = _f(20, ge=1)       # N: the SLO is back when N requests in a row meet it
    # cold start: no warm-up request and no idle baseline before the first point, and the first
    # first_window_s of load reported apart from the rest
    cold_start: bool = False
    first_window_s: float = _f(60.0, gt=0)


PROXY_MODES = ("shadow", "canary", "rollback")


@dataclass
class Proxy:
    """``tokenfactory proxy`` (harness/proxy/): an OpenAI-compatible streaming proxy in front of
    an incumbent and a candidate endpoint."""
    incumbent: Optional[str] = None           # http(s)://HOST:PORT of the incumbent
    candidate: Optional[str] = None
    # shadow: copies to the candidate; canary: a share of callers on it; rollback: all on the incumbent
    mode: str = _f("shadow", choices=PROXY_MODES)
    canary_share: float = _f(0.05, ge=0, le=1)  # canary: the candidate's share of callers (sticky)
    mirror: float = _f(0.0, ge=0, le=1)       # canary: share of candidate-served requests also run on the incumbent
    sticky: str = _f("session", choices=("session", "api_key", "none"))  # what keeps a caller on one side
    salt: str = "tokenfactory"                # the canary split's hash salt
    host: str = "127.0.0.1"
    port: int = _f(8080, ge=0, le=65535)      # 0: a free port (printed)
    incumbent_model: Optional[str] = None     # model name sent to each side (default: the caller's)
    candidate_model: Optional[str] = None
    incumbent_api_key_env: Optional[str] = None
    candidate_api_key_env: Optional[str] = None
    compare: str = _f("greedy", choices=("greedy", "all", "off"))  # whose outputs are compared
    prewarm: int = _f(16, ge=0)               # idle upstream connections kept per side
    timeouts: ClientTimeouts = field(default_factory=ClientTimeouts)
    # the proxy's process (harness/proxy/runtime.py): CPU list ("1", "2-3"), nice value, or
    # SCHED_FIFO priority (1-99; needs CAP_SYS_NICE) so it never waits out another process's slice
    cpus: Optional[str] = None
    nice: Optional[int] = _f(None, ge=-20, le=19)
    realtime: Optional[int] = _f(None, ge=1, le=99)


@dataclass
class Root:
    engine: Any = MISSING
    deployment: Deployment = MISSING
    router: Router = MISSING
    workload: Any = MISSING
    load: Load = MISSING
    protocol: Any = MISSING
    slo: Slo = MISSING
    cost: Any = MISSING
    hardware: Hardware = MISSING
    client: Client = MISSING
    proxy: Proxy = MISSING
    experiment: str = _f("default", folder=True)  # MLflow experiment and results/<experiment>/ folder
    output_dir: Optional[str] = None          # default: results/<experiment>/<run id>/
    resume: bool = True                       # with an existing output_dir: skip finished load points
    seed: int = 0
    telemetry: Telemetry = field(default_factory=Telemetry)
    mlflow: Mlflow = field(default_factory=Mlflow)
    # a tracked benchmark's name: the experiment joins its history in the MLflow store
    # (`tokenfactory track NAME` compares the newest with a baseline; protocols/track/)
    track: Optional[str] = None
    # what this experiment measures a version of (an engine commit, a build): the track's history
    # shows it; null: the engine's own version
    track_version: Optional[str] = None
    export: Export = field(default_factory=Export)
    report: Report = field(default_factory=Report)
    scenario: Scenario = field(default_factory=Scenario)
    quality: Quality = field(default_factory=Quality)
    progress: bool = True                     # a progress bar per load point


# group -> {option name -> schema}; the YAML of each option names its schema in `defaults`.
SCHEMAS: dict[str, dict[str, type]] = {
    "engine": {"schema": SharedEngine, "transformers_schema": TransformersEngine, "openai_schema": OpenAIEngine,
               "dynamo_schema": DynamoEngine},
    "deployment": {"schema": Deployment},
    "router": {"schema": Router},
    "workload": {"schema": TraceWorkload, "synthetic_schema": SyntheticWorkload},
    "load": {"schema": Load},
    "protocol": {"schema": SweepProtocol, "compare_schema": CompareProtocol, "ablation_schema": AblationProtocol,
                 "promote_schema": PromoteProtocol, "tune_schema": TuneProtocol,
                 "plan_schema": PlanProtocol, "profile_schema": ProfileProtocol,
                 "track_schema": TrackProtocol},
    "slo": {"schema": Slo},
    "cost": {"schema": RentalCost, "owned_schema": OwnedCost},
    "hardware": {"schema": Hardware},
    "client": {"schema": Client},
    "proxy": {"schema": Proxy},
}


def register() -> None:
    cs = ConfigStore.instance()
    cs.store(name="root_schema", node=Root)
    for group, nodes in SCHEMAS.items():
        for name, node in nodes.items():
            cs.store(group=group, name=name, node=node)


def typed(node, schema: type[T]) -> T:
    """A config node as its schema's dataclass (``typed(cfg.proxy, Proxy)``), converted once where
    it enters a module: a composed node keeps its values; a plain mapping (one sent to a child
    process as JSON) gets the schema's defaults for the keys it lacks, and OmegaConf's type
    checks, naming the key, for those it has."""
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), node))


# ------------------------------------------------------------------------------------ ranges
def _check(key: str, value, rules: dict) -> None:
    if value is None or not rules:
        return
    if rules.get("folder") and (not str(value).strip() or "\x00" in str(value) or str(value).startswith(("/", "\\"))
                                or ".." in str(value).replace("\\", "/").split("/")):
        raise ConfigError(f"{key}={value!r}: it names a folder under results/, so it must be a relative name "
                          "without '..' (output_dir=PATH writes anywhere you choose)")
    if "choices" in rules and value not in rules["choices"]:
        raise ConfigError(f"{key}={value!r}: expected one of {', '.join(map(str, rules['choices']))}")
    bounds = {"ge", "gt", "le", "lt"} & set(rules)
    if bounds and (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)):
        raise ConfigError(f"{key}={value!r}: expected a finite number")
    for rule, ok, word in (("ge", lambda v, b: v >= b, ">="), ("gt", lambda v, b: v > b, ">"),
                           ("le", lambda v, b: v <= b, "<="), ("lt", lambda v, b: v < b, "<")):
        if rule in rules and not ok(value, rules[rule]):
            raise ConfigError(f"{key}={value!r}: must be {word} {rules[rule]}")


def validate(cfg: DictConfig, prefix: str = "") -> None:
    """Check every field's ``ge``/``gt``/``le``/``lt``/``choices`` (see module doc); raises
    ``ConfigError`` naming the full key.  Types and unknown keys were checked by OmegaConf."""
    if isinstance(cfg, ListConfig):
        for i, v in enumerate(cfg):
            if isinstance(v, (DictConfig, ListConfig)):
                validate(v, f"{prefix}[{i}]")
        return
    kind = OmegaConf.get_type(cfg)
    typed = dataclasses.is_dataclass(kind)
    rules = {f.name: dict(f.metadata) for f in dataclasses.fields(kind)} if typed else {}
    for key in cfg:
        full = f"{prefix}.{key}" if prefix else str(key)
        if typed and key not in rules:  # added with Hydra's +key=value, which opens the node
            raise ConfigError(f"{full}: not a field of {kind.__name__} (known: {', '.join(rules)})")
        if OmegaConf.is_missing(cfg, key):
            continue
        v = cfg[key]
        rule = rules.get(key, {})
        if isinstance(v, (DictConfig, ListConfig)):
            validate(v, full)
            if "each" in rule:
                for k, item in (v.items() if isinstance(v, DictConfig) else enumerate(v)):
                    _check(f"{full}.{k}" if isinstance(v, DictConfig) else f"{full}[{k}]", item, rule["each"])
        else:
            _check(full, v, rule)
