"""The typed schema of every config group, one module a group (conf/schema/<group>.py, beside
conf/<group>/*.yaml); the rules they are built with, ``typed`` and ``validate`` in rules.py; the
root config and the ConfigStore registration in root.py.  Every name is re-exported here, so
``from conf.schema import Load, typed`` reads as it always did."""

from conf.schema.client import Client, ClientRay, ClientTimeouts
from conf.schema.cost import CostBase, OwnedCost, RentalCost
from conf.schema.deployment import Autoscale, Deployment, Placement
from conf.schema.engine import (
    DynamoEngine,
    DynamoMocker,
    EngineBase,
    OpenAIEngine,
    SharedEngine,
    SharedFeatures,
    TransformersEngine,
    TransformersFeatures,
)
from conf.schema.hardware import Hardware
from conf.schema.load import LOAD_KINDS, Load
from conf.schema.protocol import (
    COMPARED_METRICS,
    TUNE_OBJECTIVES,
    AblationProtocol,
    CompareProtocol,
    ProfileProtocol,
    SweepProtocol,
    TrackProtocol,
    TuneProtocol,
)
from conf.schema.protocol_plan import DIURNAL_CURVE, PlanEstimate, PlanModelled, PlanProtocol, PlanTraffic
from conf.schema.protocol_promote import (
    GATE_MARGINS,
    PromoteFault,
    PromoteGate,
    PromoteGuard,
    PromoteProtocol,
    PromoteStage,
)
from conf.schema.proxy import PROXY_MODES, Proxy
from conf.schema.quality import Quality
from conf.schema.root import (
    ENGINE_SCHEMAS,
    SCHEMAS,
    Export,
    Mlflow,
    Report,
    Root,
    Scenario,
    group,
    register,
    typed_engine,
)
from conf.schema.router import Router
from conf.schema.rules import ConfigError, checked, typed, validate
from conf.schema.slo import Slo
from conf.schema.telemetry import Dcgm, EngineScrape, Nvml, Rapl, Telemetry
from conf.schema.workload import (
    Burst,
    LengthDist,
    LongTail,
    LoraMix,
    PrefixGroups,
    SyntheticStress,
    SyntheticWorkload,
    TaskRule,
    TraceStress,
    TraceWorkload,
)

__all__ = [
    "COMPARED_METRICS", "DIURNAL_CURVE", "GATE_MARGINS", "LOAD_KINDS", "PROXY_MODES", "SCHEMAS", "TUNE_OBJECTIVES",
    "AblationProtocol", "Autoscale", "Burst", "Client", "ClientRay", "ClientTimeouts", "CompareProtocol",
    "ConfigError", "CostBase", "Dcgm", "Deployment", "DynamoEngine", "DynamoMocker", "EngineBase", "EngineScrape",
    "Export", "Hardware", "LengthDist", "Load", "LongTail", "LoraMix", "Mlflow", "Nvml", "OpenAIEngine",
    "OwnedCost", "Placement", "PlanEstimate", "PlanModelled", "PlanProtocol", "PlanTraffic", "PrefixGroups",
    "ProfileProtocol", "PromoteFault", "PromoteGate", "PromoteGuard", "PromoteProtocol", "PromoteStage", "Proxy",
    "Quality", "Rapl", "RentalCost", "Report", "Root", "Router", "Scenario", "SharedEngine", "SharedFeatures",
    "Slo", "SweepProtocol", "SyntheticStress", "SyntheticWorkload", "TaskRule", "Telemetry", "TraceStress",
    "TraceWorkload", "TrackProtocol", "TransformersEngine", "TransformersFeatures", "TuneProtocol", "checked",
    "register", "typed", "typed_engine", "validate", "ENGINE_SCHEMAS", "group",
]
