"""A sweep's, comparison's or ablation's run on the run lifecycle (protocols/experiment.py on
harness/lifecycle.py): experiment.json's status and the MLflow parent run's when an engine session
is interrupted (Ctrl-C, SIGTERM) or fails, on a comparison whose sessions are stand-ins."""

from __future__ import annotations

import json

import pytest
from hydra import compose, initialize_config_module

from harness import lifecycle
from harness.commands.interrupts import Terminated
from protocols.experiment import Experiment
from tests.harness.test_finish import RecordingLogger
from tests.protocols.test_compare_protocol import _overrides


@pytest.mark.parametrize("stop, status, end", [(KeyboardInterrupt, "interrupted", "KILLED"),
                                               (Terminated, "interrupted", "KILLED"),
                                               (RuntimeError, "failed", "FAILED")])
def test_a_stopped_comparison_says_so_and_its_parent_run_ends_with_the_same_status(
        tmp_path, tiny_model, monkeypatch, capsys, stop, status, end):
    from protocols.registry import protocol_experiment

    out = tmp_path / "out"
    parent = RecordingLogger()
    monkeypatch.setattr(lifecycle, "start_parent", lambda cfg, where, **kw: parent)
    sessions = []

    def run_session(self, s, todo):
        sessions.append((s.block, s.config))
        if len(sessions) == 2:  # the second engine session of the first block
            raise stop()

    monkeypatch.setattr(Experiment, "run_session", run_session)
    overrides = _overrides("http://127.0.0.1:9", tiny_model, out)
    with initialize_config_module("conf", version_base="1.3"):
        exp = protocol_experiment(compose("config", overrides=overrides), overrides=overrides)
    with pytest.raises(stop):
        exp.run()
    assert len(sessions) == 2
    record = json.loads((out / "experiment.json").read_text())
    assert record["status"] == status and record["runs_planned"] == 6 and record["runs_finished"] == 0
    assert parent.calls == [("end", end)]          # no record logged: nothing finished
    assert not (out / "runs.parquet").exists() and not (out / "comparison.json").exists()
    hint = f"to resume, run the same command with output_dir={out}"
    assert (hint in capsys.readouterr().err) == (status == "interrupted")


@pytest.mark.parametrize("key", ["protocol.repeats", "protocol.max_repeats"])
def test_repeats_past_any_runnable_experiment_are_refused_naming_the_key(key):
    # 10**6 repeats planned a million runs and validated each (16 ms apiece): it never finished
    from conf.schema import ConfigError, validate

    proto = "protocol=sweep" if key == "protocol.repeats" else "protocol=compare"
    with initialize_config_module("conf", version_base="1.3"):
        cfg = compose("config", overrides=[proto, f"{key}=1000000"])
    with pytest.raises(ConfigError, match=rf"{key}=1000000: must be <= 1000"):
        validate(cfg)


def test_each_distinct_load_point_is_checked_once_whatever_the_repeats(monkeypatch):
    from loadgen.load_spec import LoadSpec
    from protocols import experiment

    checked = []
    real = LoadSpec.from_load
    monkeypatch.setattr(LoadSpec, "from_load", staticmethod(lambda load, *a, **k: checked.append(load) or
                                                            real(load, *a, **k)))
    with initialize_config_module("conf", version_base="1.3"):
        cfg = compose("config", overrides=["load=constant", "protocol.load_points=[2,4,8]", "protocol.repeats=200"])
    runs = experiment.check_config(cfg)
    assert len(runs) == 600 and sorted(c["rate"] for c in checked) == [2, 4, 8]
