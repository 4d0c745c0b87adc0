"""Track is a protocol (issue 32, item 3): ``protocol=track`` is found through the registry,
its options are typed config (``TrackProtocol``), and ``tokenfactory track NAME --flags`` is
the same command as ``tokenfactory run protocol=track protocol.track=NAME ...`` (histories held
in memory: ``load_history`` replaced, as in test_gate.py)."""

from __future__ import annotations

import json

import pytest

import protocols.track.run as track_run
from conf.compose import compose_config
from conf.schema import TrackProtocol, typed
from harness.commands import run as run_command
from harness.commands.track import main, overrides
from protocols.registry import PROTOCOLS, get_protocol
from tests.protocols.track.test_gate import entry, rows


def test_protocol_track_is_found_through_the_registry():
    p = get_protocol("track")
    assert p.name == "track" and PROTOCOLS["track"] is p
    assert p.design.name == "track" and not p.design.in_blocks
    cfg = compose_config(["protocol=track", "protocol.track=nightly"])
    assert str(cfg.protocol.name) == "track"
    assert typed(cfg.protocol, TrackProtocol) == TrackProtocol(track="nightly")


def test_the_flags_and_the_overrides_give_the_same_typed_config():
    flags = ["nightly", "--gate", "--baseline", "window:3", "--keep-rejected", "--at", "vllm 0.2",
             "--metric", "p99_ttft_ms", "--metric", "error_rate", "--margin", "0.05", "--confidence", "0.9",
             "--adjust", "none", "--allow", "slo, workload", "--tracking-uri", "sqlite:///t/m.db", "--out", "t/o"]
    hydra = ["protocol=track", "protocol.track=nightly", "protocol.gate=true", "protocol.baseline=window:3",
             "protocol.keep_rejected=true", "protocol.at=vllm 0.2", "protocol.metrics=[p99_ttft_ms,error_rate]",
             "protocol.margin=0.05", "protocol.confidence=0.9", "protocol.adjust=none",
             "protocol.allow=[slo,workload]", "mlflow.tracking_uri=sqlite:///t/m.db", "output_dir=t/o"]
    a, b = compose_config(overrides(flags)), compose_config(hydra)
    ta, tb = typed(a.protocol, TrackProtocol), typed(b.protocol, TrackProtocol)
    assert ta == tb
    assert ta == TrackProtocol(track="nightly", gate=True, baseline="window:3", keep_rejected=True, at="vllm 0.2",
                               metrics=["p99_ttft_ms", "error_rate"], margin=0.05, confidence=0.9, adjust="none",
                               allow=["slo", "workload"])
    assert (a.mlflow.tracking_uri, a.output_dir) == (b.mlflow.tracking_uri, b.output_dir) == ("sqlite:///t/m.db",
                                                                                             "t/o")
    # no flag: the schema's defaults, and a name Hydra would otherwise parse read back as typed
    odd = "it's ${x}, [a]\\"
    assert typed(compose_config(overrides([odd])).protocol, TrackProtocol) == TrackProtocol(track=odd)


def regressed(monkeypatch):
    entries = [entry(0, rows(seed=0)), entry(1, rows(seed=1, error_rate=[0.30, 0.35, 0.40, 0.35]))]
    monkeypatch.setattr(track_run, "load_history", lambda *a, **k: entries)


def test_run_protocol_track_gates_with_the_same_exit_code_and_record(monkeypatch, tmp_path, capsys):
    regressed(monkeypatch)
    with pytest.raises(SystemExit) as e:
        run_command.main(["protocol=track", "protocol.track=nightly", "protocol.gate=true",
                          f"output_dir={tmp_path / 'run'}", f"hydra.run.dir={tmp_path / 'hydra'}"])
    assert e.value.code == 1
    by_run = json.loads((tmp_path / "run" / "track.json").read_text())
    assert main(["nightly", "--gate", "--out", str(tmp_path / "cmd")]) == 1
    by_cmd = json.loads((tmp_path / "cmd" / "track.json").read_text())
    assert [f["metric"] for f in by_run["comparison"]["regressions"]] == ["error_rate"]
    assert by_run["comparison"]["findings"] == by_cmd["comparison"]["findings"]
    assert by_run["options"] == by_cmd["options"] and by_run["options"]["gate"] is True
    assert by_run["gate_message"] == by_cmd["gate_message"] != ""
    # without the gate: the same record, exit 0
    assert main(["nightly", "--out", str(tmp_path / "nogate")]) == 0


def test_bad_options_are_errors_naming_the_key_exit_2(monkeypatch, tmp_path, capsys):
    regressed(monkeypatch)
    assert main(["nightly", "--margin", "1.5", "--out", str(tmp_path / "o")]) == 2
    assert "protocol.margin=1.5: must be < 1" in capsys.readouterr().err
    assert main(["nightly", "--confidence", "1", "--out", str(tmp_path / "o")]) == 2
    assert "protocol.confidence=1.0: must be < 1" in capsys.readouterr().err
    with pytest.raises(SystemExit) as e:  # argparse: a choice it does not know
        main(["nightly", "--adjust", "holm"])
    assert e.value.code == 2
    with pytest.raises(SystemExit) as e:
        run_command.main(["protocol=track", f"hydra.run.dir={tmp_path / 'hydra'}"])
    assert e.value.code == 2
    assert "protocol.track: which tracked benchmark?" in capsys.readouterr().err
