"""Did this version make it worse, or is it noise?  The newest experiment of a track against a
baseline, metric by metric, with the comparison's intervals and margin (``metrics.comparison``).

- The baseline: the previous experiment (``previous``), the ``window:N`` experiments before the
  newest pooled (a noisy history gives a steadier reference), or one named (its run id, its
  results folder's name, or its version).  A window holds only builds the gate accepted: each
  earlier experiment is judged in turn against the window of accepted ones before it, as a
  pipeline would have, and one it rejected (a regression, or a metric it could not judge) is
  left out (``keep_rejected`` pools them all).
- The difference is unpaired (Welch; ratios of totals by the delta method on the very ratio
  shown, as ``tokenfactory compare``): experiments run at different times are not interleaved,
  so nothing pairs a run of one with a run of the other.  The replicates: the engine launches
  (``metrics.comparison.launch_replicates``) where a side has runs of a point from at least two
  (blocks of an experiment, the experiments of a window), else the repeats of the one launch,
  whose interval then misses the launch-to-launch spread (the output says which).
- A mean of 0 on either side (an error rate that was 0, or fell to 0): the absolute difference
  is judged, the margin in points for a rate (``metrics.comparison.absolute_margin``).
- Per metric and load point: ``regressed`` when the interval of the relative difference
  excludes zero and the effect is beyond the margin in the worse direction, ``improved`` the
  same the better way, ``no significant change`` otherwise (a significant effect inside the
  margin included), ``not enough data`` without an interval (one run per experiment).
- What must stay fixed: the comparison's fixed conditions (model, tokenizer, precision,
  sampling, workload, SLO), the load points and the hardware; an experiment that differs from
  the newest in one of them is refused as a baseline unless ``allow`` names the key.
- Many metrics, many verdicts: at 95 % each, a gate over the default eleven metrics raises a
  false alarm far more often than one in twenty; ``adjust="bonferroni"`` (the default) holds
  the level for every verdict the gate judges together: each interval at
  1 - 0.05/(metrics x load points); ``none`` judges each at 95 %.
- Fails closed: a metric the baseline has a value for that cannot be compared on the newest
  (no runs at that point, an infinite cost on one run, one run so no interval) is ``cannot
  judge`` and lands in ``unjudged``; the gate fails on it (its own exit code).  No good tokens
  in any of the newest's replicates (two or more) against some in each of the baseline's is a
  regression (an infinite cost: ``metrics.statistics.ratio_difference``).
- What it can find (``sensitivity``): where the replicates are repeats of one launch, the
  stated false-alarm level does not hold between separately launched builds (their intervals
  miss the spread between launches: at least 2 launches a side would); where a latency's
  observed spread leaves a 10 % rise found less than 80 % of the time at the gate's level, the
  replicates a side that would (``metrics.sample_size.replicates_for_power``); where the
  newest's requests are too few to find an error rate rising 5 points, the requests a side a
  two-proportion test needs (``metrics.sample_size.requests_for_rate_rise``).  Live at 3
  repeats of 16 requests a side, a 10 % longer TTFT passed 6 gates of 8 and errors from 0 to
  5 % all 8 (docs/measured/verdicts.md).
- The history: every experiment's estimate and interval per metric and point, and where a
  change was detected against the experiment before it (the same test, one step at a time).
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa

from metrics.comparison import FIXED_KEYS, LAUNCH, comparable, compare_tables, direction, launch_replicates
from metrics.sample_size import replicates_for_power, requests_for_rate_rise, welch_power
from protocols.track.history import TrackEntry

TRACK_KEYS = (*FIXED_KEYS, "load_points", "hardware")
OUTCOMES = {"b_better": "improved", "a_better": "regressed", "no_significant_difference": "no significant change",
            "equivalent": "no significant change", "insufficient_data": "not enough data"}
NEWEST, BASELINE = "newest", "baseline"
CANNOT_JUDGE = "cannot judge"
# the regressions the gate says whether it can find: a latency 10 % longer, an error rate 5 points
# higher, each found 80 % of the time
DETECT_RELATIVE, DETECT_RATE_RISE, POWER = 0.10, 0.05, 0.80


def window_size(spec: str) -> int | None:
    """N of ``window:N`` (None for any other spec); ValueError naming the flag for a bad N."""
    if not spec.startswith("window:"):
        return None
    try:
        n = int(spec.split(":", 1)[1])
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"--baseline {spec}: expected window:N with N >= 1")
    return n


def pick_baseline(entries: list[TrackEntry], spec: str = "previous",
                  earlier: list[TrackEntry] | None = None) -> list[TrackEntry]:
    """The baseline experiments for the newest (``spec``: previous | window:N | a name);
    ``earlier``: the experiments a window may pool (default: all before the newest)."""
    if len(entries) < 2:
        raise ValueError(f"the track has {len(entries)} experiment: at least two are needed to compare")
    n = window_size(spec)
    if n is not None:
        return (entries[:-1] if earlier is None else earlier)[-n:]
    earlier = entries[:-1]
    if spec == "previous":
        return [earlier[-1]]
    found = [e for e in earlier if spec in (e.run_id, e.name, e.version, e.track_version)]
    if not found:
        names = ", ".join(f"{e.name} ({e.version})" for e in earlier)
        raise ValueError(f"--baseline {spec}: no earlier experiment of the track has that run id, name or version "
                         f"(earlier: {names})")
    return found[-1:]


def position(entries: list[TrackEntry], name: str) -> int:
    """The place of the last experiment whose run id, folder name or version is ``name``."""
    for i in range(len(entries) - 1, -1, -1):
        e = entries[i]
        if name in (e.run_id, e.name, e.version, e.track_version):
            return i
    raise ValueError(f"--at {name}: no experiment of the track has that run id, name or version "
                     f"(there: {', '.join(e.name for e in entries)})")


def differing(newest: TrackEntry, others: list[TrackEntry]) -> dict[str, dict]:
    """Track conditions where an experiment differs from the newest: key -> {experiment: value}."""
    out: dict[str, dict] = {}
    for key in TRACK_KEYS:
        mine = repr(newest.fixed.get(key))
        odd = {e.name: e.fixed.get(key) for e in others if repr(e.fixed.get(key)) != mine}
        if odd:
            out[key] = {newest.name: newest.fixed.get(key), **odd}
    return out


def _launches(e: TrackEntry) -> pa.Table:
    """The experiment's runs with a ``launch`` column: its run id and block (one engine launch)."""
    t = e.runs
    blocks = t.column("block").to_pylist() if "block" in t.column_names else [0] * t.num_rows
    col = pa.array([f"{e.run_id}:{b}" for b in blocks], pa.string())
    if LAUNCH in t.column_names:
        return t.set_column(t.column_names.index(LAUNCH), LAUNCH, col)
    return t.append_column(LAUNCH, col)


def _pooled(entries: list[TrackEntry]) -> pa.Table:
    return pa.concat_tables([_launches(e) for e in entries], promote_options="default")


def _labels(tables: list[pa.Table]) -> list[str]:
    out: list[str] = []
    for t in tables:
        for lab in (t.column("label").to_pylist() if "label" in t.column_names else []):
            if lab not in out:
                out.append(lab)
    return out


def default_metrics(tables: list[pa.Table]) -> list[str]:
    """The default metrics (``conf.schema.COMPARED_METRICS``) any of ``tables`` has: a metric the
    baseline has and the newest lacks is judged, and cannot be (the gate fails closed), rather
    than dropped from the comparison."""
    from conf.schema import COMPARED_METRICS

    cols = set.union(*(set(t.column_names) for t in tables)) if tables else set()
    return [m for m in COMPARED_METRICS if comparable(m, cols)]


def compare_newest(entries: list[TrackEntry], baseline: str = "previous", metrics: list[str] | None = None,
                   confidence: float = 0.95, margin: float = 0.02, allow: set[str] = frozenset(),
                   adjust: str = "bonferroni", keep_rejected: bool = False) -> dict:
    """The newest experiment against the baseline: per load point and metric the two estimates,
    the relative difference with its interval, and the outcome (module doc)."""
    newest = entries[-1]
    rejected: list[TrackEntry] = []
    earlier = None
    if window_size(baseline) is not None and not keep_rejected and len(entries) > 2:
        earlier, rejected = accepted_before(entries, baseline, metrics, confidence, margin, allow, adjust)
    base = pick_baseline(entries, baseline, earlier)
    if not base:
        raise ValueError(f"--baseline {baseline}: the gate rejected every experiment before the newest "
                         f"({', '.join(e.name for e in rejected)}); --keep-rejected pools them anyway")
    result = judge(newest, base, metrics, confidence, margin, allow, adjust)
    result.update(baseline_spec=baseline, rejected=[describe(e) for e in rejected], keep_rejected=keep_rejected)
    return result


def accepted_before(entries: list[TrackEntry], spec: str, metrics: list[str] | None, confidence: float,
                    margin: float, allow: set[str], adjust: str) -> tuple[list[TrackEntry], list[TrackEntry]]:
    """(accepted, rejected) among the experiments before the newest: the first is accepted; each
    next one is judged against the ``spec`` window of those accepted before it and rejected when
    the gate would have failed it (a regression, or a metric it could not judge).  One whose
    conditions differ from that window is kept: the gate gave no verdict there."""
    accepted, rejected = [entries[0]], []
    for e in entries[1:-1]:
        base = accepted[-(window_size(spec) or 1):]
        if {k for k in differing(e, base) if k not in allow}:
            accepted.append(e)
            continue
        r = judge(e, base, metrics, confidence, margin, allow, adjust)
        (rejected if r["regressions"] or r["unjudged"] else accepted).append(e)
    return accepted, rejected


def judge(newest: TrackEntry, base: list[TrackEntry], metrics: list[str] | None, confidence: float,
          margin: float, allow: set[str], adjust: str) -> dict:
    """``newest`` against the pooled ``base`` experiments: findings, regressions, unjudged."""
    diffs = differing(newest, base)
    refused = {k: v for k, v in diffs.items() if k not in allow}
    if refused:
        lines = [f"  {k}: " + ", ".join(f"{n}={v}" for n, v in vals.items()) for k, vals in refused.items()]
        raise ValueError(f"the newest experiment ({newest.name}) and its baseline differ in what the track holds "
                         "fixed:\n" + "\n".join(lines) + f"\nif that difference is meant, say so: --allow "
                         f"{','.join(refused)}")
    raw = {BASELINE: _pooled(base), NEWEST: _launches(newest)}
    metrics = metrics or default_metrics(list(raw.values()))
    groups, replicates = {}, {}
    for side, t in raw.items():
        groups[side], collapsed = launch_replicates(t, metrics)
        replicates[side] = "launches" if collapsed else "repeats"
    labels = _labels(list(groups.values()))
    family = len(metrics) * max(len(labels), 1)
    points = compare_tables(groups, metrics, BASELINE, paired=False, confidence=confidence, margin=margin,
                            adjust=adjust, family=family)
    findings = []
    for p in points:
        for m, entry in p["metrics"].items():
            vs = entry["vs_baseline"][NEWEST]
            judged = vs["judged"]
            d = vs["difference"][judged]
            new, old = entry["per_config"][NEWEST], entry["per_config"][BASELINE]
            f = {"label": p["label"], "metric": m, "outcome": OUTCOMES.get(vs["verdict"], vs["verdict"]),
                 "judged": judged, "margin": vs["margin"],
                 "relative": _num(d.get("value")), "low": _num(d.get("low")), "high": _num(d.get("high")),
                 "unit": entry["unit"], "newest": _num(new.get("value")), "baseline": _num(old.get("value")),
                 "higher_is_better": entry["higher_is_better"], "text": vs["text"],
                 "replicates": {NEWEST: p["replicates"].get(NEWEST, 0), BASELINE: p["replicates"].get(BASELINE, 0)}}
            if f["outcome"] == OUTCOMES["insufficient_data"] and f["baseline"] is not None:
                f["outcome"], f["reason"] = CANNOT_JUDGE, _why(new, p["replicates"].get(NEWEST, 0), vs)
            elif f["newest"] is None and isinstance(new.get("value"), float) and math.isinf(new["value"]):
                # judged all the same (metrics.statistics.ratio_difference): none of the newest's
                # replicates bought a good token, each of the baseline's did
                f["reason"] = "the newest's value is infinite: no good tokens (or no completed task) in any replicate"
            findings.append(f)
    level = points[0]["difference_confidence"] if points else confidence
    found = {(f["label"], f["metric"]) for f in findings if f["outcome"] == "regressed"}
    return {"newest": describe(newest), "baseline": [describe(e) for e in base],
            "confidence": confidence, "margin": margin, "adjust": adjust, "family": family,
            "difference_confidence": level,
            "sensitivity": sensitivity(groups, raw, metrics, replicates, level, found),
            "replicates": replicates, "newest_runs": newest.runs.num_rows,
            "metrics": metrics, "allowed": sorted(allow),
            "condition_differences": diffs, "points": points, "findings": findings,
            "regressions": [f for f in findings if f["outcome"] == "regressed"],
            "improvements": [f for f in findings if f["outcome"] == "improved"],
            "unjudged": [f for f in findings if f["outcome"] == CANNOT_JUDGE]}


def _values(t: pa.Table, label: str, column: str) -> np.ndarray:
    if column not in t.column_names or "label" not in t.column_names:
        return np.array([])
    mine = np.array([lab == label for lab in t.column("label").to_pylist()], dtype=bool)
    v = np.asarray(t.column(column).to_numpy(zero_copy_only=False), dtype=np.float64)[mine]
    return v[np.isfinite(v)]


def sensitivity(groups: dict[str, pa.Table], raw: dict[str, pa.Table], metrics: list[str], replicates: dict,
                level: float, regressed: set = frozenset(), detect: float = DETECT_RELATIVE,
                rise: float = DETECT_RATE_RISE, power: float = POWER) -> dict:
    """What the gate's replicates can find (module doc): ``notes``, one sentence each, and
    ``needs``, per load point and metric the replicates (or requests) a side now and needed;
    ``level``: each difference's confidence (Bonferroni's where adjusted); ``regressed``: the
    (label, metric) pairs already found, left out."""
    notes, needs = [], []
    one = [side for side, kind in replicates.items() if kind == "repeats"]
    if one:
        notes.append(f"false alarms: the {' and '.join(one)}'s replicates are repeats of one engine launch, whose "
                     "intervals miss the spread between launches: the gate's false-alarm level holds between "
                     "separately launched builds only with launches as replicates, at least 2 a side (an "
                     "experiment's blocks; --baseline window:N for the baseline)")
    what = "launches" if not one else "repeats"
    for label in _labels(list(groups.values())):
        short = []
        for m in metrics:
            if (label, m) in regressed:
                continue
            a, b = _values(groups[BASELINE], label, m), _values(groups[NEWEST], label, m)
            if m == "error_rate":
                short += _rate_need(raw, label, a, b, level, rise, power)
                continue
            if direction(m) != (False, "ms") or len(a) < 2 or len(b) < 2 or not a.mean() > 0:
                continue
            sd_a, sd_b = float(a.std(ddof=1)), float(b.std(ddof=1))
            now = min(len(a), len(b))
            need = replicates_for_power(detect * float(a.mean()), sd_a, sd_b, level, power)
            if need is None or need > now:
                short.append({"label": label, "metric": m, "size": detect, "kind": what, "now": now, "needed": need,
                              "spread": math.hypot(sd_a, sd_b) / math.sqrt(2) / float(a.mean()),
                              "power_now": welch_power(detect * float(a.mean()), sd_a, sd_b, now, level)})
        needs += short
        if short:
            notes.append(f"at {label}, to find a regression {power:.0%} of the time at {_level(level)} each: "
                         + "; ".join(_need_text(n) for n in short))
    return {"power": power, "detect_relative": detect, "detect_rate_rise": rise, "notes": notes, "needs": needs}


def _rate_need(raw: dict[str, pa.Table], label: str, a: np.ndarray, b: np.ndarray, level: float, rise: float,
               power: float) -> list[dict]:
    """The requests a side to find the error rate rising ``rise`` from the baseline's, where the
    newest has fewer."""
    if not len(a) or not len(b):
        return []
    p0 = float(a.mean())
    if p0 + rise > 1:
        return []
    requests = [int(sum(_values(raw[side], label, "completed")) + sum(_values(raw[side], label, "failed")))
                for side in (BASELINE, NEWEST)]
    need = requests_for_rate_rise(p0, p0 + rise, level, power)
    now = min(requests)
    if now >= need:
        return []
    runs = len(_values(raw[NEWEST], label, "error_rate")) or 1
    return [{"label": label, "metric": "error_rate", "size": rise, "kind": "requests", "now": now or None,
             "needed": need, "per_run": (requests[1] / runs) if requests[1] else None, "baseline_rate": p0}]


def _need_text(n: dict) -> str:
    if n["kind"] == "requests":
        per = f" ({math.ceil(n['needed'] / n['per_run'])} runs of {n['per_run']:.0f})" if n.get("per_run") else ""
        now = f"{n['now']}" if n["now"] else "unknown"
        return (f"{n['metric']} {n['baseline_rate'] * 100:.3g} % -> {(n['baseline_rate'] + n['size']) * 100:.3g} %: "
                f"{n['needed']} requests a side{per}, now {now} (two-proportion test)")
    need = f"{n['needed']}" if n["needed"] else f"more than {10_000}"
    return (f"{n['metric']} {n['size']:.0%} longer: {need} {n['kind']} a side, now {n['now']} (found "
            f"{n['power_now']:.0%} of the time; spread {n['spread']:.1%} of the mean a replicate)")


def _level(level: float) -> str:
    return f"{level:.0%}" if round(level * 100, 6).is_integer() else f"{level:.2%}"


def _why(new: dict, runs: int, vs: dict) -> str:
    """Why a metric the baseline has cannot be compared on the newest."""
    v = new.get("value")
    if runs == 0:
        return "the newest has no runs at this load point"
    if isinstance(v, float) and math.isinf(v):
        return "the newest's value is infinite (its denominator is 0: no good tokens, or no completed task)"
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "the newest has no value for it"
    return f"no interval ({vs['difference']['relative'].get('note') or 'too few replicates'})"


def history(entries: list[TrackEntry], metrics: list[str], confidence: float = 0.95, margin: float = 0.02,
            adjust: str = "bonferroni") -> dict:
    """Every experiment's estimate per point and metric (``per_experiment[i][label][metric]``:
    value, low, high, n), and the changes detected from one experiment to the next
    (``changes``: index, label, metric, outcome, relative, low, high)."""
    per: list[dict] = []
    for e in entries:
        est: dict = {}
        for p in compare_tables({e.name: e.runs}, metrics, e.name, paired=False, confidence=confidence, margin=margin):
            est[p["label"]] = {m: {k: _num(v.get(k)) for k in ("value", "low", "high", "n")}
                               for m, entry in p["metrics"].items() for v in [entry["per_config"][e.name]]}
        per.append(est)
    changes = []
    for i in range(1, len(entries)):
        if differing(entries[i], [entries[i - 1]]):
            continue  # conditions changed there: no verdict across the break
        groups = {side: launch_replicates(_launches(e), metrics)[0]
                  for side, e in ((BASELINE, entries[i - 1]), (NEWEST, entries[i]))}
        family = len(metrics) * max(len(_labels(list(groups.values()))), 1)
        for p in compare_tables(groups, metrics, BASELINE, paired=False, confidence=confidence, margin=margin,
                                adjust=adjust, family=family):
            for m, entry in p["metrics"].items():
                vs = entry["vs_baseline"][NEWEST]
                outcome = OUTCOMES.get(vs["verdict"], vs["verdict"])
                if outcome in ("regressed", "improved"):
                    rel = vs["difference"][vs["judged"]]
                    changes.append({"index": i, "label": p["label"], "metric": m, "outcome": outcome,
                                    "relative": _num(rel.get("value")), "low": _num(rel.get("low")),
                                    "high": _num(rel.get("high")), "judged": vs["judged"],
                                    "baseline": _num(entry["per_config"][BASELINE].get("value")),
                                    "unit": entry["unit"]})
    return {"experiments": [describe(e) for e in entries], "per_experiment": per, "changes": changes,
            "breaks": [i for i in range(1, len(entries)) if differing(entries[i], [entries[i - 1]])]}


def describe(e: TrackEntry) -> dict:
    return {"run_id": e.run_id, "experiment": e.experiment, "name": e.name, "started": e.started.isoformat(),
            "version": e.version, "engine": e.engine, "track_version": e.track_version,
            "harness_commit": e.harness_commit, "runs": e.runs.num_rows, "notes": e.notes, "answer": e.answer}


def gate_message(result: dict) -> str:
    """One line per regression (metric, size, interval, both versions), then one per metric the
    gate could not judge (why, and the baseline's value); empty: the gate passes."""
    new = result["newest"]
    base = ", ".join(f"{b['version']} ({b['name']})" for b in result["baseline"])
    who = f"{new['version']} ({new['name']}) against {base}"
    lines = []
    for f in result["regressions"]:
        if f["newest"] is None:  # an infinite value (no good tokens in any replicate)
            lines.append(f"regressed: {f['metric']} at {f['label']}: {f.get('reason', 'no value')} (baseline "
                         f"{_fmt(f['baseline'])}{_unit(f)}): {who}")
            continue
        lines.append(f"regressed: {f['metric']} at {f['label']}: {size(f)} beyond the {margin_text(f)} margin "
                     f"({f['newest']:.4g} against {_fmt(f['baseline'])}{_unit(f)}): {who}")
    if not result.get("newest_runs", 1):
        lines.append(f"cannot judge: the newest experiment has no point runs: {who}")
    for f in result.get("unjudged", []):
        lines.append(f"cannot judge: {f['metric']} at {f['label']}: {f['reason']} (baseline "
                     f"{f['baseline']:.4g}{_unit(f)}): {who}")
    return "\n".join(lines)


def size(f: dict) -> str:
    """A finding's difference and interval: relative in %, absolute (a baseline of 0) in points
    for a share, else in the metric's unit."""
    if f["judged"] == "absolute":
        why = f"(absolute: the {'baseline' if f.get('baseline') == 0 else 'newest'} is 0)"
        if f["unit"] == "":
            return f"{_pp(f['relative'])} [{_pp(f['low'])}, {_pp(f['high'])}] {why}"
        return f"{f['relative']:+.4g} [{f['low']:+.4g}, {f['high']:+.4g}] {f['unit']} {why}"
    return f"{_pct(f['relative'])} [{_pct(f['low'])}, {_pct(f['high'])}]"


def margin_text(f: dict) -> str:
    if f["judged"] == "absolute":
        return f"±{f['margin'] * 100:.3g} points" if f["unit"] == "" else f"±{f['margin']:.4g} {f['unit']}"
    return f"±{f['margin']:.0%}"


def _unit(f: dict) -> str:
    return f" {f['unit']}" if f["unit"] else ""


def _fmt(x) -> str:
    return "n/a" if x is None else f"{x:.4g}"


def _pp(x) -> str:
    return "n/a" if x is None else f"{x * 100:+.1f} points"


def _pct(x) -> str:
    return "n/a" if x is None else f"{x * 100:+.1f} %"


def _num(x):
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return float(x) if math.isfinite(x) else None
    return None
