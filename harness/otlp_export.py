"""Each finished run's ``summary.json`` as OpenTelemetry metrics, sent to an OTLP/HTTP endpoint
(``export.otlp_endpoint``) where teams already watch their services.

One export per run (``harness.point.export_otlp``, beside the MLflow child run), through the
OpenTelemetry SDK and its OTLP/HTTP protobuf exporter (``pip install 'tokenfactory[otlp]'``).
Every number of the summary (nested keys flattened with dots, as MLflow's metrics are) is one
gauge named ``tokenfactory.<key>``, its value the summary's exactly (integers as integers,
booleans as 0/1); text, lists, nulls, NaN and infinities are not sent.  Each data point carries
the run's attributes (``run_attributes``); attributes whose value is unknown (a sweep has no
config, an endpoint without a version) are left out, never sent empty.

Units come from the key's words (``UNITS``, UCUM as OpenTelemetry asks): ``_ms`` ms, ``_s``
and ``_seconds`` s, ``_ns`` ns, ``_rps`` and ``request_throughput`` {request}/s, other
``throughput`` and ``tokens_per_s`` {token}/s, ``_j`` J, ``_w`` W, ``_rate``, ``_share``,
``attainment`` and ``_util`` 1; any other key has no unit ("").

The export never costs the run its results: the folders are written first, and a receiver
that refuses, is down or does not answer within ``export.otlp_timeout_s`` gets one warning
line, after which nothing more is sent to it in this experiment (so a dead endpoint costs
one timeout, not one per run).
"""

from __future__ import annotations

import logging
import math
import re
import sys
from urllib.parse import urlsplit

from conf.schema import Export, typed
from harness.errors import UserError
from harness.mlflow_log import flatten, shown_uri

EXTRA = "otlp"
METRICS_PATH = "/v1/metrics"
PREFIX = "tokenfactory."
# (pattern on the key, unit): the first that matches wins
UNITS = ((re.compile(r"_ms(_|$)"), "ms"), (re.compile(r"_ns(_|$)"), "ns"),
         (re.compile(r"(_rps|request_throughput|request_goodput)(_|$)"), "{request}/s"),
         (re.compile(r"(throughput|tokens_per_s)(_|$)"), "{token}/s"),
         (re.compile(r"(_s|_seconds)(_|$)"), "s"),
         (re.compile(r"_j(_|$)"), "J"), (re.compile(r"_w(_|$)"), "W"),
         (re.compile(r"(_rate|_share|attainment|_util)(_|$)"), "1"))
_NOT_IN_A_NAME = re.compile(r"[^A-Za-z0-9_.\-/]")
_INT64 = 2 ** 63


def unit_of(key: str) -> str:
    for pattern, unit in UNITS:
        if pattern.search(key):
            return unit
    return ""


def metric_name(key: str) -> str:
    """An instrument name the SDK accepts (letters, digits, ``_.-/``, 255 at most)."""
    return (PREFIX + _NOT_IN_A_NAME.sub("_", key))[:255]


def gauges(summary: dict) -> dict[str, tuple[int | float, str]]:
    """name -> (value, unit) for every finite number of ``summary``."""
    out = {}
    for key, v in flatten(summary).items():
        if isinstance(v, bool):
            v = int(v)
        elif isinstance(v, int):
            if abs(v) >= _INT64:  # OTLP integers are 64-bit
                v = float(v)
        elif not isinstance(v, float) or not math.isfinite(v):
            continue
        out[metric_name(key)] = (v, unit_of(key))
    return out


def run_attributes(*, experiment: str, folder: str, protocol: str | None, track: str | None,
                   config: str | None, block: int | None, label: str, repeat: int, role: str,
                   engine: str | None, engine_version: str | None) -> dict[str, str | int]:
    """The attributes of one run's data points (those whose value is unknown left out)."""
    attrs = {"tokenfactory.experiment": experiment, "tokenfactory.experiment_folder": folder,
             "tokenfactory.protocol": protocol, "tokenfactory.track": track,
             "tokenfactory.config": config or None, "tokenfactory.block": block if config else None,
             "tokenfactory.load_point": label, "tokenfactory.repeat": repeat,
             "tokenfactory.role": role,
             "tokenfactory.engine.name": engine, "tokenfactory.engine.version": engine_version}
    return {k: v for k, v in attrs.items() if v is not None and v != ""}


def signal_url(endpoint: str) -> str:
    """OTLP's rule: a base URL (``http://collector:4318``) gets ``/v1/metrics``; a URL that
    already ends in it is used as it is."""
    u = urlsplit(endpoint)
    if u.scheme not in ("http", "https") or not u.netloc:
        raise UserError(f"export.otlp_endpoint={endpoint!r}: not an http(s) URL (an OTLP/HTTP receiver, "
                        "e.g. http://collector:4318)")
    path = u.path.rstrip("/")
    return endpoint if path.endswith(METRICS_PATH) else u._replace(path=path + METRICS_PATH).geturl()


class _Captured(logging.Handler):
    """The SDK's own log lines during one export: the last one is the reason in our warning."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records: list[str] = []

    def emit(self, record):
        self.records.append(record.getMessage())


class OtlpExporter:
    """One experiment's exporter; ``export_run`` sends one run's gauges."""

    def __init__(self, endpoint: str, headers: dict | None = None, timeout_s: float = 10.0):
        try:
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        except ImportError:
            raise UserError(f"export.otlp_endpoint is set but the OpenTelemetry OTLP exporter is not installed: "
                            f"pip install 'tokenfactory[{EXTRA}]'") from None
        self.url = signal_url(endpoint)
        self.timeout_s = float(timeout_s)
        self.failed: str | None = None
        self.exporter = OTLPMetricExporter(endpoint=self.url, headers=dict(headers or {}), timeout=self.timeout_s)

    @classmethod
    def from_config(cls, cfg) -> OtlpExporter | None:
        """The exporter ``cfg.export`` asks for, or None (no ``export.otlp_endpoint``)."""
        e = typed(cfg.export, Export)
        if not e.otlp_endpoint:
            return None
        return cls(e.otlp_endpoint, e.otlp_headers, e.otlp_timeout_s)

    def export_run(self, summary: dict, attributes: dict) -> bool:
        """Send ``summary``'s gauges with ``attributes``; False (said once) when it failed."""
        if self.failed is not None:
            return False
        from opentelemetry.sdk.metrics.export import MetricExportResult

        sdk_log = logging.getLogger("opentelemetry")
        captured, propagate = _Captured(), sdk_log.propagate
        sdk_log.addHandler(captured)
        sdk_log.propagate = False  # the SDK's own lines become the reason in our one warning
        try:
            data = _metrics_data(gauges(summary), attributes)
            result = self.exporter.export(data, timeout_millis=self.timeout_s * 1000)
            ok = result is MetricExportResult.SUCCESS
            why = captured.records[0] if captured.records else "the receiver did not accept the metrics"
        except Exception as e:  # noqa: BLE001 - whatever the SDK or its transport raises: the run goes on
            ok, why = False, f"{type(e).__name__}: {e}"
        finally:
            sdk_log.removeHandler(captured)
            sdk_log.propagate = propagate
        if not ok:
            self.failed = why[:400]
            print(f"warning: OTLP export to {shown_uri(self.url)} failed ({self.failed}); nothing more goes to it in "
                  "this experiment. The results are in their folders as always.", file=sys.stderr, flush=True)
        return ok

    def close(self) -> None:
        self.exporter.shutdown()


def _metrics_data(values: dict[str, tuple[int | float, str]], attributes: dict):
    """The SDK's MetricsData for one run: a fresh provider per run, so a gauge holds this
    run's value alone (a provider kept across runs would send every earlier run's again)."""
    from importlib import metadata

    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.resources import Resource

    try:
        version = metadata.version("tokenfactory")
    except metadata.PackageNotFoundError:
        version = "unknown"
    reader = InMemoryMetricReader()
    provider = MeterProvider(resource=Resource.create({"service.name": "tokenfactory", "service.version": version}),
                             metric_readers=[reader])
    try:
        meter = provider.get_meter("tokenfactory", version)
        for name, (value, unit) in values.items():
            meter.create_gauge(name, unit=unit, description="summary.json of a tokenfactory run").set(
                value, attributes)
        return reader.get_metrics_data()
    finally:
        provider.shutdown()

