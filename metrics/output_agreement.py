"""Agreement of two greedy outputs, token by token: the quality-matched control of the seed's
step 1 (a route that can change the model's outputs is compared with the baseline's outputs
on the same prompts) and of a shadow deployment's two sides.

For reference tokens ``a`` and candidate tokens ``b`` (token ids, or any comparable items):

- ``first_divergence``: the first position i where a[i] != b[i], or where one sequence ends
  before the other; ``None`` when they are identical;
- ``agreement``: matching positions / max(len(a), len(b)), position by position from the
  start (1.0 for identical sequences, and for two empty ones).  A shorter output counts its
  missing positions as disagreements, so stopping early is not agreement.

Greedy decoding is deterministic only up to the engine's numerics: the baseline against
itself (another block) gives the noise floor to read a threshold against.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class Agreement:
    agreement: float
    first_divergence: int | None
    matched: int
    length_a: int
    length_b: int

    def to_dict(self) -> dict:
        return asdict(self)


def first_divergence(a: Sequence, b: Sequence) -> int | None:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return None if len(a) == len(b) else n


def token_agreement(a: Sequence, b: Sequence) -> Agreement:
    """Position-by-position agreement of ``b`` with ``a`` (module doc)."""
    longest = max(len(a), len(b))
    matched = sum(1 for x, y in zip(a, b) if x == y)
    return Agreement(matched / longest if longest else 1.0, first_divergence(a, b), matched, len(a), len(b))


def set_agreement(pairs: Sequence[tuple[Sequence, Sequence]]) -> dict:
    """Over a prompt set: mean agreement (each prompt weighs the same), the share of outputs
    identical, and the median and minimum first divergence among those that diverge."""
    each = [token_agreement(a, b) for a, b in pairs]
    if not each:
        return {"prompts": 0, "mean_agreement": None, "identical_share": None,
                "median_first_divergence": None, "min_first_divergence": None}
    div = [e.first_divergence for e in each if e.first_divergence is not None]
    return {"prompts": len(each), "mean_agreement": float(np.mean([e.agreement for e in each])),
            "identical_share": sum(e.first_divergence is None for e in each) / len(each),
            "median_first_divergence": float(np.median(div)) if div else None,
            "min_first_divergence": int(min(div)) if div else None}
