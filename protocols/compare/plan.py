"""The comparison protocol (step 6 of the seed's protocol): named configs run in blocks.

``protocol=compare`` names two or more configs, each a list of Hydra overrides applied on
top of the command's own (``engine=vllm``, ``engine.features.max_num_seqs=64``, ...); every
config runs the same workload, load points and SLO.  A *block* runs every config once, each
launched fresh, over all the load points, then stopped; the configs' order inside a block
is drawn from the experiment's ``seed``, so that a drift of the machine falls on all configs
alike, and each block is an independent replicate (the engine's start is part of it).  Block
b of config A and block b of config B are paired for the statistics.

Here: the configs by name.  The blocks and their order: ``protocols.blocks`` (shared with the
ablation).
"""

from __future__ import annotations

import re

from protocols.blocks import NamedConfig

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def named_configs(protocol) -> list[NamedConfig]:
    """``protocol.configs`` (name -> list of override strings) as checked ``NamedConfig`` s."""
    configs = protocol.get("configs") or {}
    if len(configs) < 2:
        raise ValueError("protocol.configs: a comparison needs at least two named configs, e.g. "
                         "'protocol.configs={small: [\"engine.features.max_num_seqs=4\"], "
                         "big: [\"engine.features.max_num_seqs=64\"]}'")
    out = []
    for name, overrides in configs.items():
        if not _NAME.match(str(name)):
            raise ValueError(f"protocol.configs.{name}: a config name is letters, digits, '_', '.', '-' "
                             "(it names a folder)")
        ovs = [str(o) for o in (overrides or [])]
        for o in ovs:
            if "=" not in o:
                raise ValueError(f"protocol.configs.{name}: {o!r} is not an override (key=value or group=option)")
            if o.split("=", 1)[0].lstrip("+~").startswith(("protocol", "hydra", "output_dir")):
                raise ValueError(f"protocol.configs.{name}: {o!r}: a config may not change the protocol, "
                                 "hydra or output_dir (every config runs the same plan)")
        out.append(NamedConfig(str(name), ovs))
    return out
