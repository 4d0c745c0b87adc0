"""metrics/autoscale_bill.py: replica-seconds (starting, serving, draining, paid), mean and max
replicas, and scale counts over a window of a serving log, worked by hand."""

import pytest

from metrics.autoscale_bill import replica_figures, serving_at

S = 1_000_000_000


def test_a_window_over_a_scale_up_and_down():
    # 1 replica from 0 s, 2 from 10 s, 1 again from 40 s; the window is 5 s .. 50 s
    log = [(0, 1), (10 * S, 2), (40 * S, 1)]
    f = replica_figures(log, 5 * S, 50 * S)
    assert f["serving_replica_seconds"] == pytest.approx(5 * 1 + 30 * 2 + 10 * 1)
    assert f["replicas_mean"] == pytest.approx(75 / 45)
    assert f["replicas_max"] == 2 and f["autoscale_scale_ups"] == 1 and f["autoscale_scale_downs"] == 1


def test_changes_outside_the_window_are_not_counted_but_set_its_start():
    log = [(0, 1), (10 * S, 2), (40 * S, 1)]
    f = replica_figures(log, 20 * S, 30 * S)
    assert f["serving_replica_seconds"] == pytest.approx(20.0) and f["replicas_max"] == 2
    assert f["autoscale_scale_ups"] == f["autoscale_scale_downs"] == 0


def test_before_the_log_begins_nothing_serves():
    assert serving_at([(10 * S, 2)], 5 * S) == 0
    f = replica_figures([(10 * S, 2)], 0, 20 * S)
    assert f["serving_replica_seconds"] == pytest.approx(20.0)
    assert f["autoscale_scale_ups"] == 2  # counted by how much the count rose


def test_a_fixed_deployment_is_replicas_times_window():
    f = replica_figures([(0, 3)], 2 * S, 12 * S)
    assert f["serving_replica_seconds"] == pytest.approx(30.0) and f["replicas_mean"] == pytest.approx(3.0)


def test_the_bill_counts_cold_starts_serving_and_draining():
    # r0 serves all along; r1 and r2 asked for at 10 s and 20 s, each a 40 s cold start, each
    # serving 100 s (from 50 s and 60 s), each draining 5 s after it leaves; window 0 .. 300 s
    log = [(0, 1), (50 * S, 2), (60 * S, 3), (150 * S, 2), (160 * S, 1)]
    starting = [(10 * S, 50 * S), (20 * S, 60 * S)]
    draining = [(150 * S, 155 * S), (160 * S, 165 * S)]
    f = replica_figures(log, 0, 300 * S, starting, draining)
    assert f["starting_replica_seconds"] == pytest.approx(80.0)
    assert f["serving_replica_seconds"] == pytest.approx(300.0 + 100 + 100)
    assert f["draining_replica_seconds"] == pytest.approx(10.0)
    assert f["paid_replica_seconds"] == pytest.approx(590.0)
    assert f["replicas_mean"] == pytest.approx(590 / 300)
    # 3 paid on [20, 155): two starting or serving beside r0; at 150 s r1 leaves and drains
    assert f["replicas_max"] == 3
    assert f["autoscale_scale_ups"] == 2 and f["autoscale_scale_downs"] == 2


def test_a_failed_start_is_paid_until_it_failed_and_intervals_are_clipped_to_the_window():
    # a start asked for at 10 s failed at 47 s: 37 s paid, not to the window's end; a drain
    # from 95 s to 110 s counts its 5 s inside the window 0 .. 100 s
    f = replica_figures([(0, 1)], 0, 100 * S, [(10 * S, 47 * S)], [(95 * S, 110 * S)])
    assert f["starting_replica_seconds"] == pytest.approx(37.0)
    assert f["draining_replica_seconds"] == pytest.approx(5.0)
    assert f["paid_replica_seconds"] == pytest.approx(100.0 + 37 + 5)
    assert f["replicas_max"] == 2


def test_seconds_as_the_unit():
    f = replica_figures([(0.0, 2)], 0.0, 10.0, [(2.0, 4.0)], [], unit_s=1.0)
    assert f["paid_replica_seconds"] == pytest.approx(22.0) and f["replicas_max"] == 3
