"""protocol=promote: what the promotion's steps share (``PromotionState``): the checked settings, the
endpoints and proxy, the stages as they ran, the callers' and the fault's record, and the clock
(seconds since the proxy took the first stage's mode)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from omegaconf import DictConfig

from harness.proxy.routing import CANDIDATE, INCUMBENT
from protocols.promote.plan import Stage, StageMachine

if TYPE_CHECKING:
    from harness.mlflow_log import MlflowLogger
    from harness.proxy.pairs import PairBook
    from harness.proxy.process import ProxyProcess

perf_ns = time.perf_counter_ns
SIDES = (INCUMBENT, CANDIDATE)
TIMELINE_SIDE = ("requests", "served", "in_flight", "slo_attainment", "error_rate", "p50_ttft_ms", "p99_ttft_ms",
                 "p50_tpot_ms")


class RanStage:
    """A stage as it ran: its plan, when it started and ended, its rows per side, its gates."""

    def __init__(self, index: int, plan: Stage, start_ns: int, out: Path):
        self.index, self.plan, self.start_ns, self.end_ns = index, plan, start_ns, None
        self.dir = out / "stages" / f"{index:02d}_{plan.name}"
        self.rows = {s: [] for s in SIDES}
        self.pairs: list = []
        self.gates: list[dict] = []


def empty_timeline() -> dict:
    """promote.json's timeline, one point per guard tick: the stage and mode, and each side's figures."""
    return {"t_s": [], "stage": [], "mode": [], "share": [], **{s: {k: [] for k in TIMELINE_SIDE} for s in SIDES}}


@dataclass
class PromotionState:
    """One promotion's state.  The settings are written by ``Promotion`` and read by every step;
    below them, who writes each value the run adds (the record reads them all)."""

    cfg: DictConfig
    overrides: list[str]
    out: Path
    stages: list[Stage]
    pcfg: dict                               # the proxy's config (proxy.*)
    launch: dict[str, list[str] | None]      # side -> the overrides it is launched from here (None: its URL)
    urls: dict[str, str | None]              # side -> its URL (Endpoints: a launched engine's)
    machine: StageMachine                    # the stages' decisions (StageLoop; Endpoints starts it)
    fault: dict                              # the rehearsal's fault (Faults; StageLoop: failures, rollback)
    engines: dict = field(default_factory=dict)     # Endpoints: side -> the engine launched here
    proxy: ProxyProcess | None = None               # Endpoints
    proxy_url: str | None = None                    # Endpoints
    pairs: PairBook | None = None                   # Endpoints: the answers compared side by side
    t0_ns: int = 0                                  # Endpoints: the clock's zero
    ran: list[RanStage] = field(default_factory=list)  # Endpoints (the first), StageLoop (the next ones)
    after: RanStage | None = None                   # StageLoop: after the final decision
    rows_total: int = 0                             # StageLoop: the proxy's rows taken
    callers: dict[str, str] = field(default_factory=dict)  # StageLoop: request id -> ok | failed | cancelled
    timeline: dict = field(default_factory=empty_timeline)  # StageLoop
    mlflow: MlflowLogger | None = None              # Promotion.run_steps: the parent run
    status: str = "running"                         # Promotion.record_as: running, complete, interrupted, failed

    def t(self, ns: int | None = None) -> float:
        """Seconds since the proxy took the first stage's mode (``ns``: a perf_counter_ns reading; None: now)."""
        return ((ns if ns is not None else perf_ns()) - self.t0_ns) / 1e9

    @property
    def stage(self) -> RanStage:
        """The stage running now (or the last one)."""
        return self.ran[-1]
