"""protocol=tune: a trial's configuration (the command's config with the knobs set, as a sweep
with ``search=slo``) and the checks of the bracket, the knobs and the trials' shared base."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from conf.schema import ConfigError, SweepProtocol, validate
from harness.quality_gate import gate_enabled
from protocols.designs import design_of
from protocols.tune import plan


def check_bracket(cfg: DictConfig) -> None:
    """Each trial's SLO search has its bracket, or load points or a probe to take one from."""
    p = cfg.protocol
    points = list(p.load_points or [])
    if not (p.search_low and p.search_high) and len(points) < 2 and not p.probe:
        raise ValueError("protocol=tune searches each trial's max load under the SLO between "
                         "protocol.search_low and protocol.search_high: give both (requests/s, or users "
                         "for load=concurrency), or protocol.load_points to take them from, or protocol.probe=true")
    if p.search_low and p.search_high and not p.search_low < p.search_high:
        raise ValueError(f"protocol.search_low={p.search_low} must be below protocol.search_high={p.search_high}")


def check_knobs(cfg: DictConfig, knobs: list[plan.Knob], grid: int | None) -> None:
    """Every knob names one config value, and each of its choices (or range ends) fits the
    field's type and passes the schema's checks, so no suggestion fails halfway through a
    tune; each choice also survives the round trip through Hydra's override syntax (a trial's
    params are recorded, and given to its experiment, as overrides)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    missing = object()
    parser = OverridesParser.create()
    for k in knobs:
        current = OmegaConf.select(cfg, k.key, default=missing)
        if current is missing:
            parent = k.key.rsplit(".", 1)[0] if "." in k.key else ""
            node = OmegaConf.select(cfg, parent, default=None) if parent else cfg
            known = ", ".join(map(str, node)) if isinstance(node, DictConfig) else "none"
            raise ValueError(f"protocol.space.{k.key}: no such key in this config "
                             f"({parent or 'the root'} has: {known})")
        if isinstance(current, (DictConfig, ListConfig)):
            raise ValueError(f"protocol.space.{k.key}: a group or mapping, not one value; a knob is a single "
                             "setting (whole engine configs are compared with protocol=compare)")
        for want in list(k.choices) if k.choices is not None else (k.grid() if grid else []):
            got = parser.parse_overrides([f"{k.key}={plan.override_literal(want)}"])[0].value()
            if got != want or type(got) is not type(want):
                raise ValueError(f"protocol.space.{k.key}: the choice {want!r} comes back from Hydra's override "
                                 f"syntax as {got!r}; rename it")
        for v in (k.choices or [k.low, k.high]):
            trial = copy.deepcopy(cfg)
            try:
                OmegaConf.update(trial, k.key, v, merge=False)
                validate(trial)
            except ConfigError as e:
                raise ValueError(f"protocol.space.{k.key}: the value {v!r}: {e}") from None
            except OmegaConfBaseException as e:
                raise ValueError(f"protocol.space.{k.key}: the value {v!r}: {str(e.msg).splitlines()[0]}") from None


def trial_config(cfg: DictConfig, folder: Path) -> DictConfig:
    """A job's config as a trial: the protocol becomes a sweep with ``search=slo`` (its load
    points, bracket and tolerance kept), written to ``folder``."""
    trial = copy.deepcopy(cfg)
    keep = {f.name for f in dataclasses.fields(SweepProtocol)}
    proto = {k: v for k, v in OmegaConf.to_container(cfg.protocol, resolve=True).items() if k in keep}
    proto.update(name="sweep", search="slo", dry_run=False)
    trial.protocol = OmegaConf.merge(OmegaConf.structured(SweepProtocol), proto)
    trial.output_dir = str(folder)
    if gate_enabled(cfg, design_of(cfg)):  # each trial's greedy outputs, judged against the reference's
        trial.quality.enabled = True
    return trial


def with_params(cfg: DictConfig, params: dict) -> DictConfig:
    """The command's config with the knobs set to ``params`` (each checked against the schema
    for its choices and range ends before the first trial)."""
    cfg = copy.deepcopy(cfg)
    for key, value in params.items():
        OmegaConf.update(cfg, key, value, merge=False)
    return cfg
