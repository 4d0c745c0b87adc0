"""The ``cost`` group: a rental or an owned fleet's cost profile (conf/cost/*.yaml)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional

from omegaconf import MISSING

from conf.schema.rules import checked


@dataclass
class CostBase:
    model: str = MISSING
    currency: str = "USD"
    description: Optional[str] = None
    assumptions: Optional[str] = None
    num_gpus: int = checked(0, ge=0)
    extra_hourly: Dict[str, float] = checked(factory=dict, each={"ge": 0})  # every line: hours x rate


@dataclass
class RentalCost(CostBase):
    model: str = checked("rental", choices=("rental",))
    hourly_per_gpu: float = checked(0.0, ge=0)  # the rental price of one GPU hour
    num_hosts: int = checked(1, ge=0)
    hourly_per_host: float = checked(0.0, ge=0)


@dataclass
class OwnedCost(CostBase):
    model: str = checked("owned", choices=("owned",))
    hardware_price: float = checked(0.0, ge=0)
    depreciation_years: float = checked(3.0, gt=0)
    electricity_per_kwh: float = checked(0.0, ge=0)
    pue: float = checked(1.0, ge=1)
    ops_hourly: float = checked(0.0, ge=0)
    unmeasured_power_w: float = checked(0.0, ge=0)

