"""A point's lines on the console (``print_point``): what completed, its throughput and TTFT,
where it went, and what needs saying under it (a prefix cache's hits, a task workload's tasks,
cost and energy)."""

from __future__ import annotations

from harness.point.point_run import PointRun
from harness.point.session import PointSession
from metrics.slo import vacuous_line


def point_line(title: str, m: dict) -> str:
    """The console's line for a point: what completed of what ran, what was cancelled, and a
    stop (over-saturated) with the requests planned and never sent."""
    done = f"{m['completed']}/{m['num_requests']} ok"
    if m.get("num_cancelled"):
        whole = " (all)" if m["num_cancelled"] == m["num_requests"] else ""
        done += f", {m['num_cancelled']} cancelled{whole}"
    if m.get("saturated"):
        planned = m.get("num_requests_planned")
        of = (f"{m.get('num_requests_sent')} of {planned} planned sent, {m.get('num_requests_unsent')} never sent"
              if planned is not None else f"{m.get('num_requests_sent')} sent")
        after = m.get("saturated_after_s")
        done += (f"; STOPPED as over-saturated{f' after {after:.1f} s' if after is not None else ''}: {of} "
                 "(saturation_reason in summary.json)")
    emulated = f" [EMULATED: {m.get('timing_source')}]" if m.get("emulated") else ""
    return f"  {title}{emulated}: {done}, "



def print_point(s: PointSession, p: PointRun) -> None:
    m = p.summary
    if (m.get("prepare_seconds") or 0) >= 1 or m.get("prepare_cached"):
        how = "from the cache" if m["prepare_cached"] else (
            f"in {m['prepare_seconds']:.1f} s ({m['prepare_tokens_per_s']:,.0f} prompt tokens/s)")
        print(f"  requests prepared {how}; {m['prepare_stalls']} sends waited for one", flush=True)
    print(point_line(p.spec.title, m) + f"{m['output_throughput']:.1f} out tok/s, "
          f"p99 TTFT {m['p99_ttft_ms']:.1f} ms, goodput {m['goodput_rps']:.2f} req/s -> {p.run_dir}", flush=True)
    # still filling, token counts, energy: said once for the experiment, ranked, before its answer
    # (harness.caveats, printed by harness.finish), not under every point and repeat
    if vacuous_line(m):
        print("  " + vacuous_line(m), flush=True)
    if m.get("cached_tokens_rows"):
        print(f"  prefix cache: {m['cache_hit_rate']:.1%} of prompt tokens cached (server usage, "
              f"{m['cached_tokens_rows']} requests); engine counters "
              f"{m.get('engine_prefix_cache_hit_rate', float('nan')):.1%} (warm-up included; rows: "
              f"{m['cache_hit_rate_all']:.1%})", flush=True)
    if m.get("num_tasks"):
        slo = (f", {m['task_slo_attainment']:.0%} within slo.task_s={m['task_slo_s']:g} s"
               if m.get("task_slo_attainment") is not None else "")
        cut = f" ({m['censored_tasks']} censored: cut by the run's end)" if m.get("censored_tasks") else ""
        print(f"  tasks: {m['completed_tasks']}/{m['num_tasks']} completed{cut}, "
              f"{m['attempts_per_completed_task']:.2f} attempts per completed task, "
              f"mean task time {m['mean_task_time_ms']:.0f} ms{slo}; "
              f"{m.get('cost_per_completed_task', float('nan')):.4g} {m.get('cost_currency', '')} per completed task",
              flush=True)
    energy = (f"; energy {m['energy_j']:.1f} J ({m['energy_source']}, {m['energy_method']})"
              if m["energy_available"] else "")
    print(f"  cost {m.get('cost_total', float('nan')):.4g} {m.get('cost_currency', '')} over "
          f"{m['window_s']:.1f} s, {m.get('cost_per_mtok_good', float('nan')):.4g} per M good tok{energy}",
          flush=True)

