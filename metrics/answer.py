"""A protocol's answer: what it found, in a few lines of words and numbers with their intervals,
computed from its runs' summaries (one formula each, here), printed last on the console, first in
the report, and kept in ``experiment.json`` as ``answer``.

The sweep (``sweep_answer``), from its load-point runs (role ``point``; every repeat of a load point,
grouped by ``label``, ordered by ``offered_load``):

- a point *meets the SLO* when every repeat of it does (``metrics.slo.slo_holds``: percentiles within
  the limits, not stopped, not still filling, failures within what the percentile allows, the
  attainment floor); the answer names the highest load that met it and the lowest that missed it
  (with the first reason its first missing repeat gives);
- goodput there: the mean of ``goodput_rps`` and of ``good_output_throughput`` over the repeats,
  Student-t intervals (``metrics.statistics.mean_ci``); cost per million good output tokens: the
  ratio of totals 1e6 · Σ cost_total / Σ good_output_tokens over the repeats, BCa bootstrap interval
  (``metrics.statistics.ratio_ci``, as ``metrics.comparison.RATIOS`` defines it); one repeat: no
  interval, said once;
- *goodput follows the offered load* at an open-loop point (load kind ``poisson``, ``constant``,
  ``gamma``) when no repeat of it was stopped or grew a backlog (``queued``) and at least
  ``FOLLOW_SHARE`` (0.9) of the requests it was sent were good (``good_share``: Σ good_requests /
  Σ num_requests; goodput and the send rate over the same window, so a short run's drain, which
  lowers ``goodput_rps`` against ``achieved_send_rate_rps``, does not count); where the summaries do
  not record good requests, when its goodput is at least 0.9 of the rate its requests were sent at
  (``achieved_send_rate_rps``: the arrivals as drawn; the nominal ``offered_load`` where missing);
  at a closed-loop point (``concurrency``), and any
  other, when its goodput gain over the previous point is at least ``GAIN_SHARE`` (0.5) of the gain
  proportional to the offered load's (goodput_i - goodput_{i-1} >= 0.5 · goodput_{i-1} ·
  (offered_i / offered_{i-1} - 1)): a closed loop sends only as fast as the server answers, so the
  send rate cannot tell.  The *knee* is the first point (in offered order) that does not follow, and
  goodput follows the offered load "up to" the point before it;
- the points stopped as over-saturated or still filling (``metrics.filling``), each named, a
  still-filling one as a growing backlog or a fill-up (``filling_kind``).

A task workload's sweep adds the share of tasks completed and the cost per completed task there
(``task_line``); ``protocol.search=slo`` puts the search's highest load under the SLO and its bracket
first (``search_line``).

The comparison and the ablation (``comparison_answer``): per headline metric (``HEADLINE``, those
the comparison has) at the highest load point every config met the SLO at (the equal-SLO point; else
the last point, said so), the winner by its verdict or the equivalence, with the difference and its
interval; the cost per million good tokens of each config there; among its warnings, each metric it
states with no winner whose blocks could find only a difference above 10 %, and the blocks that
would find 10 % (``metrics.comparison.power_warnings``).  The tune (``tune_answer``): the
pick as measured.  The plan (``plan_answer``): the pick per plan, its cost and the probability it is
wrong.  The regression gate (``gate_answer``): pass, or the regression with the metric that
decided it.  The promotion (``promotion_answer``): its outcome and the decision that decided it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from metrics.comparison import RATIOS, SEARCH_LABEL, power_warnings
from metrics.filling import STILL_FILLING
from metrics.slo import slo_holds
from metrics.statistics import Estimate, mean_ci, ratio_ci

FOLLOW_SHARE = 0.9
GAIN_SHARE = 0.5
OPEN_LOOP = ("poisson", "constant", "gamma")
FILL_WORDS = {"backlog": "a growing backlog", "fill-up": "a fill-up"}
HEADLINE = ("max_load_under_slo", "goodput_rps", "cost_per_mtok_good", "p99_ttft_ms", "p99_tpot_ms")


@dataclass(frozen=True)
class Answer:
    """``lines``: what the console prints last and the report shows first (the first is the
    headline); ``facts``: the same numbers by name, for ``experiment.json`` and MLflow;
    ``warnings``: what the answer's own figures limit (a comparison's verdict with no winner whose
    blocks could find only a large difference), among the experiment's warnings."""
    protocol: str
    lines: tuple[str, ...]
    facts: dict = field(default_factory=dict)
    warnings: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {"protocol": self.protocol, "lines": list(self.lines), **self.facts,
                **({"warnings": list(self.warnings)} if self.warnings else {})}


@dataclass(frozen=True)
class PointResult:
    """One load point over its repeats (module doc)."""
    label: str
    offered: float | None
    load_kind: str | None
    repeats: int
    met: int                 # repeats that met the SLO
    why: str                 # why the first repeat that missed it missed it ("" when none did)
    goodput: Estimate        # goodput_rps
    good_tokens: Estimate    # good_output_throughput
    cost: Estimate           # cost per million good output tokens
    send_rate: float | None  # mean achieved_send_rate_rps (open loop)
    stopped: int
    filling: int
    fill_kind: str = ""      # of its repeats still filling: backlog, fill-up (filling_kind)
    backlog: int = 0         # repeats whose wait rose through their arrivals' second half (metrics.filling)
    good_share: float | None = None  # Σ good_requests / Σ num_requests over the repeats (None: not recorded)
    follows: bool = True

    @property
    def meets(self) -> bool:
        return self.repeats > 0 and self.met == self.repeats

    def facts(self) -> dict:
        return {"label": self.label, "offered_load": self.offered, "repeats": self.repeats, "met_slo": self.meets,
                "repeats_met": self.met, "why_missed": self.why or None, "goodput_rps": self.goodput.to_dict(),
                "good_output_throughput": self.good_tokens.to_dict(), "cost_per_mtok_good": self.cost.to_dict(),
                "follows_offered_load": self.follows, "stopped": self.stopped, "still_filling": self.filling,
                "filling_kind": self.fill_kind or None,
                "backlog_growing": self.backlog}


def _f(v) -> float:
    try:
        return math.nan if v is None else float(v)
    except (TypeError, ValueError):
        return math.nan


def _missed_text(row: Mapping, slo: Mapping, why: str) -> str:
    """``slo_holds``'s reason, with each missed percentile's value and limit; a run still filling named as a
    backlog or a fill-up where its records tell (``filling_kind``)."""
    if why.startswith(STILL_FILLING) and filling_kind(row) in FILL_WORDS:
        return (f"{STILL_FILLING}, {FILL_WORDS[filling_kind(row)]}: in flight rose from "
                f"{_f(row.get('in_flight_second_quarter')):.3g} to {_f(row.get('in_flight_last_quarter')):.3g} over "
                "the arrivals' second and last quarters (its latencies are a lower bound)")
    if not why.startswith("missed: "):
        return why
    pct = _f(row.get("slo_percentile"))
    pct = 99.0 if math.isnan(pct) else pct
    parts = []
    for name in why[len("missed: "):].split(", "):
        v, limit = _f(row.get(f"slo_{name}_p{pct:g}_ms")), _f(slo.get(f"{name}_ms"))
        parts.append(f"p{pct:g} {name.upper()} {v:,.0f} ms > {limit:,.0f}" if not math.isnan(v) and not math.isnan(
            limit) else f"p{pct:g} {name.upper()} above its limit")
    return ", ".join(parts)


def sweep_points(rows: Sequence[Mapping], slo: Mapping | None = None, confidence: float = 0.95,
                 seed: int = 0) -> list[PointResult]:
    """The sweep's load points (module doc), in offered-load order; ``rows``: runs.parquet's rows
    (or summaries with ``label``), ``slo``: experiment.json's ``slo`` (for the attainment floor
    and the limits named in a reason)."""
    slo = slo or {}
    floor = slo.get("min_attainment")
    groups: dict[str, list[Mapping]] = {}
    for r in rows:
        if (r.get("role") or "point") == "point":
            groups.setdefault(str(r.get("label")), []).append(r)
    points = []
    num, den, scale = RATIOS["cost_per_mtok_good"]
    for label, runs in groups.items():
        verdicts = [slo_holds(r, floor) for r in runs]
        why = next((_missed_text(r, slo, w) for r, (ok, w) in zip(runs, verdicts) if not ok), "")
        if all(num in r and den in r for r in runs):
            cost = ratio_ci([_f(r[num]) for r in runs], [_f(r[den]) for r in runs], scale=scale,
                            confidence=confidence, seed=seed)
        else:
            cost = mean_ci([_f(r.get("cost_per_mtok_good")) for r in runs], confidence)
        sends = [_f(r.get("achieved_send_rate_rps")) for r in runs]
        sends = [s for s in sends if not math.isnan(s)]
        points.append(PointResult(
            label=label, offered=next((_f(r["offered_load"]) for r in runs if r.get("offered_load") is not None), None),
            load_kind=next((str(r["load_kind"]) for r in runs if r.get("load_kind")), None),
            repeats=len(runs), met=sum(ok for ok, _ in verdicts), why=why,
            goodput=mean_ci([_f(r.get("goodput_rps")) for r in runs], confidence),
            good_tokens=mean_ci([_f(r.get("good_output_throughput")) for r in runs], confidence),
            cost=cost, send_rate=sum(sends) / len(sends) if sends else None,
            stopped=sum(bool(r.get("saturated")) for r in runs),
            filling=sum(bool(r.get("still_filling")) for r in runs),
            fill_kind=" and ".join(sorted({filling_kind(r) for r in runs if r.get("still_filling")})),
            backlog=sum(bool(r.get("backlog_growing")) for r in runs),
            good_share=good_share(runs)))
    points.sort(key=lambda p: (math.inf if p.offered is None else p.offered, p.label))
    return _with_follows(points)


def filling_kind(m: Mapping) -> str:
    """A run still filling (``metrics.filling``) is a *backlog* when it completed requests slower
    than it sent them (``request_throughput`` < ``FOLLOW_SHARE`` · ``achieved_send_rate_rps``: past
    its capacity, the queue grows whatever the run's length), else a *fill-up* (it kept up: the run
    ended before its batch was full, and more requests would reach the steady state)."""
    if m.get("backlog_growing"):  # its wait rose through the arrivals' second half: a queue, measured
        return "backlog"
    done, sent = _f(m.get("request_throughput")), _f(m.get("achieved_send_rate_rps"))
    if math.isnan(done) or math.isnan(sent) or sent <= 0:
        return "backlog or fill-up"
    return "backlog" if done < FOLLOW_SHARE * sent else "fill-up"


def systematic_token_difference(m: Mapping) -> bool:
    """The server's and the client's output-token counts (``metrics.token_accounting``) differ by
    one sign and at least half a token a request on average (|mean diff| >= 0.5 and >= 0.9 · mean
    |diff|): a token counted on every request (BOS/EOS), chunks re-tokenized one by one, or another
    tokenizer; a random-weight model's differences go both ways and are not this."""
    mean, mabs = _f(m.get("token_mismatch_mean")), _f(m.get("token_mismatch_mean_abs"))
    return abs(mean) >= 0.5 and abs(mean) >= 0.9 * mabs


def prompts_confirm_tokenizer(m: Mapping) -> bool:
    """Every request's prompt, as the server counted it, had the tokens the workload built
    (``prompt_tokens_mismatch`` 0): the client's tokenizer is the served model's, so an output-count
    difference is the output's decode and re-encode (a random-weight model's bytes) or a token the
    server counts and never sends, not a wrong tokenizer."""
    n = m.get("prompt_tokens_mismatch")
    return n is not None and not math.isnan(_f(n)) and int(n) == 0


def good_share(runs: Sequence[Mapping]) -> float | None:
    """Σ good_requests / Σ num_requests over a point's repeats (measured requests; None where a run lacks them)."""
    if not runs or any(r.get("good_requests") is None or not _f(r.get("num_requests")) > 0 for r in runs):
        return None
    return sum(_f(r["good_requests"]) for r in runs) / sum(_f(r["num_requests"]) for r in runs)


def queued(point: PointResult) -> bool:
    """A repeat of the point was stopped as over-saturated, or its backlog grew (``backlog_growing``, or
    still filling as a backlog: ``filling_kind``)."""
    return bool(point.stopped or point.backlog or "backlog" in point.fill_kind.split(" and "))


def follows(point: PointResult, before: PointResult | None) -> bool:
    """Whether goodput follows the offered load at ``point`` (module doc)."""
    g = point.goodput.value
    if math.isnan(g):
        return False
    if point.load_kind in OPEN_LOOP:
        if point.good_share is not None:  # the requests it was sent, against the same window
            return not queued(point) and point.good_share >= FOLLOW_SHARE
        sent = point.send_rate if point.send_rate else point.offered
        return sent is None or g >= FOLLOW_SHARE * sent
    if before is None or not before.offered or point.offered is None or math.isnan(before.goodput.value):
        return True
    prev = before.goodput.value
    return g - prev >= GAIN_SHARE * prev * (point.offered / before.offered - 1)


def _with_follows(points: list[PointResult]) -> list[PointResult]:
    out: list[PointResult] = []
    for p in points:
        out.append(replace(p, follows=follows(p, out[-1] if out else None)))
    return out


def knee(points: Sequence[PointResult]) -> int | None:
    """The index of the first point whose goodput does not follow the offered load (None: every one does)."""
    return next((i for i, p in enumerate(points) if not p.follows), None)


def interval(e: Estimate, unit: str = "", digits: int = 3) -> str:
    """``value unit [low, high]`` (the interval only where there is one)."""
    if math.isnan(e.value):
        return "n/a"
    v = f"{e.value:.{digits}g}{unit}"
    if e.n > 1 and math.isfinite(e.low) and math.isfinite(e.high):
        v += f" [{e.low:.{digits}g}, {e.high:.{digits}g}]"
    return v


def slo_text(slo: Mapping) -> str:
    """``p99 TTFT ≤ 2000 ms, TPOT ≤ 200 ms`` from experiment.json's ``slo``."""
    pct = _f(slo.get("percentile"))
    limits = [f"{k[:-3].upper()} ≤ {_f(v):g} ms" for k, v in slo.items() if k.endswith("_ms") and v is not None]
    return (f"p{99 if math.isnan(pct) else pct:g} " + ", ".join(limits)) if limits else "no SLO set"


def task_line(rows: Sequence[Mapping], at: PointResult, currency: str = "", confidence: float = 0.95) -> str:
    """A task workload's answer at a point (its repeats): the share of tasks completed (Σ completed
    / Σ tasks) and the cost per completed task (Σ cost / Σ completed tasks, ``RATIOS``); "" where
    its runs have no tasks."""
    runs = [r for r in rows if str(r.get("label")) == at.label and (r.get("role") or "point") == "point"
            and r.get("num_tasks")]
    if not runs:
        return ""
    done, total = sum(_f(r.get("completed_tasks")) for r in runs), sum(_f(r.get("num_tasks")) for r in runs)
    num, den, scale = RATIOS["cost_per_completed_task"]
    cost = ratio_ci([_f(r.get(num)) for r in runs], [_f(r.get(den)) for r in runs], scale=scale,
                    confidence=confidence)
    cur = f" {currency}" if currency else ""
    return (f"tasks at {at.label}: {done:.0f} of {total:.0f} completed ({done / total:.0%}), "
            f"{interval(cost, cur, 4)} per completed task")


def sweep_answer(rows: Sequence[Mapping], slo: Mapping | None = None, currency: str = "", confidence: float = 0.95,
                 seed: int = 0) -> Answer:
    """The sweep's answer (module doc) from its runs' rows."""
    slo = slo or {}
    points = sweep_points(rows, slo, confidence, seed)
    if not points:
        return Answer("sweep", ("no load point finished: nothing to answer yet",), {"points": []})
    cur = f" {currency}" if currency else ""
    met = [p for p in points if p.meets]
    missed = [p for p in points if not p.meets]
    best = met[-1] if met else None
    first_miss = missed[0] if missed else None
    lines = []

    def at(p: PointResult) -> str:
        return (f"goodput {interval(p.goodput, ' req/s')} ({interval(p.good_tokens, ' good tok/s')}), "
                f"{interval(p.cost, cur)} per M good tokens")

    if best is not None and first_miss is not None:
        lines.append(f"the highest load that met the SLO ({slo_text(slo)}) is {best.label}: {at(best)}")
        lines.append(f"the first that missed it is {first_miss.label}: {first_miss.why}"
                     + (f" (below {best.label}, which met it: the boundary is noisy here; repeats would settle it)"
                        if points.index(first_miss) < points.index(best) else ""))
    elif best is not None:
        lines.append(f"every load point met the SLO ({slo_text(slo)}), up to the highest, {best.label}: {at(best)}; "
                     "the sweep did not reach the load that misses it (higher load points would)")
    else:
        lines.append(f"no load point met the SLO ({slo_text(slo)}): the lowest, {points[0].label}, missed it: "
                     f"{points[0].why}; at it {at(points[0])}")
    k = knee(points)
    if k is None:
        lines.append(f"goodput follows the offered load at every point, up to {interval(points[-1].goodput, ' req/s')} "
                     f"at {points[-1].label}")
    else:
        p = points[k]
        sent = p.send_rate if p.load_kind in OPEN_LOOP and p.send_rate else None
        if sent and p.good_share is not None:
            share = (" (stopped as over-saturated)" if p.stopped else " (a growing backlog)" if queued(p) else
                     f" ({p.good_share:.0%} of its requests good)")
        else:
            share = (f" ({p.goodput.value / sent:.0%} of the {sent:.3g} req/s sent)" if sent else
                     f" (gain under {GAIN_SHARE:.0%} of the offered load's)")
        lines.append((f"goodput follows the offered load up to {points[k - 1].label} and stops there: "
                      if k else "goodput does not follow the offered load even at the lowest point: ")
                     + f"{interval(p.goodput, ' req/s')} at {p.label}{share}")
    def caveat(p: PointResult) -> str:
        says = ["stopped as over-saturated"] if p.stopped else []
        if p.filling:
            says.append(f"still filling, {FILL_WORDS.get(p.fill_kind, p.fill_kind)} (its latencies are a lower bound)")
        if p.backlog and not p.filling:
            says.append("a growing backlog (its wait rose through its arrivals: latencies grow with the run's length)")
        return f"{p.label} " + ", ".join(says)

    odd = [caveat(p) for p in points if p.stopped or p.filling or p.backlog]
    lines.append("stopped or still filling: " + "; ".join(odd) if odd else
                 "every point reached a steady state (none stopped, none still filling)")
    tasks = task_line(rows, best or points[0], currency)
    if tasks:
        lines.append(tasks)
    if max(p.repeats for p in points) < 2:
        lines.append("one repeat per point: no intervals (protocol.repeats=3 gives them)")
    facts = {"slo": slo_text(slo), "highest_met": best.label if best else None,
             "highest_met_load": best.offered if best else None,
             "first_missed": first_miss.label if first_miss else None,
             "first_missed_load": first_miss.offered if first_miss else None,
             "first_missed_why": first_miss.why if first_miss else None,
             "knee": points[k].label if k is not None else None, "follow_share": FOLLOW_SHARE,
             "gain_share": GAIN_SHARE, "points": [p.facts() for p in points]}
    if best is not None:
        facts.update({"goodput_rps": best.goodput.to_dict(), "good_output_throughput": best.good_tokens.to_dict(),
                      "cost_per_mtok_good": best.cost.to_dict(), "currency": currency or None})
    return Answer("sweep", tuple(lines), facts)


def search_line(search: Mapping, currency: str = "") -> str:
    """The SLO search's answer (``protocol.search=slo``: a session's ``search.json``): the highest
    load under the SLO, its bracket (the last load that passed, the first that failed), goodput and
    cost there, and why the search stopped."""
    unit = "req/s" if search.get("kind") == "rate" else "concurrent requests"
    lo, hi = (list(search.get("bracket") or []) + [None, None])[:2]
    where = f"{search.get('config')}: " if search.get("config") else ""
    at = ""
    if search.get("goodput_rps") is not None:
        cost = _f(search.get("cost_per_mtok_good"))
        at = f"; goodput {_f(search['goodput_rps']):.3g} req/s, {cost:.3g}{' ' + currency if currency else ''} per M " \
             "good tokens there"
    return (f"{where}the SLO search's highest load under the SLO: {_f(search.get('max_load_under_slo')):g} {unit} "
            f"(bracket [{_f(lo):g}, {_f(hi):g}]: {search.get('note')}){at}")


def _short(text: str) -> str:
    """A verdict's text without its parenthesised detail (``metrics.statistics.verdict``)."""
    return text.split(" (", 1)[0]


def comparison_answer(comparison: Mapping, rows: Sequence[Mapping], slo: Mapping | None = None, currency: str = "",
                      protocol: str = "compare") -> Answer:
    """A comparison's (or an ablation's) answer (module doc) from its ``comparison.json`` and its
    runs' rows: at the equal-SLO point (the highest load point every config met the SLO at, by
    ``sweep_points`` per config; else the last point, said so) each non-baseline config's verdict
    against the baseline per headline metric, then each config's cost per M good tokens there; the
    SLO search's verdict on the highest load under the SLO first where it ran; a comparison of none
    of the headline metrics answers with those it compared."""
    slo = slo or {}
    configs = list(comparison.get("configs") or [])
    baseline = comparison.get("baseline") or (configs[0] if configs else "")
    points = {p["label"]: p for p in comparison.get("points") or []}
    per = {c: sweep_points([r for r in rows if (r.get("config") or "") == c], slo) for c in configs}
    met = [set(p.label for p in pts if p.meets) for pts in per.values()]
    labels = [p["label"] for p in comparison.get("points") or [] if p["label"] in set.intersection(*met)] if met else []
    if not points:
        return Answer(protocol, ("no load point finished: nothing to compare yet",), {})
    lines, facts, short = [], {"baseline": baseline, "slo": slo_text(slo), "verdicts": {}}, []
    loads = [lab for lab in points if lab != SEARCH_LABEL]
    at = labels[-1] if labels else (loads[-1] if loads else SEARCH_LABEL)
    if not slo_text(slo).startswith("p"):  # no SLO to hold the configs equal at: the highest point
        lines.append(f"at {at}, the highest load point (no SLO set: not an equal-SLO comparison)")
    else:
        lines.append(f"at {at}, the highest load every config met the SLO at ({slo_text(slo)})" if labels else
                     f"no load point where every config met the SLO ({slo_text(slo)}): compared at the highest, {at}")
    facts["equal_slo_point"] = at if labels else None
    for label in ([SEARCH_LABEL] if SEARCH_LABEL in points else []) + [at]:
        compared = points[label]["metrics"]
        shown = [m for m in HEADLINE if m in compared] or list(compared)  # else what it compared
        short += power_warnings(points[label], shown, len(configs))  # what its blocks could not find
        for metric in shown:
            entry = compared[metric]
            for name, vs in entry["vs_baseline"].items():
                where = "" if label == at else f" ({label})"
                lines.append(f"{metric}{where}: {_short(vs['text'])}")
                facts["verdicts"].setdefault(label, {}).setdefault(metric, {})[name] = vs["verdict"]
    cost = points[at]["metrics"].get("cost_per_mtok_good")
    if cost:
        cur = f" {currency}" if currency else ""
        order = [n for n in [baseline, *configs] if n in cost["per_config"]]  # the baseline first
        order = list(dict.fromkeys(order)) or list(cost["per_config"])
        est = {n: estimate_of(cost["per_config"][n]) for n in order}
        lines.append("cost per M good tokens there: " + ", ".join(f"{n} {interval(e, cur)}" for n, e in est.items()))
        facts["cost_per_mtok_good"] = {n: e.to_dict() for n, e in est.items()}
    return Answer(protocol, tuple(lines), facts, tuple(short))


def _figure(x) -> float:
    """A figure read back from JSON: null is NaN, "inf"/"nan" strings are floats (no good tokens)."""
    return math.nan if x is None else float(x)


def estimate_of(d: Mapping) -> Estimate:
    """An ``Estimate`` from its JSON form in ``comparison.json`` (bounds null or "inf" where the data gave none)."""
    return Estimate(value=_figure(d.get("value")), low=_figure(d.get("low")), high=_figure(d.get("high")),
                    n=int(d.get("n") or 0), method=str(d.get("method") or ""))


def gate_answer(result: Mapping | None, track: str = "") -> Answer:
    """The regression gate's answer (``tokenfactory track NAME --gate``) from its judgement (the
    newest experiment against its baseline, ``protocols.track.verdicts.judge``; None: one experiment
    in the track): a regression, with the metric and load point that decided it and the size with its
    interval; else a metric it could not judge; else a pass, with what improved."""
    if not result:
        return Answer("gate", (f"the gate passes: track {track} has one experiment, nothing to compare it with",),
                      {"decision": "pass", "deciding": None})
    base = ", ".join(f"{b['version']} ({b['name']})" for b in result.get("baseline") or [])
    new = result.get("newest") or {}
    who = f"{new.get('version')} ({new.get('name')}) against {base}"
    regs, unjudged = list(result.get("regressions") or []), list(result.get("unjudged") or [])
    # what the gate's replicates cannot give (protocols.track.verdicts.sensitivity), after its verdict
    short = [f"short: {n}" for n in (result.get("sensitivity") or {}).get("notes", [])]
    if regs:
        lines = [f"the gate fails: {len(regs)} regression(s), {who}"]
        lines += [f"regressed: {f['metric']} at {f['label']}: {_short(str(f.get('text') or f.get('reason')))}"
                  for f in regs]
        return Answer("gate", tuple(lines + short), {"decision": "regression",
                                             "deciding": {"metric": regs[0]["metric"], "label": regs[0]["label"]}})
    if unjudged or not result.get("newest_runs", 1):
        lines = [f"the gate cannot judge {who}"]
        lines += [f"cannot judge: {f['metric']} at {f['label']}: {f.get('reason')}" for f in unjudged]
        if not result.get("newest_runs", 1):
            lines.append("the newest experiment has no point runs")
        return Answer("gate", tuple(lines + short), {"decision": "cannot_judge",
                                             "deciding": ({"metric": unjudged[0]["metric"], "label": unjudged[0][
                                                 "label"]} if unjudged else None)})
    better = list(result.get("improvements") or [])
    lines = [f"the gate passes: {who}: no metric regressed ({len(better)} improved of "
             f"{len(result.get('findings') or [])} judged)"]
    lines += [f"improved: {f['metric']} at {f['label']}: {_short(str(f.get('text')))}" for f in better]
    return Answer("gate", tuple(lines + short), {"decision": "pass", "deciding": None})


def tune_answer(record: Mapping) -> Answer:
    """The tune's answer (``tune.json``): the pick, as measured (its objective, the highest load
    under the SLO and the cost per M good tokens there, and the confirmation's word where one ran),
    or why there is none."""
    best = record.get("best")
    if not best:
        return Answer("tune", (f"no pick: {record.get('best_note')}",), {"pick": None})
    params = " ".join(f"{k}={v}" for k, v in (best.get("params") or {}).items())
    line = (f"the pick is trial {best['trial']} ({params}): {record.get('objective')} {_f(best.get('objective')):.4g}, "
            f"measured: highest load under the SLO {_f(best.get('max_load_under_slo')):g}, "
            f"{_f(best.get('cost_per_mtok_good')):.4g} per M good tokens there")
    lines = [line]
    if best.get("confirmation"):
        lines.append(f"confirmation: {best['confirmation'].get('said')}")
    lines.append(f"{record.get('feasible')} of {record.get('evaluated')} trials feasible")
    return Answer("tune", tuple(lines), {"pick": best.get("trial"), "params": best.get("params")})


def promotion_answer(record: Mapping) -> Answer:
    """The promotion's answer (``promote.json``): promoted, rolled back or ended, the decision that
    decided it (its stage, time and reason), the stages run, and the callers' failed requests."""
    outcome = str(record.get("outcome"))
    decisions = list(record.get("decisions") or [])
    last = decisions[-1] if decisions else None
    words = {"promoted": "the candidate is promoted", "rolled_back": "the candidate is rolled back",
             "ended": "no decision: the traffic stopped first"}
    lines = [words.get(outcome, f"outcome: {outcome}")
             + (f" at {last['t_s']:.1f} s in stage {last['stage']}: {last['reason']}" if last else "")]
    callers = record.get("callers") or {}
    lines.append(f"{len(record.get('stages') or [])} stage(s) run; the callers' requests: "
                 f"{callers.get('failed', 0)} failed of {callers.get('requests', 0)}")
    return Answer("promote", tuple(lines), {"outcome": outcome, "deciding": last})


def plan_answer(doc: Mapping) -> Answer:
    """The plan's answer (``plan.json``), one line per plan (policy and SLO): the pick (the cheapest
    config whose plan meets the SLO, where its verdict names one; else the cheapest ranked, said so),
    its cost per M good tokens with the interval, and the probability the pick is wrong: over every
    config (``pick_wrong``, those whose plan misses the SLO counted by their resamples meeting it),
    the runner-up's figure beside it; an older plan.json without it, the runner-up's alone."""
    lines, picks = [], []
    for plan in doc.get("plans") or []:
        ch = plan.get("cheapest") or {}
        pick = ch.get("config") or ((ch.get("ranking") or [None])[0] if ch.get("among", "").startswith(
            "configs whose") else None)
        where = f"{plan.get('variant')} policy, {slo_text(plan.get('slo') or {})}"
        if pick is None:
            lines.append(f"{where}: no pick: {ch.get('verdict') or 'no config planned'}")
            picks.append(None)
            continue
        m = ((plan.get("configs") or {}).get(pick) or {}).get("metrics", {}).get("cost_per_mtok_good") or {}
        iv = m.get("interval")
        cost = f"{_f(m.get('value')):.4g}" + (f" [{_f(iv[0]):.4g}, {_f(iv[1]):.4g}]" if iv else "")
        odds = ch.get("runner_up_cheaper") or {}
        wrong = (f"P({odds.get('runner_up')} cheaper, the pick wrong) = {_f(odds['probability']):.1%}"
                 if odds.get("probability") is not None else (odds.get("why") or "no probability"))
        every = (ch.get("pick_wrong") or {}).get("probability")   # over every config, those missing the SLO too
        if every is not None:
            wrong = f"P(the pick wrong) = {_f(every):.1%} over every config meeting the SLO or not ({wrong})"
        settled = "" if ch.get("config") else " (not significantly cheaper than the runner-up)"
        lines.append(f"{where}: the pick is {pick}{settled}, {cost} per M good tokens; {wrong}")
        picks.append({"pick": pick, "probability_wrong": every if every is not None else odds.get("probability")})
    return Answer("plan", tuple(lines) or ("no plan",), {"picks": picks})
