"""The promotion gate: is the candidate not worse than the incumbent over the same period, with
confidence?  And the guards that stop a stage at once.

**Samples.**  A stage's requests, per side (``SideSample``): status, SLO pass, TTFT, TPOT, output
tokens, and when each arrived.  Requests inside a stage are correlated (they share the engine's
batch, the host's noise), so the resampling unit is a *time block*: the stage is cut by arrival
time into ``blocks`` spans holding equal numbers of the candidate's requests (at least 5 each and
at least 5 blocks: fewer than 25 candidate requests give no interval), and a bootstrap resample
draws blocks with replacement, the same blocks for both sides (``metrics.statistics.bootstrap_ci``,
BCa with its percentile fallback; percentiles of the pooled requests of the drawn blocks exactly,
by ``metrics.statistics.PooledQuantile``).  In shadow mode both sides ran the very same requests,
so a resample compares the same requests (paired per request); so in a canary stage whose every
candidate-served request is mirrored, where the samples are those requests and their copies on
the incumbent (``protocols.promote.run.gate_rows``); in other canary stages the two sides' requests
differ (unpaired) and only the period is shared.

**Metrics** (candidate c vs incumbent i):

- ``slo_attainment`` = good / requests; ``error_rate`` = not ``ok`` / requests;
  ``token_agreement`` (greedy outputs of the same request on both sides,
  ``metrics.output_agreement``): compared as c - i (absolute), agreement against
  ``min_agreement``;
- ``pXX_ttft_ms``, ``pXX_tpot_ms``: the percentile (numpy's linear rule) of the side's requests,
  compared as c/i - 1 (relative); judged only with MLPerf's early-stopping minimum of values on
  each side (11 for p50, 64 for p90, 662 for p99: fewer make the percentile one request's
  latency, and its bootstrap interval meaningless), else inconclusive;
- ``cost_per_mtok_good`` = 1e6 x cost / good output tokens, each side's cost its share of the
  window's cost by the requests it ran (``cost_per_request`` x requests x its hourly factor):
  compared as c/i - 1.

**Decision** per metric with margin m and interval [lo, hi] of the difference (worse = higher
for latency, cost and errors, lower for attainment):

- ``pass`` when the interval lies on the good side of the margin (hi <= m; lo >= -m for
  attainment): not worse by more than m, with confidence;
- ``fail`` when it lies wholly beyond it (lo > m; hi < -m): worse by more than m, with confidence;
- ``inconclusive`` otherwise (also without an interval: too few requests).

The gate says ``advance`` when every metric passes, ``rollback`` when any fails, ``extend``
otherwise.  A stage is gated again as it runs longer; each look spends half of what is left
of alpha = 1 - confidence (look k at 1 - alpha / 2^k), so all looks together keep the
configured confidence.

**Guards** (``guard_trips``), over the last ``window_s`` of finished requests, the candidate's
against the incumbent's in the same window: error rate higher by more than
``max_error_rate_increase``, attainment lower by more than ``max_attainment_drop``, p90 TTFT
more than ``max_ttft_ratio`` times the incumbent's (or ``ttft_floor_ms``, if larger), or a
candidate request in flight without a first token for ``stall_s`` (and ``max_ttft_ratio`` x the
incumbent's p90 TTFT).  Each needs ``min_requests`` candidate requests in the window (the
latency guard ``min_latency_requests`` TTFTs on each side), but the stall.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from metrics.output_agreement import token_agreement
from metrics.percentiles import early_stopping_min_samples, percentile
from metrics.statistics import PooledQuantile, bootstrap_ci

# metric -> (kind, higher_is_better, comparison)
METRICS = {
    "slo_attainment": ("rate", True, "absolute"),
    "error_rate": ("rate", False, "absolute"),
    "cost_per_mtok_good": ("cost", False, "relative"),
}
LATENCY = {"ttft": "ttft_s", "tpot": "tpot_s"}
MIN_BLOCKS = 5  # fewer blocks than this give a bootstrap too few distinct resamples to trust


def metric_kind(name: str) -> tuple[str, bool, str]:
    if name in METRICS:
        return METRICS[name]
    parts = name.split("_")  # p99_ttft_ms
    if len(parts) == 3 and parts[0].startswith("p") and parts[1] in LATENCY and parts[2] == "ms":
        try:
            q = float(parts[0][1:])
        except ValueError:
            q = math.nan
        if 0 < q < 100:
            return "quantile", False, "relative"
    raise ValueError(f"protocol.gate.margins.{name}: not a gate metric (slo_attainment, error_rate, "
                     f"cost_per_mtok_good, p<q>_ttft_ms, p<q>_tpot_ms)")


@dataclass
class SideSample:
    """One side's requests in a stage, one element per request."""
    arrive_ns: np.ndarray
    ok: np.ndarray          # status == ok
    good: np.ndarray        # completed and within every SLO
    ttft_s: np.ndarray      # NaN where undefined
    tpot_s: np.ndarray
    output_tokens: np.ndarray

    @classmethod
    def from_rows(cls, rows: Sequence) -> SideSample:
        """From rows with ``arrive_ns, status, slo_ok, ttft_s, tpot_s, output_tokens`` attributes."""
        f = lambda v: math.nan if v is None else float(v)  # noqa: E731
        return cls(np.array([r.arrive_ns for r in rows], dtype=np.int64),
                   np.array([r.status == "ok" for r in rows], dtype=bool),
                   np.array([bool(r.slo_ok) for r in rows], dtype=bool),
                   np.array([f(r.ttft_s) for r in rows]), np.array([f(r.tpot_s) for r in rows]),
                   np.array([f(r.output_tokens) if r.status == "ok" else 0.0 for r in rows]))

    @property
    def n(self) -> int:
        return int(self.arrive_ns.size)


def block_edges(cand_arrive_ns: np.ndarray, blocks: int) -> np.ndarray:
    """Inner edges of ``blocks`` time blocks holding equal numbers of the candidate's requests
    (a 1 % canary's requests are sparse: equal spans of time would leave blocks empty)."""
    return np.quantile(cand_arrive_ns.astype(np.float64), np.linspace(0, 1, blocks + 1)[1:-1])


def _min_samples(name: str) -> int:
    """A percentile is judged only on at least MLPerf's early-stopping minimum of values a side
    (64 for p90, 662 for p99): below it the percentile is one or two requests' latency."""
    if metric_kind(name)[0] != "quantile":
        return 0
    return early_stopping_min_samples(float(name.split("_")[0][1:]))


def _values(name: str, s: SideSample) -> int:
    if metric_kind(name)[0] != "quantile":
        return s.n
    col = getattr(s, LATENCY[name.split("_")[1]])
    return int((~np.isnan(col)).sum())


def _blocks(t: np.ndarray, edges: np.ndarray) -> np.ndarray:
    return np.searchsorted(edges, t.astype(np.float64), side="right").astype(np.intp)


class _BlockStats:
    """Per-block sums of one side, and the statistic of a weighted set of blocks."""

    def __init__(self, s: SideSample, b: np.ndarray, B: int):
        self.B = B
        count = lambda w: np.bincount(b, weights=w, minlength=B).astype(np.float64)  # noqa: E731
        self.n = count(None)
        ok, good = s.ok.astype(bool), s.good.astype(bool)
        self.err = count((~ok).astype(np.float64))
        self.good = count(good.astype(np.float64))
        self.good_tokens = count(np.where(good, np.nan_to_num(s.output_tokens), 0.0))
        self.values = {k: [getattr(s, col)[(b == j) & ~np.isnan(getattr(s, col))] for j in range(B)]
                       for k, col in LATENCY.items()}
        self._pq: dict = {}

    def quantile(self, which: str, q: float, w: np.ndarray) -> np.ndarray:
        key = (which, q)
        if key not in self._pq:
            self._pq[key] = PooledQuantile(self.values[which], q)
        return self._pq[key].from_weights(w)[:, 0]


def _weights(idx: np.ndarray, B: int) -> np.ndarray:
    """Drawn block indices (rows, k) -> times each block was drawn, (rows, B)."""
    rows = idx.shape[0]
    flat = (np.arange(rows)[:, None] * B + idx).ravel()
    return np.bincount(flat, minlength=rows * B).reshape(rows, B).astype(np.float64)


def _statistic(name: str, st: _BlockStats, w: np.ndarray, cost_per_request: float, factor: float) -> np.ndarray:
    kind = metric_kind(name)[0]
    with np.errstate(divide="ignore", invalid="ignore"):
        if name == "slo_attainment":
            return (w @ st.good) / (w @ st.n)
        if name == "error_rate":
            return (w @ st.err) / (w @ st.n)
        if kind == "cost":
            return 1e6 * cost_per_request * factor * (w @ st.n) / (w @ st.good_tokens)
        q, which, _ = name.split("_")
        return st.quantile(which, float(q[1:]), w) * 1e3


def _diff(name: str, c: np.ndarray, i: np.ndarray) -> np.ndarray:
    if metric_kind(name)[2] == "absolute":
        return c - i
    with np.errstate(divide="ignore", invalid="ignore"):
        return c / i - 1.0


def _decide(name: str, lo: float, hi: float, margin: float) -> str:
    higher_better = metric_kind(name)[1]
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return "inconclusive"
    if higher_better:
        return "pass" if lo >= -margin else ("fail" if hi < -margin else "inconclusive")
    return "pass" if hi <= margin else ("fail" if lo > margin else "inconclusive")


def compare_sides(inc: SideSample, cand: SideSample, margins: Mapping[str, float | None], *, paired: bool,
                  confidence: float = 0.95, blocks: int = 10, resamples: int = 2000, seed: int = 0,
                  cost_per_request: float = math.nan, cost_factor: float = 1.0, label: str | None = None) -> dict:
    """Every metric of ``margins`` (None: reported, not gated): each side's value, the difference,
    its interval at ``confidence`` and the decision (module doc).  ``blocks`` is at most that
    many, at least 5 candidate requests each and at least ``MIN_BLOCKS``."""
    B = max(MIN_BLOCKS, min(int(blocks), cand.n // 5))
    edges = block_edges(cand.arrive_ns, B) if cand.n else np.zeros(B - 1)
    si = _BlockStats(inc, _blocks(inc.arrive_ns, edges), B)
    sc = _BlockStats(cand, _blocks(cand.arrive_ns, edges), B)
    one = np.ones((1, B))
    out = {}
    for name, margin in margins.items():
        kind, higher_better, comparison = metric_kind(name)
        vi = float(_statistic(name, si, one, cost_per_request, 1.0)[0])
        vc = float(_statistic(name, sc, one, cost_per_request, cost_factor)[0])
        if kind == "cost" and not math.isfinite(cost_per_request):
            out[name] = {"incumbent": vi, "candidate": vc, "difference": math.nan, "low": math.nan,
                         "high": math.nan, "comparison": comparison, "margin": margin, "gated": False,
                         "decision": "not gated", "method": "", "note": "no cost profile"}
            continue

        def stat(idx, axis=-1, name=name):
            idx = np.moveaxis(np.asarray(idx), axis, -1)
            lead = idx.shape[:-1]
            w = _weights(idx.reshape(-1, idx.shape[-1]), B)
            d = _diff(name, _statistic(name, sc, w, cost_per_request, cost_factor),
                      _statistic(name, si, w, cost_per_request, 1.0))
            return d.reshape(lead)

        populated = int(((si.n > 0) & (sc.n > 0)).sum())
        need = _min_samples(name)
        have = min(_values(name, inc), _values(name, cand))
        if have < need:
            est_lo = est_hi = math.nan
            method, note = "", (f"too few samples for {name.split('_')[0]}: {have} on the smaller side, "
                                f"{need} needed (MLPerf's early-stopping minimum)")
        elif cand.n < MIN_BLOCKS * 5 or populated < MIN_BLOCKS:
            est_lo = est_hi = math.nan
            method, note = "", (f"too few requests for an interval: incumbent {inc.n}, candidate {cand.n} "
                                f"(at least {MIN_BLOCKS * 5}), {populated} block(s) with both (at least {MIN_BLOCKS})")
        else:
            est = bootstrap_ci(stat, (np.arange(B),), confidence=confidence, n_resamples=int(resamples), seed=seed,
                               drop_nan=False)
            est_lo, est_hi, method, note = est.low, est.high, "block " + est.method, est.note
        d = float(_diff(name, np.array(vc), np.array(vi)))
        gated = margin is not None
        out[name] = {"incumbent": vi, "candidate": vc, "difference": d, "low": float(est_lo), "high": float(est_hi),
                     "comparison": comparison, "higher_is_better": higher_better, "margin": margin, "gated": gated,
                     "decision": _decide(name, est_lo, est_hi, float(margin)) if gated else "not gated",
                     "method": method, "note": note,
                     "pairing": label or ("paired (same requests)" if paired else "unpaired (same period)")}
    return out


def agreement_check(pairs: Sequence[tuple[Sequence, Sequence]], min_agreement: float, *, confidence: float = 0.95,
                    min_pairs: int = 10, required: bool = True, resamples: int = 2000, seed: int = 0) -> dict:
    """Mean token agreement of the candidate's greedy outputs with the incumbent's on the same
    requests (``metrics.output_agreement.token_agreement``, incumbent as reference), with a
    bootstrap interval over requests; pass when its lower bound >= ``min_agreement``, fail when
    its upper bound is below.  Fewer than ``min_pairs`` pairs: inconclusive where ``required``
    (shadow), else not gated."""
    each = [token_agreement(a, b) for a, b in pairs]
    n = len(each)
    base = {"pairs": n, "min_agreement": min_agreement, "gated": True}
    if n:
        div = [e.first_divergence for e in each if e.first_divergence is not None]
        base.update(mean_agreement=float(np.mean([e.agreement for e in each])),
                    identical_share=sum(e.first_divergence is None for e in each) / n,
                    median_first_divergence=float(np.median(div)) if div else None,
                    min_first_divergence=int(min(div)) if div else None)
    if n < min_pairs:
        return {**base, "low": math.nan, "high": math.nan, "gated": required,
                "decision": "inconclusive" if required else "not gated",
                "note": f"{n} compared greedy pair(s) < protocol.gate.min_pairs={min_pairs}"}
    values = np.array([e.agreement for e in each])
    est = bootstrap_ci(np.mean, (values,), confidence=confidence, n_resamples=int(resamples), seed=seed,
                       vectorized=True)
    lo, hi = est.low, est.high
    if values.min() == values.max():  # all the same: the interval is the point
        lo = hi = float(values[0])
    decision = "pass" if lo >= min_agreement else ("fail" if hi < min_agreement else "inconclusive")
    return {**base, "low": float(lo), "high": float(hi), "decision": decision, "method": est.method,
            "note": est.note}


def gate_outcome(metrics: Mapping[str, dict], agreement: dict | None) -> tuple[str, list[str]]:
    """``advance`` (every gated check passes), ``rollback`` (one fails) or ``extend``; with reasons."""
    checks = {k: v for k, v in metrics.items() if v.get("gated")}
    if agreement is not None and agreement.get("gated"):
        checks["token_agreement"] = agreement
    fails = [k for k, v in checks.items() if v["decision"] == "fail"]
    open_ = [k for k, v in checks.items() if v["decision"] == "inconclusive"]
    if fails:
        return "rollback", [describe(k, checks[k]) for k in fails]
    if open_:
        return "extend", [describe(k, checks[k]) for k in open_]
    return "advance", [f"all {len(checks)} checks pass: " + ", ".join(sorted(checks))]


def describe(name: str, v: dict) -> str:
    if name == "token_agreement":
        m = v.get("mean_agreement")
        return (f"token_agreement {v['decision']}: mean {m if m is None else round(m, 4)} "
                f"[{v['low']:.4f}, {v['high']:.4f}] vs min {v['min_agreement']} over {v['pairs']} pairs"
                + (f" ({v['note']})" if v.get("note") else ""))
    unit = "%" if v["comparison"] == "relative" else ""
    k = 100.0 if unit else 1.0
    return (f"{name} {v['decision']}: incumbent {v['incumbent']:.4g}, candidate {v['candidate']:.4g}, "
            f"difference {v['difference'] * k:+.3g}{unit} [{v['low'] * k:+.3g}{unit}, {v['high'] * k:+.3g}{unit}] "
            f"vs margin {v['margin'] * k:.3g}{unit} ({'higher' if v.get('higher_is_better') else 'lower'} is better)"
            + (f" ({v['note']})" if v.get("note") else ""))


def look_confidence(confidence: float, look: int) -> float:
    """The level of a stage's ``look``-th gate (1-based): alpha spent as alpha / 2^look."""
    return 1.0 - (1.0 - confidence) / 2.0 ** look


# ------------------------------------------------------------------------------------ guards
def guard_trips(inc: SideSample, cand: SideSample, *, min_requests: int, max_error_rate_increase: float,
                max_attainment_drop: float, max_ttft_ratio: float, stall_s: float, ttft_floor_ms: float = 0.0,
                min_latency_requests: int = 30, candidate_oldest_wait_s: float = 0.0) -> list[dict]:
    """The guards that trip on one window (module doc), each with its numbers."""
    trips = []
    i_ttft = percentile(inc.ttft_s[~np.isnan(inc.ttft_s)], 90) if inc.n else math.nan
    stall_limit = max(stall_s, max_ttft_ratio * i_ttft) if math.isfinite(i_ttft) else stall_s
    if candidate_oldest_wait_s > stall_limit:
        trips.append({"guard": "stall", "value": candidate_oldest_wait_s, "limit": stall_limit,
                      "reason": f"a candidate request has waited {candidate_oldest_wait_s:.1f} s for its first token "
                                f"(limit {stall_limit:.1f} s)"})
    if cand.n < min_requests:
        return trips
    ce, ie = float(np.mean(~cand.ok)), float(np.mean(~inc.ok)) if inc.n else 0.0
    if ce - ie > max_error_rate_increase:
        trips.append({"guard": "error_rate", "value": ce, "incumbent": ie, "limit": ie + max_error_rate_increase,
                      "reason": f"candidate error rate {ce:.1%} vs incumbent {ie:.1%} over {cand.n} / {inc.n} "
                                f"requests (more than +{max_error_rate_increase:.1%})"})
    ca = float(np.mean(cand.good))
    ia = float(np.mean(inc.good)) if inc.n else math.nan
    if inc.n >= min_requests and ia - ca > max_attainment_drop:
        trips.append({"guard": "attainment", "value": ca, "incumbent": ia, "limit": ia - max_attainment_drop,
                      "reason": f"candidate SLO attainment {ca:.1%} vs incumbent {ia:.1%} "
                                f"(a drop of more than {max_attainment_drop:.1%})"})
    c_ttft_v = cand.ttft_s[~np.isnan(cand.ttft_s)]
    i_n = int((~np.isnan(inc.ttft_s)).sum())
    if min(i_n, c_ttft_v.size) >= max(min_requests, min_latency_requests) and math.isfinite(i_ttft):
        c_ttft = percentile(c_ttft_v, 90)
        limit = max_ttft_ratio * max(i_ttft, ttft_floor_ms / 1e3)
        if c_ttft > limit:
            trips.append({"guard": "latency", "value": c_ttft * 1e3, "incumbent": i_ttft * 1e3, "limit": limit * 1e3,
                          "reason": f"candidate p90 TTFT {c_ttft * 1e3:.1f} ms vs incumbent {i_ttft * 1e3:.1f} ms "
                                    f"(limit {limit * 1e3:.1f} ms: {max_ttft_ratio:g}x the incumbent's or "
                                    f"{ttft_floor_ms:g} ms)"})
    return trips
