"""Engine configs for adapter tests: conf/engine/NAME.yaml composed with its schema, with overrides."""

from __future__ import annotations

from pathlib import Path

from hydra import compose, initialize_config_module
from omegaconf import OmegaConf

FIXTURES = Path(__file__).resolve().parent / "fixtures"


def engine_cfg(name: str, **over):
    with initialize_config_module("conf", version_base="1.3"):
        cfg = compose("config", overrides=[f"engine={name}"]).engine
    for k, v in over.items():
        OmegaConf.update(cfg, k, v, force_add=True)
    return cfg
