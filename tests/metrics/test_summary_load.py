"""The load a run achieved and the client's own part in it, from the request rows: the send rate
and the mean number in flight, the schedule lag (send after the later of schedule and slot) with
its client-limited flag, the wait for a max_concurrency slot, and the sends that opened a
connection; and the client settings a summary without them (an import) takes from the config."""

from __future__ import annotations

import math

import pytest

from conf.schema import Client
from metrics.slo import SLO
from metrics.summary import summarize
from tests.telemetry_fixtures import S, request_table

MS = 1_000_000


def summary(rows, **kw) -> dict:
    return summarize(request_table(rows), SLO(), 0, 60 * S, **kw)


def test_send_rate_counts_the_gaps_between_the_first_and_the_last_send():
    # sent at 0, 0.5, 1.5 and 2 s (listed out of order): 3 gaps over 2 s
    rows = [{"sent": t, "done": t + d} for t, d in ((1.5, 1.0), (0.0, 1.0), (2.0, 2.0), (0.5, 1.0))]
    s = summary(rows)
    assert s["achieved_send_rate_rps"] == 1.5
    # Little's law: 1 + 1 + 2 + 1 s in flight over the 4 s from the first send to the last done
    # (every figure a whole number of ns: exact)
    assert s["duration_s"] == 4.0 and s["mean_in_flight"] == 1.25


def test_a_run_shorter_than_a_second_has_its_rates():
    # sent at 0 and 0.2 s, done at 0.5 and 0.6 s: 0.9 s in flight over 0.6 s
    s = summary([{"sent": 0.0, "done": 0.5}, {"sent": 0.2, "done": 0.6}])
    assert s["achieved_send_rate_rps"] == pytest.approx(5.0)
    assert s["mean_in_flight"] == pytest.approx(1.5) and s["request_throughput"] == pytest.approx(2 / 0.6)


def test_send_rate_needs_two_sends_apart():
    assert math.isnan(summary([{"sent": 1.0}])["achieved_send_rate_rps"])
    assert math.isnan(summary([{"sent": 1.0}, {"sent": 1.0}])["achieved_send_rate_rps"])
    # a request never sent is no send: two sends 3 s apart, one gap
    rows = [{"sent": 1.0}, {"sent": 4.0}, {"sent": 2.0, "status": "cancelled", "sent_ns": None, "done_ns": None}]
    assert summary(rows)["achieved_send_rate_rps"] == pytest.approx(1 / 3)


def queued_run() -> list[dict]:
    """Five sends (ms): scheduled, slot, sent.  The slot waits are 0, 200, 400, 0 (a slot never
    recorded: no wait) and 0.5; the lags after the later of schedule and slot 2, 4, 12, 1 and 7."""
    times = ((0, 0, 2), (100, 300, 304), (200, 600, 612), (300, None, 301), (400, 400.5, 407.5))
    ns = lambda ms: None if ms is None else round(ms * MS)  # noqa: E731
    return [{"sent": sent / 1e3, "done": sent / 1e3 + 1.0, "scheduled_ns": ns(sched), "slot_ns": ns(slot),
             "sent_ns": ns(sent)} for sched, slot, sent in times]


def test_schedule_lag_leaves_out_the_wait_for_a_slot():
    s = summary(queued_run(), max_schedule_lag_ms=10.0)
    # lags 1, 2, 4, 7, 12: p50 the middle one; p99 at rank 3.96: 12 - 0.04 x 5
    assert s["schedule_lag_p50_ms"] == pytest.approx(4.0)
    assert s["schedule_lag_p99_ms"] == pytest.approx(11.8)
    assert s["schedule_lag_max_ms"] == pytest.approx(12.0)
    assert s["client_limited"] is True


def test_client_limited_only_above_the_limit():
    assert summary(queued_run(), max_schedule_lag_ms=20.0)["client_limited"] is False
    assert summary(queued_run(), max_schedule_lag_ms=11.7)["client_limited"] is True


def test_without_client_settings_given_the_client_config_defaults_apply():
    client = Client()
    assert (client.max_schedule_lag_ms, client.token_mismatch_tolerance, client.token_mismatch_threshold) == (
        10.0, 1, 0.01)
    s = summary([{"sent": 1.0}])
    assert s["token_mismatch_tolerance"] == 1 and s["token_mismatch_threshold"] == 0.01

    def lagged(ms: float) -> list[dict]:     # every send ``ms`` after its schedule (and slot)
        ready = [int((1.0 + i) * S - ms * MS) for i in range(3)]
        return [{"sent": 1.0 + i, "scheduled_ns": t, "slot_ns": t} for i, t in enumerate(ready)]

    assert summary(lagged(9.5))["schedule_lag_p99_ms"] == pytest.approx(9.5)
    assert summary(lagged(9.5))["client_limited"] is False
    assert summary(lagged(10.0))["schedule_lag_p99_ms"] == 10.0
    assert summary(lagged(10.0))["client_limited"] is False          # at the limit: not above it
    assert summary(lagged(10.5))["client_limited"] is True


def test_queue_wait_is_the_slot_after_the_schedule():
    s = summary(queued_run())
    # waits 0, 0, 0.5, 200, 400: three queued (half a millisecond is queueing too); p50 the middle
    # one, p99 at rank 3.96: 400 - 0.04 x 200
    assert s["num_queued"] == 3
    assert s["queue_wait_mean_ms"] == pytest.approx(600.5 / 5)
    assert s["queue_wait_p50_ms"] == pytest.approx(0.5)
    assert s["queue_wait_p99_ms"] == pytest.approx(392.0)
    assert s["queue_wait_max_ms"] == pytest.approx(400.0)


def test_a_file_without_slots_has_lag_from_the_schedule_and_no_queue():
    s = summarize(request_table(queued_run()).drop_columns(["slot_ns"]), SLO(), 0, 60 * S)
    # lags 2, 204, 412, 1, 7.5 (sent - scheduled); waits all 0
    assert s["schedule_lag_max_ms"] == pytest.approx(412.0)
    assert s["schedule_lag_p50_ms"] == pytest.approx(7.5)
    assert s["num_queued"] == 0 and s["queue_wait_max_ms"] == 0.0


def test_connects_count_the_sends_that_opened_one():
    rows = [{"sent": float(i), "connect_s": c} for i, c in enumerate([None, 0.004, 0.010, None, 0.001])]
    s = summary(rows)
    assert s["num_connects"] == 3
    assert s["connect_p50_ms"] == pytest.approx(4.0) and s["connect_max_ms"] == pytest.approx(10.0)
    none = summary([{"sent": 1.0}])
    assert none["num_connects"] == 0 and math.isnan(none["connect_p50_ms"]) and math.isnan(none["connect_max_ms"])
