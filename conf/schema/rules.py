"""The machinery every config schema (conf/schema/<group>.py) is built with.

The typed schema of every config group is one dataclass per group (stored in Hydra's
ConfigStore as ``<group>/schema``, conf/schema/root.py), so OmegaConf checks types and
unknown keys while Hydra composes, naming the full key (``load.rate``,
``engine.features.max_num_seqs``).

Each YAML file of a group starts from its schema (``defaults: [schema, _self_]``) and
writes only what differs from it: a key is defined once, in its schema.  What types cannot
say (ranges, a choice among names) is in each field's metadata (``checked``) and checked by
``validate`` right after composition, with the same full key in the message:

- ``ge`` / ``gt`` / ``le`` / ``lt``: bounds of a number, which must also be finite (None
  passes: the field is unset);
- ``choices``: the allowed values of a string;
- ``folder``: a name that becomes a folder (``results/<experiment>/``): relative, no ``..``;
- ``each``: rules for every value of a mapping or list field.

``typed`` turns a config node into its schema's dataclass, once, where it enters a module.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import field
from typing import TypeVar

from omegaconf import DictConfig, ListConfig, OmegaConf

T = TypeVar("T")


class ConfigError(ValueError):
    """A config value outside what its field allows; the message names the full key."""


def checked(default=None, *, factory=None, **rules):
    """A field with checks for ``validate`` (``ge``, ``gt``, ``le``, ``lt``, ``choices``, ``folder``, ``each``)."""
    if factory is not None:
        return field(default_factory=factory, metadata=rules)
    return field(default=default, metadata=rules)


def typed(node, schema: type[T]) -> T:
    """A config node as its schema's dataclass (``typed(cfg.proxy, Proxy)``), converted once where
    it enters a module: a composed node keeps its values; a plain mapping (one sent to a child
    process as JSON) gets the schema's defaults for the keys it lacks, and OmegaConf's type
    checks, naming the key, for those it has."""
    if isinstance(node, DictConfig) and OmegaConf.get_type(node) is schema:
        # Composed with this schema already: a merge onto a fresh one would give the same
        # values at ~30x the time (22 ms against 0.7 for an engine node), paid on every call.
        return OmegaConf.to_object(node)
    return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), node))


# ------------------------------------------------------------------------------------ ranges
def _check(key: str, value, rules: dict) -> None:
    if value is None or not rules:
        return
    if rules.get("folder") and (not str(value).strip() or "\x00" in str(value) or str(value).startswith(("/", "\\"))
                                or ".." in str(value).replace("\\", "/").split("/")):
        raise ConfigError(f"{key}={value!r}: it names a folder under results/, so it must be a relative name "
                          "without '..' (output_dir=PATH writes anywhere you choose)")
    if "choices" in rules and value not in rules["choices"]:
        raise ConfigError(f"{key}={value!r}: expected one of {', '.join(map(str, rules['choices']))}")
    bounds = {"ge", "gt", "le", "lt"} & set(rules)
    if bounds and (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)):
        raise ConfigError(f"{key}={value!r}: expected a finite number")
    for rule, ok, word in (("ge", lambda v, b: v >= b, ">="), ("gt", lambda v, b: v > b, ">"),
                           ("le", lambda v, b: v <= b, "<="), ("lt", lambda v, b: v < b, "<")):
        if rule in rules and not ok(value, rules[rule]):
            raise ConfigError(f"{key}={value!r}: must be {word} {rules[rule]}")


def validate(cfg: DictConfig, prefix: str = "") -> None:
    """Check every field's ``ge``/``gt``/``le``/``lt``/``choices`` (see module doc); raises
    ``ConfigError`` naming the full key.  Types and unknown keys were checked by OmegaConf."""
    if isinstance(cfg, ListConfig):
        for i, v in enumerate(cfg):
            if isinstance(v, (DictConfig, ListConfig)):
                validate(v, f"{prefix}[{i}]")
        return
    kind = OmegaConf.get_type(cfg)
    typed = dataclasses.is_dataclass(kind)
    rules = {f.name: dict(f.metadata) for f in dataclasses.fields(kind)} if typed else {}
    for key in cfg:
        full = f"{prefix}.{key}" if prefix else str(key)
        if typed and key not in rules:  # added with Hydra's +key=value, which opens the node
            raise ConfigError(f"{full}: not a field of {kind.__name__} (known: {', '.join(rules)})")
        if OmegaConf.is_missing(cfg, key):
            continue
        v = cfg[key]
        rule = rules.get(key, {})
        if isinstance(v, (DictConfig, ListConfig)):
            validate(v, full)
            if "each" in rule:
                for k, item in (v.items() if isinstance(v, DictConfig) else enumerate(v)):
                    _check(f"{full}.{k}" if isinstance(v, DictConfig) else f"{full}[{k}]", item, rule["each"])
        else:
            _check(full, v, rule)
