"""The autoscaling policy: replicas wanted per signal, immediate scale-up, scale-down held by
the stabilisation window, the arrival window's rate, bad settings named."""

import pytest

from conf.schema import Autoscale
from engines.autoscale_policy import ArrivalWindow, Autoscaler, ScalingPolicy


def test_wanted_replicas_by_utilisation_and_queue():
    p = ScalingPolicy(Autoscale(capacity_rps=4.0, target=0.5, max_replicas=10))
    assert p.wanted(0.0) == 1                 # min_replicas
    assert p.wanted(2.0) == 1                 # exactly one replica's 50 %
    assert p.wanted(2.01) == 2
    assert p.wanted(100.0) == 10              # max_replicas
    q = ScalingPolicy(Autoscale(signal="queue", target=8, max_replicas=10))
    assert q.wanted(8) == 1 and q.wanted(9) == 2 and q.wanted(33) == 5


def test_scale_up_at_once_and_down_after_the_stabilisation_window():
    a = Autoscaler(ScalingPolicy(Autoscale(capacity_rps=1.0, target=1.0, scale_down_delay_s=30, max_replicas=5)))
    assert a.decide(0, 3.5, 1) == 4           # up at once, straight to what is wanted
    assert a.decide(10, 0.5, 4) == 4          # asked for 4 within the last 30 s
    assert a.decide(35, 0.5, 4) == 1          # the window now holds only the low asks
    assert [(d["from"], d["to"]) for d in a.decisions] == [(1, 4), (4, 1)]


def test_a_dip_shorter_than_the_window_stops_nothing():
    a = Autoscaler(ScalingPolicy(Autoscale(capacity_rps=1.0, target=1.0, scale_down_delay_s=20)))
    n = 2
    for t, rate in [(0, 2), (5, 0.5), (10, 0.5), (15, 2), (20, 0.5), (25, 0.5), (30, 2)]:
        n = a.decide(t, rate, n)
        assert n == 2


def test_arrival_window_rate():
    w = ArrivalWindow(10.0)
    for t in (1, 2, 3, 4):
        w.add(t)
    assert w.rate(5.0) == pytest.approx(4 / 5)    # the window is not full yet: over 5 s
    assert w.rate(12.5) == pytest.approx(2 / 10)  # 3 and 4 remain in (2.5, 12.5]


@pytest.mark.parametrize("kw, key", [
    ({"signal": "load"}, "signal"),
    ({"capacity_rps": None}, "capacity_rps"),
    ({"capacity_rps": 1.0, "min_replicas": 3, "max_replicas": 2}, "min_replicas"),
    ({"capacity_rps": 1.0, "target": 0}, "target"),
])
def test_bad_policy_names_the_key(kw, key):
    with pytest.raises(ValueError, match=key):
        ScalingPolicy(Autoscale(**kw))
