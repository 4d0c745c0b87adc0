"""``protocol=plan``'s schema: the traffic a fleet is planned for, estimated and modelled configs."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from omegaconf import MISSING

from conf.schema.rules import checked

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
    duration_s: Optional[float] = checked(None, gt=0)  # with rate_curve: the planned window (86400: a day)
    mean_rps: Optional[float] = checked(None, gt=0)  # the curve's mean rate; null: the trace's own mean rate
    peak_rps: Optional[float] = checked(None, gt=0)  # or its highest slice's rate (not both)


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
    backend: str = checked("vllm", choices=("vllm", "sglang", "trtllm"))
    version: Optional[str] = None             # the backend's version in aiconfigurator's data; null: its current one
    isl: int = checked(1024, ge=1)            # prompt tokens of every request
    osl: int = checked(256, ge=2)             # output tokens of every request
    tp: int = checked(1, ge=1)                # tensor parallel size of a worker (prefill and decode workers unless set)
    pp: int = checked(1, ge=1)                # pipeline parallel size of a worker
    disaggregated: bool = False               # true: a replica is a prefill/decode set
    prefill_workers: int = checked(1, ge=1)   # disaggregated: prefill workers in a set
    decode_workers: int = checked(1, ge=1)    # disaggregated: decode workers in a set (concurrencies: multiples)
    prefill_tp: Optional[int] = checked(None, ge=1)  # disaggregated: null = tp
    decode_tp: Optional[int] = checked(None, ge=1)  # disaggregated: null = tp
    prefill_batch_size: int = checked(1, ge=1)  # disaggregated: prompts a prefill worker batches
    # requests in flight per replica, one point each
    concurrencies: List[int] = checked(factory=lambda: [1, 4, 16, 64], each={"ge": 1})
    requests: int = checked(50, ge=1)         # requests each point holds (all alike: a model gives means)
    cost: Optional[str] = None                # the cost profile (conf/cost/NAME) a replica is priced with
    cold_start_s: float = checked(MISSING, ge=0)  # a replica's start time: an assumption to state, nothing measures it
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
    repeats: int = checked(1, ge=1)
    dry_run: bool = False
    experiments: List[str] = field(default_factory=list)  # finished experiments' folders: their configs the candidates
    configs: List[str] = field(default_factory=list)      # keep these (NAME or EXPERIMENT_FOLDER_NAME:NAME); empty: all
    traffic: PlanTraffic = field(default_factory=PlanTraffic)
    # further SLOs planned side by side with slo.* (each a mapping of slo fields: {ttft_ms: 500})
    slos: List[Any] = field(default_factory=list)
    # name -> deployment.autoscale overrides planned beside the base policy
    # ({fast_start: ["cold_start_s=10"], no_headroom: ["target=1.0"]})
    variants: Any = None
    routing: str = checked("round_robin", choices=("round_robin", "least_loaded"))  # the simulated router
    # config name -> cost profile (conf/cost/NAME); unlisted: the profile its runs were measured with
    # (untyped so a command line can give the whole mapping, as protocol.configs)
    costs: Any = None
    resamples: int = checked(200, ge=0)       # block bootstrap of the capacity measurements (0: point estimate only)
    confidence: float = checked(0.95, gt=0, lt=1)
    min_effect: float = checked(0.02, ge=0, lt=1)  # smallest relative cost difference that picks a cheapest config
    workers: int = checked(0, ge=0)           # simulation processes (0: one per core)
    # calibrate each candidate's slowdown curve so that simulating its runs reproduces their mean
    # TTFT and TPOT (protocols/plan/fleet.py calibrate); false: the curve as measured
    calibrate: bool = True
    # a replica's model: scheduler (each replica's requests replayed by the engine's scheduler,
    # Dynamo's replay, timed by protocol.profile), processor_sharing (the fitted slowdown curve), or
    # auto: scheduler where a profile and the Dynamo venv are at hand, else processor sharing
    replica_model: str = checked("auto", choices=("auto", "scheduler", "processor_sharing"))
    profile: Optional[str] = None             # a tokenfactory profile folder or its perf_data.npz
    # the Dynamo venv's Python; null: $TOKENFACTORY_DYNAMO_PYTHON, else ~/.cache/tokenfactory/dynamo-venv
    dynamo_python: Optional[str] = None
    # the scheduler model below 1: an APPROXIMATION, a stratified sample of this fraction of each
    # replica's stretches replayed, the others given their stratum's replayed latencies
    # (protocols/plan/stretches.py; labelled in plan.json and the page); 1: exact replay
    replay_sample: float = checked(1.0, gt=0, le=1)
    replay_stretch_s: float = checked(300.0, gt=0)  # the stretches the approximation samples
    replay_lead_s: float = checked(120.0, ge=0)  # requests replayed before each sampled stretch, records dropped
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

