"""Did this version make it worse, or is it noise?  The newest experiment of a track against a
baseline, metric by metric, with the comparison's intervals and margin (``metrics.comparison``).

- The baseline: the previous experiment (``previous``), the ``window:N`` experiments before the
  newest pooled (their runs are all replicates of the baseline: a noisy history gives a steadier
  reference), or one named (its run id, its results folder's name, or its version).
- The difference is unpaired (Welch; ratios of totals by bootstrap, as ``tokenfactory compare``):
  experiments run at different times are not interleaved, so nothing pairs a run of one with a
  run of the other; a load point's replicates are its repeats (``protocol.repeats``).
- Per metric and load point: ``regressed`` when the interval of the relative difference
  excludes zero and the effect is beyond the margin in the worse direction, ``improved`` the
  same the better way, ``no significant change`` otherwise (a significant effect inside the
  margin included), ``not enough data`` without an interval (one run per experiment).
- What must stay fixed: the comparison's fixed conditions (model, tokenizer, precision,
  sampling, workload, SLO), the load points and the hardware; an experiment that differs from
  the newest in one of them is refused as a baseline unless ``allow`` names the key.
- Many metrics, many verdicts: at 95 % each, a gate over the default eleven metrics raises a
  false alarm far more often than one in twenty; ``adjust="bonferroni"`` holds the level for a
  load point's metrics together (each interval at 1 - 0.05/metrics), as ``protocol.adjust`` does.
- The history: every experiment's estimate and interval per metric and point, and where a
  change was detected against the experiment before it (the same test, one step at a time).
"""

from __future__ import annotations

import math

import pyarrow as pa

from metrics.comparison import FIXED_KEYS, comparable, compare_tables
from protocols.track.history import TrackEntry

TRACK_KEYS = (*FIXED_KEYS, "load_points", "hardware")
OUTCOMES = {"b_better": "improved", "a_better": "regressed", "no_significant_difference": "no significant change",
            "equivalent": "no significant change", "insufficient_data": "not enough data"}
NEWEST, BASELINE = "newest", "baseline"


def pick_baseline(entries: list[TrackEntry], spec: str = "previous") -> list[TrackEntry]:
    """The baseline experiments for the newest (``spec``: previous | window:N | a name)."""
    if len(entries) < 2:
        raise ValueError(f"the track has {len(entries)} experiment: at least two are needed to compare")
    earlier = entries[:-1]
    if spec == "previous":
        return [earlier[-1]]
    if spec.startswith("window:"):
        try:
            n = int(spec.split(":", 1)[1])
        except ValueError:
            n = 0
        if n < 1:
            raise ValueError(f"--baseline {spec}: expected window:N with N >= 1")
        return earlier[-n:]
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


def _pooled(entries: list[TrackEntry]) -> pa.Table:
    return pa.concat_tables([e.runs for e in entries], promote_options="default")


def default_metrics(tables: list[pa.Table]) -> list[str]:
    from conf.schema import COMPARED_METRICS

    cols = set.intersection(*(set(t.column_names) for t in tables))
    return [m for m in COMPARED_METRICS if comparable(m, cols)]


def compare_newest(entries: list[TrackEntry], baseline: str = "previous", metrics: list[str] | None = None,
                   confidence: float = 0.95, margin: float = 0.02, allow: set[str] = frozenset(),
                   adjust: str = "none") -> dict:
    """The newest experiment against the baseline: per load point and metric the two estimates,
    the relative difference with its interval, and the outcome (module doc)."""
    newest, base = entries[-1], pick_baseline(entries, baseline)
    diffs = differing(newest, base)
    refused = {k: v for k, v in diffs.items() if k not in allow}
    if refused:
        lines = [f"  {k}: " + ", ".join(f"{n}={v}" for n, v in vals.items()) for k, vals in refused.items()]
        raise ValueError(f"the newest experiment ({newest.name}) and its baseline differ in what the track holds "
                         "fixed:\n" + "\n".join(lines) + f"\nif that difference is meant, say so: --allow "
                         f"{','.join(refused)}")
    groups = {BASELINE: _pooled(base), NEWEST: newest.runs}
    metrics = metrics or default_metrics(list(groups.values()))
    points = compare_tables(groups, metrics, BASELINE, paired=False, confidence=confidence, margin=margin,
                            adjust=adjust)
    findings = []
    for p in points:
        for m, entry in p["metrics"].items():
            vs = entry["vs_baseline"][NEWEST]
            rel = vs["difference"]["relative"]
            findings.append({"label": p["label"], "metric": m, "outcome": OUTCOMES.get(vs["verdict"], vs["verdict"]),
                             "relative": _num(rel.get("value")), "low": _num(rel.get("low")),
                             "high": _num(rel.get("high")), "unit": entry["unit"],
                             "newest": _num(entry["per_config"][NEWEST].get("value")),
                             "baseline": _num(entry["per_config"][BASELINE].get("value")),
                             "higher_is_better": entry["higher_is_better"], "text": vs["text"]})
    return {"newest": describe(newest), "baseline": [describe(e) for e in base], "baseline_spec": baseline,
            "confidence": confidence, "margin": margin, "adjust": adjust,
            "difference_confidence": points[0]["difference_confidence"] if points else confidence,
            "metrics": metrics, "allowed": sorted(allow),
            "condition_differences": diffs, "points": points, "findings": findings,
            "regressions": [f for f in findings if f["outcome"] == "regressed"],
            "improvements": [f for f in findings if f["outcome"] == "improved"]}


def history(entries: list[TrackEntry], metrics: list[str], confidence: float = 0.95, margin: float = 0.02,
            adjust: str = "none") -> dict:
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
        groups = {BASELINE: entries[i - 1].runs, NEWEST: entries[i].runs}
        for p in compare_tables(groups, metrics, BASELINE, paired=False, confidence=confidence, margin=margin,
                                adjust=adjust):
            for m, entry in p["metrics"].items():
                vs = entry["vs_baseline"][NEWEST]
                outcome = OUTCOMES.get(vs["verdict"], vs["verdict"])
                if outcome in ("regressed", "improved"):
                    rel = vs["difference"]["relative"]
                    changes.append({"index": i, "label": p["label"], "metric": m, "outcome": outcome,
                                    "relative": _num(rel.get("value")), "low": _num(rel.get("low")),
                                    "high": _num(rel.get("high"))})
    return {"experiments": [describe(e) for e in entries], "per_experiment": per, "changes": changes,
            "breaks": [i for i in range(1, len(entries)) if differing(entries[i], [entries[i - 1]])]}


def describe(e: TrackEntry) -> dict:
    return {"run_id": e.run_id, "experiment": e.experiment, "name": e.name, "started": e.started.isoformat(),
            "version": e.version, "engine": e.engine, "track_version": e.track_version,
            "harness_commit": e.harness_commit, "runs": e.runs.num_rows, "notes": e.notes}


def gate_message(result: dict) -> str:
    """One line per regression: metric, size, interval, both versions (empty: none)."""
    new = result["newest"]
    base = ", ".join(f"{b['version']} ({b['name']})" for b in result["baseline"])
    lines = []
    for f in result["regressions"]:
        lines.append(f"regressed: {f['metric']} at {f['label']}: {_pct(f['relative'])} [{_pct(f['low'])}, "
                     f"{_pct(f['high'])}] beyond the ±{result['margin']:.0%} margin ({f['newest']:.4g} against "
                     f"{f['baseline']:.4g} {f['unit']}): {new['version']} ({new['name']}) against {base}")
    return "\n".join(lines)


def _pct(x) -> str:
    return "n/a" if x is None else f"{x * 100:+.1f} %"


def _num(x):
    if isinstance(x, (int, float)) and not isinstance(x, bool):
        return float(x) if math.isfinite(x) else None
    return None
