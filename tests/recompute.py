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


# ------------------------------------------------------------------------------------------------
# A second, deliberately plain implementation of the headline numbers (issue 31): loops over rows,
# sorted lists and the formulas as DESIGN.md and the metrics/ docstrings state them.  It imports
# nothing from metrics/ (scipy only for Student-t quantiles), so a slip on either side shows.

def _num(v) -> float:
    """A record's number, None -> NaN."""
    return math.nan if v is None else float(v)


def plain_percentile(xs, q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default, vLLM's): rank q/100 x (n-1).
    The step from the lower rank is taken from whichever neighbour is nearer (numpy's two-sided
    lerp), so a percentile that lands on an SLO limit is the same float on both sides."""
    xs = sorted(x for x in xs if not math.isnan(x))
    if not xs:
        return math.nan
    pos = q / 100 * (len(xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    a, b, t = xs[lo], xs[hi], pos - lo
    return a + (b - a) * t if t < 0.5 else b - (b - a) * (1 - t)


def plain_mean(xs) -> float:
    xs = [x for x in xs if not math.isnan(x)]
    return math.fsum(xs) / len(xs) if xs else math.nan


def plain_itl(chunk_ns, chunk_tokens) -> list[float]:
    """Per-token ITL of one request whose every chunk carries tokens (request_metrics.itl_per_token_s):
    the first chunk's other tokens 0 each, every later chunk of k tokens k values of gap / k."""
    out = [0.0] * (chunk_tokens[0] - 1)
    for i in range(1, len(chunk_ns)):
        out += [(chunk_ns[i] - chunk_ns[i - 1]) / 1e9 / chunk_tokens[i]] * chunk_tokens[i]
    return out


def plain_ttfa(row) -> float:
    """TTFA of a row (seconds): ``ttfa_s``; where that is null and the row never counted reasoning
    (``reasoning_tokens`` null or no such column: an older file), its TTFT."""
    v = _num(row.get("ttfa_s"))
    return _num(row["ttft_s"]) if math.isnan(v) and row.get("reasoning_tokens") is None else v


# SLO -> the row's value it bounds (seconds), and whether a NaN passes (TPOT of a one-token output)
SLO_VALUES = (("ttft_ms", lambda r: _num(r["ttft_s"]), False), ("tpot_ms", lambda r: _num(r["tpot_s"]), True),
              ("e2el_ms", lambda r: _num(r["e2el_s"]), False), ("ttfa_ms", plain_ttfa, False))


def plain_good(row, slo: dict) -> bool:
    """Completed and every configured SLO holds, inclusively; NaN fails, except TPOT (one token)."""
    if row["status"] != "ok":
        return False
    for limit, value, nan_passes in SLO_VALUES:
        if slo.get(limit) is None:
            continue
        v = value(row)
        if math.isnan(v):
            if not nan_passes:
                return False
        elif not v * 1e3 <= slo[limit]:
            return False
    return True


def plain_rental_cost(cost: dict, window_s: float, replica_seconds: float | None = None) -> float:
    """hours x (per-replica hourly lines) x replicas + hours x extra_hourly lines (metrics/cost.py doc)."""
    per_replica = (cost.get("hourly_per_gpu", 0) * cost.get("num_gpus", 0)
                   + cost.get("hourly_per_host", 0) * cost.get("num_hosts", 1))
    rep_s = window_s if replica_seconds is None else replica_seconds
    return rep_s / 3600 * per_replica + window_s / 3600 * sum((cost.get("extra_hourly") or {}).values())


def _stats(out: dict, key: str, xs_ms) -> None:
    """mean, median, p90, p99 of ``xs_ms`` (NaN left out) as a summary's latency keys."""
    out[f"mean_{key}_ms"] = plain_mean(xs_ms)
    out[f"median_{key}_ms"] = plain_percentile(xs_ms, 50)
    for q in (90, 99):
        out[f"p{q}_{key}_ms"] = plain_percentile(xs_ms, q)


def _end(r):
    """When a request was over: ``done_ns``, else its last chunk's ``end_ns`` (None: neither)."""
    return r["done_ns"] if r["done_ns"] is not None else r["end_ns"]


def _ms(a_ns, b_ns) -> float:
    """b - a in milliseconds (NaN where either is missing), as ns / 1e9 x 1e3 like metrics/."""
    return math.nan if a_ns is None or b_ns is None else (b_ns - a_ns) / 1e9 * 1e3


def _tokens(rows, col: str = "output_tokens") -> float:
    return math.fsum(r.get(col) or 0 for r in rows)


def adapter_by_hand(rows: list[dict], slo: dict, per_s) -> dict:
    """One LoRA adapter's keys over its measured ``rows``; ``per_s`` divides by the run's duration."""
    done = [r for r in rows if r["status"] == "ok"]
    good = [r for r in rows if plain_good(r, slo)]
    out = {"num_requests": len(rows), "completed": len(done), "total_output_tokens": _tokens(done),
           "request_throughput": per_s(len(done)), "output_throughput": per_s(_tokens(done)),
           "good_requests": len(good), "goodput_rps": per_s(len(good)), "good_output_throughput": per_s(_tokens(good)),
           "slo_attainment": len(good) / len(rows)}
    for k in ("ttft", "tpot", "e2el"):
        _stats(out, k, [_num(r[f"{k}_s"]) * 1e3 for r in done])
    return out


def sessions_by_hand(rows: list[dict], expected_turns: dict | None) -> dict:
    """Sessions of the measured rows, a session complete when every turn of it is ``ok``; with the
    workload's planned turns, every planned session counts and needs that many ``ok`` turns, and a
    session with a warm-up turn is left out."""
    turns: dict = {}
    for r in rows:
        if not r["warmup"] and r.get("session_id") is not None:
            turns.setdefault(r["session_id"], []).append(r["status"] == "ok")
    if expected_turns is None:
        complete = {s: all(oks) for s, oks in turns.items()}
    else:
        warm = {r.get("session_id") for r in rows if r["warmup"]}
        complete = {s: s in turns and all(turns[s]) and len(turns[s]) >= k
                    for s, k in expected_turns.items() if s not in warm}
    n, done = len(complete), sum(complete.values())
    return {"num_sessions": n, "completed_sessions": done, "session_completion_rate": done / n if n else math.nan}


def filling_by_hand(m: list[dict]) -> dict:
    """Over the arrival window (first to last send of the measured rows ``m``), the mean in flight
    (sent <= t < end) over its second and its last quarter, and whether the last exceeds the
    second by more than 3 x sqrt(second + last) and by more than a tenth of the second."""
    sends = [r["sent_ns"] for r in m if r["sent_ns"] is not None]
    if len(sends) < 2 or max(sends) == min(sends):
        return {"in_flight_second_quarter": math.nan, "in_flight_last_quarter": math.nan, "still_filling": False}
    first, length = min(sends), max(sends) - min(sends)

    def mean_in_flight(a, b):
        total = 0.0
        for r in m:
            if r["sent_ns"] is None or _end(r) is None:
                continue                        # never sent, or no end recorded: counts nowhere
            lo, hi = max(r["sent_ns"], a), min(_end(r), b)
            if hi > lo:
                total += hi - lo
        return total / (b - a)

    second = mean_in_flight(first + length / 4, first + length / 2)
    last = mean_in_flight(first + 3 * length / 4, first + length)
    rise = last - second
    return {"in_flight_second_quarter": second, "in_flight_last_quarter": last,
            "still_filling": rise > 3 * math.sqrt(second + last) and rise > 0.1 * second}


STATUSES = ("http_error", "timeout", "connection_error", "invalid_response", "truncated", "cancelled")
EXACT_TOKEN_SOURCES = ("usage_continuous", "usage")   # per-chunk counts that are the server's (speculative.py)


def summary_by_hand(rows: list[dict], slo: dict, window_start_ns: int, window_end_ns: int,
                    cost: dict | None = None, max_schedule_lag_ms: float = 10.0,
                    expected_turns: dict | None = None) -> dict:
    """summary.json's numbers that metrics/summary.py computes itself, from request rows (dicts, as
    ``Table.to_pylist()`` gives; a column an older file lacks is a key the rows lack).
    ``max_schedule_lag_ms``: client.max_schedule_lag_ms (10 ms by default)."""
    m = [r for r in rows if not r["warmup"]]
    n = len(m)
    done = [r for r in m if r["status"] == "ok"]
    good = [r for r in m if plain_good(r, slo)]
    sent = sorted(r["sent_ns"] for r in m if r["sent_ns"] is not None)
    ends = [_end(r) for r in m if _end(r) is not None]
    duration = (max(ends) - min(sent)) / 1e9 if sent and ends else math.nan
    per_s = (lambda x: x / duration) if duration > 0 else (lambda x: math.nan)
    share = (lambda x: x / n) if n else (lambda x: math.nan)
    rejected = sum(r["http_status"] in (429, 503) for r in m)
    out = {"num_requests": n, "num_warmup": len(rows) - n, "completed": len(done), "failed": n - len(done),
           **{f"num_{s}": sum(r["status"] == s for r in m) for s in STATUSES},
           "good_requests": len(good), "duration_s": duration, "window_s": (window_end_ns - window_start_ns) / 1e9,
           "completion_rate": share(len(done)), "error_rate": 1 - len(done) / n if n else math.nan,
           "num_rejected": rejected, "rejection_rate": share(rejected), "slo_attainment": share(len(good)),
           "total_input_tokens": _tokens(done, "prompt_tokens"), "total_output_tokens": _tokens(done),
           "request_throughput": per_s(len(done)), "output_throughput": per_s(_tokens(done)),
           "total_token_throughput": per_s(_tokens(done, "prompt_tokens") + _tokens(done)),
           "goodput_rps": per_s(len(good)), "request_goodput": per_s(len(good)),
           "good_output_throughput": per_s(_tokens(good)), "good_output_tokens": _tokens(good),
           "good_answer_tokens": _tokens(good) - _tokens(good, "reasoning_tokens"),
           "all_output_tokens": _tokens(m), "window_output_tokens": _tokens(rows),
           "total_reasoning_tokens": _tokens(done, "reasoning_tokens"),
           "total_tool_call_tokens": _tokens(done, "tool_call_tokens")}
    # achieved load: sends per second between the first and the last send; Little's law
    span = (sent[-1] - sent[0]) / 1e9 if len(sent) > 1 else 0.0
    out["achieved_send_rate_rps"] = (len(sent) - 1) / span if span > 0 else math.nan
    out["mean_in_flight"] = per_s(math.fsum((_end(r) - r["sent_ns"]) / 1e9 for r in m
                                            if _end(r) is not None and r["sent_ns"] is not None))
    out.update(filling_by_hand(m))
    q = slo.get("percentile", 99)
    for name, value, nan_passes in SLO_VALUES:
        if slo.get(name) is not None:
            short = name[:-3]
            passed = [r for r in done if plain_good(r, {name: slo[name]})]
            out[f"slo_attainment_{short}"] = share(len(passed))
            pv = plain_percentile([value(r) for r in done], q) * 1e3   # seconds, then ms, as metrics/ does
            out[f"slo_{short}_p{q:g}_ms"] = pv
            # no value at all: a TPOT SLO holds vacuously (no request has one to miss), any other misses
            out[f"slo_{short}_met"] = nan_passes if math.isnan(pv) else pv <= slo[name]
            if nan_passes:
                out[f"slo_{short}_vacuous"] = math.isnan(pv)
    out["slo_percentile"] = q
    lat = {k: [_num(r[f"{k}_s"]) * 1e3 for r in done] for k in ("ttft", "tpot", "e2el")}
    lat["ttfa"] = [plain_ttfa(r) * 1e3 for r in done]
    lat["itl"] = [g * 1e3 for r in done if r["chunk_ns"] and len(r["chunk_ns"]) > 1
                  for g in plain_itl(r["chunk_ns"], r["chunk_tokens"])]
    lat["chunk_gap"] = [_ms(a, b) for r in done for a, b in zip(r["chunk_ns"] or [], (r["chunk_ns"] or [])[1:])]
    for k, xs in lat.items():
        _stats(out, k, xs)
    # speculative decoding: tokens per decode step (chunks after the first) of rows whose counts are the server's
    steps = [k for r in done if r.get("tokens_source") in EXACT_TOKEN_SOURCES and r["chunk_tokens"]
             for k in r["chunk_tokens"][1:] if k > 0]
    out.update({"spec_decode_steps": len(steps), "spec_tokens_per_step_mean": plain_mean(steps),
                "spec_tokens_per_step_p50": plain_percentile(steps, 50),
                "spec_tokens_per_step_p90": plain_percentile(steps, 90)})
    if steps:
        out["spec_tokens_per_step_hist"] = {str(k): steps.count(k) for k in sorted(set(steps))}
    # the client's own delay: sent - max(scheduled, slot), a missing slot (or column) the schedule;
    # waiting for a slot (slot - scheduled, 0 without one) is the server's backlog
    ready = [(r["scheduled_ns"], r.get("slot_ns")) for r in m]
    lag = [_ms(t if s is None else s if t is None else max(s, t), r["sent_ns"]) for (s, t), r in zip(ready, m)]
    lag = [x for x in lag if not math.isnan(x)]
    out.update({"schedule_lag_p50_ms": plain_percentile(lag, 50), "schedule_lag_p99_ms": plain_percentile(lag, 99),
                "schedule_lag_max_ms": max(lag, default=math.nan)})
    out["client_limited"] = bool(lag) and plain_percentile(lag, 99) > max_schedule_lag_ms
    wait = [0.0 if t is None else _ms(s, t) for s, t in ready]
    wait = [x for x in wait if not math.isnan(x)]
    out.update({"num_queued": sum(x > 0 for x in wait), "queue_wait_mean_ms": plain_mean(wait),
                "queue_wait_p50_ms": plain_percentile(wait, 50), "queue_wait_p99_ms": plain_percentile(wait, 99),
                "queue_wait_max_ms": max(wait, default=math.nan)})
    conn = [r["connect_s"] * 1e3 for r in m if r.get("connect_s") is not None]
    out.update({"num_connects": len(conn), "connect_p50_ms": plain_percentile(conn, 50),
                "connect_max_ms": max(conn, default=math.nan)})
    adapters = sorted({r.get("lora") for r in m} - {None})
    if adapters:
        out["per_adapter"] = {a: adapter_by_hand([r for r in m if r.get("lora") == a], slo, per_s) for a in adapters}
    out.update(sessions_by_hand(rows, expected_turns))
    if cost is not None:
        total = plain_rental_cost(cost, out["window_s"])
        per_mtok = lambda x: 1e6 * total / x if x > 0 else math.inf    # noqa: E731
        out["cost_total"] = total
        out["cost_per_mtok_good"] = per_mtok(out["good_output_tokens"])
        out["cost_per_mtok_good_answer"] = per_mtok(out["good_answer_tokens"])
        out["cost_per_mtok_all"] = per_mtok(out["all_output_tokens"])
        out["cost_per_good_request"] = total / len(good) if good else math.inf
        if out["num_sessions"]:
            c = out["completed_sessions"]
            out["cost_per_completed_session"] = total / c if c else math.inf
        if out["good_output_tokens"] <= 0:
            out["cost_per_mtok_good_reason"] = "no good output tokens"   # why the cost is infinite
    return out


# -------------------------------------------------------------------- comparison.json, by hand

def _t(confidence: float, dof: float) -> float:
    from scipy import stats
    return float(stats.t.ppf(0.5 + confidence / 2, dof))


def _sd(xs) -> float:
    mu = math.fsum(xs) / len(xs)
    return math.sqrt(math.fsum((x - mu) ** 2 for x in xs) / (len(xs) - 1))


def plain_mean_interval(xs, confidence: float) -> tuple[float, float, float]:
    """(mean, low, high): mean ± t(n-1) · s/√n; NaN bounds below two values; the point without spread."""
    xs = [x for x in xs if not math.isnan(x)]
    if not xs:
        return (math.nan,) * 3
    mu = math.fsum(xs) / len(xs)
    if len(xs) < 2:
        return mu, math.nan, math.nan
    h = _t(confidence, len(xs) - 1) * _sd(xs) / math.sqrt(len(xs))
    return mu, mu - h, mu + h


def plain_ratio_of_totals(num, den, scale: float = 1.0) -> float:
    """scale x Σ num / Σ den over the repeats that have both; inf when the cost bought nothing."""
    pairs = [(a, b) for a, b in zip(num, den) if not (math.isnan(a) or math.isnan(b))]
    if not pairs:
        return math.nan
    n, d = math.fsum(a for a, _ in pairs), math.fsum(b for _, b in pairs)
    if d == 0:
        return math.inf if n > 0 else math.nan
    return scale * n / d


def plain_paired(a: dict, b: dict, confidence: float) -> dict:
    """B - A over the blocks both have (block -> value): the mean difference with its t interval,
    and the relative difference (``plain_relative``)."""
    blocks = [k for k in a if k in b and not (math.isnan(a[k]) or math.isnan(b[k]))]
    aa, bb = [a[k] for k in blocks], [b[k] for k in blocks]
    return {"n": len(blocks), "absolute": plain_mean_interval([y - x for x, y in zip(aa, bb)], confidence),
            "relative": plain_relative(aa, bb, confidence),
            "means": (math.fsum(aa) / len(aa) if aa else math.nan, math.fsum(bb) / len(bb) if bb else math.nan)}


def plain_judged(p: dict, metric: str, margin: float) -> tuple[tuple, float]:
    """(the difference a verdict judges, its margin): where either side's mean is exactly 0 and the
    absolute difference has an interval, B - A, its margin in points for a share (a rate, an
    attainment) else margin x the larger mean; otherwise the relative difference and ``margin``."""
    ma, mb = p["means"]
    lo, hi = p["absolute"][1:]
    if (ma == 0 or mb == 0) and not (math.isnan(lo) or math.isnan(hi)):
        share = metric.endswith(("_rate", "attainment"))
        return p["absolute"], margin if share else margin * max(abs(ma), abs(mb))
    return p["relative"], margin


def plain_verdict(rel: tuple, n: int, margin: float, higher_is_better: bool) -> str:
    """Winner when the interval excludes 0 and |r| > margin; equivalent inside ±margin; else no
    significant difference; insufficient data below two blocks or without an interval."""
    v, lo, hi = rel
    if n < 2 or any(x is None or math.isnan(x) for x in (v, lo, hi)):
        return "insufficient_data"
    if (lo > 0 or hi < 0) and abs(v) > margin:
        return "b_better" if (v > 0) == higher_is_better else "a_better"
    if lo >= -margin and hi <= margin:
        return "equivalent"
    return "no_significant_difference"


def plan_costs_by_hand(cost: dict | None, replica_seconds: float, window_s: float, good_tokens: float,
                       overprovisioned_s: float) -> dict:
    """plan.json's costs of one simulated window (rental): the replicas paid for x their hourly lines,
    the window x the extra lines; per million good tokens (inf without any); the headroom is the
    overprovisioned replica-hours x one replica's hourly lines."""
    if not cost:
        return {"cost_total": math.nan, "cost_per_mtok_good": math.nan, "headroom_cost": math.nan}
    total = plain_rental_cost(cost, window_s, replica_seconds)
    one = plain_rental_cost({**cost, "extra_hourly": {}}, 3600.0)
    return {"cost_total": total, "cost_per_mtok_good": 1e6 * total / good_tokens if good_tokens > 0 else math.inf,
            "headroom_cost": overprovisioned_s / 3600 * one}


def plain_relative(a: list[float], b: list[float], confidence: float) -> tuple[float, float, float]:
    """compare's relative difference of paired blocks (all complete): the geometric mean of b_i/a_i
    minus 1 with a t interval on the logs when every value is positive; else the delta method,
    r = b̄/ā, (r - 1) ± t(n-1) · max(s_e, s_d)/(√n ā), e_i = b_i - r a_i, d_i = b_i - a_i; NaN
    without a positive ā.  One block: the point, no interval."""
    n = len(a)
    if n and all(x > 0 for x in a + b):
        g, lo, hi = plain_mean_interval([math.log(y / x) for x, y in zip(a, b)], confidence)
        return math.exp(g) - 1, math.exp(lo) - 1, math.exp(hi) - 1
    ma = math.fsum(a) / n if n else math.nan
    if not ma > 0:
        return (math.nan,) * 3
    r = math.fsum(b) / n / ma
    if n < 2:
        return r - 1, math.nan, math.nan
    s = max(_sd([y - r * x for x, y in zip(a, b)]), _sd([y - x for x, y in zip(a, b)]))
    h = _t(confidence, n - 1) * s / (math.sqrt(n) * ma)
    return r - 1, r - 1 - h, r - 1 + h
