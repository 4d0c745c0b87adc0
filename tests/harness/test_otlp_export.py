"""export.otlp_endpoint: each run's summary as OpenTelemetry gauges, checked against an OTLP/HTTP
receiver started by the test (tests/otlp_receiver.py decodes what arrives with opentelemetry-proto),
and an endpoint that is down, refuses or is too slow costs one warning line, never the run."""

from __future__ import annotations

import json
import math
import socket
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_module

from harness.errors import UserError
from harness.otlp_export import OtlpExporter, gauges, run_attributes, signal_url, unit_of
from tests.otlp_receiver import OtlpReceiver

ATTRS = run_attributes(experiment="e", folder="f", protocol="sweep", track=None, config=None, block=0,
                       label="00-constant-rate=20", repeat=0, role="point", engine="openai", engine_version=None)


def test_numbers_become_gauges_and_nothing_else_does():
    g = gauges({"p99_ttft_ms": 12.5, "completed": 6, "slo_ttft_met": True, "nan_ms": math.nan,
                "inf_s": math.inf, "label": "a", "energy_notes": [], "energy_j": None,
                "cost_lines": {"gpu": 1.5}, "window_start_ns": 3 ** 38, "big": 2 ** 70})
    assert g == {"tokenfactory.p99_ttft_ms": (12.5, "ms"), "tokenfactory.completed": (6, ""),
                 "tokenfactory.slo_ttft_met": (1, ""), "tokenfactory.cost_lines.gpu": (1.5, ""),
                 "tokenfactory.window_start_ns": (3 ** 38, "ns"), "tokenfactory.big": (float(2 ** 70), "")}
    assert isinstance(g["tokenfactory.completed"][0], int) and isinstance(g["tokenfactory.big"][0], float)


@pytest.mark.parametrize("key, unit", [
    ("p50_ttft_ms_ci95_low", "ms"), ("duration_s", "s"), ("cost_replica_seconds", "s"), ("goodput_rps", "{request}/s"),
    ("request_throughput", "{request}/s"), ("output_throughput", "{token}/s"), ("prepare_tokens_per_s", "{token}/s"),
    ("energy_j", "J"), ("mean_power_w", "W"), ("slo_attainment", "1"), ("error_rate", "1"),
    ("client_cpu_util", "1"), ("idle_energy_share", "1"), ("num_requests", ""), ("tokens_per_joule", ""),
])
def test_units_from_the_key(key, unit):
    assert unit_of(key) == unit


def test_endpoint_rules():
    assert signal_url("http://collector:4318") == "http://collector:4318/v1/metrics"
    assert signal_url("https://otlp.example/otlp/") == "https://otlp.example/otlp/v1/metrics"
    assert signal_url("http://c:4318/v1/metrics") == "http://c:4318/v1/metrics"
    with pytest.raises(UserError, match="export.otlp_endpoint='collector:4317'"):
        signal_url("collector:4317")


def test_unknown_attributes_are_left_out():
    assert "tokenfactory.track" not in ATTRS and "tokenfactory.config" not in ATTRS
    assert "tokenfactory.block" not in ATTRS and "tokenfactory.engine.version" not in ATTRS
    a = run_attributes(experiment="e", folder="f", protocol="compare", track="nightly", config="fast", block=2,
                       label="x", repeat=0, role="point", engine="vllm", engine_version="0.32.0")
    assert a["tokenfactory.config"] == "fast" and a["tokenfactory.block"] == 2 and a["tokenfactory.track"] == "nightly"


def test_header_values_are_redacted_and_their_names_kept():
    from harness.results_io import REDACTED, redact

    cfg = {"export": {"otlp_endpoint": "http://c:4318", "otlp_headers": {"x-api-key": "k", "api-key": "k2"}}}
    assert redact(cfg)["export"] == {"otlp_endpoint": "http://c:4318",
                                     "otlp_headers": {"x-api-key": REDACTED, "api-key": REDACTED}}
    assert redact({"otlp_headers": {}}) == {"otlp_headers": {}}


def test_missing_package_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.metric_exporter", None)
    with pytest.raises(UserError, match=r"pip install 'tokenfactory\[otlp\]'"):
        OtlpExporter("http://127.0.0.1:4318")


def test_a_run_without_the_package_stops_before_it_starts(monkeypatch, tmp_path, tiny_model):
    monkeypatch.setitem(sys.modules, "opentelemetry.exporter.otlp.proto.http.metric_exporter", None)
    out = tmp_path / "out"
    with pytest.raises(UserError, match=r"tokenfactory\[otlp\]"):
        _run(_comparison(out, "http://127.0.0.1:9", tiny_model, "export.otlp_endpoint=http://127.0.0.1:4318"))
    assert not out.exists()


def test_one_export_arrives_decoded_with_headers():
    with OtlpReceiver() as r:
        e = OtlpExporter(r.endpoint, {"x-api-key": "k1"}, timeout_s=5)
        assert e.export_run({"p99_ttft_ms": 12.5, "completed": 6, "label": "a"}, ATTRS)
    pts = {p["name"]: p for p in r.points()}
    assert set(pts) == {"tokenfactory.p99_ttft_ms", "tokenfactory.completed"}
    assert pts["tokenfactory.p99_ttft_ms"]["value"] == 12.5 and pts["tokenfactory.p99_ttft_ms"]["unit"] == "ms"
    assert pts["tokenfactory.completed"]["value"] == 6 and pts["tokenfactory.completed"]["kind"] == "gauge"
    assert pts["tokenfactory.completed"]["attributes"] == ATTRS
    assert pts["tokenfactory.completed"]["resource"]["service.name"] == "tokenfactory"
    assert r.headers[0]["x-api-key"] == "k1"


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("receiver", ["down", "refuses", "slow"])
def test_a_failed_export_warns_once_and_sends_nothing_more(receiver, capfd):
    if receiver == "down":
        e = OtlpExporter(f"http://127.0.0.1:{_closed_port()}", timeout_s=0.5)
        assert not e.export_run({"a_ms": 1.0}, ATTRS) and not e.export_run({"a_ms": 2.0}, ATTRS)
    else:
        with OtlpReceiver(status=400 if receiver == "refuses" else 200,
                          delay_s=2.0 if receiver == "slow" else 0.0) as r:
            e = OtlpExporter(r.endpoint, timeout_s=0.5)
            assert not e.export_run({"a_ms": 1.0}, ATTRS) and not e.export_run({"a_ms": 2.0}, ATTRS)
            assert r.requests == []
    err = capfd.readouterr().err
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("warning: OTLP export to http://127.0.0.1:"), err
    assert "nothing more goes to it" in lines[0]
    if receiver == "refuses":
        assert "400" in lines[0]


def _comparison(out: Path, base_url: str, tok: str, *extra: str) -> list[str]:
    return ["protocol=compare", "engine=openai", f"engine.base_url={base_url}", f"engine.tokenizer={tok}",
            "load=constant", "load.num_requests=4", "load.warmup_requests=0", "protocol.load_points=[20]",
            "protocol.repeats=1",
            'protocol.configs={fast: ["engine.model=fake-ttft_ms:5"], slow: ["engine.model=fake-ttft_ms:30"]}',
            f"output_dir={out}", "mlflow.enabled=false", "report.enabled=false", "progress=false",
            "telemetry.idle_baseline_s=0", "experiment=otlp-check", *extra]


def _run(overrides: list[str]) -> None:
    from protocols.registry import protocol_experiment

    with initialize_config_module("conf", version_base="1.3"):
        cfg = compose("config", overrides=overrides)
        exp = protocol_experiment(cfg, overrides=overrides)
    exp.run()


@pytest.mark.slow
def test_a_comparison_exports_every_run_as_its_summary_says(tmp_path, tiny_model):
    from tests.fake_server import FakeServer

    out = tmp_path / "out"
    with OtlpReceiver() as r, FakeServer() as srv:
        _run(_comparison(out, srv.base_url, tiny_model, f"export.otlp_endpoint={r.endpoint}",
                         "+export.otlp_headers={x-team: hdr-secret-42}", "track=nightly"))
    assert len(r.requests) == 2 and all(h["x-team"] == "hdr-secret-42" for h in r.headers)
    # the header's value (an exporter's key, in practice) reaches no file: config.yaml has it redacted
    assert not [f for f in out.rglob("*") if f.is_file() and b"hdr-secret-42" in f.read_bytes()]
    assert "x-team: '***redacted***'" in (out / "config.yaml").read_text()
    by_config: dict[str, dict] = {}
    for p in r.points():
        by_config.setdefault(p["attributes"]["tokenfactory.config"], {})[p["name"]] = p
    assert set(by_config) == {"fast", "slow"}
    for config, pts in by_config.items():
        run_dir = out / config / "block0" / "00-constant-rate=20"
        summary = json.loads((run_dir / "summary.json").read_text())
        engine = json.loads((run_dir / "provenance.json").read_text())["engine"]
        run = json.loads((run_dir / "run.json").read_text())
        expected = gauges(summary)
        assert {n: p["value"] for n, p in pts.items()} == {n: v for n, (v, _) in expected.items()}
        assert pts["tokenfactory.p50_ttft_ms"]["unit"] == "ms" and pts["tokenfactory.completed"]["value"] == 4
        assert "tokenfactory.label" not in pts and "tokenfactory.energy_j" not in pts  # text, null
        attrs = pts["tokenfactory.completed"]["attributes"]
        assert all(p["attributes"] == attrs for p in pts.values())
        want = {"tokenfactory.experiment": "otlp-check", "tokenfactory.experiment_folder": "out",
                "tokenfactory.protocol": "compare", "tokenfactory.track": "nightly", "tokenfactory.config": config,
                "tokenfactory.block": 0, "tokenfactory.load_point": run["label"], "tokenfactory.repeat": 0,
                "tokenfactory.role": "point", "tokenfactory.engine.name": engine["engine"]}
        if engine.get("engine_version"):
            want["tokenfactory.engine.version"] = engine["engine_version"]
        assert attrs == want
    # the fast config's TTFT is the fast one's, as the summary said
    assert by_config["fast"]["tokenfactory.p50_ttft_ms"]["value"] < by_config["slow"]["tokenfactory.p50_ttft_ms"][
        "value"]


@pytest.mark.slow
def test_a_dead_endpoint_only_warns(tmp_path, tiny_model, capfd):
    from tests.fake_server import FakeServer

    out = tmp_path / "out"
    dead = f"http://127.0.0.1:{_closed_port()}"
    with FakeServer() as srv:
        _run(_comparison(out, srv.base_url, tiny_model, f"export.otlp_endpoint={dead}", "export.otlp_timeout_s=0.5"))
    err = capfd.readouterr().err
    assert err.count("warning: OTLP export to") == 1, err
    for config in ("fast", "slow"):
        summary = json.loads((out / config / "block0" / "00-constant-rate=20" / "summary.json").read_text())
        assert summary["completed"] == 4
    assert json.loads((out / "experiment.json").read_text())["status"] == "complete"
