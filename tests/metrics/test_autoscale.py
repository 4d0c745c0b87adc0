"""metrics/autoscale.py: replica-seconds, mean and max replicas, and scale counts over a window
of a serving log, worked by hand."""

import pytest

from metrics.autoscale import replica_figures, serving_at

S = 1_000_000_000


def test_a_window_over_a_scale_up_and_down():
    # 1 replica from 0 s, 2 from 10 s, 1 again from 40 s; the window is 5 s .. 50 s
    log = [(0, 1), (10 * S, 2), (40 * S, 1)]
    f = replica_figures(log, 5 * S, 50 * S)
    assert f["replica_seconds_serving"] == pytest.approx(5 * 1 + 30 * 2 + 10 * 1)
    assert f["replicas_mean"] == pytest.approx(75 / 45)
    assert f["replicas_max"] == 2 and f["autoscale_scale_ups"] == 1 and f["autoscale_scale_downs"] == 1


def test_changes_outside_the_window_are_not_counted_but_set_its_start():
    log = [(0, 1), (10 * S, 2), (40 * S, 1)]
    f = replica_figures(log, 20 * S, 30 * S)
    assert f["replica_seconds_serving"] == pytest.approx(20.0) and f["replicas_max"] == 2
    assert f["autoscale_scale_ups"] == f["autoscale_scale_downs"] == 0


def test_before_the_log_begins_nothing_serves():
    assert serving_at([(10 * S, 2)], 5 * S) == 0
    f = replica_figures([(10 * S, 2)], 0, 20 * S)
    assert f["replica_seconds_serving"] == pytest.approx(20.0)
    assert f["autoscale_scale_ups"] == 2  # counted by how much the count rose


def test_a_fixed_deployment_is_replicas_times_window():
    f = replica_figures([(0, 3)], 2 * S, 12 * S)
    assert f["replica_seconds_serving"] == pytest.approx(30.0) and f["replicas_mean"] == pytest.approx(3.0)
