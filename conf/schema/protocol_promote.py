"""``protocol=promote``'s schema: the stages, their gate, the guards and a rehearsal's fault."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from conf.schema.protocol import SweepProtocol
from conf.schema.rules import checked


@dataclass
class PromoteStage:
    """One stage of a promotion (protocols/promote/plan.py): the proxy's mode and the candidate's share
    while it lasts; its gate runs once it has ``min_requests`` candidate requests and
    ``min_duration_s``, and is retried until ``max_duration_s`` (no decision by then: roll back)."""
    name: str = ""                            # default: shadow, or canary_<share in %>
    mode: str = checked("canary", choices=("shadow", "canary"))
    share: float = checked(0.0, ge=0, le=1)   # canary: the candidate's share of callers (sticky)
    mirror: float = checked(0.0, ge=0, le=1)  # canary: share of candidate-served requests also run on the incumbent
    min_requests: int = checked(64, ge=1)     # candidate requests before the gate (64: enough for a p90)
    min_duration_s: float = checked(60.0, ge=0)
    max_duration_s: float = checked(600.0, gt=0)


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
    confidence: float = checked(0.95, gt=0, lt=1)
    margins: Dict[str, Optional[float]] = checked(factory=lambda: dict(GATE_MARGINS), each={"ge": 0})  # null: not gated
    blocks: int = checked(10, ge=2)           # time blocks a stage is cut into: the bootstrap resamples them
    resamples: int = checked(2000, ge=100)
    min_agreement: float = checked(0.9, ge=0, le=1)  # lower bound of the mean greedy token agreement
    min_pairs: int = checked(10, ge=1)        # fewer compared pairs in a stage: agreement not gated there (said so)
    candidate_cost_factor: float = checked(1.0, gt=0)  # the candidate's hourly cost over the incumbent's


@dataclass
class PromoteGuard:
    """Checked every ``interval_s`` over the last ``window_s``: a trip rolls back at once."""
    interval_s: float = checked(1.0, gt=0)
    window_s: float = checked(15.0, gt=0)
    min_requests: int = checked(5, ge=1)      # candidate requests in the window before a rate guard can trip
    max_error_rate_increase: float = checked(0.05, ge=0, le=1)
    max_attainment_drop: float = checked(0.10, ge=0, le=1)
    max_ttft_ratio: float = checked(3.0, gt=1)  # candidate p90 TTFT over the incumbent's, same window ...
    ttft_floor_ms: float = checked(50.0, ge=0)  # ... or over this, whichever is larger (noise on tiny latencies)
    min_latency_requests: int = checked(30, ge=1)  # TTFTs on each side in the window before the latency guard can trip
    stall_s: float = checked(10.0, gt=0)      # a candidate request without a first token for this long


@dataclass
class PromoteFault:
    """A rehearsal's fault: make a candidate that the promotion launched worse mid-run."""
    kind: str = checked("none", choices=("none", "kill", "pause"))  # pause: SIGSTOP (a hung engine)
    at_s: float = checked(60.0, ge=0)         # seconds after the start of `stage` (default: the first request)
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
    traffic: str = checked("loadgen", choices=("loadgen", "live"))  # our load generator through the proxy, or callers
    incumbent: Any = None                     # override list: launch the incumbent (else proxy.incumbent, a URL)
    candidate: Any = None                     # override list: launch the candidate (else proxy.candidate)
    after_s: float = checked(10.0, ge=0)      # keep recording after the final decision (the timeline's tail)
    fault: PromoteFault = field(default_factory=PromoteFault)
