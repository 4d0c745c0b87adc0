"""A run's ``summary.json``, computed from its per-request records alone.

Key names and definitions follow ``vllm bench serve`` where it has the same quantity
(``request_throughput``, ``output_throughput``, ``mean_ttft_ms``, ``p99_itl_ms`` ...);
ours are added beside them.  Everything here can be recomputed from ``requests.parquet``,
the run's window and its config.

Definitions:
- measured requests: rows with ``warmup == False``.
- ``duration_s``: first ``sent_ns`` to last ``done_ns`` among measured requests (the
  benchmark duration of vLLM's benchmark).  Throughputs divide by it.
- ``window_s``: the run's observation window (engine start or run start to release); cost
  and energy cover it, warm-up and idle gaps included.
- ``completed``: measured requests with status ``ok``; token totals count completed ones.
- ``all_output_tokens``: output tokens of every measured request, failed ones included (good
  or not); ``cost_per_mtok_all``, ``energy_per_token_j`` and ``tokens_per_joule`` divide by it.
  ``window_output_tokens`` adds the warm-up rows' tokens: all the window produced.
- sessions (rows with a ``session_id``, warm-up left out): a session is completed when every
  one of its turns is ``ok`` (and, given the workload's planned turns, every planned turn was
  sent); ``cost_per_completed_session`` = cost_total / completed sessions.
- tasks (rows with ``attempt >= 1``: DAGs of calls): completed tasks, task time, engine share,
  critical path, attempts, task SLO and cost per completed task; ``metrics/tasks.py`` holds their
  definitions.  No task key when no row is a task's.
- achieved load beside the offered one: ``achieved_send_rate_rps`` = (measured sends - 1) /
  (last send - first send), the arrival rate the engine saw; ``mean_in_flight`` = sum over
  measured requests of (done - sent) / ``duration_s`` (Little's law: the concurrency the
  engine held on average).  Over the arrival window (first to last send), the mean in flight over
  its second quarter and its last (``in_flight_second_quarter``, ``in_flight_last_quarter``) and
  ``still_filling`` when the last exceeds the second by more than max(3·√(second + last), 0.1·second):
  the run's arrivals ended before its batch filled, so its latencies are a fill-up's, a lower bound
  of the steady state's (``metrics/filling.py`` holds the definitions); judged only at a fixed
  offered rate (``fixed_rate``: not a trace's replay, whose rate changes by design).  Beside it,
  ``backlog_wait_rise_s``: the wait for a first token (or the end, with none) fitted against the
  send over the arrivals' second half, its rise over that half; ``backlog_wait_bound_s`` what it must
  pass (4 standard errors, or the 10th percentile of the latency: a service time); and
  ``backlog_growing`` when it does: a queue past capacity, not a fill-up (whose latency levels).
  ``saturation_guard_limit``: where the run's own inputs (its requests, send rate and burstiness,
  service time, streaming or not) put those guards where they were measured outside their bounds,
  the reasons in one line (``metrics/guard_limits.py``), else null.
- ``schedule_lag_*_ms``: the load generator's own delay per measured request,
  ``sent_ns - max(scheduled_ns, slot_ns)`` (``metrics.request_metrics.schedule_lag_s``);
  ``client_limited`` when its p99 exceeds ``client.max_schedule_lag_ms``.  Waiting for a
  ``load.max_concurrency`` slot is ``queue_wait_*_ms`` (``slot_ns - scheduled_ns``), the
  server's backlog, never the client's; ``num_connects`` and ``connect_*_ms`` count the sends
  that had to open a connection and how long that took (included in their lag).
- SLOs (``metrics.slo``'s rules): ``slo_attainment`` = good / measured requests and, per configured SLO,
  ``slo_attainment_<metric>`` = its pass share, ``slo_<metric>_p<q>_ms`` its ``slo.percentile``-th
  percentile over the completed requests that have a value, ``slo_<metric>_met`` that percentile within the
  limit (``metrics.slo.percentile_check``); ``slo_tpot_vacuous`` when no completed request has a TPOT
  (each one token): the TPOT SLO then holds with nothing to judge.
- cost and energy: ``metrics/cost.py`` and ``metrics/energy.py`` hold their definitions.
- prefix-cache hits from the rows (``cache_hit_rate`` ...) and client-server token counts
  (``token_mismatch_rate`` ...): ``metrics/token_accounting.py``.
- ``per_adapter`` (rows with a ``lora`` adapter: workload.lora): per adapter, the formulas
  above over its own measured rows (``adapter_summary``); throughputs and goodput divide by
  the run's ``duration_s`` (the adapters share one window), so they add up to the run's.
- reasoning (``metrics.token_attribution``'s chunk kinds): ``total_reasoning_tokens`` and
  ``total_tool_call_tokens`` over completed requests; TTFA (``mean_ttfa_ms``, ``p99_ttft_ms``'s
  sibling ``p99_ttfa_ms`` ...) beside TTFT; ``good_answer_tokens`` = sum over good requests of
  (output_tokens - reasoning_tokens); ``cost_per_mtok_good_answer`` = 1e6 x cost_total /
  good_answer_tokens.  A row that never told reasoning apart (``reasoning_tokens`` null: an older
  file, an import) counts 0 reasoning tokens and its TTFA is its TTFT
  (``metrics.request_metrics.ttfa_or_ttft``).
- speculative decoding (tokens per decode step from the rows): ``metrics/speculative.py``.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from metrics.cost import fleet_cost, per_million, per_unit, window_cost
from metrics.energy import energy_summary, token_figures
from metrics.filling import backlog_growing, quarter_in_flight, still_filling, wait_rise
from metrics.guard_limits import run_guard_limit
from metrics.percentiles import add_latency_stats
from metrics.request_metrics import chunk_gaps_s, itl_per_token_s, queue_wait_s, schedule_lag_s, ttfa_or_ttft
from metrics.slo import SLO, SLO_COLUMNS, UNDEFINED_PASSES, good_mask, percentile_check, slo_pass
from metrics.speculative import spec_summary
from metrics.tasks import task_cost, task_summary
from metrics.token_accounting import cache_summary, mismatch_summary


def _col(t: pa.Table, name: str, dtype=np.float64) -> np.ndarray:
    return t.column(name).to_numpy(zero_copy_only=False).astype(dtype, copy=False)


def _col_or(t: pa.Table, name: str, fallback: str | float) -> np.ndarray:
    """Column ``name``; a file written before it: column ``fallback``, or that constant."""
    if name in t.column_names:
        return _col(t, name)
    return _col(t, fallback) if isinstance(fallback, str) else np.full(t.num_rows, fallback, dtype=np.float64)


def _ttfa(t: pa.Table) -> np.ndarray:
    """TTFA per row (``metrics.request_metrics.ttfa_or_ttft``: TTFT where nothing told reasoning apart)."""
    return ttfa_or_ttft(_col_or(t, "ttfa_s", math.nan), _col(t, "ttft_s"), _col_or(t, "reasoning_tokens", math.nan))


def itl_values(t: pa.Table) -> tuple[np.ndarray, np.ndarray]:
    """All per-token ITLs and all raw chunk gaps (seconds) of the completed requests in ``t``."""
    per_token, raw = [], []
    for chunks, toks in zip(t.column("chunk_ns").to_pylist(), t.column("chunk_tokens").to_pylist()):
        if chunks and len(chunks) > 1:
            per_token.append(itl_per_token_s(chunks, toks))
            raw.append(chunk_gaps_s(chunks))
    cat = lambda xs: np.concatenate(xs) if xs else np.empty(0)  # noqa: E731
    return cat(per_token), cat(raw)


def summarize(table: pa.Table, slo: SLO, window_start_ns: int, window_end_ns: int,
              cost_cfg=None, energy_j: float | None = None, max_schedule_lag_ms: float = 10.0,
              telemetry=None, steady_capacity: int | None = None, steady_reason: str = "",
              expected_turns: dict | None = None, cost_replicas: int = 1,
              cost_replica_seconds: float | None = None, token_mismatch_tolerance: int = 1,
              token_mismatch_threshold: float = 0.01, fixed_rate: bool = True) -> dict:
    """The run's metrics from its per-request table (see module doc for definitions).

    ``telemetry`` (the run's ``telemetry.parquet`` table) gives the energy block; without
    it the block says energy is unavailable (or uses ``energy_j`` when a caller measured it).
    ``steady_capacity`` is the batch capacity of the steady-state rule (``metrics.energy``).
    ``cost_replica_seconds`` (a deployment whose replicas changed in the window): the cost
    counts those replica-seconds (``metrics.cost.fleet_cost``), not ``cost_replicas`` x window.
    ``token_mismatch_tolerance`` / ``_threshold``: ``client.token_mismatch_*`` (``metrics.token_accounting``).
    """
    measured = table.filter(pc.invert(table.column("warmup")))
    status = measured.column("status").to_numpy(zero_copy_only=False).astype(str)
    ok = status == "ok"
    done = measured.filter(pa.array(ok))
    n_all = measured.num_rows
    out: dict = {"num_requests": n_all, "num_warmup": table.num_rows - n_all,
                 "completed": int(ok.sum()), "failed": int(n_all - ok.sum())}
    for s in ("http_error", "timeout", "connection_error", "invalid_response", "truncated", "cancelled"):
        out[f"num_{s}"] = int((status == s).sum())
    out["completion_rate"] = out["completed"] / n_all if n_all else math.nan
    out["error_rate"] = 1.0 - out["completion_rate"] if n_all else math.nan
    # A 429/503 is the server refusing the request, not failing it half-way.
    http = _col(measured, "http_status")
    out["num_rejected"] = int(np.isin(http, (429, 503)).sum())
    out["rejection_rate"] = out["num_rejected"] / n_all if n_all else math.nan

    sent = _col(measured, "sent_ns")
    done_ns = np.where(np.isnan(_col(measured, "done_ns")), _col(measured, "end_ns"), _col(measured, "done_ns"))
    if n_all and not np.all(np.isnan(sent)):
        duration = (np.nanmax(done_ns) - np.nanmin(sent)) / 1e9 if not np.all(np.isnan(done_ns)) else math.nan
    else:
        duration = math.nan
    out["duration_s"] = duration
    sent_ok = np.sort(sent[~np.isnan(sent)])
    span = (sent_ok[-1] - sent_ok[0]) / 1e9 if sent_ok.size > 1 else math.nan
    out["achieved_send_rate_rps"] = (sent_ok.size - 1) / span if span and span > 0 else math.nan
    busy = np.nansum(done_ns - sent) / 1e9
    out["mean_in_flight"] = busy / duration if duration and duration > 0 else math.nan
    second, last = quarter_in_flight(sent, done_ns)
    out["in_flight_second_quarter"], out["in_flight_last_quarter"] = second, last
    # a trace's rate changes by design: its in flight follows the trace, not a fill-up
    out["still_filling"] = bool(fixed_rate) and still_filling(second, last)
    # the wait for a first token (the end, with none) rising through the arrivals' second half: a backlog
    ttft = _col(measured, "ttft_s")
    wait = np.where(np.isnan(ttft), (done_ns - sent) / 1e9, ttft)
    rise, bound = wait_rise(sent, wait, done_ns)
    out["backlog_wait_rise_s"], out["backlog_wait_bound_s"] = rise, bound
    out["backlog_growing"] = bool(fixed_rate) and backlog_growing(rise, bound)
    # where the run's own inputs put the guards outside their measured bounds (metrics.guard_limits)
    out["saturation_guard_limit"] = (run_guard_limit(sent / 1e9, sent / 1e9 + ttft, done_ns / 1e9)
                                     if fixed_rate else None)

    in_tok = _col(done, "prompt_tokens")
    out_tok = _col(done, "output_tokens")
    total_in = float(np.nansum(in_tok))
    total_out = float(np.nansum(out_tok))
    out["total_input_tokens"] = int(total_in)
    out["total_output_tokens"] = int(total_out)
    rate = (lambda x: x / duration) if duration and duration > 0 else (lambda x: math.nan)
    out["request_throughput"] = rate(out["completed"])
    out["output_throughput"] = rate(total_out)
    out["total_token_throughput"] = rate(total_in + total_out)
    out.update(cache_summary(table))
    out.update(mismatch_summary(table, token_mismatch_tolerance, token_mismatch_threshold))

    ttft, tpot, e2el = _col(done, "ttft_s"), _col(done, "tpot_s"), _col(done, "e2el_s")
    add_latency_stats(out, "ttft", ttft)
    add_latency_stats(out, "tpot", tpot)
    add_latency_stats(out, "e2el", e2el)
    add_latency_stats(out, "ttfa", _ttfa(done))
    out["total_reasoning_tokens"] = int(np.nansum(_col_or(done, "reasoning_tokens", 0.0)))
    out["total_tool_call_tokens"] = int(np.nansum(_col_or(done, "tool_call_tokens", 0.0)))
    itl, raw_gaps = itl_values(done)
    add_latency_stats(out, "itl", itl)
    add_latency_stats(out, "chunk_gap", raw_gaps)

    # Goodput: recomputed here from the columns, not trusted from slo_ok.
    good = good_mask(slo, status, _col(measured, "ttft_s"), _col(measured, "tpot_s"), _col(measured, "e2el_s"),
                     ttfa_s=_ttfa(measured))
    good_out = float(np.nansum(np.where(good, _col(measured, "output_tokens"), 0.0)))
    good_answer = good_out - float(np.nansum(np.where(good, _col_or(measured, "reasoning_tokens", 0.0), 0.0)))
    out["good_requests"] = int(good.sum())
    out["good_output_tokens"] = int(good_out)
    out["good_answer_tokens"] = int(good_answer)
    out["goodput_rps"] = rate(int(good.sum()))
    out["request_goodput"] = out["goodput_rps"]  # vLLM's name for the same quantity
    out["good_output_throughput"] = rate(good_out)
    out["slo_attainment"] = good.sum() / n_all if n_all else math.nan
    for name, col in SLO_COLUMNS.items():
        if getattr(slo, name) is None:
            continue
        short = name[:-3]
        pick = _ttfa if col == "ttfa_s" else (lambda t, c=col: _col(t, c))
        passed = ok & slo_pass(slo, name, pick(measured))
        out[f"slo_attainment_{short}"] = passed.sum() / n_all if n_all else math.nan
        check = percentile_check(slo, name, pick(done))
        out[f"slo_{short}_p{slo.percentile:g}_ms"] = check.value_ms
        out[f"slo_{short}_met"] = check.met
        if name in UNDEFINED_PASSES:
            out[f"slo_{short}_vacuous"] = check.vacuous
    out["slo_percentile"] = slo.percentile
    out.update(spec_summary(done.column("chunk_tokens").to_pylist(),
                            done.column("tokens_source").to_pylist() if "tokens_source" in done.column_names
                            else [None] * done.num_rows))

    scheduled = _col(measured, "scheduled_ns")
    slot = _col(measured, "slot_ns") if "slot_ns" in measured.column_names else scheduled
    lag = schedule_lag_s(scheduled, slot, sent) * 1e3
    lag = lag[~np.isnan(lag)]
    out["schedule_lag_p50_ms"] = float(np.percentile(lag, 50)) if lag.size else math.nan
    out["schedule_lag_p99_ms"] = float(np.percentile(lag, 99)) if lag.size else math.nan
    out["schedule_lag_max_ms"] = float(lag.max()) if lag.size else math.nan
    out["client_limited"] = bool(lag.size and out["schedule_lag_p99_ms"] > max_schedule_lag_ms)
    wait = queue_wait_s(scheduled, slot) * 1e3
    wait = wait[~np.isnan(wait)]
    out["num_queued"] = int((wait > 0).sum())
    for name, v in (("mean", wait.mean() if wait.size else math.nan),
                    ("p50", np.percentile(wait, 50) if wait.size else math.nan),
                    ("p99", np.percentile(wait, 99) if wait.size else math.nan),
                    ("max", wait.max() if wait.size else math.nan)):
        out[f"queue_wait_{name}_ms"] = float(v)
    conn = _col(measured, "connect_s") * 1e3 if "connect_s" in measured.column_names else np.empty(0)
    conn = conn[~np.isnan(conn)]
    out["num_connects"] = int(conn.size)  # sends that had to open a connection (pool empty)
    out["connect_p50_ms"] = float(np.percentile(conn, 50)) if conn.size else math.nan
    out["connect_max_ms"] = float(conn.max()) if conn.size else math.nan

    window_s = (window_end_ns - window_start_ns) / 1e9
    out["window_start_ns"] = int(window_start_ns)
    out["window_end_ns"] = int(window_end_ns)
    out["window_s"] = window_s
    good_n = int(good.sum())
    all_tokens = float(np.nansum(_col(measured, "output_tokens")))
    out["all_output_tokens"] = int(all_tokens)
    out["window_output_tokens"] = int(np.nansum(_col(table, "output_tokens")))
    if telemetry is not None or energy_j is None:
        out.update(energy_summary(telemetry, window_start_ns, window_end_ns, good_out, all_tokens,
                                  requests=table, capacity=steady_capacity, capacity_reason=steady_reason))
    else:  # energy measured by the caller: the per-token figures still come from metrics.energy
        out.update({"energy_available": not math.isnan(energy_j), "energy_j": energy_j, "energy_source": "caller",
                    **token_figures(energy_j, good_out, all_tokens)})
    adapters = adapter_summary(measured, status, good, duration)
    if adapters:
        out["per_adapter"] = adapters
    sessions = _sessions(measured, status, expected_turns, table)
    out.update(sessions)
    tasks = task_summary(table, slo)
    out.update(tasks)
    if cost_cfg is not None:
        energy = out["energy_j"] if out.get("energy_available") else None
        c = (window_cost(cost_cfg, window_s, energy, replicas=cost_replicas) if cost_replica_seconds is None
             else fleet_cost(cost_cfg, cost_replica_seconds, window_s, energy))
        out.update(c)
        out["cost_per_mtok_good"] = per_million(c["cost_total"], good_out)
        out["cost_per_mtok_good_answer"] = per_million(c["cost_total"], good_answer)
        out["cost_per_mtok_all"] = per_million(c["cost_total"], all_tokens)
        out["cost_per_good_request"] = per_unit(c["cost_total"], good_n)
        if sessions["num_sessions"]:
            out["cost_per_completed_session"] = per_unit(c["cost_total"], sessions["completed_sessions"])
        out.update(task_cost(c["cost_total"], tasks))
        if good_out <= 0:
            out["cost_per_mtok_good_reason"] = "no good output tokens in the window: the cost was paid for nothing"
    return out


ADAPTER_LATENCIES = ("ttft", "tpot", "e2el")


def adapter_summary(measured: pa.Table, status: np.ndarray, good: np.ndarray, duration: float) -> dict:
    """``{adapter: keys}`` over the measured rows of each LoRA adapter (``lora`` column; {} when
    no row names one).  Per adapter: ``num_requests``, ``completed``, ``total_output_tokens``
    (completed rows), ``request_throughput`` = completed / D, ``output_throughput`` = output
    tokens / D, ``goodput_rps`` = good / D, ``good_output_throughput`` = good rows' output
    tokens / D (D: the run's ``duration_s``), ``slo_attainment`` = good / num_requests, and
    ``add_latency_stats`` of TTFT, TPOT and E2EL over its completed rows (the run's keys)."""
    if "lora" not in measured.column_names:
        return {}
    lora = np.asarray(measured.column("lora").to_pylist(), dtype=object)
    names = sorted({a for a in lora if a is not None})
    if not names:
        return {}
    ok = status == "ok"
    out_tok = _col(measured, "output_tokens")
    rate = (lambda x: x / duration) if duration and duration > 0 else (lambda x: math.nan)
    lat = {k: _col(measured, f"{k}_s") for k in ADAPTER_LATENCIES}
    per: dict = {}
    for name in names:
        mine = lora == name
        n, done, g = int(mine.sum()), mine & ok, mine & good
        toks = float(np.nansum(np.where(done, out_tok, 0.0)))
        good_toks = float(np.nansum(np.where(g, out_tok, 0.0)))
        row = {"num_requests": n, "completed": int(done.sum()), "total_output_tokens": int(toks),
               "request_throughput": rate(int(done.sum())), "output_throughput": rate(toks),
               "good_requests": int(g.sum()), "goodput_rps": rate(int(g.sum())),
               "good_output_throughput": rate(good_toks),
               "slo_attainment": int(g.sum()) / n if n else math.nan}
        for k in ADAPTER_LATENCIES:
            add_latency_stats(row, k, lat[k][done])
        per[name] = row
    return per


def _sessions(measured: pa.Table, status: np.ndarray, expected_turns: dict | None = None,
              table: pa.Table | None = None) -> dict:
    """Sessions and how many completed (every turn ``ok``); zero sessions when there is no session_id.

    With ``expected_turns`` (session -> turns the workload planned), every planned session
    counts, sent or not (a turn never sent, after a failure or past the run's end, leaves
    its session incomplete); sessions with a warm-up turn are left out."""
    sid = measured.column("session_id").to_pylist() if "session_id" in measured.column_names else []
    per: dict = {}
    for s, st in zip(sid, status):
        if s is None:
            continue
        per[s] = per.get(s, True) and st == "ok"
    if expected_turns is not None:
        warm = set()
        if table is not None and "session_id" in table.column_names:  # (older files have none)
            warm = set(table.filter(table.column("warmup")).column("session_id").to_pylist())
        ok_turns: dict = {}
        for s, st in zip(sid, status):
            if s is not None and st == "ok":
                ok_turns[s] = ok_turns.get(s, 0) + 1
        per = {s: per.get(s, False) and ok_turns.get(s, 0) >= k for s, k in expected_turns.items() if s not in warm}
    n, done = len(per), sum(per.values())
    return {"num_sessions": n, "completed_sessions": done,
            "session_completion_rate": done / n if n else math.nan}
