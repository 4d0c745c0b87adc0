"""Recompute a run's cost figures from its files alone (requests.parquet, run.json, config.yaml),
independently of metrics/: the check that the summary is reproducible from the records."""

import json
import math
from pathlib import Path

import pandas as pd
import yaml


def recompute(run_dir) -> dict:
    run_dir = Path(run_dir)
    req = pd.read_parquet(run_dir / "requests.parquet")
    run = json.loads((run_dir / "run.json").read_text())
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    window_s = (run["window_end_ns"] - run["window_start_ns"]) / 1e9
    cost = cfg["cost"]
    assert cost.get("model", "rental") == "rental", "this check recomputes rental profiles"
    hourly = (cost.get("hourly_per_gpu", 0) * cost.get("num_gpus", 0)
              + cost.get("hourly_per_host", 0) * cost.get("num_hosts", 1)
              + sum((cost.get("extra_hourly") or {}).values()))
    cost_total = window_s / 3600 * hourly
    m = req[~req["warmup"]]
    slo = cfg.get("slo") or {}
    good = m["status"] == "ok"
    for limit, col, nan_passes in (("ttft_ms", "ttft_s", False), ("tpot_ms", "tpot_s", True),
                                   ("e2el_ms", "e2el_s", False)):
        if slo.get(limit) is not None:
            ms = m[col] * 1e3
            good &= (ms <= slo[limit]) | (ms.isna() if nan_passes else False)
    good_tokens = float(m.loc[good, "output_tokens"].sum())
    all_tokens = float(m["output_tokens"].fillna(0).sum())
    window_tokens = float(req["output_tokens"].fillna(0).sum())
    n = len(m)
    return {
        "window_s": window_s, "cost_total": cost_total, "good_output_tokens": good_tokens,
        "all_output_tokens": all_tokens, "window_output_tokens": window_tokens, "good_requests": int(good.sum()),
        "cost_per_mtok_good": 1e6 * cost_total / good_tokens if good_tokens else math.inf,
        "cost_per_mtok_all": 1e6 * cost_total / all_tokens if all_tokens else math.inf,
        "completion_rate": float((m["status"] == "ok").sum() / n),
        "rejection_rate": float(m["http_status"].isin([429, 503]).sum() / n),
    }


def recovery_by_hand(run_dir) -> float:
    """``slo_recovery_s`` of a ``scenario.kill_at_s`` run from its files, as metrics/recovery.py's
    docstring defines it: the first N requests in a row (by end time, all ending after the
    kill) with a share of good ones of at least slo.min_attainment (else percentile / 100)."""
    run_dir = Path(run_dir)
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    kill = json.loads((run_dir / "summary.json").read_text())["kill_ns"]
    slo, n = cfg["slo"], cfg["scenario"]["recovery_window"]
    need = slo["min_attainment"] if slo.get("min_attainment") is not None else slo["percentile"] / 100

    def end(r):
        for k in ("done_ns", "end_ns", "sent_ns"):
            if r[k] is not None and not (isinstance(r[k], float) and math.isnan(r[k])):
                return r[k]

    def good(r):
        if r["status"] != "ok":
            return False
        for limit, col, nan_passes in (("ttft_ms", "ttft_s", False), ("tpot_ms", "tpot_s", True),
                                       ("e2el_ms", "e2el_s", False)):
            v = r[col]
            if slo.get(limit) is None or (nan_passes and (v is None or math.isnan(v))):
                continue
            if v is None or math.isnan(v) or v * 1e3 > slo[limit]:
                return False
        return True

    rows = [r for r in pd.read_parquet(run_dir / "requests.parquet").to_dict("records") if not r["warmup"]]
    post = sorted((r for r in rows if end(r) >= kill), key=lambda r: (end(r), r["sent_ns"]))
    for i in range(n - 1, len(post)):
        window = post[i - n + 1:i + 1]
        if sum(good(r) for r in window) / n >= need - 1e-12:
            return (end(post[i]) - kill) / 1e9
    return math.nan
