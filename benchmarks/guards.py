"""The guards' operating characteristic: how often the over-saturation rule (loadgen/saturation.py)
and ``still_filling`` (metrics/filling.py) stop or flag simulated servers, within and past capacity.

    python benchmarks/guards.py [--runs 60] [--sizes 60,400,2000] [--cases all] [--markdown]

Each case is a simulated server (tests/loadgen/saturation_streams.py), streaming (first token
early) and not (first token = end), under Poisson arrivals and gamma arrivals of CV 2 (a trace's
burstiness), at 60, 400 and 2,000 requests, ``--runs`` seeds each, fed to the rule as the dispatcher
feeds it; the run is then read by ``still_filling`` as summarize reads it.  Bounds held:

- within capacity: false stops (the rule stopped the run) at most 1 %;
- within capacity, the end-of-run ``backlog_growing`` flags at most 1 % too (counted with the stops);
- 25 % or more past a slot-limited server's capacity: caught in at least 95 % of the runs that last
  three service times past the queue forming: stopped by the rule within three service times of it
  (the column "stopped in 3 service times"), or marked by the end of the run (stopped later, or
  flagged still filling or backlog growing); a case whose runs end sooner than three service
  times past the queue, and are not stopped by then, is marked ``cannot``: the evidence is not there;
- a server that stops answering (halfway, the client's timeout 10 s; or from the start, 30 s): stopped
  within the timeout + 15 s of its silence in at least 95 % of the runs that send for that long after it.

Rates come with their Clopper-Pearson 95 % interval; a row passes on the rate itself.  "limit said":
the runs whose records (cut at a stop, what was in flight cancelled after the drain) give a
``saturation_guard_limit`` (metrics/guard_limits.py): the guard's own word that its verdict there is
the weaker one; "wrong, limit said": of the runs the guards got wrong (a false stop or flag, an
overload or silence not caught), those.  Simulated
clocks: the figures do not depend on the host (60 runs of everything: about 2.5 minutes of one CPU).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.stats import beta

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadgen.saturation import SaturationRule
from metrics.filling import backlog_growing, quarter_in_flight, still_filling, wait_rise
from metrics.guard_limits import run_guard_limit
from tests.loadgen.saturation_streams import (
    H200_STEP,
    Stream,
    batcher,
    feed,
    gamma,
    poisson,
    silent_from,
    slotted,
    unlimited,
    whole,
    workers,
)

FALSE_STOP_BOUND = 0.01
CATCH_BOUND = 0.95
SERVICE_TIMES = 3          # an overload is caught within this many service times of its queue forming
SILENT_AFTER_TIMEOUT_S = 15.0  # a server that stops answering is stopped within the client's timeout + this
TTFT_S = 0.05              # slotted servers: the first token this long into the service


@dataclass(frozen=True)
class Case:
    name: str
    kind: str                           # "within", "over" or "silent"
    rate: float
    service_s: float
    server: Callable[[np.ndarray], Stream]
    overload: float = 0.0               # past capacity by this fraction ("over")
    silent_at: float = 0.0              # "silent": the server stops answering at this fraction of the sends
    timeout_s: float = 0.0              # "silent": the client's timeout


def silence(sends: np.ndarray, frac: float) -> float:
    """When a server that stops answering after ``frac`` of the sends does (0: it never answers)."""
    return float(sends[int(len(sends) * frac)]) if frac else 0.0


def cases() -> list[Case]:
    out = [
        Case("no limit, 10 s requests, 2 req/s", "within", 2.0, 10.0, lambda s: unlimited(s, 0.2, 9.8)),
        # 1,000 tokens a request, a step of 5 ms + 0.4 ms a running sequence: 5 s alone, about 24 s at the
        # batch 2 req/s fills (a bound: its ceiling is 2.5 req/s)
        Case("batcher, 5 s rising to 24 s, 2 req/s", "within", 2.0, 24.0,
             lambda s: batcher(s, 1000, 5e-3, 0.4e-3, max_seqs=100_000)),
        Case("25 slots x 10 s, 2 req/s (80 %)", "within", 2.0, 10.0, lambda s: slotted(s, 25, 10.0, TTFT_S)),
        Case("4 H200 batchers, 26 req/s (93 %)", "within", 26.0, 20.0, lambda s: workers(s, 4, **H200_STEP)),
    ]
    for over in (0.10, 0.25, 1.0, 1.5):
        out.append(Case(f"16 slots x 10 s, +{over:.0%}", "over", 1.6 * (1 + over), 10.0,
                        lambda s: slotted(s, 16, 10.0, TTFT_S), over))
    for frac, timeout in ((0.5, 10.0), (0.0, 30.0)):
        name = "stops answering halfway" if frac else "never answers"
        out.append(Case(f"{name}, 10 s requests, 2 req/s, client timeout {timeout:g} s", "silent", 2.0, 10.0,
                        lambda s, f=frac, to=timeout: silent_from(unlimited(s, 0.2, 9.8), silence(s, f), to),
                        silent_at=frac, timeout_s=timeout))
    return out


def arrivals(kind: str, rate: float, n: int, seed: int) -> np.ndarray:
    return poisson(rate, n, seed) if kind == "poisson" else gamma(rate, n, 2.0, seed)


def queue_formed(stream: Stream, until: float) -> float:
    """A slot-limited server's queue: the send of the last request by ``until`` that waited for no slot
    (from then on every request waited)."""
    sends, firsts, _ = stream
    before = sends <= until
    idle = before & (firsts - TTFT_S <= sends + 1e-9)
    return float(sends[idle][-1]) if idle.any() else 0.0


def one(case: Case, arrival: str, streaming: bool, n: int, seed: int, rule: SaturationRule) -> dict:
    sends = arrivals(arrival, case.rate, n, seed)
    stream = case.server(sends)
    judged = stream if streaming else whole(stream)
    reason, at = feed(judged, rule)
    sent, _, ends = judged
    filling = still_filling(*quarter_in_flight(sent * 1e9, ends * 1e9))
    firsts = judged[1]
    backlog = backlog_growing(*wait_rise(sent * 1e9, np.where(np.isnan(firsts), ends, firsts) - sent, ends * 1e9))
    out = {"stopped": reason is not None, "at": at, "filling": filling, "backlog": backlog, "reason": reason,
           "limit": run_guard_limit(*recorded(judged, at if reason else None, rule.drain_s)) is not None}
    if case.kind == "over":
        tq = queue_formed(stream, at if reason else float(sends[-1]))
        out["after"] = (at - tq) if reason else np.nan
        deadline = tq + SERVICE_TIMES * case.service_s
        out["judgeable"] = bool(reason and at <= deadline) or float(sends[-1]) >= deadline
        out["online"] = bool(reason and at <= deadline) or (not reason and filling and float(sends[-1]) < deadline)
        # or the run is marked at its end: stopped later, or flagged still filling or backlog growing
        out["caught"] = out["online"] or bool(reason) or filling or backlog
    elif case.kind == "silent":
        dead, bound = silence(sends, case.silent_at), case.timeout_s + SILENT_AFTER_TIMEOUT_S
        out["after"] = (at - dead) if reason else np.nan
        out["judgeable"] = bool(reason and at - dead <= bound) or float(sends[-1]) >= dead + bound
        out["caught"] = bool(reason) and at - dead <= bound
    return out


def recorded(stream: Stream, stopped_at: float | None, drain_s: float) -> Stream:
    """What a run's records hold: all of it, or, stopped at ``stopped_at``, the requests sent by then,
    those still in flight ``drain_s`` later cancelled there (no first token, if it had none by then)."""
    sends, firsts, ends = stream
    if stopped_at is None:
        return stream
    keep = sends <= stopped_at
    cut = stopped_at + drain_s
    return Stream((sends[keep], np.where(firsts[keep] <= cut, firsts[keep], np.nan), np.minimum(ends[keep], cut)))


def interval(k: int, n: int) -> tuple[float, float]:
    """Clopper-Pearson 95 % interval of k in n."""
    lo = beta.ppf(0.025, k, n - k + 1) if k > 0 else 0.0
    hi = beta.ppf(0.975, k + 1, n - k) if k < n else 1.0
    return float(lo), float(hi)


def row(case: Case, arrival: str, streaming: bool, n: int, runs: int, rule: SaturationRule) -> dict:
    rs = [one(case, arrival, streaming, n, seed, rule) for seed in range(runs)]
    stops = sum(r["stopped"] for r in rs)
    out = {"case": case.name, "kind": case.kind, "arrivals": arrival, "streaming": streaming, "n": n,
           "runs": runs, "stopped": stops, "filling": sum(r["filling"] for r in rs),
           "backlog": sum(r["backlog"] for r in rs), "limit": sum(r["limit"] for r in rs), "online": np.nan}
    # the runs the guards got wrong (a false stop or flag; an overload or silence not caught), and of those
    # the ones whose own records said the guard is weaker there
    wrong = [r for r in rs if (r["stopped"] or r["backlog"])] if case.kind == "within" else \
        [r for r in rs if r.get("judgeable") and not r["caught"]]
    out["wrong"], out["wrong_said"] = len(wrong), sum(r["limit"] for r in wrong)
    if case.kind == "within":
        k, m = sum(r["stopped"] or r["backlog"] for r in rs), runs
        out["rate"], out["bound"] = k / m, f"false stops or backlog flags <= {FALSE_STOP_BOUND:.0%}"
        out["pass"] = "pass" if k / m <= FALSE_STOP_BOUND else "FAIL"
    else:
        judged = [r for r in rs if r["judgeable"]]
        k, m = sum(r["caught"] for r in judged), len(judged)
        if case.kind == "over" and m:
            out["online"] = sum(r["online"] for r in judged) / m
        after = [r["after"] for r in rs if r["stopped"]]
        out["after"] = float(np.median(after)) / (case.service_s if case.kind == "over" else 1.0) if after else np.nan
        if case.kind == "over" and case.overload < 0.25:
            out["bound"], out["pass"] = "none (below 25 %)", "-"
        elif m < runs / 2:
            out["bound"] = f"caught >= {CATCH_BOUND:.0%}"
            out["pass"] = f"cannot: {runs - m} of {runs} runs end sooner"
        else:
            out["bound"] = (f"caught >= {CATCH_BOUND:.0%} (in {SERVICE_TIMES} service times, or at the end)"
                            if case.kind == "over"
                            else f"stopped >= {CATCH_BOUND:.0%} in {case.timeout_s + SILENT_AFTER_TIMEOUT_S:g} s")
            out["pass"] = "pass" if k / m >= CATCH_BOUND else "FAIL"
        out["rate"] = k / m if m else np.nan
    out["k"], out["m"] = k, m
    out["lo"], out["hi"] = interval(k, m) if m else (np.nan, np.nan)
    return out


def matrix(runs: int, sizes: list[int], names: str = "all", rule: SaturationRule | None = None):
    rule = rule or SaturationRule()
    for case in cases():
        if names != "all" and not any(w in case.name for w in names.split(",")):
            continue
        for arrival in ("poisson", "gamma"):
            for streaming in (True, False):
                for n in sizes:
                    yield row(case, arrival, streaming, n, runs, rule)


def show(r: dict) -> str:
    after = r.get("after", np.nan)
    if np.isnan(after):
        after = "-"
    else:
        after = f"{after:.1f} st" if r["kind"] == "over" else f"{after:.0f} s"
    rate = "-" if np.isnan(r["rate"]) else f"{r['k']}/{r['m']} = {r['rate']:.1%} [{r['lo']:.1%}, {r['hi']:.1%}]"
    online = "-" if np.isnan(r["online"]) else f"{r['online']:.0%}"
    return (f"| {r['case']} | {r['arrivals']} | {'streaming' if r['streaming'] else 'whole'} | {r['n']} | "
            f"{r['stopped']}/{r['runs']} | {r['filling']}/{r['runs']} | {r['backlog']}/{r['runs']} | {rate} | "
            f"{online} | {after} | {r['bound']} | {r['pass']} | {r['limit']}/{r['runs']} | "
            f"{r['wrong_said']}/{r['wrong']} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=60)
    ap.add_argument("--sizes", default="60,400,2000")
    ap.add_argument("--cases", default="all", help="comma-separated words of the case names to run")
    args = ap.parse_args()
    rule = SaturationRule()
    print(f"rule: {rule}; {args.runs} runs a row (seeds 0 .. {args.runs - 1})")
    print("| case | arrivals | output | requests | stopped | still filling | backlog growing | rate [95 % interval] | "
          "stopped in 3 service times | median stop after the queue / silence | bound | held | limit said | "
          "wrong, limit said |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    failed = 0
    for r in matrix(args.runs, [int(x) for x in args.sizes.split(",")], args.cases, rule):
        print(show(r), flush=True)
        failed += r["pass"] == "FAIL"
    print(f"{failed} rows outside their bound")


if __name__ == "__main__":
    main()
