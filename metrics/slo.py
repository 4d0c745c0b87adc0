"""SLOs and goodput: which requests are good, and how often each SLO holds.

A request is good when it completed (status ``ok``) and every configured per-request SLO
holds, inclusively (``ttft <= slo.ttft_ms``).  ``task_s`` bounds a task's completion time, not a
request's (``metrics.tasks``).  TPOT is undefined for one-token outputs; such a
request passes the TPOT SLO, as in ``vllm bench serve``'s goodput.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from conf.schema import Slo

# SLO name -> the per-request column (seconds) it bounds.
SLO_COLUMNS = {"ttft_ms": "ttft_s", "tpot_ms": "tpot_s", "e2el_ms": "e2el_s"}


@dataclass(frozen=True)
class SLO:
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2el_ms: float | None = None
    percentile: float = Slo.percentile
    task_s: float | None = None  # last: callers build SLO(ttft, tpot, e2el, percentile) by position

    @classmethod
    def from_config(cls, cfg) -> SLO:
        """From ``slo`` (conf/schema.py's ``Slo``) or the mapping a results file recorded of it (JSON:
        numbers may come back as ints); None: no SLO."""
        get = (lambda k: cfg.get(k)) if cfg is not None else (lambda k: None)
        return cls(
            ttft_ms=_opt_float(get("ttft_ms")),
            tpot_ms=_opt_float(get("tpot_ms")),
            e2el_ms=_opt_float(get("e2el_ms")),
            percentile=float(get("percentile") if get("percentile") is not None else cls.percentile),
            task_s=_opt_float(get("task_s")),
        )

    def limits(self) -> dict[str, float]:
        """Configured SLOs only: name -> limit in milliseconds."""
        return {k: getattr(self, k) for k in SLO_COLUMNS if getattr(self, k) is not None}


def _opt_float(v):
    return None if v is None else float(v)


def slo_pass(slo: SLO, name: str, values_s) -> np.ndarray:
    """Per-request pass mask for one SLO (NaN passes only for TPOT, see module doc)."""
    v = np.asarray(values_s, dtype=np.float64) * 1e3
    limit = getattr(slo, name)
    with np.errstate(invalid="ignore"):
        ok = v <= limit
    if name == "tpot_ms":
        ok |= np.isnan(v)
    return ok


def good_mask(slo: SLO, status, ttft_s, tpot_s, e2el_s) -> np.ndarray:
    """Good = completed and every configured SLO holds."""
    ok = np.asarray(status) == "ok"
    cols = {"ttft_ms": ttft_s, "tpot_ms": tpot_s, "e2el_ms": e2el_s}
    for name in slo.limits():
        ok &= slo_pass(slo, name, cols[name])
    return ok
