"""The ``workload`` group: synthetic workloads and trace replays (conf/workload/*.yaml)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, List, Optional

from omegaconf import MISSING

from conf.schema.rules import checked


@dataclass
class LengthDist:
    # lengths around the mean: fixed, uniform (min, max), normal (std), lognormal (sigma)
    kind: str = checked("fixed", choices=("fixed", "uniform", "normal", "lognormal"))
    min: Optional[int] = checked(None, ge=1)
    max: Optional[int] = checked(None, ge=1)
    std: Optional[float] = checked(None, gt=0)
    sigma: Optional[float] = checked(None, gt=0)


@dataclass
class PrefixGroups:
    count: int = checked(0, ge=0)            # 0: no shared prefixes
    prefix_tokens: int = checked(0, ge=0)
    popularity: str = checked("uniform", choices=("uniform", "zipf"))
    zipf_s: float = checked(1.0, gt=0)


@dataclass
class LongTail:
    fraction: float = checked(0.0, ge=0, le=1)
    kind: str = checked("input", choices=("input", "output"))
    input_tokens: Optional[int] = checked(None, ge=1)
    output_tokens: Optional[int] = checked(None, ge=1)


@dataclass
class Burst:
    factor: float = checked(1.0, ge=1)
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
    dist: str = checked("uniform", choices=("uniform", "zipf"))  # zipf: share of rank r (from 1) ~ 1 / r^zipf_s
    zipf_s: float = checked(1.0, gt=0)


@dataclass
class SyntheticWorkload:
    name: str = "synthetic"
    input_tokens: int = checked(128, ge=1)    # exact prompt length, in tokens of engine.tokenizer
    output_tokens: int = checked(64, ge=1)    # output length (max_tokens; exact where the engine takes ignore_eos)
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
    max_attempts: int = checked(1, ge=1)     # an attempt that fails its check is run again, up to this many
    # success of an attempt (every call ok, and then): ok (nothing more) | rate (a verifier that
    # passes each attempt with success_rate, drawn from workload.seed) | regex (every sink's reply
    # matches success_regex)
    success: str = checked("ok", choices=("ok", "rate", "regex"))
    success_rate: float = checked(1.0, gt=0, le=1)
    success_regex: Optional[str] = None
    # the longest a success_regex match may run on one reply (it runs on the send loop: a
    # backtracking pattern would stall every send); over it the check fails, saying so in `error`
    success_regex_timeout_s: float = checked(0.01, gt=0)
    tool_s: float = checked(0.0, ge=0)       # tool time before a call whose line gives no tool_s
    tool_dist: str = checked("fixed", choices=("fixed", "exponential"))  # exponential: mean tool_s
    # a call's prompt: its prefix path, then the messages and replies of its ancestors (every call
    # it depends on, in the task's order) or of its parents only, then its own message
    context: str = checked("ancestors", choices=("ancestors", "parents"))
    # the shared prefix tree, declared once: {name: {tokens: N, children: {...}}}; a call's
    # `prefix` is a path in it (a tree in the trace file's first line wins over this one)
    prefix_tree: Optional[Any] = None


@dataclass
class TraceWorkload:
    name: str = MISSING
    path: Optional[str] = None               # the trace file (required: the reader says so)
    model_filter: Optional[str] = None       # burstgpt: keep one model's rows
    # a malformed line: error (file:line and text) | skip (counted in the summary)
    on_bad_line: str = checked("error", choices=("error", "skip"))
    # input + output over engine.max_model_len: error | clip | skip
    on_too_long: str = checked("error", choices=("error", "clip", "skip"))
    max_output_tokens: Optional[int] = checked(None, ge=1)  # cap every output (a small engine replaying a big trace)
    window: Optional[List[float]] = None     # [start_s, end_s] on the trace's own clock (0 = its first request)
    # keep each request (a session whole) with this probability, drawn from workload.seed: a trace
    # thinned to what an engine can take, its shape over time kept
    sample_fraction: Optional[float] = checked(None, gt=0, le=1)
    max_requests: Optional[int] = checked(None, ge=1)  # the first N requests (replay order) after the window
    time_scale: float = checked(1.0, gt=0)   # speed-up of the trace's clock (2: twice as fast; think times too)
    target_rate: Optional[float] = checked(None, gt=0)  # rescale time to this mean rate, keeping the burst shape
    think_s: float = checked(0.0, ge=0)      # think time between session turns where the trace gives none
    think_dist: str = checked("fixed", choices=("fixed", "exponential"))  # exponential: mean think_s
    task: TaskRule = field(default_factory=TaskRule)  # task workloads (task_id on the lines)
    stress: TraceStress = field(default_factory=TraceStress)  # burst: factor x rate over [start_s, end_s)
    lora: LoraMix = field(default_factory=LoraMix)
    seed: int = 0
