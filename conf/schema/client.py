"""The ``client`` group: the load generator's timeouts, workers (local or Ray) and request preparation."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, Optional

from conf.schema.rules import checked


@dataclass
class ClientTimeouts:
    connect_s: float = checked(10.0, gt=0)    # TCP connect
    ttft_s: float = checked(300.0, gt=0)      # request sent -> first output chunk
    idle_s: float = checked(60.0, gt=0)       # between chunks once output started
    total_s: float = checked(900.0, gt=0)     # whole request


@dataclass
class ClientRay:
    """``client.backend=ray``: the workers as Ray actors on a cluster (loadgen/ray_workers.py)."""
    address: Optional[str] = None                 # ray.init's: null = $RAY_ADDRESS, else a local one; "auto"
    num_cpus: float = checked(1.0, ge=0)          # CPUs each worker reserves (its event loop needs a core)
    resources: Dict[str, float] = checked(factory=dict, each={"ge": 0})  # per worker, e.g. {loadgen: 1}
    placement: str = checked("spread", choices=("spread", "pack"))  # workers over as many nodes as can be, or few
    clock_samples: int = checked(16, ge=1)        # round trips per offset measurement (the shortest wins)
    clock_every_s: float = checked(2.0, gt=0)     # each worker's offset measured again this often
    start_margin_ms: float = checked(300.0, gt=0)  # from the start order to t0 (reaching every worker)
    placement_timeout_s: float = checked(60.0, gt=0)  # waiting for the cluster to place every worker
    runtime_env: Dict[str, Any] = field(default_factory=dict)  # ray.init's runtime_env (pip, working_dir)


@dataclass
class Client:
    timeouts: ClientTimeouts = field(default_factory=ClientTimeouts)
    max_schedule_lag_ms: float = checked(10.0, ge=0)  # p99 send lag above this flags the run as client-limited
    workers: int = checked(1, ge=1)               # load-generator processes sharing one schedule
    backend: str = checked("local", choices=("local", "ray"))  # workers forked here, or Ray actors (client.ray)
    max_clock_error_ms: float = checked(1.0, gt=0)  # ray: a worker's clock error above this flags client-limited
    # metrics.token_accounting: a request's server usage.completion_tokens against the tokenizer's count of its text
    token_mismatch_tolerance: int = checked(1, ge=0)     # tokens the two may differ by (an EOS never sent as text)
    token_mismatch_threshold: float = checked(0.01, ge=0, le=1)  # share of requests past it that flags the run
    ray: ClientRay = field(default_factory=ClientRay)
    # Requests are prepared off the send loop (loadgen/prepare.py): all before the window opens,
    # streamed by a producer thread prepare_ahead_s ahead, or auto: all while within prepare_max_mb.
    prepare: str = checked("auto", choices=("auto", "all", "stream"))
    prepare_ahead_s: float = checked(10.0, gt=0)
    prepare_max_mb: float = checked(2048.0, gt=0)
    prepare_cache: bool = True                    # keep built requests on disk, keyed by a hash of their inputs
    # A burst opens connections past the prewarmed pool; once idle this long, those above the
    # prewarmed count are closed (never one with a request in flight). 0 or null: keep them all.
    idle_close_s: Optional[float] = checked(30.0, ge=0)

