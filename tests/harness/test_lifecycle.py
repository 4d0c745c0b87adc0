"""The run lifecycle every protocol plugs into (harness/lifecycle.py): the record's status and the
MLflow parent run's on finish, interrupt and failure, the ending logged and the answer printed last;
on stand-ins for a protocol's steps and the MLflow logger."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pyarrow.parquet as pq
import pytest

from harness import lifecycle
from harness.commands.interrupts import Terminated
from harness.lifecycle import Ending, Lifecycle, RunRecord, run_lifecycle
from tests.harness.test_finish import RecordingLogger

ANSWER = {"answer": {"protocol": "sweep", "lines": ["8 req/s met the SLO"]}, "warnings": []}


class Steps:
    def __init__(self, fail: BaseException | None = None, end: str | None = None):
        self.fail, self.end, self.calls = fail, end, []

    def run_steps(self, parent):
        self.calls.append(("run", parent is not None))
        if self.fail is not None:
            raise self.fail

    def record_as(self, status):
        self.calls.append(("record", status))
        return RunRecord({"status": status}, [{"config": "", "ttft_ms": 12.5}])

    def ending(self, status):
        self.calls.append(("ending", status))
        return Ending(metrics={"x": 1.0}, artifacts=("experiment.json",), answer=ANSWER, end=self.end)


@pytest.fixture
def parent(monkeypatch):
    log = RecordingLogger()
    monkeypatch.setattr(lifecycle, "start_parent", lambda cfg, out, **kw: log)
    return log


def _cfg():
    return SimpleNamespace(report=SimpleNamespace(enabled=False))


def _status(out):
    return json.loads((out / "experiment.json").read_text())["status"]


def test_a_finished_run_is_complete_its_parent_finished_and_the_answer_last(tmp_path, parent, capsys):
    steps = Steps()
    assert run_lifecycle(_cfg(), tmp_path, steps) == tmp_path
    assert steps.calls == [("record", "running"), ("run", True), ("record", "complete"), ("ending", "complete")]
    assert _status(tmp_path) == "complete"
    assert pq.read_table(tmp_path / "runs.parquet").to_pylist() == [{"config": "", "ttft_ms": 12.5}]
    assert parent.calls[0] == ("metrics", {"x": 1.0}) and parent.calls[-1] == ("end", "FINISHED")
    assert capsys.readouterr().out.splitlines()[-3:] == [f"results: {tmp_path}", "answer (sweep):",
                                                          "  8 req/s met the SLO"]


@pytest.mark.parametrize("signal, status, end", [(KeyboardInterrupt(), "interrupted", "KILLED"),
                                                 (Terminated(), "interrupted", "KILLED"),
                                                 (RuntimeError("engine died"), "failed", "FAILED")])
def test_a_stopped_run_says_so_and_its_parent_ends_with_the_same_status(tmp_path, parent, capsys, signal, status,
                                                                        end):
    steps = Steps(fail=signal)
    with pytest.raises(type(signal)):
        run_lifecycle(_cfg(), tmp_path, steps)
    assert steps.calls == [("record", "running"), ("run", True), ("record", status)]  # no ending
    assert _status(tmp_path) == status and parent.calls == [("end", end)]
    err = capsys.readouterr().err
    assert (f"to resume, run the same command with output_dir={tmp_path}" in err) == (status == "interrupted")


def test_a_stopped_run_is_finished_too_where_the_protocol_asks(tmp_path, parent, capsys):
    steps = Steps(fail=KeyboardInterrupt())
    with pytest.raises(KeyboardInterrupt):
        run_lifecycle(_cfg(), tmp_path, steps, options=Lifecycle(finish_stopped=True, resume_hint=None))
    assert steps.calls[-1] == ("ending", "interrupted") and parent.calls[-1] == ("end", "KILLED")
    out, err = capsys.readouterr()
    assert out.splitlines()[-1] == "  8 req/s met the SLO" and "to resume" not in err


def test_the_protocol_names_its_parents_end_and_nothing_pending_starts_no_parent(tmp_path, parent):
    run_lifecycle(_cfg(), tmp_path, Steps(end="FAILED"))
    assert parent.calls[-1] == ("end", "FAILED")
    parent.calls.clear()
    steps = Steps()
    run_lifecycle(_cfg(), tmp_path, steps, pending=False)
    assert steps.calls == [("record", "complete"), ("ending", "complete")] and parent.calls == []


def test_without_a_parent_run_the_console_ends_on_the_answer_alone(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(lifecycle, "start_parent", lambda *a, **kw: pytest.fail("no parent run"))
    run_lifecycle(_cfg(), tmp_path, Steps(), options=Lifecycle(parent=None))
    assert capsys.readouterr().out.splitlines() == ["answer (sweep):", "  8 req/s met the SLO"]


def test_a_failing_record_after_an_interrupt_leaves_the_interrupt_to_tell(tmp_path, parent):
    steps = Steps(fail=KeyboardInterrupt())
    steps.record_as = lambda status: (_ for _ in ()).throw(OSError(28, "No space left")) if status != "running" \
        else RunRecord({"status": status})
    with pytest.raises(KeyboardInterrupt):
        run_lifecycle(_cfg(), tmp_path, steps)
    assert _status(tmp_path) == "running" and parent.calls == [("end", "KILLED")]
