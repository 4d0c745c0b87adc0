"""The root config composed by Hydra from overrides, for code that composes a config of its
own (a comparison's configs, a promotion's engines, a tune's reference), inside a running
Hydra app or not."""

from __future__ import annotations

from omegaconf import DictConfig


def compose_config(overrides: list[str]) -> DictConfig:
    """The root config with ``overrides``, composed by Hydra (inside a running Hydra app or not)."""
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    if GlobalHydra.instance().is_initialized():
        cfg = compose("config", overrides=list(overrides))
    else:
        with initialize_config_module("conf", version_base="1.3"):
            cfg = compose("config", overrides=list(overrides))
    return cfg
