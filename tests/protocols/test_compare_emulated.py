"""A comparison never sets an emulated config (engine=dynamo with mocker workers) beside a
measured one unasked: ``tokenfactory compare`` refuses without ``--allow-emulated``, and
``protocol=compare`` refuses before any engine starts without ``protocol.allow_emulated=true``."""

from __future__ import annotations

import json
import signal
import sys

import pyarrow as pa
import pyarrow.parquet as pq

from harness.commands.compare import main as compare_main
from tests.synthetic_experiment import write_experiment


def _emulated(exp):
    """Mark every run of ``exp`` as Dynamo's mocker would have written it."""
    t = pq.read_table(exp / "runs.parquet")
    n = t.num_rows
    t = t.append_column("emulated", pa.array([True] * n)).append_column(
        "timing_source", pa.array(["mocker-polynomial"] * n))
    pq.write_table(t, exp / "runs.parquet")


def test_compare_command_refuses_emulated_beside_measured_unless_allowed(tmp_path, capsys):
    real = write_experiment(tmp_path / "real", requests=20, rates=(5.0,), blocks=2)
    mock = write_experiment(tmp_path / "mock", requests=20, rates=(5.0,), blocks=2)
    _emulated(mock)
    out = tmp_path / "comparison.json"
    assert compare_main([str(real), str(mock), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "real/fast: measured" in err and "mock/fast: emulated (mocker-polynomial)" in err
    assert "--allow-emulated" in err and not out.exists()
    assert compare_main([str(real), str(mock), "--allow-emulated", "--out", str(out)]) == 0
    assert "EMULATED: mock/fast is emulated (mocker-polynomial); mock/slow is emulated" in capsys.readouterr().out
    doc = json.loads(out.read_text())
    assert doc["allow_emulated"] is True
    assert doc["kinds"] == {"real/fast": "measured", "real/slow": "measured",
                            "mock/fast": "emulated (mocker-polynomial)", "mock/slow": "emulated (mocker-polynomial)"}


def test_protocol_compare_refuses_before_any_engine_starts(tmp_path, tiny_model, monkeypatch, capfd):
    from harness.cli import main

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", list(sys.argv))  # the command sets it for Hydra
    sigterm = signal.getsignal(signal.SIGTERM)

    def run(*extra):
        try:
            return main(["run", "protocol=compare", f"engine.tokenizer={tiny_model}", "protocol.load_points=[1]",
                         'protocol.configs={mock: ["engine=dynamo"], real: ["engine=vllm"]}',
                         f"output_dir={tmp_path / 'out'}", "mlflow.enabled=false", *extra, "--dry-run"])
        except SystemExit as e:  # a user error ends the command with its code
            return e.code
        finally:
            signal.signal(signal.SIGTERM, sigterm)

    assert run() == 2
    out, err = capfd.readouterr()
    assert "mock: emulated (mocker-polynomial)" in out + err and "real: measured" in out + err
    assert "protocol.allow_emulated=true" in out + err
    assert run("protocol.allow_emulated=true") == 0
    assert "config mock: engine=dynamo" in capfd.readouterr().out
