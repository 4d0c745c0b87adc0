"""The ``slo`` group: per-request and per-task objectives and the run-level check."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from conf.schema.rules import checked


@dataclass
class Slo:
    ttft_ms: Optional[float] = checked(None, gt=0)  # per-request SLO for goodput (inclusive); null: not checked
    tpot_ms: Optional[float] = checked(None, gt=0)  # per-request SLO for goodput (inclusive); null: not checked
    e2el_ms: Optional[float] = checked(None, gt=0)  # per-request SLO for goodput (inclusive); null: not checked
    ttfa_ms: Optional[float] = checked(None, gt=0)  # time to first answer token (reasoning left out), as ttft_ms
    task_s: Optional[float] = checked(None, gt=0)  # per-task SLO: completed task's time (inclusive); null: not checked
    # run-level check: the SLO holds when this percentile of each metric is within it
    percentile: float = checked(99.0, gt=0, lt=100)
    min_attainment: Optional[float] = checked(None, gt=0, le=1)  # a run meets the SLO only with this share good

