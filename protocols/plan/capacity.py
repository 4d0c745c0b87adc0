"""What a plan knows of each config: its operating points, measured (finished experiments'
runs and their requests) or estimated (a performance model, ``protocols.plan.estimates``).

An ``OperatingPoint`` is one run of a config at a deployment size (replicas): its offered
load and mean requests in flight per replica, and per request its prompt tokens, TTFT and
TPOT.  A ``ConfigCapacity`` holds a config's points by deployment size and block, its
measured cold starts and cost profile.  The fleet simulation (``protocols.plan.fleet``)
samples requests from the points; the capacity a replica has under an SLO is read from the
points themselves (``max_load``): the highest offered load whose run passes the run-level check
(``metrics.slo.run_meets_slo``, the SLO search's: failed requests, an over-saturated stop and a
run still filling up count against it) at that SLO over its requests, per block, so any SLO can be planned from the
same runs.

Resampling blocks with replacement (``resample``) gives the capacity's uncertainty: a block
is one launch of the config with its own runs, the unit the experiment randomised.
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from harness import results_io
from harness.errors import UserError
from metrics.slo import SLO, good_mask, in_flight_quarters, percentiles_missed, run_meets_slo

# Columns read from each run's requests.parquet.
REQUEST_COLUMNS = ["prompt_tokens", "output_tokens", "ttft_s", "tpot_s", "status", "warmup"]


@dataclass
class OperatingPoint:
    """One run: offered load and requests in flight per replica, and its completed requests."""
    rate_rps: float                 # offered load per replica (requests/s)
    in_flight: float                # mean requests in flight per replica over the run
    prompt_tokens: np.ndarray       # per completed request, sorted by prompt tokens
    ttft_s: np.ndarray
    tpot_s: np.ndarray
    output_tokens: np.ndarray
    failed: int = 0                 # requests that did not complete (they count against the SLO)
    block: int = 0
    run_dir: str = ""
    estimated: bool = False
    # an estimated point's roofline bound beside it (protocols.plan.estimates.roofline_beside)
    roofline: dict | None = None
    saturated: bool = False         # the run was stopped as over-saturated (summary.json ``saturated``)
    # mean in flight over its arrivals' second and last quarters (summary.json, metrics.filling):
    # a run still filling up measured a fill-up's latencies; None: not recorded
    in_flight_quarters: tuple[float, float] | None = None

    def __post_init__(self):
        order = np.argsort(self.prompt_tokens, kind="stable")
        for name in ("prompt_tokens", "ttft_s", "tpot_s", "output_tokens"):
            setattr(self, name, np.asarray(getattr(self, name))[order])

    def meets(self, slo: SLO, min_attainment: float | None = None) -> bool:
        """The run-level check (``metrics.slo.run_meets_slo``) at ``slo`` over this point's requests."""
        done = self.ttft_s.size
        e2el = self.ttft_s + np.nan_to_num(self.tpot_s) * np.maximum(self.output_tokens - 1, 0)
        good = good_mask(slo, np.full(done, "ok"), self.ttft_s, self.tpot_s, e2el).sum()
        n = done + self.failed
        return run_meets_slo(percentiles_missed(slo, self.ttft_s, self.tpot_s, e2el), completed=done,
                             failed=self.failed, percentile=slo.percentile, attainment=good / n if n else None,
                             min_attainment=min_attainment, saturated=self.saturated,
                             in_flight_quarters=self.in_flight_quarters)[0]


@dataclass
class ConfigCapacity:
    """A config's operating points by deployment size, with what the plan needs beside them."""
    name: str
    source: str                                   # "measured", "estimated" or "emulated" (a mocker's runs)
    origin: str                                   # the experiment folder, or the estimator and its inputs
    points: dict[int, list[OperatingPoint]]       # replicas -> runs (every block)
    cold_start_s: list[float] = field(default_factory=list)   # measured engine starts (one per block)
    cost: dict | None = None                      # the cost profile (a mapping) its runs were priced with
    slo: dict | None = None                       # the SLO its experiment ran with
    workload: dict | None = None                  # the workload its runs replayed
    notes: list[str] = field(default_factory=list)
    # per deployment size, the slowdown curve's calibration (protocols.plan.fleet.calibrate)
    corrections: dict | None = None

    @property
    def sizes(self) -> list[int]:
        return sorted(self.points)

    @property
    def blocks(self) -> list[int]:
        return sorted({p.block for pts in self.points.values() for p in pts})

    def model_size(self, replicas: int) -> tuple[int, bool]:
        """The measured deployment size whose per-replica behaviour stands for ``replicas``
        serving (the largest measured size not above it, else the smallest), and whether
        that is outside the measurements (a size above every measured one)."""
        sizes = self.sizes
        below = [s for s in sizes if s <= replicas]
        size = below[-1] if below else sizes[0]
        return size, replicas > sizes[-1]

    def max_load(self, slo: SLO, size: int | None = None, min_attainment: float | None = None) -> dict:
        """Per-replica capacity under ``slo`` at deployment ``size`` (default: the smallest):
        per block, the highest offered load per replica whose run meets the SLO (0 where none
        does), its mean over blocks, and the lowest failing load above it (the bracket)."""
        size = self.sizes[0] if size is None else size
        per_block, brackets = {}, {}
        for p in self.points.get(size, []):
            ok = p.meets(slo, min_attainment)
            best, fail = per_block.get(p.block, 0.0), brackets.get(p.block, math.inf)
            if ok:
                per_block[p.block] = max(best, p.rate_rps)
            else:
                per_block.setdefault(p.block, 0.0)
                brackets[p.block] = min(fail, p.rate_rps)
        # a failing load below a passing one (noise between probes) does not bound the knee
        for b in list(brackets):
            if brackets[b] <= per_block.get(b, 0.0):
                above = [p.rate_rps for p in self.points[size] if p.block == b and p.rate_rps > per_block[b]
                         and not p.meets(slo, min_attainment)]
                brackets[b] = min(above) if above else math.inf
        values = [per_block[b] for b in sorted(per_block)]
        rates = [p.rate_rps for p in self.points.get(size, [])]
        return {"per_block": values, "blocks": sorted(per_block),
                "mean": float(np.mean(values)) if values else 0.0,
                "first_fail": [brackets.get(b, math.inf) for b in sorted(per_block)],
                "measured_range": [min(rates), max(rates)] if rates else [0.0, 0.0]}

    def cold_start(self) -> float | None:
        return float(np.mean(self.cold_start_s)) if self.cold_start_s else None

    def with_blocks(self, blocks: list[int]) -> ConfigCapacity:
        """The same config with only the runs of ``blocks`` (a block drawn twice counts twice)."""
        pts = {}
        for size, ps in self.points.items():
            by_block = {}
            for p in ps:
                by_block.setdefault(p.block, []).append(p)
            chosen = []
            for i, b in enumerate(blocks):
                chosen += [replace(p, block=i) for p in by_block.get(b, [])]
            pts[size] = chosen
        order = self.blocks
        cold = [self.cold_start_s[order.index(b)] for b in blocks
                if b in order and order.index(b) < len(self.cold_start_s)]
        return replace(self, points=pts, cold_start_s=cold or list(self.cold_start_s))


def resamples(blocks: list[int], limit: int, seed: int = 0) -> list[tuple[tuple[int, ...], float]]:
    """Block resamples with replacement and their weights: every distinct multiset (the exact
    bootstrap distribution) when there are at most ``limit`` of them, else ``limit`` random
    draws of weight 1/limit."""
    k = len(blocks)
    if k == 0 or limit <= 0:
        return []
    distinct = math.comb(2 * k - 1, k)
    if distinct <= limit:
        out = []
        for combo in itertools.combinations_with_replacement(blocks, k):
            counts = Counter(combo)
            # multinomial probability of drawing this multiset
            w = math.factorial(k) / math.prod(math.factorial(c) for c in counts.values()) / k ** k
            out.append((combo, w))
        return out
    rng = np.random.default_rng(seed)
    return [(tuple(int(b) for b in rng.choice(blocks, size=k, replace=True)), 1.0 / limit) for _ in range(limit)]


# ------------------------------------------------------------------------------ measured
def read_experiment(folder: str | Path) -> list[ConfigCapacity]:
    """Every config of a finished experiment (its runs.parquet, each run's requests and
    config), as measured capacity."""
    root = Path(folder)
    runs_path = root / results_io.RUNS_TABLE
    if not runs_path.is_file():
        raise UserError(f"{root}: not a finished experiment (no runs.parquet); give the folder a "
                        "`tokenfactory run protocol=sweep|compare ...` wrote")
    runs = results_io.read_parquet(runs_path).to_pylist()
    exp = results_io.read_json(root / results_io.EXPERIMENT, {})
    by_config: dict[str, list[dict]] = {}
    for r in runs:
        if r.get("role") not in (None, "", "measure", "point", "search"):
            continue
        by_config.setdefault(str(r.get("config") or "default"), []).append(r)
    out = []
    for name, rows in by_config.items():
        out.append(_config_capacity(root, name, rows, exp))
    if not out:
        raise UserError(f"{runs_path}: no runs in it")
    return out


def _config_capacity(root: Path, name: str, rows: list[dict], exp: dict) -> ConfigCapacity:
    points: dict[int, list[OperatingPoint]] = {}
    cold: dict[int, float] = {}
    cost = workload = None
    notes = []
    emulated: set[str] = set()  # timing sources of runs on an emulated engine (Dynamo's mocker)
    for r in rows:
        run = root / str(r["run_dir"])
        if r.get("load_kind") not in ("poisson", "constant", "gamma", "trace"):
            notes.append(f"{run}: load {r.get('load_kind')} is closed-loop (a concurrency, not a rate): left out")
            continue
        cfg = results_io.read_yaml(run / results_io.CONFIG, {})
        dep = cfg.get("deployment") or {}
        size = int(dep.get("replicas", 1)) if dep.get("kind", "single") != "disaggregated" else \
            int(dep.get("prefill", 1)) + int(dep.get("decode", 1))
        if dep.get("kind") == "disaggregated":
            notes.append(f"{run}: a prefill/decode deployment is planned as {size} replicas of its whole")
        summary = results_io.read_json(run / results_io.SUMMARY, {})
        if summary.get("emulated"):
            emulated.add(str(summary.get("timing_source")))
        req_path = run / results_io.REQUESTS
        if not req_path.is_file():
            notes.append(f"{run}: no requests.parquet: left out")
            continue
        t = results_io.read_parquet(req_path, columns=REQUEST_COLUMNS).to_pydict()
        warm = np.asarray(t["warmup"], dtype=bool)
        ok = (np.asarray(t["status"]) == "ok") & ~warm
        block = int(r.get("block") or 0)
        rate = float(r.get("offered_load") or summary.get("offered_load") or 0.0)
        if not rate > 0:
            notes.append(f"{run}: no offered rate recorded: left out")
            continue
        points.setdefault(size, []).append(OperatingPoint(
            rate_rps=rate / size,
            in_flight=float(summary.get("mean_in_flight") or 0.0) / size,
            prompt_tokens=_column(t["prompt_tokens"], ok, np.int64),
            ttft_s=_column(t["ttft_s"], ok, np.float64),
            tpot_s=_column(t["tpot_s"], ok, np.float64),
            output_tokens=_column(t["output_tokens"], ok, np.int64),
            failed=int(((np.asarray(t["status"]) != "ok") & ~warm).sum()),
            block=block, run_dir=str(run), saturated=bool(summary.get("saturated")),
            in_flight_quarters=in_flight_quarters(summary)))
        if summary.get("engine_startup_s") and block not in cold:
            cold[block] = float(summary["engine_startup_s"])
        cost = cost or cfg.get("cost")
        workload = workload or cfg.get("workload")
    if not points:
        raise UserError(f"{root}: config {name!r} has no open-loop run with requests to plan from")
    if emulated:  # marked as estimates are: a model's capacity, not a measurement
        notes.append(f"{root}: config {name!r} ran on an emulated engine ({', '.join(sorted(emulated))}): "
                     "its capacity is emulated, not measured")
    return ConfigCapacity(name=name, source="emulated" if emulated else "measured", origin=str(root), points=points,
                          cold_start_s=[cold[b] for b in sorted(cold)], cost=cost,
                          slo=exp.get("slo"), workload=workload, notes=notes)


def _column(values: list, keep: np.ndarray, dtype) -> np.ndarray:
    """The kept rows of a column (a failed row's nulls are never kept; a kept null is NaN or 0)."""
    picked = [v for v, k in zip(values, keep) if k]
    fill = np.nan if dtype is np.float64 else 0
    return np.asarray([fill if v is None else v for v in picked], dtype=dtype)



def run_requests(run_dir: str | Path) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """A run's offered requests, warm-up left out, in arrival order: (arrival s from its first
    request, prompt tokens, output tokens, how many were not completed).  A request that did not
    complete keeps its place in the arrivals (it was offered load); its output length, which the
    run never saw, is the median of the completed ones (0 rows: empty arrays)."""
    t = results_io.read_parquet(Path(run_dir) / results_io.REQUESTS, columns=[
        "scheduled_ns", "prompt_tokens", "output_tokens", "status", "warmup"]).to_pydict()
    keep = ~np.asarray(t["warmup"], dtype=bool)
    sched = np.asarray(t["scheduled_ns"], dtype=np.int64)[keep]
    if sched.size == 0:
        return np.zeros(0), np.zeros(0, np.int64), np.zeros(0, np.int64), 0
    ok = (np.asarray(t["status"]) == "ok")[keep]
    prompt = np.asarray([v or 1 for v, k in zip(t["prompt_tokens"], keep) if k], dtype=np.int64)
    out = np.asarray([v or 0 for v, k in zip(t["output_tokens"], keep) if k], dtype=np.int64)
    fill = int(np.median(out[ok])) if ok.any() else 1
    out = np.where(ok, out, fill)
    order = np.argsort(sched, kind="stable")
    return ((sched[order] - sched[order][0]) / 1e9, prompt[order], np.maximum(out[order], 1),
            int((~ok).sum()))
