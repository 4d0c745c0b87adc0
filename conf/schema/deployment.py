"""The ``deployment`` group: what serves the load, where each replica runs, and how the replicas scale."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from conf.schema.rules import checked


@dataclass
class Placement:
    """Where each replica runs (engines/placement.py).  Lists give one entry per replica, in
    the order prefill replicas then decode replicas (deployment=disaggregated)."""
    cpus: List[str] = field(default_factory=list)     # CPU cores per replica ("0", "1", "2-3"): the process is pinned
    devices: List[str] = field(default_factory=list)  # CUDA_VISIBLE_DEVICES per replica ("0", "1", "2,3")
    # deployment.backend=ray: one placement-group bundle per replica (and one for the router)
    ray_address: Optional[str] = None                 # null: client.ray.address, else a local cluster
    ray_strategy: str = checked("SPREAD", choices=("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"))
    ray_bundle: Dict[str, float] = field(default_factory=lambda: {"CPU": 1.0})  # resources per replica


@dataclass
class Autoscale:
    """How a deployment=replicas grows and shrinks with its load (engines/autoscale_policy.py): the
    same policy drives the harness's live scaling of real replicas (``enabled``) and the fleet
    simulation of ``tokenfactory plan``, so a plan can be checked against a real replay."""
    enabled: bool = False                     # live: the harness starts and stops replicas during the load
    # utilisation: arrivals over the trailing window / (replicas x capacity_rps);
    # queue: requests in flight (sent, not finished) per replica
    signal: str = checked("utilisation", choices=("utilisation", "queue"))
    target: float = checked(0.7, gt=0)        # utilisation kept (share of capacity), or in flight per replica
    # one replica's capacity (requests/s); null: plan takes the measured max load under the SLO
    capacity_rps: Optional[float] = checked(None, gt=0)
    window_s: float = checked(30.0, gt=0)     # the signal's trailing window
    interval_s: float = checked(5.0, gt=0)    # how often the policy decides
    # plan: seconds from the decision to a new replica serving; null: the measured cold start
    # (engine_startup_s).  Live: the real start of a real replica (this is not added).
    cold_start_s: Optional[float] = checked(None, ge=0)
    provision_s: float = checked(0.0, ge=0)   # before the replica's process starts (a node to acquire): live and plan
    # scale down to the most replicas the policy asked for over this trailing window (HPA's
    # stabilisation window), so a dip shorter than it stops no replica
    scale_down_delay_s: float = checked(120.0, ge=0)
    min_replicas: int = checked(1, ge=1)
    max_replicas: int = checked(4, ge=1)
    # live: a replica scaled down is stopped once its requests in flight are done, or this long
    # after it left the router (its requests still running then fail with it)
    drain_timeout_s: float = checked(60.0, ge=0)


@dataclass
class Deployment:
    """What serves the load: one engine (single), N replicas behind a router (replicas), or
    prefill and decode pools with the KV cache moved between them (disaggregated)."""
    kind: str = checked("single", choices=("single", "replicas", "disaggregated"))
    replicas: int = checked(1, ge=1)          # deployment=replicas: engine processes behind the router
    prefill: int = checked(1, ge=1)           # deployment=disaggregated: prefill replicas
    decode: int = checked(1, ge=1)            # deployment=disaggregated: decode replicas
    backend: str = checked("local", choices=("local", "ray"))  # local processes, or Ray placement groups across nodes
    placement: Placement = field(default_factory=Placement)
    # deployment=disaggregated: the engine's KV connector (vLLM --kv-transfer-config kv_connector;
    # SGLang --disaggregation-transfer-backend); null: the engine's documented default
    kv_connector: Optional[str] = None
    kv_connector_extra: Dict[str, Any] = field(default_factory=dict)  # vLLM kv_connector_extra_config
    prefill_args: List[str] = field(default_factory=list)  # flags only prefill replicas get
    decode_args: List[str] = field(default_factory=list)   # flags only decode replicas get
    # The response header that names the replica which served a request (harness-launched vLLM
    # replicas set it; a gateway may set its own); absent: the row's replica is `unknown`
    replica_header: str = "x-tokenfactory-replica"
    first_port: Optional[int] = checked(None, ge=1, le=65535)  # replica i listens on first_port + i; null: free ports
    autoscale: Autoscale = field(default_factory=Autoscale)
