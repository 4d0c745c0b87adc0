"""Per-task metrics (metrics/tasks.py) on hand-built request tables: a DAG with a fan-out and a
join and tool gaps, a failed call and a retry, a failed check and a retry, a warm-up task, the task
SLO and cost; and the seed's A/B example through the paired comparison protocols/compare uses.

Times are in milliseconds from 0; every expected number is worked out by hand in a comment."""

import dataclasses
import math

import pyarrow as pa
import pytest
from omegaconf import OmegaConf

from conf.schema import COMPARED_METRICS
from harness.experiment_record import runs_table
from metrics.comparison import compare_runs, compare_tables, format_comparison, point_aggregates
from metrics.slo import SLO
from metrics.summary import summarize
from metrics.tasks import TASK_COLUMNS, critical_path_ns, read_tasks, task_cost, task_summary, union_length_ns
from tests.task_rows import MS, RENTAL, S, ab_run, call, plain, table


def fan_out_join(task="t1", t0=0):
    """a -> (b, c) -> d; tool gaps: b sent 50 ms after a ended, c 20 ms, d 10 ms after b."""
    return [call(task, "a", 1, t0 + 0, t0 + 100, calls=4),
            call(task, "b", 1, t0 + 150, t0 + 310, parents=["a"], calls=4),
            call(task, "c", 1, t0 + 120, t0 + 300, parents=["a"], calls=4),
            call(task, "d", 1, t0 + 320, t0 + 400, parents=["b", "c"], calls=4, check=True)]


def test_a_dag_with_a_fan_out_a_join_and_tool_gaps():
    s = task_summary(table(fan_out_join()))
    assert (s["num_tasks"], s["completed_tasks"], s["task_attempts"]) == (1, 1, 1)
    assert s["task_completion_rate"] == 1.0 and s["attempts_per_completed_task"] == 1.0
    # first send 0 to d's last token 400
    assert s["p50_task_time_ms"] == pytest.approx(400.0) and s["mean_task_time_ms"] == pytest.approx(400.0)
    assert s["n_task_time"] == 1
    # engine busy: [0,100] U [120,310] (b and c overlap) U [320,400] = 100 + 190 + 80 = 370 of 400
    assert s["mean_task_engine_share"] == pytest.approx(370 / 400)  # 0.925
    # critical path: d (80) -> its later-ending parent b (ends 310 > c's 300: 160) -> a (100) = 340
    assert s["mean_critical_path_engine_ms"] == pytest.approx(340.0)
    assert s["p99_critical_path_engine_ms"] == pytest.approx(340.0)
    assert s["good_tasks"] == 1 and "task_slo_attainment" not in s  # no task_s: every completed task is good
    assert s["good_task_output_tokens"] == 40  # 4 calls x 10


def test_the_critical_path_follows_the_parent_that_ended_last():
    rows = fan_out_join()
    rows[2] = call("t1", "c", 1, 120, 315, parents=["a"], calls=4)  # c now ends at 315, after b's 310
    (task,) = read_tasks(table(rows))
    # d (80) -> c (315 - 120 = 195) -> a (100) = 375
    assert critical_path_ns(task.attempts[1]) == 375 * MS


def test_a_failed_call_and_its_retry():
    rows = [call("t2", "a", 1, 1000, 1100, calls=2),
            call("t2", "b", 1, 1150, None, parents=["a"], calls=2, status="http_error", out=0, done_ms=1160),
            call("t2", "a", 2, 1300, 1400, calls=2),
            call("t2", "b", 2, 1450, 1600, parents=["a"], calls=2, check=True)]
    s = task_summary(table(rows))
    # attempt 1 failed (b not ok), attempt 2 succeeded: completed in 2 attempts
    assert (s["num_tasks"], s["completed_tasks"], s["task_attempts"]) == (1, 1, 2)
    assert s["attempts_per_completed_task"] == 2.0
    # 1000 (attempt 1's first send) to 1600 (attempt 2's last token): the failed attempt counts
    assert s["mean_task_time_ms"] == pytest.approx(600.0)
    # engine: 100 + 10 (the failed b, to its stream's close at 1160) + 100 + 150 = 360 of 600
    assert s["mean_task_engine_share"] == pytest.approx(0.6)
    # per attempt: (b 10 + a 100) + (b 150 + a 100) = 360
    assert s["mean_critical_path_engine_ms"] == pytest.approx(360.0)
    # good tokens: the succeeded attempt's only (10 + 10), not the failed one's
    assert s["good_task_output_tokens"] == 20


def test_failed_checks_retries_and_unfinished_attempts():
    rows = [call("t3", "a", 1, 0, 100, check=False), call("t3", "a", 2, 200, 300, check=True),   # 2nd passes
            call("t4", "a", 1, 0, 100, check=False), call("t4", "a", 2, 200, 300, check=False),  # never passes
            call("t5", "a", 1, 0, 100, calls=2),                          # its second call never ran
            call("t6", "a", 1, 0, 100, calls=2), call("t6", "b", 1, 100, 200, parents=["a"], calls=2)]  # no check
    s = task_summary(table(rows))
    # t6's sink b has check_ok null: not a pass; only t3 completed; t5 was cut (its attempt is short
    # with nothing failed in it): censored, out of the completion rate's denominator
    assert (s["num_tasks"], s["completed_tasks"], s["censored_tasks"]) == (4, 1, 1)
    assert s["task_completion_rate"] == pytest.approx(1 / 3)  # 1 / (4 - 1)
    assert s["task_censored_rate"] == pytest.approx(0.25)
    assert s["task_attempts"] == 6                       # 2 + 2 + 1 + 1
    assert s["attempts_per_completed_task"] == 6.0       # 6 / 1
    assert s["mean_task_time_ms"] == pytest.approx(300.0)  # t3: 0 to 300
    assert s["mean_task_engine_share"] == pytest.approx(200 / 300)  # [0,100] U [200,300]


def test_a_task_with_a_warm_up_row_and_plain_requests_are_left_out():
    rows = fan_out_join() + [call("w", "a", 1, 0, 50, check=False, warmup=True),
                             call("w", "a", 2, 60, 90, check=True),  # measured, but its task began in warm-up
                             plain(0, 0, 10), plain(1, 20, 30, warmup=True)]
    s = task_summary(table(rows))
    assert (s["num_tasks"], s["completed_tasks"], s["task_attempts"]) == (1, 1, 1)  # t1 only
    assert s["mean_task_time_ms"] == pytest.approx(400.0)


def test_no_task_rows_no_task_metrics():
    plain_rows = table([plain(0, 0, 10), plain(1, 20, 30)])
    assert task_summary(plain_rows) == {}
    old = plain_rows.drop_columns(list(TASK_COLUMNS) + ["tool_s"])  # a file written before the task columns
    assert task_summary(old) == {}
    s = summarize(old, SLO(), 0, S, cost_cfg=RENTAL)
    assert "num_tasks" not in s and "cost_per_completed_task" not in s and s["completed"] == 2


def test_union_length():
    # [0,10] U [5,20] U [30,40] U [40,41] = 20 + 11; an empty interval (b < a) counts 0
    assert union_length_ns([(30, 40), (0, 10), (5, 20), (40, 41), (50, 49)]) == 31
    assert union_length_ns([]) == 0


def slo_and_cost_rows():
    return [call("g1", "a", 1, 0, 200, calls=2, out=10), call("g1", "b", 1, 250, 500, ["a"], 2, check=True, out=30),
            call("g2", "a", 1, 0, 100, out=7, check=False), call("g2", "a", 2, 300, 600, out=20, check=True),
            call("g3", "a", 1, 0, 100, out=9, check=False)]


def test_task_slo_good_task_tokens_and_cost_in_the_summary():
    window = (0, 100 * S)  # 100 s: cost_total = 100 x 0.001 = 0.1
    s = summarize(table(slo_and_cost_rows()), SLO(task_s=0.5), *window, cost_cfg=RENTAL)
    assert s["cost_total"] == pytest.approx(0.1)
    # g1 took 500 ms (= task_s: inclusive, good), g2 600 ms (completed, too slow), g3 never completed
    assert (s["num_tasks"], s["completed_tasks"], s["good_tasks"]) == (3, 2, 1)
    assert s["task_slo_s"] == 0.5 and s["task_slo_attainment"] == pytest.approx(1 / 3)
    assert s["good_task_output_tokens"] == 40             # g1: 10 + 30
    assert s["task_attempts"] == 4                        # 1 + 2 + 1
    assert s["cost_per_completed_task"] == pytest.approx(0.05)  # 0.1 / 2
    assert s["cost_per_task_attempt"] == pytest.approx(0.025)   # 0.1 / 4
    assert s["cost_per_mtok_good_task"] == pytest.approx(2500.0)  # 1e6 x 0.1 / 40
    assert s["p50_task_time_ms"] == pytest.approx(550.0)  # median of 500 and 600
    # without task_s every completed task is good: g1's 40 + g2's succeeded attempt's 20 (not its first 7)
    s = summarize(table(slo_and_cost_rows()), SLO(), *window, cost_cfg=RENTAL)
    assert s["good_tasks"] == 2 and s["good_task_output_tokens"] == 60 and "task_slo_attainment" not in s
    assert s["cost_per_mtok_good_task"] == pytest.approx(1e6 * 0.1 / 60)


def test_tasks_cut_by_the_run_end_are_censored_apart_from_failed_ones():
    rows = [call("ok", "a", 1, 0, 100, check=True),
            # in flight when the run stopped: cancelled, nothing failed -> censored
            call("cut1", "a", 1, 0, 100, calls=2), call("cut1", "b", 1, 150, 180, ["a"], 2, status="cancelled"),
            # its second call was due after the drain's end: never sent -> censored
            call("cut2", "a", 1, 0, 100, calls=2),
            # failed, then retried; the retry was cut -> censored (its last attempt decides)
            call("cut3", "a", 1, 0, 100, check=False), call("cut3", "a", 2, 200, None, status="cancelled",
                                                              out=0, done_ms=250),
            # a cancelled row beside a failed one: the attempt failed -> not completed, not censored
            call("bad", "a", 1, 0, 100, calls=3), call("bad", "b", 1, 120, None, ["a"], 3, status="http_error",
                                                        out=0, done_ms=130),
            call("bad", "c", 1, 120, 140, ["a"], 3, status="cancelled"),
            call("bad2", "a", 1, 0, 100, check=False)]  # failed its check, no attempt left
    s = summarize(table(rows), SLO(task_s=1.0), 0, 100 * S, cost_cfg=RENTAL)  # cost_total 0.1
    assert (s["num_tasks"], s["completed_tasks"], s["censored_tasks"]) == (6, 1, 3)
    assert s["task_censored_rate"] == pytest.approx(0.5)       # 3 / 6
    assert s["task_completion_rate"] == pytest.approx(1 / 3)   # 1 / (6 - 3): ok of ok, bad, bad2
    assert s["task_slo_attainment"] == pytest.approx(1 / 3)    # the same denominator
    assert s["task_attempts"] == 7                             # 1 + 1 + 1 + 2 + 1 + 1
    assert s["attempts_per_completed_task"] == 7.0             # every attempt was spent
    assert s["cost_per_completed_task"] == pytest.approx(0.1)  # the whole window / 1 completed
    assert s["n_task_time"] == 1
    every = task_summary(table([call("c", "a", 1, 0, 100, calls=2)]))  # nothing judged
    assert every["censored_tasks"] == 1 and math.isnan(every["task_completion_rate"])


def test_task_cost_with_nothing_completed_is_infinite():
    s = task_summary(table([call("x", "a", 1, 0, 100, check=False)]))
    c = task_cost(0.2, s)
    assert s["attempts_per_completed_task"] == math.inf
    assert c["cost_per_completed_task"] == math.inf and c["cost_per_mtok_good_task"] == math.inf
    assert c["cost_per_task_attempt"] == pytest.approx(0.2)  # 0.2 / 1 attempt
    assert task_cost(0.2, {}) == {}


# ------------------------------------------------------------------------------ the seed's A/B example
# (tests/task_rows.py's ab_run): A costs 0.08 per attempt and needs one per task; B 0.05 (0.052 and
# 0.048 in two of the blocks) and needs two, its first attempt failing its check; 4 tasks per run.
def ab_comparison() -> dict:
    runs = runs_table([ab_run(c, b) for b in range(3) for c in ("A", "B")])
    protocol = OmegaConf.create({"metrics": list(COMPARED_METRICS), "confidence": 0.95, "min_effect": 0.02,
                                 "baseline": "A", "adjust": "none"})
    record = {"configs": {"A": [], "B": []}, "blocks": [{"block": b} for b in range(3)], "seed": 0}
    return compare_runs(runs, protocol, record)


def test_the_seeds_example_a_is_cheaper_per_completed_task_b_per_attempt():
    (point,) = ab_comparison()["points"]
    m = point["metrics"]
    per_task = m["cost_per_completed_task"]
    # ratios of totals over the 3 blocks: A 3 x 0.32 / 12 tasks = 0.08; B (0.40 + 0.416 + 0.384) / 12 = 0.10
    assert per_task["per_config"]["A"]["value"] == pytest.approx(0.08)
    assert per_task["per_config"]["B"]["value"] == pytest.approx(0.10)
    assert m["cost_per_task_attempt"]["per_config"]["B"]["value"] == pytest.approx(0.05)  # 1.2 / 24 attempts
    assert m["attempts_per_completed_task"]["per_config"]["A"]["value"] == pytest.approx(1.0)   # 12 / 12
    assert m["attempts_per_completed_task"]["per_config"]["B"]["value"] == pytest.approx(2.0)   # 24 / 12
    # the difference is judged on the values shown (one definition, metrics.statistics.ratio_difference):
    # R_B/R_A - 1 = 0.10/0.08 - 1 = +25 % exactly (a mean of per-block ratios would give 1.95^(1/3) - 1 =
    # +24.93 %).  Interval, paired, delta on ln R: u_i = (num_i - R den_i)/(mean(den) R): A 0, 0, 0;
    # B (0.400 - 0.4, 0.416 - 0.4, 0.384 - 0.4)/0.4 = 0, +0.04, -0.04; sd 0.04, se 0.04/sqrt(3) = 0.023094,
    # t(0.975, 2) = 4.3027: 1.25 x exp(-+0.099367) = [1.13177, 1.38058]
    vs = per_task["vs_baseline"]["B"]
    rel = vs["difference"]["relative"]
    assert rel["value"] == pytest.approx(0.25, abs=1e-12)
    assert rel["low"] == pytest.approx(0.13177, abs=1e-5) and rel["high"] == pytest.approx(0.38058, abs=1e-5)
    assert vs["verdict"] == "a_better"  # lower cost is better and B is 25 % dearer per completed task
    # per attempt: 0.05/0.08 = 0.625, the same u: B 37.5 % cheaper, 0.625 x exp(-+0.099367) - 1
    vs = m["cost_per_task_attempt"]["vs_baseline"]["B"]
    rel = vs["difference"]["relative"]
    assert rel["value"] == pytest.approx(-0.375, abs=1e-12)
    assert rel["low"] == pytest.approx(-0.43412, abs=1e-5)
    assert rel["high"] == pytest.approx(-0.30971, abs=1e-5)
    assert vs["verdict"] == "b_better"
    assert m["attempts_per_completed_task"]["vs_baseline"]["B"]["verdict"] == "a_better"
    text = format_comparison(ab_comparison())
    assert "cost_per_completed_task" in text and "A better than B" in text
    # a sweep's per-point aggregates (its MLflow parent run) carry them too: B's 1.2 / 12 tasks
    agg = point_aggregates(runs_table([ab_run("B", b) for b in range(3)]), list(COMPARED_METRICS))
    assert agg["p0.cost_per_completed_task.value"] == pytest.approx(0.10)
    assert agg["p0.attempts_per_completed_task.value"] == pytest.approx(2.0)  # 24 / 12


def test_runs_without_tasks_compare_without_task_metrics_and_nan_does_not_crash():
    plain_rows = table([plain(i, 10 * i, 10 * i + 5) for i in range(4)])
    rows = []
    for b in range(2):
        for c in ("A", "B"):
            s = summarize(plain_rows, SLO(), 0, 10 * S, cost_cfg=RENTAL)
            rows.append({"config": c, "block": b, "role": "point", "label": "plain", "offered_load": 1.0,
                         **{k: v for k, v in s.items() if isinstance(v, (bool, int, float, str))}})
    protocol = OmegaConf.create({"metrics": list(COMPARED_METRICS), "confidence": 0.95, "min_effect": 0.02,
                                 "baseline": "A", "adjust": "none"})
    record = {"configs": {"A": [], "B": []}, "blocks": [{"block": b} for b in range(2)], "seed": 0}
    (point,) = compare_runs(runs_table(rows), protocol, record)["points"]
    assert not any("task" in m for m in point["metrics"]) and "output_throughput" in point["metrics"]
    # a task metric NaN or infinite in some runs (nothing completed there): estimates, no crash
    runs = runs_table([ab_run(c, b) for b in range(3) for c in ("A", "B")])
    cols = {n: runs.column(n).to_pylist() for n in runs.column_names}
    cols["completed_tasks"][1] = 0.0                       # B's block 0 completed nothing
    cols["cost_per_completed_task"][1] = math.inf
    cols["p50_task_time_ms"][3] = math.nan
    runs = pa.table(cols)
    groups = {c: runs.filter(pa.compute.equal(runs.column("config"), c)) for c in ("A", "B")}
    (point,) = compare_tables(groups, ["cost_per_completed_task", "p50_task_time_ms"], "A", paired=True)
    assert point["metrics"]["p50_task_time_ms"]["vs_baseline"]["B"]["difference"]["absolute"]["n"] == 2
    vs = point["metrics"]["cost_per_completed_task"]["vs_baseline"]["B"]
    # the block that completed nothing keeps its cost in the ratio of totals (the value shown):
    # B 1.2/8 = 0.15 against A 0.08 is +87.5 %, all 3 blocks; its spread (influences 1.0, -0.46,
    # -0.54 on ln R_B) leaves that inside the interval at 95 %
    rel = vs["difference"]["relative"]
    assert rel["n"] == 3 and rel["value"] == pytest.approx(0.875) and vs["verdict"] == "no_significant_difference"
    # B's estimate is still the ratio of totals: (0.40 + 0.416 + 0.384) / (0 + 4 + 4) = 0.15
    assert point["metrics"]["cost_per_completed_task"]["per_config"]["B"]["value"] == pytest.approx(0.15)


# ------------------------------------------------------------------- mutants of metrics/tasks.py
# (benchmarks/mutation.py, docs/measured/mutation.md): each test below kills a mutant that
# survived the tests above and changed a number of summary.json.
EXACT = 1e-12  # pytest.approx's default (1e-6) does not see 1e9 -> 1e9 + 1 in a ns -> s division


def test_task_times_are_exact_to_the_nanosecond():
    # fan_out_join: T 400 ms, engine 370 ms, critical path 340 ms (worked out above), held to 1e-12
    s = task_summary(table(fan_out_join()))
    assert s["mean_task_time_ms"] == pytest.approx(400.0, rel=EXACT)
    assert s["mean_task_engine_share"] == pytest.approx(370 / 400, rel=EXACT)
    assert s["mean_critical_path_engine_ms"] == pytest.approx(340.0, rel=EXACT)


def test_a_table_without_the_warmup_and_done_columns():
    # an older file: no warm-up flag (nothing was warm-up) and no done_ns (every row has end_ns)
    full = task_summary(table(fan_out_join()))
    old = task_summary(table(fan_out_join()).drop_columns(["warmup", "done_ns"]))
    assert (old["num_tasks"], old["completed_tasks"]) == (1, 1)
    assert old["mean_task_time_ms"] == full["mean_task_time_ms"] == pytest.approx(400.0)


def test_a_warm_up_task_before_a_counted_one_skips_only_its_own_rows():
    rows = [call("w", "a", 1, 0, 50, check=True, warmup=True)] + fan_out_join(t0=100)
    s = task_summary(table(rows))
    assert (s["num_tasks"], s["completed_tasks"]) == (1, 1)
    assert s["mean_task_time_ms"] == pytest.approx(400.0)


def test_calls_with_no_send_or_no_end_add_no_engine_time():
    # attempt 1's call was sent at 0 but has no end at all, attempt 2's failed before it was sent:
    # neither was on the engine, and each attempt adds 0 ns (not 1) to the critical path; attempt 3:
    # one call [200, 300] ms.  T = 0 (attempt 1's send) to 300
    no_end = call("n", "a", 1, 0, None, status="http_error", out=0)
    never = dataclasses.replace(call("n", "a", 2, 0, None, status="http_error", out=0), sent_ns=None)
    s = task_summary(table([no_end, never, call("n", "a", 3, 200, 300, check=True)]))
    assert (s["completed_tasks"], s["task_attempts"]) == (1, 3)
    assert s["mean_task_time_ms"] == pytest.approx(300.0, rel=EXACT)
    assert s["mean_task_engine_share"] == pytest.approx(1 / 3, rel=EXACT)
    assert s["mean_critical_path_engine_ms"] == pytest.approx(100.0, rel=EXACT)


def test_a_good_task_call_with_no_output_token_counts_zero_tokens():
    rows = [call("z", "a", 1, 0, 100, calls=2, out=0), call("z", "b", 1, 100, 200, ["a"], 2, check=True, out=7)]
    assert task_summary(table(rows))["good_task_output_tokens"] == 7  # 0 + 7


def test_a_fan_out_with_a_branch_never_sent_is_cut_not_completed():
    # a -> (b, c); c was due after the drain's end: b, the only sink present, passed its check, but the
    # attempt has 2 of its 3 calls -> not completed, censored
    rows = [call("f", "a", 1, 0, 100, calls=3), call("f", "b", 1, 100, 200, ["a"], 3, check=True)]
    s = task_summary(table(rows))
    assert (s["num_tasks"], s["completed_tasks"], s["censored_tasks"]) == (1, 0, 1)


def test_a_task_of_zero_time_is_left_out_of_the_engine_share():
    # a completed task whose one call was sent and ended in the same nanosecond: T = 0, no share
    s = task_summary(table(fan_out_join() + [call("z", "a", 1, 0, 0, check=True)]))
    assert s["completed_tasks"] == 2
    assert s["mean_task_engine_share"] == pytest.approx(370 / 400, rel=EXACT)  # t1's only, not NaN


def test_a_sink_that_failed_after_its_check_passed_did_not_complete():
    # loadgen.dispatch judges a sink's check on its final record whatever its status: a stream that
    # broke (http_error) or timed out after the text the check wanted has check_ok true, yet the call
    # failed: neither task completed, and with a failed row neither was cut (statuses below and
    # above "ok", so no ordering of the status stands in for "not ok")
    rows = [call("h", "a", 1, 0, 100, status="http_error", check=True),
            call("to", "a", 1, 0, 100, status="timeout", check=True)]
    s = task_summary(table(rows))
    assert (s["num_tasks"], s["completed_tasks"], s["censored_tasks"]) == (2, 0, 0)
    assert s["task_completion_rate"] == 0.0


# the second run, every sampled mutant (docs/measured/mutation.md): six more survivors
def test_attempts_per_completed_task_divides_by_the_completed_tasks():
    # t3 completed in 2 attempts, t7 in 1, t4 failed twice: 5 attempts over 2 completed tasks = 2.5
    rows = [call("t3", "a", 1, 0, 100, check=False), call("t3", "a", 2, 200, 300, check=True),
            call("t7", "a", 1, 0, 100, check=True),
            call("t4", "a", 1, 0, 100, check=False), call("t4", "a", 2, 200, 300, check=False)]
    s = task_summary(table(rows))
    assert (s["completed_tasks"], s["task_attempts"]) == (2, 5)
    assert s["attempts_per_completed_task"] == 2.5


def test_a_task_of_300_calls_is_judged_by_its_row_count_not_by_identity():
    # 300 calls, each a root and a sink, [0, 100] ms.  "all": every check passed -> completed;
    # "unchecked": every row ok and present but no sink has a check -> neither completed nor cut.
    # Past 256 CPython makes a new int for each count, so `len(calls) is not task_calls` would read
    # every whole attempt as short
    def task(name, check):
        return [call(name, f"n{i}", 1, 0, 100, calls=300, check=check) for i in range(300)]

    s = task_summary(table(task("all", True) + task("unchecked", None)))
    assert (s["num_tasks"], s["completed_tasks"], s["censored_tasks"]) == (2, 1, 0)
    assert s["task_completion_rate"] == 0.5  # 1 / (2 - 0)
    assert s["mean_task_time_ms"] == pytest.approx(100.0, rel=EXACT)
    assert s["good_task_output_tokens"] == 3000  # 300 calls x 10


def test_a_completed_task_whose_rows_carry_no_send_has_no_time():
    # a malformed file (loadgen sends every ok call): "m"'s one call passed with no sent_ns, so it
    # completed but has no span: T NaN, left out of the task time and the engine share, and its
    # critical path is 0 (no call on the engine).  t1 (fan_out_join): T 400, engine 370, path 340
    m = dataclasses.replace(call("m", "a", 1, 0, 100, check=True), sent_ns=None)
    s = task_summary(table(fan_out_join() + [m]))
    assert (s["num_tasks"], s["completed_tasks"]) == (2, 2)
    assert s["n_task_time"] == 1 and s["mean_task_time_ms"] == pytest.approx(400.0, rel=EXACT)
    assert s["mean_task_engine_share"] == pytest.approx(370 / 400, rel=EXACT)  # t1's only, not NaN
    assert s["mean_critical_path_engine_ms"] == pytest.approx(170.0, rel=EXACT)  # (340 + 0) / 2
    assert s["good_task_output_tokens"] == 50  # t1's 4 x 10 + m's 10
