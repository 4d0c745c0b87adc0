"""The ablation protocol (step 5 of the seed's protocol): baseline -> each optimisation alone
-> all combined (optionally the full factorial, or chosen pairs).

``protocol=ablation`` names a baseline (a list of overrides) and optimisations (name -> the
overrides that turn it on).  Each *arm* is a config of the comparison protocol (its blocks,
its order drawn from the seed, its statistics): ``baseline``, ``+name`` for each optimisation
alone, ``+a+b`` for pairs, and ``all`` for every one together.  The analysis
(``metrics.ablation``) reports each arm's effect as a ratio to the baseline, and the combined
effect beside the product of the single effects: their ratio is the interaction (1 when the
speed-ups multiply, below 1 when the bottleneck moved).
"""

from __future__ import annotations

import itertools
import re

from protocols.blocks import NamedConfig

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,40}$")
BASELINE = "baseline"
ALL = "all"


def arm_name(opts: tuple[str, ...], every: tuple[str, ...]) -> str:
    if not opts:
        return BASELINE
    if len(opts) == len(every) and len(every) > 1:
        return ALL
    return "+" + "+".join(opts)


def ablation_arms(protocol) -> list[tuple[str, tuple[str, ...], NamedConfig]]:
    """``(arm name, optimisations on, config)`` for every arm, the baseline first."""
    base = [str(o) for o in (protocol.get("baseline") or [])]
    opts = protocol.get("optimisations") or {}
    if not opts:
        raise ValueError("protocol.optimisations: an ablation needs at least one named optimisation, e.g. "
                         "'protocol.optimisations={prefix_caching: [\"engine.features.prefix_caching=true\"]}'")
    names = tuple(str(n) for n in opts)
    for n in names:
        if not _NAME.match(n) or n in (BASELINE, ALL):
            raise ValueError(f"protocol.optimisations.{n}: a name is letters, digits, '_', '.', '-' "
                             f"(not {BASELINE!r} or {ALL!r})")
        for o in opts[n] or []:
            if "=" not in str(o):
                raise ValueError(f"protocol.optimisations.{n}: {o!r} is not an override (key=value)")
    combos: list[tuple[str, ...]] = [()] + [(n,) for n in names]
    if protocol.get("factorial"):
        combos += [c for k in range(2, len(names) + 1) for c in itertools.combinations(names, k)]
    else:
        for pair in protocol.get("pairs") or []:
            pair = tuple(str(x) for x in pair)
            unknown = [x for x in pair if x not in names]
            if unknown or len(pair) < 2:
                raise ValueError(f"protocol.pairs: {list(pair)} must name two or more of {list(names)}")
            combos.append(tuple(n for n in names if n in pair))
        if len(names) > 1:
            combos.append(names)
    seen, arms = set(), []
    for c in combos:
        if c in seen:
            continue
        seen.add(c)
        overrides = base + [str(o) for n in c for o in (opts[n] or [])]
        arms.append((arm_name(c, names), c, NamedConfig(arm_name(c, names), overrides)))
    return arms
