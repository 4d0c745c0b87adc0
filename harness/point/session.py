"""What a load point's steps use of the engine session: the ``session`` argument of every step,
typed.  ``harness.engine_session.EngineSession`` is the one implementation; a Protocol rather
than the class itself because the session runs the point's steps (it imports this package), so
this package may not import it back (the import contracts' no-cycle rule)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from omegaconf import DictConfig

from engines.base import EngineAdapter
from harness.engine_faults import EngineFaults
from harness.mlflow_log import MlflowLogger
from harness.otlp_export import OtlpExporter
from loadgen.client import ClientConfig
from loadgen.workloads.prompts import PromptBuilder
from metrics.slo import SLO
from metrics.telemetry.process import TelemetryProcess


class PointSession(Protocol):
    """The engine, its telemetry and what the points share (``harness.engine_session``)."""

    cfg: DictConfig
    out: Path                            # the session's folder (engine.log, workload.html)
    name: str | None                     # the config's name in a comparison (None in a sweep)
    block: int
    mlflow: MlflowLogger | None
    otlp: OtlpExporter | None
    total_points: int
    container: dict                      # the config, resolved
    safe_config: dict                    # ... and redacted
    slo: SLO
    engine: EngineAdapter
    telemetry: TelemetryProcess
    engine_metrics: bool                 # the engine's /metrics is sampled
    telemetry_sampling: tuple[str, str]  # (periodic or edges, why): metrics.telemetry.sampling
    builder: PromptBuilder
    tokenizer: Any
    client_cfg: ClientConfig
    engine_prov: dict
    idle_interval: tuple[int, int] | None
    window_open_ns: int | None
    workload_figures_written: bool
    workload_descriptions: dict          # point key -> its description, computed before the start
    faults: EngineFaults
    cold_start: bool
    points_run: int
    engine_launch: tuple | None          # the first launch's (started, healthy, ready) ns
    restarted_before_s: float | None
    experiment_dir: Path

    def restart_engine(self, why: str) -> float: ...

    def tokenizer_digest(self) -> str: ...

    def fixed_conditions(self) -> dict: ...

    def count_tokens(self, text: str) -> int: ...

    def topology(self) -> dict: ...
