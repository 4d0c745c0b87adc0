"""A point's console line and its planned / sent / unsent counts (harness.point)."""

from __future__ import annotations

from conf.compose import compose_config
from harness.point import PointInputs, planned_keys, point_line
from loadgen.dispatch import LoadSpec


def test_a_stopped_point_counts_what_it_planned_and_never_sent():
    keys = planned_keys(LoadSpec.of(kind="poisson", rate=8.0, requests_to_send=400), {"sent": 60})
    assert keys == {"num_requests_planned": 400, "num_requests_sent": 60, "num_requests_unsent": 340}
    # bound by duration: nothing planned by count, so nothing counted as unsent
    keys = planned_keys(LoadSpec.of(kind="poisson", rate=8.0, duration_s=30.0), {"sent": 60})
    assert keys["num_requests_planned"] is None and keys["num_requests_unsent"] is None


def test_the_console_says_a_stop_with_the_requests_planned_and_never_sent():
    m = {"completed": 60, "num_requests": 60, "num_cancelled": 0, "saturated": True, "saturated_after_s": 8.04,
         "num_requests_planned": 400, "num_requests_sent": 60, "num_requests_unsent": 340}
    assert point_line("poisson rate=8", m) == (
        "  poisson rate=8: 60/60 ok; STOPPED as over-saturated after 8.0 s: 60 of 400 planned sent, 340 never "
        "sent (saturation_reason in summary.json), ")


def test_the_console_says_a_point_cancelled_whole():
    m = {"completed": 0, "num_requests": 15, "num_cancelled": 15, "saturated": False}
    assert point_line("poisson rate=1", m) == "  poisson rate=1: 0/15 ok, 15 cancelled (all), "
    m = {"completed": 12, "num_requests": 15, "num_cancelled": 3, "saturated": False}
    assert point_line("poisson rate=1", m) == "  poisson rate=1: 12/15 ok, 3 cancelled, "
    assert point_line("x", {"completed": 5, "num_requests": 5, "num_cancelled": 0}) == "  x: 5/5 ok, "


def test_a_point_reads_its_config_once_typed():
    cfg = compose_config(["client.prepare_max_mb=1.5", "client.workers=3", "scenario.kill_at_s=4",
                          "engine.cache_state=cold", "engine.on_failure=restart", "experiment=x"])
    inputs = PointInputs.from_config(cfg)
    assert inputs.prepare_max_bytes == 1572864 and inputs.client.workers == 3 and inputs.client.backend == "local"
    assert inputs.scenario.kill_at_s == 4.0 and inputs.scenario.kill_signal == "SIGKILL"
    assert inputs.scenario.recovery_window == 20
    # the groups are conf/schema.py's own classes, typed (not look-alikes): client.ray goes to the Ray workers as it is
    assert type(inputs.client).__name__ == "Client" and type(inputs.client.ray).__name__ == "ClientRay"
    assert (inputs.cache_state, inputs.on_failure, inputs.experiment, inputs.protocol) == (
        "cold", "restart", "x", "sweep")
    assert inputs.min_attainment is None and inputs.track is None


def test_the_console_says_an_emulated_point():
    m = {"completed": 20, "num_requests": 20, "num_cancelled": 0, "emulated": True,
         "timing_source": "mocker-polynomial"}
    assert point_line("poisson rate=2", m) == "  poisson rate=2 [EMULATED: mocker-polynomial]: 20/20 ok, "
    assert point_line("x", {**m, "emulated": False}) == "  x: 20/20 ok, "


def test_an_autoscaled_run_keeps_sending_through_an_overload_unless_told():
    """The over-saturation guard stops a probe past capacity; an autoscaled replay overloads its
    replicas while the next one starts, which is what it measures (the plan's held-out replay
    was stopped at 688 of 899 s, its last 105 requests never sent): off there unless given."""
    from harness.point import saturation_guard

    plain, scaled = compose_config([]), compose_config(["deployment=replicas", "deployment.autoscale.enabled=true"])
    assert PointInputs.from_config(plain).autoscaled is False and PointInputs.from_config(scaled).autoscaled is True
    assert saturation_guard({"kind": "poisson", "rate": 4.0}, autoscaled=False) is True
    assert saturation_guard({"kind": "trace"}, autoscaled=True) is False
    assert saturation_guard({"kind": "trace", "stop_when_saturated": True}, autoscaled=True) is True
    assert saturation_guard({"kind": "poisson", "stop_when_saturated": False}, autoscaled=False) is False
    assert LoadSpec.from_load({"kind": "trace", "stop_when_saturated": None}).stop_when_saturated is None

