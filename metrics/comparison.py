"""The comparison table, pure (tables in, ``comparison.json``'s content out): per load point
and metric, each config's estimate with its interval, the difference from the baseline with
its interval, and the verdict; which way is better for each metric.

Inside one experiment (``protocol=compare``) configs ran in blocks: block b of every config
pairs with block b of the baseline, and differences are paired (t interval of the per-block
differences; the relative one by the delta method).  ``tokenfactory compare EXP_A EXP_B``
compares experiments run separately: a load point's replicates are its runs (a sweep's
repeats of it, or a comparison's blocks), grouped by the point's label; the experiments were
not interleaved, so nothing pairs a run of one with a run of the other, the difference is
unpaired (Welch), and the table says so; experiments whose fixed conditions differ (model,
tokenizer, precision, sampling, workload, SLO) are refused unless ``--allow KEY`` names the
difference under test (``protocols.compare.record``).  Statistics: ``metrics.statistics``.

What a verdict's replicates can find (``sensitivity``, per metric and config in
``vs_baseline``): from the spread its interval was drawn from, at the interval's own (adjusted)
level, the smallest difference found 80 % of the time at the blocks it ran and the blocks a 5 %
and a 10 % difference need (a paired t: ``metrics.sample_size``); ``power_warnings`` says, for a
metric with no winner, where only a difference above 10 % could have been found.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from scipy.stats import t as student

from metrics.sample_size import (
    blocks_for_power,
    detectable_difference,
    paired_t_power,
    replicates_for_power,
    welch_detectable,
    welch_power,
)
from metrics.statistics import (
    Difference,
    Estimate,
    mean_ci,
    paired_difference,
    ratio_ci,
    ratio_difference,
    unpaired_difference,
    verdict,
)

# metric -> (higher is better, unit)
METRICS = {
    "output_throughput": (True, "tok/s"), "request_throughput": (True, "req/s"),
    "goodput_rps": (True, "req/s"), "good_output_throughput": (True, "tok/s"), "slo_attainment": (True, ""),
    "cost_per_mtok_good": (False, "per M good tok"), "cost_per_mtok_all": (False, "per M tok"),
    "cost_per_mtok_good_answer": (False, "per M good answer tok"),  # reasoning left out (metrics.summary)
    "energy_per_good_token_j": (False, "J/tok"), "error_rate": (False, ""), "max_load_under_slo": (True, "load"),
    "engine_prefix_cache_hit_rate": (True, ""),
    # a deployment's replicas (metrics.replicas): evener is better
    "replica_load_imbalance": (False, ""), "replica_kv_usage_imbalance": (False, ""),
    "replica_queue_imbalance": (False, ""), "replica_hit_rate_spread": (False, ""),
    # tasks (metrics.tasks): a cheap attempt can be an expensive result
    "task_completion_rate": (True, ""), "task_slo_attainment": (True, ""), "task_censored_rate": (False, ""),
    "attempts_per_completed_task": (False, "attempts"), "cost_per_completed_task": (False, "per task"),
    "cost_per_task_attempt": (False, "per attempt"), "cost_per_mtok_good_task": (False, "per M good-task tok"),
}
# Ratios across repeats are ratios of totals (BCa bootstrap), not means of per-run ratios.
RATIOS = {"cost_per_mtok_good": ("cost_total", "good_output_tokens", 1e6),
          "cost_per_mtok_all": ("cost_total", "all_output_tokens", 1e6),
          "cost_per_mtok_good_answer": ("cost_total", "good_answer_tokens", 1e6),
          "cost_per_completed_task": ("cost_total", "completed_tasks", 1.0),
          "cost_per_task_attempt": ("cost_total", "task_attempts", 1.0),
          "attempts_per_completed_task": ("task_attempts", "completed_tasks", 1.0),
          "cost_per_mtok_good_task": ("cost_total", "good_task_output_tokens", 1e6)}


# shares in [0, 1]: where a side's mean is 0 their absolute difference is judged in points
# (margin 0.02 = 2 percentage points)
FRACTIONS = {"error_rate", "slo_attainment", "engine_prefix_cache_hit_rate", "task_completion_rate",
             "task_slo_attainment"}


def absolute_margin(metric: str, margin: float, scale: float) -> float:
    """The margin for an absolute difference B - A, used where A's or B's mean is 0 (no relative
    one): for a share in [0, 1] (:data:`FRACTIONS`, ``*_rate``, ``*attainment``) ``margin``
    itself, in points (0.02 = 2 percentage points); for any other metric ``margin`` · ``scale``,
    the larger of the two means' magnitudes (a move off or onto zero counts when it is beyond
    the margin's share of the side that is not zero)."""
    if metric in FRACTIONS or (direction(metric)[1] == "" and metric.endswith(("_rate", "attainment"))):
        return margin
    return margin * abs(scale) if math.isfinite(scale) else margin


def comparable(metric: str, columns) -> bool:
    """Whether runs with these summary ``columns`` have ``metric``: its own column, or for a ratio
    of totals its denominator's (runs without tasks have no task metric to compare)."""
    return metric in columns or (metric in RATIOS and RATIOS[metric][1] in columns)


def direction(metric: str) -> tuple[bool, str]:
    """(higher is better, unit) of ``metric``: the table above, else a latency for ``*_ms``,
    else higher is better."""
    if metric in METRICS:
        return METRICS[metric]
    if metric.endswith("_ms"):  # latencies
        return False, "ms"
    return True, ""


FIXED_KEYS = ("model", "model_revision", "tokenizer_sha256", "weight_dtype", "kv_cache_dtype", "quantization",
              "sampling", "workload", "slo")


def _col(t: pa.Table, name: str) -> np.ndarray:
    if name not in t.column_names:
        return np.full(t.num_rows, np.nan)
    return np.asarray(t.column(name).to_numpy(zero_copy_only=False), dtype=np.float64)


def _per_config(t: pa.Table, metric: str, confidence: float, seed: int) -> Estimate:
    if metric in RATIOS:
        num, den, scale = RATIOS[metric]
        if num in t.column_names and den in t.column_names:
            return ratio_ci(_col(t, num), _col(t, den), scale=scale, confidence=confidence, seed=seed)
    return mean_ci(_col(t, metric), confidence=confidence)


def _by_block(t: pa.Table, metric: str) -> dict[int, float]:
    blocks = t.column("block").to_pylist() if "block" in t.column_names else list(range(t.num_rows))
    return dict(zip(blocks, _col(t, metric).tolist()))


def _has_ratio(metric: str, *tables: pa.Table) -> bool:
    return metric in RATIOS and all(c in t.column_names for t in tables for c in RATIOS[metric][:2])


def difference(base: pa.Table, t: pa.Table, metric: str, *, paired: bool, confidence: float,
               labels: tuple[str, str]) -> Difference:
    """B (``t``) vs A (``base``) for ``metric``, by the definition its estimate uses
    (:func:`_per_config`): a ratio of totals (:data:`RATIOS`, where both sides have the numerator
    and denominator columns) by ``metrics.statistics.ratio_difference``, so the difference
    judged is R_B/R_A - 1 of the very values shown; any other metric by the difference of
    means (paired by block: the log ratio; unpaired: Welch)."""
    if _has_ratio(metric, base, t):
        num, den, scale = RATIOS[metric]
        if paired:
            keys = list(dict.fromkeys([*_by_block(base, num), *_by_block(t, num)]))
            a_n, a_d, b_n, b_d = ([m.get(k, math.nan) for k in keys] for m in (
                _by_block(base, num), _by_block(base, den), _by_block(t, num), _by_block(t, den)))
            return ratio_difference(a_n, a_d, b_n, b_d, paired=True, scale=scale, confidence=confidence,
                                    labels=labels)
        return ratio_difference(_col(base, num), _col(base, den), _col(t, num), _col(t, den), paired=False,
                                scale=scale, confidence=confidence, labels=labels)
    if paired:
        return paired_difference(_by_block(base, metric), _by_block(t, metric), confidence=confidence,
                                 relative="log", labels=labels)
    return unpaired_difference(_col(base, metric), _col(t, metric), confidence=confidence, labels=labels)


LAUNCH = "launch"


def launch_replicates(t: pa.Table, metrics: list[str]) -> tuple[pa.Table, bool]:
    """One row per (load point, engine launch) where some load point has runs from at least two
    launches (the ``launch`` column where there is one, else ``block``): repeats inside one
    launch share its engine process, its warm-up, its placement, so they understate the spread
    between launches; the launch is the replicate.  A launch's row holds the mean of its
    repeats for each metric and the sum of its repeats for the numerators and denominators of
    :data:`RATIOS` (so Σnum/Σden over launches is the ratio of totals over all runs).  Returns
    (the table, whether it was collapsed); a table with one launch per point is returned as is."""
    key = LAUNCH if LAUNCH in t.column_names else "block" if "block" in t.column_names else None
    if key is None or not t.num_rows:
        return t, False
    labels, launches = t.column("label").to_pylist(), t.column(key).to_pylist()
    per_point: dict = {}
    for lab, la in zip(labels, launches):
        per_point.setdefault(lab, set()).add(la)
    if max(len(v) for v in per_point.values()) < 2:
        return t, False
    summed = {c for m in metrics if m in RATIOS for c in RATIOS[m][:2]}
    cols = [c for c in dict.fromkeys([*metrics, *summed, "offered_load"]) if c in t.column_names]
    groups: dict = {}
    for i, (lab, la) in enumerate(zip(labels, launches)):
        groups.setdefault((lab, la), []).append(i)
    values = {c: _col(t, c) for c in cols}
    rows = []
    for (lab, la), idx in groups.items():
        row = {"label": lab, key: la, "repeats": len(idx)}
        for c in cols:
            v = values[c][idx]
            v = v[~np.isnan(v)]
            row[c] = (float(v.sum()) if c in summed else float(v.mean())) if v.size else None
        rows.append(row)
    return pa.Table.from_pylist(rows), True


def difference_confidence(confidence: float, family: int, adjust: str) -> float:
    """The level of each difference's interval: ``bonferroni`` makes ``confidence`` hold for the
    ``family`` of verdicts together (1 - (1 - confidence)/family each); ``none`` per verdict.
    Without it, 11 metrics at 95 % each give a false winner in about 4 of 10 comparisons of a
    config with itself."""
    if adjust == "none" or family <= 1:
        return confidence
    if adjust != "bonferroni":
        raise ValueError(f"protocol.adjust must be bonferroni or none, not {adjust!r}")
    return 1.0 - (1.0 - confidence) / family


def compare_tables(groups: dict[str, pa.Table], metrics: list[str], baseline: str, *, paired: bool,
                   confidence: float = 0.95, margin: float = 0.02, seed: int = 0,
                   adjust: str = "none", family: int | None = None) -> list[dict]:
    """Per load point (``label``) and metric: estimates per group (at ``confidence``),
    differences from ``baseline`` (at ``difference_confidence``: the point's metrics are one
    family, or ``family`` verdicts where the caller judges more: every metric at every point).
    Every row of a group at a point is one replicate of it (a repeat, or a block);
    ``replicates`` says how many each group has.  A metric whose mean is 0 on either side is
    judged by its absolute difference (margin: :func:`absolute_margin`)."""
    family = family or len(metrics)
    dconf = difference_confidence(confidence, family, adjust)
    labels: list[str] = []
    for t in groups.values():
        for lab in t.column("label").to_pylist():
            if lab not in labels:
                labels.append(lab)
    points = []
    for lab in labels:
        at = {name: t.filter(pc.equal(t.column("label"), lab)) for name, t in groups.items()}
        base = at.get(baseline)
        offered = next((float(v) for t in at.values() for v in t.column("offered_load").to_pylist()
                        if v is not None), None) if "offered_load" in next(iter(at.values())).column_names else None
        point = {"label": lab, "offered_load": offered, "replicates": {name: t.num_rows for name, t in at.items()},
                 "difference_confidence": dconf, "family": family, "adjust": adjust, "metrics": {}}
        for m in metrics:
            higher, unit = direction(m)
            entry = {"higher_is_better": higher, "unit": unit, "per_config": {}, "vs_baseline": {}}
            for name, t in at.items():
                entry["per_config"][name] = _per_config(t, m, confidence, seed).to_dict()
            for name, t in at.items():
                if name == baseline or base is None:
                    continue
                diff = difference(base, t, m, paired=paired, confidence=dconf, labels=(baseline, name))
                am = absolute_margin(m, margin, max(abs(diff.a.value), abs(diff.b.value)))
                v = verdict(diff, margin=margin, higher_is_better=higher, confidence=dconf, absolute_margin=am)
                entry["vs_baseline"][name] = {"difference": diff.to_dict(), "verdict": v.outcome, "text": v.text,
                                              "judged": v.judged, "margin": v.margin,
                                              "sensitivity": sensitivity(diff, dconf)}
            point["metrics"][m] = entry
        points.append(point)
    return points


POWER = 0.8
SIZES = (0.05, 0.10)  # the differences whose blocks a comparison states
WINNER = ("a_better", "b_better")


def sensitivity(diff: Difference, level: float, power: float = POWER, sizes: tuple[float, ...] = SIZES) -> dict:
    """What the replicates behind ``diff`` can find at ``level`` (its interval's confidence).

    Paired blocks: ``spread``, the block-to-block standard deviation of the per-block difference
    its interval rests on, s = h·√n / t(1 - (1 - level)/2, n - 1), h the interval's half-width (on
    the log scale for a log ratio or a ratio of totals, ``scale`` "log"; on the relative scale for
    the delta method, "relative"); ``detectable``: the smallest relative difference found with
    ``power`` at its ``blocks`` (exp(δ) - 1 on the log scale; ``metrics.sample_size``'s paired t);
    ``power_at``: the chance to find each of ``sizes`` there; ``blocks_for``: the blocks each needs
    (null beyond 10,000).  Runs made separately (``unit`` "replicates a side"): each side's spread
    from its own interval, over A's mean (``spread_a``, ``spread_b``), and Welch's power with the
    fewer replicates of the two a side.  A ``note`` says why there is no figure: one block (no
    spread), a mean of 0 on a side (judged by the absolute difference), an interval that is not
    finite."""
    out: dict = {"power": power, "level": level, "unit": "blocks" if diff.paired else "replicates a side",
                 "blocks": None, "spread": None, "scale": None, "detectable": None,
                 "power_at": {f"{d:g}": None for d in sizes}, "blocks_for": {f"{d:g}": None for d in sizes}, "note": ""}
    rel = diff.relative
    n = rel.n if diff.paired else min(diff.a.n, diff.b.n)
    out["blocks"] = n
    if diff.a.value == 0 and diff.b.value == 0:
        return {**out, "note": "both sides 0: no relative difference to size"}
    if n < 2:
        what = "block(s): no spread between blocks" if diff.paired else "replicate(s) a side: no spread"
        return {**out, "note": f"{n} {what} to size a difference from (2 or more)"}
    if diff.judged == "absolute" or not diff.a.value > 0:
        return {**out, "note": "a side's mean is 0: judged by the absolute difference, no relative one to size"}
    crit = float(student.ppf(1 - (1 - level) / 2, n - 1))
    log = "log" in (rel.method if diff.paired else diff.a.method)
    if diff.paired:
        spread = _half_width(1 + rel.low, 1 + rel.high, log) * math.sqrt(n) / crit
        spreads = (spread,)
    else:  # each side's spread from its own interval at this level, over A's mean where it is not on logs
        spreads = tuple(_half_width(e.low, e.high, log) * math.sqrt(e.n)
                        / float(student.ppf(1 - (1 - level) / 2, e.n - 1)) / (1.0 if log else diff.a.value)
                        for e in (diff.a, diff.b))
        spread = math.hypot(*spreads) / math.sqrt(2)
        out.update(spread_a=spreads[0], spread_b=spreads[1])
    if not all(math.isfinite(x) for x in spreads):
        return {**out, "note": "the interval is not finite: no spread to size a difference from"}

    def on_scale(d: float) -> float:
        return math.log1p(d) if log else d
    if diff.paired:
        found = detectable_difference(spread, n, level, power)
        chance = {f"{d:g}": paired_t_power(on_scale(d), spread, n, level) for d in sizes}
        need = {f"{d:g}": blocks_for_power(on_scale(d), spread, level, power) for d in sizes}
    else:
        found = welch_detectable(*spreads, n, level, power)
        chance = {f"{d:g}": welch_power(on_scale(d), *spreads, n, level) for d in sizes}
        need = {f"{d:g}": replicates_for_power(on_scale(d), *spreads, level, power) for d in sizes}
    out.update(spread=spread, scale="log" if log else "relative", power_at=chance, blocks_for=need,
               detectable=(math.expm1(found) if log else found) if found is not None else None)
    if spread == 0:
        out["note"] = f"no spread between {'blocks' if diff.paired else 'replicates'}: any difference would be found"
    return out


def _half_width(low: float, high: float, log: bool) -> float:
    """Half an interval's width, on the log scale where ``log`` (inf where a bound is not finite)."""
    lo, hi = (math.log(x) if x > 0 else -math.inf for x in (low, high)) if log else (low, high)
    return (hi - lo) / 2 if math.isfinite(lo) and math.isfinite(hi) else math.inf


def power_warnings(point: dict, metrics, configs: int = 2, size: float = 0.10) -> list[str]:
    """One sentence per metric of ``metrics`` at ``point`` with no winner whose blocks could find
    only a difference above ``size``, and one where a point has a single block."""
    out, one = [], ""
    where = f" ({point['label']})" if point.get("label") == SEARCH_LABEL else ""
    for m in metrics:
        for name, vs in ((point.get("metrics") or {}).get(m) or {}).get("vs_baseline", {}).items():
            sens = vs.get("sensitivity") or {}
            if vs.get("verdict") in WINNER:
                continue
            one = one or (sens.get("unit") or "blocks") * (sens.get("blocks") == 1)
            found = sens.get("detectable")
            if found is None or not found > size:
                continue
            who = f" ({name} against the baseline)" if configs > 2 else ""
            unit = sens.get("unit") or "blocks"
            need = (sens.get("blocks_for") or {}).get(f"{size:g}")
            above = "of more than tenfold" if found >= 9 else f"above {found * 100:.0f} %"  # not 2.4e17 %
            out.append(f"no winner on {m}{where}{who}: with {sens['blocks']} {unit} only a difference {above} "
                       f"could be found; {need or 'more than 10,000'} {unit} would find {size * 100:g} %")
    if one == "blocks":
        out.append(f"one block{where}: no spread between blocks, so no difference can be found (protocol.repeats "
                   "of 2 or more; a small difference needs many more)")
    elif one:
        out.append(f"one replicate a side{where}: no spread, so no difference can be found (2 or more a side; a "
                   "small difference needs many more)")
    return out


SEARCH_LABEL = "max load under the SLO"
SEARCH_METRICS = ["max_load_under_slo", "goodput_rps", "good_output_throughput", "cost_per_mtok_good"]


def compare_runs(table: pa.Table, protocol, record: dict, searches: list[dict] | None = None,
                 baseline: str | None = None, quality: dict | None = None) -> dict:
    """``comparison.json`` of one ``protocol=compare`` experiment from its ``runs.parquet``
    (the load points) and its sessions' ``search.json`` (max load under the SLO, and goodput and
    cost there)."""
    configs = list((record.get("configs") or {}).keys())
    baseline = baseline or protocol.get("baseline") or configs[0]
    if "role" in table.column_names:
        table = table.filter(pc.equal(table.column("role"), "point"))
    groups = {c: table.filter(pc.equal(table.column("config"), c)) for c in configs}
    metrics = [m for m in protocol.metrics if comparable(m, table.column_names)]
    confidence, margin = float(protocol.confidence), float(protocol.min_effect)
    adjust = str(protocol.get("adjust") or "none")
    seed = int(record.get("seed") or 0)
    points = []
    if searches:
        found = pa.Table.from_pylist([{**{k: s.get(k) for k in ("config", "block", "cost_total",
                                                                 "good_output_tokens", *SEARCH_METRICS)},
                                       "label": SEARCH_LABEL} for s in searches])
        sgroups = {c: found.filter(pc.equal(found.column("config"), c)) for c in configs}
        points += compare_tables(sgroups, SEARCH_METRICS, baseline, paired=True, confidence=confidence,
                                 margin=margin, seed=seed, adjust=adjust)
    points += compare_tables(groups, metrics, baseline, paired=True, confidence=confidence, margin=margin,
                             seed=seed, adjust=adjust)
    failed = {n: v["reason"] for n, v in ((quality or {}).get("configs") or {}).items() if not v["passed"]}
    _gate_verdicts(points, failed)
    return {"kind": "paired", "method_note": "blocks paired: block b of each config against block b of the baseline",
            "quality_gate_failed": failed,
            "configs": configs, "baseline": baseline, "blocks": sorted({r["block"] for r in record.get("blocks", [])}),
            "confidence": confidence, "adjust": adjust, "min_effect": margin, "points": points,
            "fixed_condition_differences": fixed_differences(record.get("fixed_conditions") or {}),
            "mlflow_metrics": mlflow_metrics(points)}


GATED = ("max_load_under_slo", "goodput_rps", "good_output_throughput", "slo_attainment", "cost_per_mtok_good",
         "energy_per_good_token_j")


def _gate_verdicts(points: list[dict], failed: dict[str, str]) -> None:
    """A config that fails the quality gate loses on every good-token metric, whatever its
    speed: its verdict there says so instead of comparing numbers it does not have."""
    for p in points:
        for m, entry in p["metrics"].items():
            if m not in GATED:
                continue
            for name, vs in entry["vs_baseline"].items():
                if name in failed:
                    vs["verdict"] = "a_better"
                    vs["text"] = f"{name} fails the quality gate ({failed[name]}): no good tokens"


def fixed_differences(fixed: dict[str, dict]) -> dict[str, dict]:
    """Fixed conditions whose value is not the same for every config: key -> {config: value}."""
    out = {}
    for key in FIXED_KEYS:
        vals = {name: fc.get(key) for name, fc in fixed.items()}
        if len({repr(v) for v in vals.values()}) > 1:
            out[key] = vals
    return out


def mlflow_metrics(points: list[dict]) -> dict[str, float]:
    """Each config's estimate and bounds per point and metric, for the parent MLflow run."""
    out = {}
    for i, p in enumerate(points):
        for m, entry in p["metrics"].items():
            for name, est in entry["per_config"].items():
                for k in ("value", "low", "high", "n"):
                    v = est.get(k)
                    if isinstance(v, (int, float)) and math.isfinite(v):
                        out[(f"{name}." if name else "") + f"p{i}.{m}.{k}"] = float(v)
    return out


def point_aggregates(table: pa.Table, metrics: list[str], confidence: float = 0.95, seed: int = 0) -> dict[str, float]:
    """A sweep's estimate per load point (over its repeats) and metric, with its interval and
    n, for the parent MLflow run: ``p<i>.<metric>.value|low|high|n``, ``i`` the point's place in
    ``experiment.json``'s ``load_points``."""
    if "role" in table.column_names:
        table = table.filter(pc.equal(table.column("role"), "point"))
    metrics = [m for m in metrics if comparable(m, table.column_names)]
    if not table.num_rows or not metrics:
        return {}
    return mlflow_metrics(compare_tables({"": table}, metrics, "", paired=False, confidence=confidence, seed=seed))


def _fmt(v: float | None, unit: str = "") -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "n/a"
    if unit == "" and abs(v) <= 1.5:
        return f"{v:.3g}"
    return f"{v:.4g}"


def format_comparison(comparison: dict) -> str:
    lines = []
    kind = comparison["kind"]
    how = "paired by block" if kind == "paired" else comparison.get("method_note") or "unpaired (Welch)"
    lines.append(f"comparison ({how}), "
                 f"{comparison['confidence']:.0%} intervals, baseline {comparison['baseline']}, "
                 f"margin {comparison['min_effect']:.0%}")
    diffs = comparison.get("fixed_condition_differences") or {}
    for key, vals in diffs.items():
        lines.append(f"  fixed condition {key} differs: " + ", ".join(f"{k}={v}" for k, v in vals.items()))
    for p in comparison["points"]:
        reps = p.get("replicates") or {}
        lines.append(f"\nload point {p['label']}" + (" (replicates: " + ", ".join(
            f"{k} of {n}" for n, k in reps.items()) + ")" if reps else ""))
        if p.get("adjust") == "bonferroni" and p.get("family", 1) > 1:
            lines.append(f"  (differences at {p['difference_confidence']:.2%} each: Bonferroni over the {p['family']} "
                         f"metrics below, {comparison['confidence']:.0%} for all of them together)")
        elif p.get("family", 1) > 1:
            lines.append(f"  ({p['family']} verdicts at {comparison['confidence']:.0%} each: between identical configs "
                         f"about 1 in {round(1 / (1 - comparison['confidence']))} is a false winner; "
                         "protocol.adjust=bonferroni holds the level for all of them together)")
        for m, e in p["metrics"].items():
            cells = []
            for name, est in e["per_config"].items():
                cells.append(f"{name} {_fmt(est['value'], e['unit'])} [{_fmt(est['low'], e['unit'])}, "
                             f"{_fmt(est['high'], e['unit'])}]")
            lines.append(f"  {m:<24} " + "; ".join(cells))
            for vs in e["vs_baseline"].values():
                lines.append(f"  {'':<24}   {vs['text']}")
    return "\n".join(lines)
