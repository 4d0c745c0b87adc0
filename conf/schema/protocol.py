"""The ``protocol`` group: the sweep and the protocols built on it (compare, ablation, tune), profile
and track; plan's and promote's schemas are in protocol_plan.py and protocol_promote.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, List, Optional

from omegaconf import MISSING

from conf.schema.rules import checked

# Runs of a point (a sweep) or blocks (a comparison, an ablation): more is no experiment one
# can run, and the plan of every run is built and checked before an engine starts.
MAX_REPEATS = 1000


@dataclass
class SweepProtocol:
    name: str = "sweep"
    load_points: List[Any] = field(default_factory=list)  # numbers (rate or concurrency) or load mappings
    # runs of each load point, its replicates (one label; `repeat` says which)
    repeats: int = checked(1, ge=1, le=MAX_REPEATS)
    dry_run: bool = False                     # print the plan and stop (the command line's --dry-run)
    # Step 4, adaptive (protocols/sweep/load_search.py): a probe of closed-loop runs at rising
    # concurrency finds the saturation and places num_points load points up to and past it ...
    probe: bool = False
    probe_max_concurrency: int = checked(256, ge=1)
    probe_requests_per_user: int = checked(8, ge=1)
    spacing: str = checked("geometric", choices=("linear", "geometric", "mlperf"))
    num_points: int = checked(6, ge=2)
    # ... and search=slo finds the highest load at which the SLO holds (bisection, per session)
    search: str = checked("none", choices=("none", "slo"))
    search_low: Optional[float] = checked(None, gt=0)  # default: the smallest load point (or probe x 0.1)
    search_high: Optional[float] = checked(None, gt=0)  # default: the largest load point (or probe x 1.2)
    search_tolerance: float = checked(0.1, gt=0, lt=1)  # stop when (first fail - last pass) <= this x last pass
    search_max_probes: int = checked(8, ge=2)
    # a miss below the bracket's upper end is re-measured this many times before it counts (a host
    # stall fails a small probe far below the knee, and a burst of load outlasts one re-measurement:
    # docs/measured/verdicts.md); 0: off
    search_recheck: int = checked(2, ge=0)


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
    repeats: int = checked(3, ge=1, le=MAX_REPEATS)  # blocks
    max_repeats: Optional[int] = checked(None, ge=1, le=MAX_REPEATS)  # with target_rel_halfwidth: add blocks up to this
    target_rel_halfwidth: Optional[float] = checked(None, gt=0, lt=1)  # e.g. 0.05: every interval within +-5 %
    converge_metrics: List[str] = field(default_factory=lambda: ["output_throughput", "p99_ttft_ms"])
    metrics: List[str] = field(default_factory=lambda: list(COMPARED_METRICS))
    min_effect: float = checked(0.02, ge=0, lt=1)  # smallest relative difference that counts as a winner
    confidence: float = checked(0.95, gt=0, lt=1)
    # the verdicts of one load point are a family: bonferroni holds `confidence` for all of them
    # together (each difference's interval at 1 - (1 - confidence)/number of metrics); the default
    # since none gave a false winner in 2 of 3 comparisons of identical engines (docs/measured/verdicts.md)
    adjust: str = checked("bonferroni", choices=("none", "bonferroni"))
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
    repeats: int = checked(3, ge=1, le=MAX_REPEATS)  # blocks
    max_repeats: Optional[int] = checked(None, ge=1, le=MAX_REPEATS)
    target_rel_halfwidth: Optional[float] = checked(None, gt=0, lt=1)
    converge_metrics: List[str] = field(default_factory=lambda: ["output_throughput", "p99_ttft_ms"])
    metrics: List[str] = field(default_factory=lambda: list(COMPARED_METRICS))
    min_effect: float = checked(0.02, ge=0, lt=1)
    confidence: float = checked(0.95, gt=0, lt=1)
    adjust: str = checked("bonferroni", choices=("none", "bonferroni"))  # as protocol=compare's
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
    trials: int = checked(8, ge=1)            # the sampler's budget of suggestions
    objective: str = checked("cost_per_mtok_good", choices=TUNE_OBJECTIVES)
    sampler: str = checked("tpe", choices=("tpe", "grid", "random"))
    startup_trials: Optional[int] = checked(None, ge=1)  # tpe: random suggestions first; null: 3
    seed: Optional[int] = None                # the sampler's seed; null: the root seed
    search: str = checked("slo", choices=("slo",))  # every trial finds its max load under the SLO
    # the quality gate's reference: overrides on top of the command's (default: none, the config with
    # no knob set); every trial's greedy outputs are judged against its
    reference: Any = None
    # model: rank every config of the space's grid on the engine's scheduler model first and measure
    # only the `finalists` best by the modelled objective, then the winner again to confirm it
    # (protocols/tune/screen.py); none: the Optuna study measures every suggestion
    screen: str = checked("none", choices=("none", "model"))
    finalists: int = checked(3, ge=1)         # screen=model: configs measured after the screen
    base_experiment: Optional[str] = None     # screen=model: a finished sweep of the config with no knob set
    # screen=model: a tokenfactory profile (its folder or perf_data.npz); null: perf_data.npz in base_experiment
    profile: Optional[str] = None
    # screen=model: the Dynamo venv's Python; null: $TOKENFACTORY_DYNAMO_PYTHON, else ~/.cache/tokenfactory/dynamo-venv
    dynamo_python: Optional[str] = None
    screen_requests: int = checked(200, ge=10)  # screen=model: requests replayed at each rate of the ladder
    confirm: bool = True                      # screen=model: measure the winner a second time (a fresh engine)
    # screen=model: the model's residuals (a JSON file as protocol=plan's protocol.residuals); its
    # scheduler cases bound the model's disagreement with a finalist's measurement; null: the shipped
    # protocols/plan/residuals.json (no scheduler case in it: "not validated")
    residuals: Optional[str] = None


@dataclass
class ProfileProtocol:
    """``protocol=profile``: an engine's prefill time against prompt length and decode step time
    against batch size and context length, through its API (protocols/profile/; the formulas:
    metrics/profile.py).  Writes profile.json and the Dynamo mocker's perf_data.npz."""
    name: str = "profile"
    load_points: List[Any] = field(default_factory=list)  # (unused: the ladders are the load points)
    repeats: int = checked(1, ge=1, le=MAX_REPEATS)  # (unused: each length's requests are its repeats)
    dry_run: bool = False
    # prefill ladder: prompt lengths, each at concurrency 1 with one output token
    prefill_lengths: List[int] = checked(factory=lambda: [64, 128, 256, 512, 1024, 1792], each={"ge": 1})
    prefill_requests: int = checked(4, ge=1)  # requests at each length, one at a time
    # decode ladders: every prompt length at every concurrency, outputs of decode_output_tokens
    decode_prompt_lengths: List[int] = checked(factory=lambda: [128, 1024], each={"ge": 1})
    decode_concurrency: List[int] = checked(factory=lambda: [1, 2, 4, 8, 16], each={"ge": 1})
    decode_output_tokens: int = checked(64, ge=2)
    decode_waves: int = checked(2, ge=1)      # requests at each concurrency: concurrency x waves
    warmup_requests: int = checked(1, ge=0)   # each run's warm-up requests (outside its figures)
    # mixed ladder: each prefill length with mixed_concurrency requests in a closed loop, outputs
    # spread over mixed_output_tokens/2 .. 3/2 of it, so each prefill shares a step with the
    # others' decodes: what a prefill adds to that step (the scheduler model's prefill cost); 0: none
    mixed_concurrency: int = checked(4, ge=0)
    mixed_requests: int = checked(40, ge=1)
    mixed_output_tokens: int = checked(32, ge=4)
    resolution: int = checked(50, ge=2)       # points per axis of the mocker's tables
    # whose figures the mocker's tables come from: the client's (TTFT, ITL: what a user waits
    # for, the serving path included) or the engine's phase histograms (vLLM; the serving path
    # left out, for an emulator behind a frontend of its own).  Both are fitted where both exist.
    source: str = checked("client", choices=("client", "engine"))


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
    margin: float = checked(0.02, ge=0, lt=1)
    confidence: float = checked(0.95, gt=0, lt=1)  # level of the intervals
    # bonferroni: the confidence holds for every verdict judged together (metrics x load points); none: for each
    adjust: str = checked("bonferroni", choices=("bonferroni", "none"))
    allow: List[str] = field(default_factory=list)  # track conditions allowed to differ
