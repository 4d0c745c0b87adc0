"""Step 4 of the seed's protocol, made adaptive: find the engine's saturation, place the load
points up to and past it, and find the highest load at which the SLO still holds.

- ``saturation``: from a probe of closed-loop runs at rising concurrency (1, 2, 4, ...): the
  highest request throughput seen, stopping once doubling the users adds less than
  ``min_gain`` (or a step fails).  ``place_points`` spaces the sweep's points from it:
  ``linear`` (fractions 0.1 .. 1.1 of saturation), ``geometric`` (halving down from 1.1x),
  ``mlperf`` (MLPerf Endpoints' regions: 1, 2, 4, ... 32 below saturation, then three
  log2-spaced points up to a 10 % margin above it).  Open loops get request rates, closed
  loops concurrencies.
- ``Bisection``: the highest offered load whose run meets the SLO, between a load known to
  pass and one known to fail, halving the bracket until it is within ``tolerance`` of the
  passing end (or ``max_probes`` runs); integer for concurrency.  The answer carries its
  bracket: the true knee lies between the last pass and the first fail.  A probe still filling
  up (``metrics.filling``: its requests in flight still rising through its arrivals) fails
  (``metrics.slo.run_meets_slo``), and the answer's note names its load and what to do.
- ``thin_percentile_warning``: a probe whose SLO percentile rests on fewer requests than can
  support it (MLPerf's early-stopping count: 662 for a p99) is decided by its one or two slowest
  requests, so one stall of the host fails it: the answer may lie far below the true highest
  load (live, on a loaded 2-core host: docs/measured/verdicts.md).  The result says so.

Pure: numbers in, numbers out; the harness runs the probes (``protocols.experiment``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from metrics.filling import STILL_FILLING
from metrics.percentiles import early_stopping_min_samples

SPACINGS = ("linear", "geometric", "mlperf")
MLPERF_LOW = (1, 2, 4, 8, 16, 32)


def probe_concurrencies(max_concurrency: int = 256) -> list[int]:
    return [2 ** i for i in range(int(math.log2(max_concurrency)) + 1)]


def saturation(steps: list[tuple[int, float]], min_gain: float = 0.05) -> tuple[float, int, bool]:
    """(saturation throughput, its concurrency, whether the curve flattened) from probe steps
    ``(concurrency, request throughput)`` in rising order."""
    best_c, best = 0, 0.0
    for c, thr in steps:
        if thr > best * (1 + min_gain):
            best_c, best = c, thr
        elif best > 0:
            return max(best, thr), best_c, True
    return best, best_c, False


def probe_done(steps: list[tuple[int, float]], min_gain: float = 0.05) -> bool:
    """Whether the probe can stop: the last doubling gained less than ``min_gain``."""
    return len(steps) >= 2 and steps[-1][1] < steps[-2][1] * (1 + min_gain)


def place_points(sat: float, spacing: str, n: int = 6, integer: bool = False) -> list[float]:
    """Load points up to and past saturation ``sat`` (a rate, or a concurrency when ``integer``)."""
    if spacing not in SPACINGS:
        raise ValueError(f"protocol.spacing={spacing!r}: expected one of {', '.join(SPACINGS)}")
    if not (sat > 0 and math.isfinite(sat)):
        raise ValueError(f"the probe found no saturation (throughput {sat}): nothing to place points by")
    top = 1.1 * sat
    if spacing == "linear":
        pts = list(np.linspace(0.1, 1.1, n) * sat)
    elif spacing == "geometric":
        pts = [top / 2 ** (n - 1 - i) for i in range(n)]
    else:
        low = [x for x in MLPERF_LOW if x < sat]
        start = low[-1] if low else sat / 2
        pts = [float(x) for x in low] + list(np.exp2(np.linspace(np.log2(start), np.log2(top), 4))[1:])
    if integer:
        return sorted({max(1, int(round(p))) for p in pts})
    return sorted({round(float(p), 3) for p in pts if p > 0})


@dataclass
class Probe:
    load: float
    passed: bool
    run_dir: str = ""
    why: str = ""
    recheck: int = 0  # which measurement of this load: 0 its first, 1 its first re-measurement, ...


@dataclass
class Bisection:
    """The highest load meeting the SLO in ``[low, high]`` (``integer`` for concurrency).

    A miss below the bracket's upper end (a load already missed above it) is re-measured up to
    ``recheck`` times before it counts, and counts only when every measurement misses: a stall
    of the host only adds latency, so one miss of a small probe far below the knee is more often
    the host than the engine (live: docs/measured/verdicts.md).  Twice by default: a burst of
    the host's load outlasts one re-measurement taken right after the miss (live, 3 of 34 searches
    answered low with one, 0 of 20 with two), at the price of two more probes for each miss that
    is the engine's own.  The high end, with no evidence above it, is measured once.
    ``recheck=0``: every miss counts at once."""

    low: float
    high: float
    tolerance: float = 0.1
    max_probes: int = 8
    integer: bool = False
    recheck: int = 2
    probes: list[Probe] = field(default_factory=list)

    def __post_init__(self):
        if not 0 < self.low < self.high:
            raise ValueError(f"protocol.search: the bracket must be 0 < low < high, got [{self.low}, {self.high}]")
        if self.recheck < 0:
            raise ValueError(f"protocol.search_recheck must be >= 0, got {self.recheck}")

    def measured(self, load: float) -> int:
        """How many times ``load`` has been measured so far."""
        return sum(p.load == load for p in self.probes)

    def _passes(self, load: float) -> bool:
        return any(p.passed for p in self.probes if p.load == load)

    def _pending(self) -> float | None:
        """The load whose miss awaits a re-measurement before it counts, if any."""
        if not self.probes or self.probes[-1].passed:
            return None
        load = self.probes[-1].load
        upper = [p.load for p in self.probes if not p.passed and p.load > load]
        if not upper or self._passes(load) or self.measured(load) > self.recheck:
            return None
        return load

    @property
    def best_pass(self) -> float | None:
        ok = [p.load for p in self.probes if p.passed]
        return max(ok) if ok else None

    @property
    def first_fail(self) -> float | None:
        pending, best = self._pending(), self.best_pass
        bad = [p.load for p in self.probes if not p.passed and p.load != pending and not self._passes(p.load)
               and (best is None or p.load > best)]
        return min(bad) if bad else None

    def next_load(self) -> float | None:
        """The next load to try, or None when the answer is known (or the probes are spent)."""
        if (pending := self._pending()) is not None:
            return pending  # re-measured before it counts (not one of max_probes)
        tried = {p.load for p in self.probes}
        if len(tried) >= self.max_probes:
            return None
        if self.high not in tried:
            return self.high
        if self.best_pass is None and self.first_fail is not None:
            if self.low not in tried:
                return self.low
            return None  # even the low end fails
        if self.first_fail is None:
            return None  # the high end passes: the knee is beyond the bracket
        lo, hi = self.best_pass, self.first_fail
        if hi - lo <= max(self.tolerance * lo, 1 if self.integer else 0):
            return None
        mid = (lo + hi) / 2
        if self.integer:
            mid = int(mid)
            if mid in tried or mid <= lo:
                return None
        return mid

    def record(self, load: float, passed: bool, run_dir: str = "", why: str = "") -> str:
        """Adds a measurement of ``load``; returns what the console says of it beyond meeting or
        missing the SLO ("" when nothing)."""
        n = self.measured(load)
        self.probes.append(Probe(load, passed, run_dir, why, n))
        if self._pending() == load:
            return (f"re-measured before it counts: a miss below the bracket's upper end may be a stall of the "
                    f"host (protocol.search_recheck={self.recheck}; 0 turns it off)")
        if n and passed:
            return "met the SLO when re-measured: its miss before read as a stall of the host"
        return ""

    def rechecked(self) -> list[dict]:
        """Each re-measured load, and whether its miss was confirmed (every measurement missed)."""
        loads = sorted({p.load for p in self.probes if p.recheck}, key=[p.load for p in self.probes].index)
        return [{"load": x, "confirmed": not self._passes(x)} for x in loads]

    def _met_at_last_recheck(self) -> list[float]:
        """Loads that missed every measurement but the last one allowed: the host's bursts here last
        about as long as the re-measurements can wait out."""
        return [p.load for p in self.probes if p.passed and p.recheck and p.recheck == self.recheck]

    def result(self) -> dict:
        """``max_load_under_slo`` with its bracket and why the search stopped."""
        lo, hi = self.best_pass, self.first_fail
        if lo is None:
            note = f"the SLO fails already at the low end {self.low:g}"
        elif hi is None:
            note = f"the SLO holds at the high end {self.high:g}: the knee is beyond the bracket"
        elif hi - lo <= max(self.tolerance * lo, 1 if self.integer else 0):
            note = f"bracket within tolerance {self.tolerance:.0%}"
        else:
            note = f"stopped after {len({p.load for p in self.probes})} probes (protocol.search_max_probes)"
        filling = sorted({p.load for p in self.probes if not p.passed and p.why.startswith(STILL_FILLING)
                          and not self._passes(p.load)})
        if filling:  # met the SLO on a fill-up's latencies: no answer stands on them, nor above them
            note += (f"; {STILL_FILLING} at {', '.join(f'{x:g}' for x in filling)} (its latencies a "
                     "fill-up's, not a steady state's), read as missing the SLO: give each probe more requests "
                     "(load.num_requests) or a longer duration (load.duration_s)")
        rechecked = self.rechecked()
        overturned = [r["load"] for r in rechecked if not r["confirmed"]]
        if overturned:
            note += (f"; re-measured: {', '.join(f'{x:g}' for x in overturned)} met the SLO when re-measured "
                     "(a miss before read as a stall of the host)")
        if (late := self._met_at_last_recheck()) and hi is not None:
            note += (f"; {', '.join(f'{x:g}' for x in late)} met the SLO only at its last re-measurement "
                     f"(protocol.search_recheck={self.recheck}): a burst of the host's load a little longer would "
                     f"have counted it, and the bracket's upper end {hi:g} may be one; "
                     f"protocol.search_recheck={self.recheck + 1} or a quieter host would tell")
        return {"max_load_under_slo": lo if lo is not None else 0.0,
                "bracket": [lo if lo is not None else 0.0, hi if hi is not None else math.inf],
                "probes": [p.__dict__ for p in self.probes], "rechecked": rechecked, "note": note}


def thin_percentile_warning(percentile: float, requests: list[int]) -> str | None:
    """What the search's answer says when some probe judged the SLO's ``percentile`` on fewer
    ``requests`` than MLPerf's early stopping needs to claim it (None when every probe had enough)."""
    if not requests or percentile >= 100:
        return None
    need = early_stopping_min_samples(percentile)
    fewest = min(requests)
    if fewest >= need:
        return None
    return (f"the SLO's p{percentile:g} was judged on as few as {fewest} requests in a probe (a claim about it needs "
            f"{need}): a probe's one or two slowest requests decide it, so one stall of the host fails it and the "
            f"answer may lie well below the true highest load; run probes of at least {need} requests "
            "(load.num_requests or load.duration_s x rate)")
