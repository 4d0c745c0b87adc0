"""Configs in blocks, shared by the protocols that compare configs (compare, ablation).

A *block* runs every config once, each launched fresh, over all the load points, then
stopped; the configs' order inside a block is drawn from the experiment's ``seed``, so that a
drift of the machine falls on all configs alike, and each block is an independent replicate
(the engine's start is part of it).  Block b of config A and block b of config B are paired
for the statistics.

Plans are pure data: printed before anything starts (``--dry-run``), resumed, and tested
without an engine.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from conf.load_point import RunSpec


@dataclass
class NamedConfig:
    name: str
    overrides: list[str]


@dataclass
class SessionPlan:
    """One engine launch: a config in a block, over its load points (``runs``)."""
    config: str
    block: int
    position: int                    # its place in the block's order
    overrides: list[str]
    runs: list[RunSpec] = field(default_factory=list)

    @property
    def subdir(self) -> str:
        return f"{self.config}/block{self.block}"


def block_orders(names: list[str], blocks: int, seed: int, first_block: int = 0) -> list[list[str]]:
    """The configs' order in each block, randomised and counterbalanced: blocks come in cycles of
    k = len(names); each cycle draws (from ``(seed, cycle)``) a random order and assigns its k
    rotations to its k blocks in random order (a randomised Latin square), so over a complete
    cycle every config runs once in every position (first after a fresh boot, last, ...) and an
    effect of position cannot fall on one config.  A block's order does not depend on how many
    blocks were planned (convergence adds blocks one at a time)."""
    k = len(names)
    out = []
    for b in range(first_block, first_block + blocks):
        rng = np.random.default_rng([int(seed), 1_000_003, b // k])
        base, rotation = rng.permutation(k), rng.permutation(k)[b % k]
        out.append([names[base[(i + rotation) % k]] for i in range(k)])
    return out


def plan_sessions(configs: list[NamedConfig], runs: list[RunSpec], blocks: int, seed: int,
                  first_block: int = 0) -> list[SessionPlan]:
    """Every (block, config) session in the order they run, each with the same load points."""
    by_name = {c.name: c for c in configs}
    out = []
    for b, order in enumerate(block_orders([c.name for c in configs], blocks, seed, first_block), first_block):
        for pos, name in enumerate(order):
            out.append(SessionPlan(config=name, block=b, position=pos, overrides=list(by_name[name].overrides),
                                   runs=list(runs)))
    return out


def describe_plan(sessions: list[SessionPlan], base_overrides: list[str]) -> str:
    """The plan as text, for ``--dry-run`` and before a comparison starts."""
    lines = []
    if base_overrides:
        lines.append("every config: " + " ".join(base_overrides))
    configs: dict[str, list[str]] = {}
    for s in sessions:
        configs.setdefault(s.config, s.overrides)
    for name, ovs in configs.items():
        lines.append(f"config {name}: " + (" ".join(ovs) if ovs else "(the base config)"))
    points = [r.label for r in sessions[0].runs] if sessions else []
    lines.append(f"load points ({len(points)}): " + ", ".join(points))
    for b in sorted({s.block for s in sessions}):
        order = [s.config for s in sessions if s.block == b]
        lines.append(f"block {b}: " + " -> ".join(order) + "  (each launched fresh, over every load point)")
    return "\n".join(lines)
