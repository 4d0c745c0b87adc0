"""The ``hardware`` group: provenance and the roofline's peak rates (conf/hardware/*.yaml)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Optional

from omegaconf import MISSING

from conf.schema.rules import checked


@dataclass
class Hardware:
    """What the run's hardware is: provenance, and the roofline's peak rates."""
    name: str = MISSING
    accelerator: str = "none"
    num_accelerators: int = checked(0, ge=0)
    peak_tflops: Dict[str, float] = field(default_factory=dict)  # dense, per precision (bf16, fp8, ...)
    memory_bandwidth_gbs: Optional[float] = checked(None, gt=0)  # per accelerator
    memory_gb: Optional[float] = checked(None, gt=0)             # per accelerator
    interconnect_gbs: Optional[float] = checked(None, gt=0)      # per accelerator, one direction
    source: Optional[str] = None                                 # where the figures come from

