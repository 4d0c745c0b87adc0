"""The root config: the groups' schemas in Hydra's ConfigStore (``<group>/schema``), and the top-level
keys (experiment, output_dir, mlflow, export, report, scenario ...)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, TypeVar

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from conf.schema import protocol
from conf.schema.client import Client
from conf.schema.cost import OwnedCost, RentalCost
from conf.schema.deployment import Deployment
from conf.schema.engine import DynamoEngine, EngineBase, OpenAIEngine, SharedEngine, TransformersEngine
from conf.schema.hardware import Hardware
from conf.schema.load import Load
from conf.schema.protocol_plan import PlanProtocol
from conf.schema.protocol_promote import PromoteProtocol
from conf.schema.proxy import Proxy
from conf.schema.quality import Quality
from conf.schema.router import Router
from conf.schema.rules import checked, typed
from conf.schema.slo import Slo
from conf.schema.telemetry import Telemetry
from conf.schema.workload import SyntheticWorkload, TraceWorkload


@dataclass
class Mlflow:
    enabled: bool = True
    tracking_uri: Optional[str] = None        # null: $MLFLOW_TRACKING_URI, else sqlite:///results/mlflow.db


@dataclass
class Export:
    """Where each run's summary goes besides MLflow (harness/otlp_export.py): OpenTelemetry metrics
    to an OTLP endpoint, with the experiment, config and engine version as attributes."""
    otlp_endpoint: Optional[str] = None       # e.g. http://collector:4318 (OTLP/HTTP); null: no export
    otlp_headers: Dict[str, str] = field(default_factory=dict)  # e.g. an API key header
    otlp_timeout_s: float = checked(10.0, gt=0)


@dataclass
class Report:
    enabled: bool = True
    # PNG/SVG/PDF of every figure (kaleido + the system's Chromium); null: when both are found
    static: Optional[bool] = None



@dataclass
class Scenario:
    """Scenarios beside steady state (harness/scenarios.py; metrics/recovery.py, metrics/cold_start.py)."""
    # failure recovery: the engine is killed this long after each point's load started, restarted
    # by the harness while the load goes on; null: no kill
    kill_at_s: Optional[float] = checked(None, ge=0)
    kill_signal: str = checked("SIGKILL", choices=("SIGKILL", "SIGSTOP", "SIGTERM"))
    # a deployment: kill this replica only (r1, p0 ...), not restarted; the rest serve on and the
    # requests it ended are named and counted
    kill_replica: Optional[str] = None
    recovery_window: int = checked(20, ge=1)  # N: the SLO is back when N requests in a row meet it
    # cold start: no warm-up request and no idle baseline before the first point, and the first
    # first_window_s of load reported apart from the rest
    cold_start: bool = False
    first_window_s: float = checked(60.0, gt=0)



@dataclass
class Root:
    engine: Any = MISSING
    deployment: Deployment = MISSING
    router: Router = MISSING
    workload: Any = MISSING
    load: Load = MISSING
    protocol: Any = MISSING
    slo: Slo = MISSING
    cost: Any = MISSING
    hardware: Hardware = MISSING
    client: Client = MISSING
    proxy: Proxy = MISSING
    experiment: str = checked("default", folder=True)  # MLflow experiment and results/<experiment>/ folder
    output_dir: Optional[str] = None          # default: results/<experiment>/<run id>/
    resume: bool = True                       # with an existing output_dir: skip finished load points
    seed: int = 0
    telemetry: Telemetry = field(default_factory=Telemetry)
    mlflow: Mlflow = field(default_factory=Mlflow)
    # a tracked benchmark's name: the experiment joins its history in the MLflow store
    # (`tokenfactory track NAME` compares the newest with a baseline; protocols/track/)
    track: Optional[str] = None
    # what this experiment measures a version of (an engine commit, a build): the track's history
    # shows it; null: the engine's own version
    track_version: Optional[str] = None
    export: Export = field(default_factory=Export)
    report: Report = field(default_factory=Report)
    scenario: Scenario = field(default_factory=Scenario)
    quality: Quality = field(default_factory=Quality)
    progress: bool = True                     # a progress bar per load point


# group -> {option name -> schema}; the YAML of each option names its schema in `defaults`.
SCHEMAS: dict[str, dict[str, type]] = {
    "engine": {"schema": SharedEngine, "transformers_schema": TransformersEngine, "openai_schema": OpenAIEngine,
               "dynamo_schema": DynamoEngine},
    "deployment": {"schema": Deployment},
    "router": {"schema": Router},
    "workload": {"schema": TraceWorkload, "synthetic_schema": SyntheticWorkload},
    "load": {"schema": Load},
    "protocol": {"schema": protocol.SweepProtocol, "compare_schema": protocol.CompareProtocol,
                 "ablation_schema": protocol.AblationProtocol, "promote_schema": PromoteProtocol,
                 "tune_schema": protocol.TuneProtocol, "plan_schema": PlanProtocol,
                 "profile_schema": protocol.ProfileProtocol, "track_schema": protocol.TrackProtocol},
    "slo": {"schema": Slo},
    "cost": {"schema": RentalCost, "owned_schema": OwnedCost},
    "hardware": {"schema": Hardware},
    "client": {"schema": Client},
    "proxy": {"schema": Proxy},
}


# engine.name -> its schema, for an engine section that is a plain mapping (a composed one knows its own)
ENGINE_SCHEMAS: dict[str, type] = {"vllm": SharedEngine, "sglang": SharedEngine, "transformers": TransformersEngine,
                                   "openai": OpenAIEngine, "dynamo": DynamoEngine}

T = TypeVar("T")


def group(cfg, name: str, schema: type[T]) -> T:
    """The ``name`` group of ``cfg`` as ``schema``'s dataclass, converted once where it enters a
    module; a config without the group (one built with only an engine section) gets its defaults."""
    node = cfg[name] if name in cfg else None
    return typed(node if node is not None else {}, schema)


def typed_engine(node) -> EngineBase:
    """``cfg.engine`` as its schema's dataclass: the one it was composed with, else (a plain
    mapping) the one of its ``name``, else the vLLM/SGLang one."""
    kind = OmegaConf.get_type(node) if isinstance(node, DictConfig) else None
    if kind is None or not dataclasses.is_dataclass(kind):
        kind = ENGINE_SCHEMAS.get(node["name"] if "name" in node else None, SharedEngine)
    return typed(node, kind)


def register() -> None:
    cs = ConfigStore.instance()
    cs.store(name="root_schema", node=Root)
    for group, nodes in SCHEMAS.items():
        for name, node in nodes.items():
            cs.store(group=group, name=name, node=node)
