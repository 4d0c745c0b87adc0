"""The plan's traffic: a trace as it is, or tiled over a window with its rate following a curve."""

import json

import numpy as np
import pytest

from conf.compose import compose_config
from harness.errors import UserError
from protocols.plan.traffic import build_traffic, stretch


def test_stretch_follows_the_curve_slice_by_slice():
    rng = np.random.default_rng(0)
    arrival = np.sort(rng.uniform(0, 600, 3000))          # 5 req/s
    n = np.arange(arrival.size)
    t = stretch(arrival, n, n, [1, 2, 4, 1], 4000.0, mean_rps=4.0)
    starts, rates = t.rate_profile(1000.0)
    # mean 4 over slices of relative rate 1:2:4:1 -> 2, 4, 8, 2 req/s
    assert rates == pytest.approx([2, 4, 8, 2], rel=0.05)
    assert np.all(np.diff(t.arrival_s) >= 0) and t.arrival_s.max() < 4000
    # the trace's rows are reused in order: lengths come from the trace
    assert set(np.unique(t.prompt_tokens)) <= set(n)
    peak = stretch(arrival, n, n, [1, 2, 4, 1], 4000.0, peak_rps=6.0)
    assert peak.rate_profile(1000.0)[1].max() == pytest.approx(6.0, rel=0.05)


def test_a_zero_slice_gets_no_request():
    arrival = np.linspace(0, 100, 501)
    t = stretch(arrival, arrival, arrival, [1, 0, 1], 300.0)
    assert not ((t.arrival_s >= 100) & (t.arrival_s < 200)).any()


def _trace(path, rows):
    path.write_text("\n".join(json.dumps({"timestamp": int(ts * 1000), "input_length": 100, "output_length": 10,
                                          "hash_ids": [1]}) for ts in rows) + "\n")
    return str(path)


def test_build_traffic_from_the_composed_workload(tmp_path):
    trace = _trace(tmp_path / "t.jsonl", [0, 1, 2, 3, 10])
    cfg = compose_config(["protocol=plan", "workload=mooncake", f"workload.path={trace}",
                          "workload.max_output_tokens=4"])
    t = build_traffic(cfg)
    assert list(t.arrival_s) == [0, 1, 2, 3, 10] and t.duration_s == 10 and set(t.output_tokens) == {4}
    day = build_traffic(compose_config(["protocol=plan", "workload=mooncake", f"workload.path={trace}",
                                        "protocol.traffic.diurnal=true"]))
    # the trace's own mean rate (4 gaps over 10 s) over the whole day
    assert day.duration_s == 86400 and len(day.curve) == 24 and len(day) == pytest.approx(0.4 * 86400, rel=0.05)


@pytest.mark.parametrize("extra, needle", [
    (["protocol.traffic.mean_rps=3"], "scale a rate curve"),
    (["protocol.traffic.rate_curve=[1,2]"], "duration_s"),
    (["protocol.traffic.rate_curve=[0,0]", "protocol.traffic.duration_s=10"], "every value is 0"),
    (["protocol.traffic.diurnal=true", "protocol.traffic.mean_rps=1", "protocol.traffic.peak_rps=2"], "not both"),
])
def test_bad_traffic_is_named(tmp_path, extra, needle):
    trace = _trace(tmp_path / "t.jsonl", [0, 1, 2, 3])
    with pytest.raises(UserError, match=needle):
        build_traffic(compose_config(["protocol=plan", "workload=mooncake", f"workload.path={trace}", *extra]))


def test_a_synthetic_workload_has_no_times():
    with pytest.raises(UserError, match="needs a trace"):
        build_traffic(compose_config(["protocol=plan"]))
