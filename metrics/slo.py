"""SLOs and goodput: which requests are good, and how often each SLO holds.

A request is good when it completed (status ``ok``) and every configured per-request SLO
holds, inclusively (``ttft <= slo.ttft_ms``).  ``ttfa_ms`` bounds the time to the first answer
token (``metrics.request_metrics.ttfa_s``: reasoning left out); a caller without that column (a
simulation of a model that does not reason) passes none and TTFT stands for it.  ``task_s``
bounds a task's completion time, not a request's (``metrics.tasks``).

A request without a TPOT (fewer than two output tokens: ``metrics.request_metrics.tpot_s`` is NaN)
cannot miss a TPOT SLO: it passes it (``slo_pass``), and the TPOT percentile is taken over the
requests that have one (``percentile_check``), as ``vllm bench serve`` (goodput; TPOT over outputs
longer than one token) and AIPerf (no inter-token latency below two tokens) do.  A run where no
completed request has a TPOT meets the TPOT SLO vacuously, and says so (``slo_tpot_vacuous`` in
``summary.json``, the reason ``run_meets_slo`` gives).  Any other SLO without a value misses it
(a TTFT or E2EL only a completed request has; a TTFA where only reasoning came).  Every reader (the
summary, the good mask, the plan's capacity, the SLO search, the report) goes through these.

A run meets the SLO (``run_meets_slo``, the one run-level check: the SLO search, the plan's
capacity, the report and tune all read it) when it was not stopped as over-saturated, every
configured SLO's ``slo.percentile``-th percentile over its completed requests is within the
limit, some request completed, failed <= (100 - percentile)% of the run's requests (a failed
request misses every limit: with more failed than that, the percentile over all the run's
requests is beyond any limit), and the share of good requests is at least the attainment floor
(``slo.min_attainment``) where one is set, and it was not still filling (``metrics.filling``: the
requests in flight still rising through its arrivals, so its latencies are a fill-up's, a lower
bound of the steady state's).  A run still filling that misses the SLO misses it (the steady
state would be slower still); one that meets it on a fill-up's latencies does not meet it, and the
reason says it was still filling.  ``slo_holds`` applies it to a ``summary.json`` (one written
before ``in_flight_second_quarter`` was recorded is not judged on it).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from conf.schema import Slo
from metrics.filling import backlog_growing, backlog_note, filling_note, still_filling
from metrics.percentiles import percentile as _percentile

# SLO name -> the per-request column (seconds) it bounds.
SLO_COLUMNS = {"ttft_ms": "ttft_s", "tpot_ms": "tpot_s", "e2el_ms": "e2el_s", "ttfa_ms": "ttfa_s"}
# SLOs a request may have no value for without missing them (module doc): TPOT, undefined below two tokens.
UNDEFINED_PASSES = frozenset({"tpot_ms"})
VACUOUS_NOTE = "no completed request has a {0} (each had fewer than two output tokens): the {0} SLO holds vacuously"


@dataclass(frozen=True)
class SLO:
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    e2el_ms: float | None = None
    percentile: float = Slo.percentile
    task_s: float | None = None  # after the four: callers build SLO(ttft, tpot, e2el, percentile) by position
    ttfa_ms: float | None = None

    @classmethod
    def from_config(cls, cfg) -> SLO:
        """From ``slo`` (conf/schema/slo.py's ``Slo``) or the mapping a results file recorded of it (JSON:
        numbers may come back as ints); None: no SLO."""
        get = (lambda k: cfg.get(k)) if cfg is not None else (lambda k: None)
        return cls(
            ttft_ms=_opt_float(get("ttft_ms")),
            tpot_ms=_opt_float(get("tpot_ms")),
            e2el_ms=_opt_float(get("e2el_ms")),
            percentile=float(get("percentile") if get("percentile") is not None else cls.percentile),
            task_s=_opt_float(get("task_s")),
            ttfa_ms=_opt_float(get("ttfa_ms")),
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
    if name in UNDEFINED_PASSES:
        ok |= np.isnan(v)
    return ok


@dataclass(frozen=True)
class PercentileCheck:
    """One SLO's ``slo.percentile``-th percentile over the requests that have a value (NaN left out)."""
    value_ms: float    # NaN: no request has a value
    samples: int       # the requests that have one
    met: bool          # within the limit, inclusively; with no sample: TPOT holds (vacuously), any other misses

    @property
    def vacuous(self) -> bool:
        """Met with nothing to judge: no request has a TPOT."""
        return self.met and self.samples == 0


def percentile_check(slo: SLO, name: str, values_s) -> PercentileCheck:
    """The percentile part of the run-level check for SLO ``name`` over ``values_s`` (seconds, the completed
    requests'): the percentile of the non-NaN values (numpy's linear rule) against the limit (module doc)."""
    v = np.asarray(values_s, dtype=np.float64)
    n = int(np.count_nonzero(~np.isnan(v)))
    pv = _percentile(v, slo.percentile) * 1e3
    return PercentileCheck(pv, n, bool(pv <= getattr(slo, name)) if n else name in UNDEFINED_PASSES)


def good_mask(slo: SLO, status, ttft_s, tpot_s, e2el_s, ttfa_s=None) -> np.ndarray:
    """Good = completed and every configured SLO holds (``ttfa_s`` None: TTFT stands for it)."""
    ok = np.asarray(status) == "ok"
    cols = {"ttft_ms": ttft_s, "tpot_ms": tpot_s, "e2el_ms": e2el_s, "ttfa_ms": ttft_s if ttfa_s is None else ttfa_s}
    for name in slo.limits():
        ok &= slo_pass(slo, name, cols[name])
    return ok


def percentiles_missed(slo: SLO, ttft_s, tpot_s, e2el_s, ttfa_s=None) -> list[str]:
    """The configured SLOs (``ttft``, ``tpot``, ``e2el``, ``ttfa``: ``ttfa_s`` None, TTFT stands for it)
    whose ``slo.percentile``-th percentile over the completed requests' values (NaN left out) is
    above the limit (``percentile_check``); one with no value misses, except TPOT (module doc)."""
    cols = {"ttft_ms": ttft_s, "tpot_ms": tpot_s, "e2el_ms": e2el_s, "ttfa_ms": ttft_s if ttfa_s is None else ttfa_s}
    return [name[:-3] for name in slo.limits() if not percentile_check(slo, name, cols[name]).met]


def run_meets_slo(missed: list[str], *, completed: int, failed: int, percentile: float,
                  attainment: float | None = None, min_attainment: float | None = None,
                  saturated: bool = False, in_flight_quarters: tuple[float, float] | None = None,
                  vacuous: list[str] = (), backlog: tuple[float, float] | None = None) -> tuple[bool, str]:
    """The run-level check (module doc) and, when it fails, why: ``missed`` the SLOs whose
    percentile over the completed requests is above the limit, ``completed`` and ``failed`` the
    run's measured requests, ``attainment`` its share of good requests, ``in_flight_quarters`` the
    mean in flight over its arrivals' second and last quarters (``metrics.filling``; None: unknown).
    ``backlog`` the rise of its wait over its arrivals' second half and the bound it must pass
    (``metrics.filling.wait_rise``; None: unknown).  A run that meets it with ``vacuous`` SLOs (held
    with no request to judge: ``tpot``) says so."""
    if saturated:
        return False, "over-saturated"
    if missed:
        return False, "missed: " + ", ".join(missed)
    if not completed:
        return False, "no request completed"
    n = completed + failed
    # failed / n > (100 - percentile) / 100, with room for the float error of 100 - 99.9
    if failed * 100 > n * (100 - percentile) * (1 + 1e-9):
        return False, (f"{failed} of {n} requests failed: more than the {100 - percentile:.3g}% a "
                       f"p{percentile:g} SLO allows")
    if min_attainment is not None and not (attainment or 0) >= min_attainment:
        return False, f"attainment {attainment} < {min_attainment}"
    if backlog is not None and backlog_growing(*backlog):  # a backlog, not a fill-up: the note says which
        return False, backlog_note(*backlog)
    if in_flight_quarters is not None and still_filling(*in_flight_quarters):
        return False, filling_note(*in_flight_quarters)
    return True, "; ".join(VACUOUS_NOTE.format(name.upper()) for name in vacuous)


def slo_holds(summary: Mapping, min_attainment: float | None = None) -> tuple[bool, str]:
    """``run_meets_slo`` on a run's ``summary.json``: its per-SLO checks (``slo_*_met``, ``slo_*_vacuous``),
    request counts, ``slo_percentile``, ``slo_attainment``, ``saturated``, ``in_flight_second_quarter``,
    ``in_flight_last_quarter`` and the backlog's (``backlog_growing``, ``backlog_wait_rise_s``, ``_bound_s``).
    A summary written before ``slo_tpot_vacuous`` (its ``slo_tpot_met`` false
    where no request had a TPOT: its percentile null) is read by the same rule (module doc)."""
    # a summary without the key (written before it was recorded) was run at the default percentile
    pct = summary.get("slo_percentile")
    pct = float(pct) if pct is not None else SLO.percentile
    checked = [k[4:-4] for k in summary if k.startswith("slo_") and k.endswith("_met")]
    vacuous = [m for m in checked if _vacuous(summary, m, pct)]
    missed = [m for m in checked if not summary[f"slo_{m}_met"] and m not in vacuous]
    return run_meets_slo(missed, completed=int(summary.get("completed") or 0), failed=int(summary.get("failed") or 0),
                         percentile=pct, attainment=summary.get("slo_attainment"), min_attainment=min_attainment,
                         saturated=bool(summary.get("saturated")), in_flight_quarters=in_flight_quarters(summary),
                         vacuous=vacuous, backlog=wait_backlog(summary))


def _vacuous(summary: Mapping, short: str, pct: float) -> bool:
    """Whether the summary's SLO ``short`` held with no request to judge (an older summary: its percentile null)."""
    if f"{short}_ms" not in UNDEFINED_PASSES:
        return False
    if f"slo_{short}_vacuous" in summary:
        return bool(summary[f"slo_{short}_vacuous"])
    key = f"slo_{short}_p{pct:g}_ms"
    return key in summary and (summary[key] is None or math.isnan(float(summary[key])))


def vacuous_line(summary: Mapping) -> str | None:
    """What the console says of a run whose TPOT SLO held with no request to judge (else None)."""
    held = [k[4:-len("_vacuous")] for k, v in summary.items() if k.startswith("slo_") and k.endswith("_vacuous") and v]
    return "; ".join(VACUOUS_NOTE.format(m.upper()) for m in held) or None


def wait_backlog(summary: Mapping) -> tuple[float, float]:
    """A summary's (``backlog_wait_rise_s``, ``backlog_wait_bound_s``), ``metrics.filling``'s; NaN (no
    backlog) where JSON wrote null, the summary was written before them, or it did not flag the run
    (``backlog_growing`` false: a trace's replay, whose rate changes by design)."""
    if not summary.get("backlog_growing"):
        return math.nan, math.nan
    return tuple(math.nan if summary.get(k) is None else float(summary[k])
                 for k in ("backlog_wait_rise_s", "backlog_wait_bound_s"))


def in_flight_quarters(summary: Mapping) -> tuple[float, float]:
    """A summary's (``in_flight_second_quarter``, ``in_flight_last_quarter``), ``metrics.filling``'s
    means; NaN (not filling) where JSON wrote null, the summary was written before them, or the run
    replayed a trace (``load_kind`` trace: its rate changes by design, so its in flight may rise)."""
    if summary.get("load_kind") == "trace":
        return math.nan, math.nan
    return tuple(math.nan if summary.get(k) is None else float(summary[k])
                 for k in ("in_flight_second_quarter", "in_flight_last_quarter"))
