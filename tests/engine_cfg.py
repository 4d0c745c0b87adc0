"""Engine configs for adapter tests: the shipped conf/engine/NAME.yaml with overrides."""

from __future__ import annotations

from pathlib import Path

from omegaconf import OmegaConf

CONF = Path(__file__).resolve().parent.parent / "conf" / "engine"
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def engine_cfg(name: str, **over):
    cfg = OmegaConf.load(CONF / f"{name}.yaml")
    for k, v in over.items():
        OmegaConf.update(cfg, k, v, force_add=True)
    return cfg
