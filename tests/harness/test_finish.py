"""The finishing step every protocol's run ends with (harness/finish.py), on a recording
stand-in for the MLflow logger."""

from __future__ import annotations

from types import SimpleNamespace

from harness.finish import finish_run


class RecordingLogger:
    def __init__(self, failed: str | None = None):
        self.calls: list[tuple] = []
        self.failed = failed

    def log_parent_metrics(self, metrics):
        self.calls.append(("metrics", dict(metrics)))

    def log_parent_artifact(self, path):
        self.calls.append(("artifact", path.name))

    def end_parent(self, status):
        self.calls.append(("end", status))

    def set_parent_tags(self, tags):
        self.calls.append(("tags", dict(tags)))


def _cfg(report: bool):
    return SimpleNamespace(report=SimpleNamespace(enabled=report))


def test_the_record_then_the_report_are_logged_and_the_parent_run_ends(tmp_path, capsys):
    (tmp_path / "experiment.json").write_text("{}")
    (tmp_path / "comparison.json").write_text("{}")
    log = RecordingLogger()

    def report():
        (tmp_path / "report.html").write_text("<html>")
        return tmp_path / "report.html"

    out = finish_run(_cfg(True), tmp_path, log, metrics={"ttft_p50": 0.1},
                     artifacts=("experiment.json", "comparison.json", "ablation.json"), report=report, end="FINISHED")
    assert out == tmp_path
    # a record file that was not written (ablation.json) is not logged; the report is, after the record
    assert log.calls == [("metrics", {"ttft_p50": 0.1}), ("artifact", "experiment.json"),
                         ("artifact", "comparison.json"), ("artifact", "report.html"), ("end", "FINISHED")]
    assert capsys.readouterr().out.splitlines()[-1] == f"results: {tmp_path}"


def test_no_report_when_disabled_no_end_when_already_ended_and_the_mlflow_note(tmp_path, capsys):
    log = RecordingLogger(failed="connection refused")
    drawn = []
    finish_run(_cfg(False), tmp_path, log, metrics={}, artifacts=("experiment.json",),
               report=lambda: drawn.append(1))
    assert drawn == [] and log.calls == []
    printed = capsys.readouterr().out
    assert f"MLflow: not logged (connection refused); once it is back: tokenfactory mlflow-sync {tmp_path}" in printed


def test_without_mlflow_the_report_is_drawn_and_the_folder_printed(tmp_path, capsys):
    drawn = []
    finish_run(_cfg(True), tmp_path, None, metrics={"x": 1.0}, artifacts=("experiment.json",),
               report=lambda: drawn.append(1), end="FINISHED")
    assert drawn == [1]
    assert capsys.readouterr().out == f"results: {tmp_path}\n"


def test_the_answer_is_the_parent_runs_description_and_the_last_lines(tmp_path, capsys):
    log = RecordingLogger()
    record = {"answer": {"protocol": "sweep", "lines": ["the highest load that met the SLO is rate=4", "knee at 8"]},
              "warnings": [{"kind": "still_filling", "rank": "changes the answer",
                            "text": "1 of 3 runs still filling"}]}
    finish_run(_cfg(False), tmp_path, log, metrics={"x": 1.0}, end="FINISHED", answer=record)
    assert log.calls[1] == ("tags", {
        "tokenfactory.answer": "the highest load that met the SLO is rate=4\nknee at 8",
        "mlflow.note.content": "the highest load that met the SLO is rate=4\nknee at 8\nwarning: 1 of 3 runs still "
                               "filling"})
    assert capsys.readouterr().out.splitlines() == [
        f"results: {tmp_path}", "warnings, by what they change:", "  [changes the answer] 1 of 3 runs still filling",
        "answer (sweep):", "  the highest load that met the SLO is rate=4", "  knee at 8"]
