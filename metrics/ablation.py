"""The ablation's effects (``ablation.json``): each arm against the baseline, the combined
effect beside the product of the single ones, their interaction, and the bottleneck per arm.

Per block b (arms are paired by block, as configs are in a comparison):
- effect of arm X on a metric: r_X,b = X_b / baseline_b; its estimate is the geometric mean of
  the r_X,b with a Student-t interval on log r (ratios multiply, so logs average);
- product of the single effects for a combination C: P_C,b = prod over its optimisations i of
  r_i,b;
- interaction: I_C,b = r_C,b / P_C,b, estimated the same way.  I = 1 when the speed-ups
  multiply; I < 1 for a metric where higher is better (I > 1 for lower-is-better ones) when the
  combination gains less than its parts promise: the bottleneck moved (the seed's point).
The bottleneck line of an arm comes from its runs' ``bottleneck`` (``metrics.roofline``:
compute, memory bandwidth, KV capacity, queueing, the client) with the measured-over-roofline
ratio, and the engine's own evidence (waiting requests, KV usage, preemptions, prefix-cache
hits).
"""

from __future__ import annotations

import math
from collections import Counter

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from metrics.comparison import direction
from metrics.statistics import log_ratio_ci

EFFECT_METRICS = ("output_throughput", "goodput_rps", "cost_per_mtok_good", "p50_ttft_ms", "p99_ttft_ms",
                  "p50_tpot_ms", "p99_tpot_ms")


def _per_block(t: pa.Table, arm: str, label: str, metric: str) -> dict[int, float]:
    sel = t.filter(pc.and_(pc.equal(t.column("config"), arm), pc.equal(t.column("label"), label)))
    if metric not in sel.column_names:
        return {}
    return {b: (math.nan if v is None else float(v))
            for b, v in zip(sel.column("block").to_pylist(), sel.column(metric).to_pylist())}


def effects(table: pa.Table, arms: list[tuple[str, tuple[str, ...]]], metrics=EFFECT_METRICS,
            confidence: float = 0.95) -> list[dict]:
    """Per load point and metric: every arm's effect ratio, and for combinations the product of
    the single effects and the interaction (module doc)."""
    if "role" in table.column_names:
        table = table.filter(pc.equal(table.column("role"), "point"))
    singles = {opts[0]: name for name, opts in arms if len(opts) == 1}
    labels = list(dict.fromkeys(table.column("label").to_pylist()))
    out = []
    for label in labels:
        point = {"label": label, "metrics": {}}
        for m in metrics:
            base = _per_block(table, "baseline", label, m)
            if not base:
                continue
            higher, unit = direction(m)
            ratio = {name: {b: v / base[b] for b, v in _per_block(table, name, label, m).items()
                            if b in base and base[b] and math.isfinite(v)} for name, _ in arms}
            entry = {"higher_is_better": higher, "unit": unit, "arms": {}}
            for name, opts in arms:
                if name == "baseline":
                    continue
                arm = {"effect": log_ratio_ci(list(ratio[name].values()), confidence).to_dict()}
                if len(opts) > 1 and all(o in singles for o in opts):
                    blocks = [b for b in ratio[name] if all(b in ratio[singles[o]] for o in opts)]
                    prod = [math.prod(ratio[singles[o]][b] for o in opts) for b in blocks]
                    arm["product_of_singles"] = log_ratio_ci(prod, confidence).to_dict()
                    arm["interaction"] = log_ratio_ci([ratio[name][b] / p for b, p in zip(blocks, prod)],
                                                      confidence).to_dict()
                    arm["interaction_text"] = _interaction_text(arm["interaction"], higher)
                entry["arms"][name] = arm
            point["metrics"][m] = entry
        out.append(point)
    return out


def _interaction_text(i: dict, higher: bool) -> str:
    v, lo, hi = i["value"], i["low"], i["high"]
    if any(x is None or (isinstance(x, float) and math.isnan(x)) for x in (v, lo, hi)):
        return "interaction: too few blocks for an interval"
    if lo <= 1 <= hi:
        return f"the effects multiply (interaction {v:.3f} [{lo:.3f}, {hi:.3f}] includes 1)"
    worse = (v < 1) if higher else (v > 1)
    return (f"the combination {'gains less than' if worse else 'gains more than'} the product of its parts "
            f"(interaction {v:.3f} [{lo:.3f}, {hi:.3f}])" + (": the bottleneck moved" if worse else ""))


def bottlenecks(table: pa.Table, arms: list[tuple[str, tuple[str, ...]]]) -> dict[str, dict]:
    """Per arm and load point: the most frequent ``bottleneck`` of its runs, the median measured
    over roofline, and the engine's evidence, as one line."""
    if "role" in table.column_names:
        table = table.filter(pc.equal(table.column("role"), "point"))
    out: dict[str, dict] = {}
    for name, _ in arms:
        rows = table.filter(pc.equal(table.column("config"), name)).to_pylist()
        per_label: dict[str, list[dict]] = {}
        for r in rows:
            per_label.setdefault(r["label"], []).append(r)
        out[name] = {lab: _bottleneck_line(rs) for lab, rs in per_label.items()}
    return out


def _median(rows: list[dict], key: str) -> float:
    v = [r.get(key) for r in rows if isinstance(r.get(key), (int, float)) and math.isfinite(r.get(key))]
    return float(np.median(v)) if v else math.nan


def _bottleneck_line(rows: list[dict]) -> dict:
    limits = Counter(r.get("bottleneck") for r in rows if r.get("bottleneck"))
    limit = limits.most_common(1)[0][0] if limits else "unknown (no roofline: see roofline_unavailable_reason)"
    parts = [f"limited by {limit}"]
    ratio = _median(rows, "tpot_over_roofline")
    if math.isfinite(ratio):
        parts.append(f"TPOT {ratio:.1f}x its roofline bound ({rows[0].get('roofline_decode_limit')})")
    for key, what in (("engine_waiting_max", "requests waiting (max)"), ("engine_kv_cache_usage_max", "KV use (max)"),
                      ("engine_preemptions", "preemptions"), ("engine_prefix_cache_hit_rate", "prefix-cache hits")):
        v = _median(rows, key)
        if math.isfinite(v):
            parts.append(f"{what} {v:.3g}")
    return {"bottleneck": limit, "votes": dict(limits), "tpot_over_roofline": ratio, "line": "; ".join(parts)}


def format_ablation(record: dict) -> str:
    lines = [f"ablation: {len(record['arms'])} arms, effects as ratios to the baseline "
             f"(geometric mean over blocks, {record['confidence']:.0%} t interval on logs)"]
    for p in record["points"]:
        lines.append(f"\nload point {p['label']}")
        for m, e in p["metrics"].items():
            cells = []
            for name, a in e["arms"].items():
                ef = a["effect"]
                cells.append(f"{name} x{ef['value']:.3g} [{ef['low']:.3g}, {ef['high']:.3g}]")
            lines.append(f"  {m:<16} " + "; ".join(cells))
            for name, a in e["arms"].items():
                if "interaction" in a:
                    pr = a["product_of_singles"]
                    lines.append(f"  {'':<16}   {name}: product of singles x{pr['value']:.3g}; {a['interaction_text']}")
        for name, per in record["bottlenecks"].items():
            if p["label"] in per:
                lines.append(f"  bottleneck {name}: {per[p['label']]['line']}")
    return "\n".join(lines)
