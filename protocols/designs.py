"""What the machinery needs to know of a protocol's plan (``protocol.name`` -> its design):
whether its configs run in blocks and which is the baseline, whether the quality gate is on by
default, and whether it ablates or promotes (what experiment.json's steps say it covered).
Pure; the machinery imports no protocol, so a protocol's run hands its design to the
machinery that asks (``harness.quality_gate.gate_enabled``, ``experiment_record.seven_steps``);
what each protocol runs and the records it writes are found through ``protocols.registry``,
whose protocols carry these designs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from protocols.ablation.plan import ablation_arms
from protocols.blocks import NamedConfig
from protocols.compare.plan import named_configs


@dataclass(frozen=True)
class Design:
    name: str
    # several named configs in blocks (protocol config -> them); None: one config, repeated in place
    configs: Callable[[Any], list[NamedConfig]] | None = None
    # the baseline among the configs (protocol config, their names -> it)
    baseline: Callable[[Any, list[str]], str] | None = None
    quality_gate: bool = False   # quality.enabled=null turns the gate on
    ablation: bool = False       # effects and interactions of its arms (its record: protocols.ablation.record)
    promotion: bool = False      # a candidate behind the proxy (its record: promote.json)

    @property
    def in_blocks(self) -> bool:
        return self.configs is not None


def _ablation_configs(protocol) -> list[NamedConfig]:
    return [nc for _, _, nc in ablation_arms(protocol)]


def _compare_baseline(protocol, names: list[str]) -> str:
    return protocol.baseline or next(iter(names), "")


DESIGNS: dict[str, Design] = {d.name: d for d in (
    Design("sweep"),
    Design("compare", configs=named_configs, baseline=_compare_baseline, quality_gate=True),
    Design("ablation", configs=_ablation_configs, baseline=lambda protocol, names: "baseline", quality_gate=True,
           ablation=True),
    Design("tune", quality_gate=True),
    Design("promote", promotion=True),
    Design("plan"),
    Design("profile"),
    Design("track"),
)}


def design_of(cfg) -> Design:
    """The design of the config's protocol (``cfg.protocol.name``: the schema allows only these)."""
    name = str(cfg.protocol.name)
    if name not in DESIGNS:
        raise ValueError(f"protocol={name!r} is not a known protocol (known: {', '.join(DESIGNS)})")
    return DESIGNS[name]
