"""A workload's mix over LoRA adapters (``workload.lora``): each request names one adapter as
its ``model``, the name the engine serves it under (vLLM's ``--lora-modules NAME=PATH``).

Shares: ``shares`` (one weight per adapter, normalised), else ``dist``: ``uniform`` (1/n each)
or ``zipf`` (adapter of rank r, from 1 in the listed order: share = r^-s / sum_k k^-s, s =
``zipf_s``).  A request's adapter is drawn from a hash of (workload.seed, its session id, else
its request id): the same seed gives the same adapter to the same request whatever the order
of building or the worker, and every turn of a session goes to one adapter.
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Iterator

from loadgen.workloads.item import WorkItem


class AdapterMix:
    def __init__(self, adapters: list[str], shares: list[float], seed: int):
        self.adapters = list(adapters)
        total = sum(shares)
        self.shares = [w / total for w in shares]
        self._cum = []
        acc = 0.0
        for w in self.shares:
            acc += w
            self._cum.append(acc)
        self._cum[-1] = 1.0  # rounding never leaves a draw past the last adapter
        self.seed = int(seed)

    @classmethod
    def from_config(cls, lora, seed: int) -> AdapterMix | None:
        """From ``workload.lora`` (None: no adapters).  Raises ValueError naming the key."""
        adapters = [str(a) for a in (lora.adapters or [])]
        if not adapters:
            if lora.shares:
                raise ValueError("workload.lora.shares is set but workload.lora.adapters is empty")
            return None
        if any(not a.strip() for a in adapters) or len(set(adapters)) != len(adapters):
            raise ValueError(f"workload.lora.adapters={adapters}: names must be non-empty and distinct")
        if lora.shares is not None:
            shares = [float(w) for w in lora.shares]
            if len(shares) != len(adapters):
                raise ValueError(f"workload.lora.shares has {len(shares)} weights for {len(adapters)} adapters "
                                 f"(workload.lora.adapters={adapters}): one weight per adapter")
            if any(not w >= 0 for w in shares) or sum(shares) <= 0:
                raise ValueError(f"workload.lora.shares={shares}: weights must be >= 0 with a positive sum")
        elif lora.dist == "zipf":
            shares = [r ** -float(lora.zipf_s) for r in range(1, len(adapters) + 1)]
        else:
            shares = [1.0] * len(adapters)
        return cls(adapters, shares, seed)

    def pick(self, key: str) -> str:
        """The adapter of the request (or session) ``key``: a uniform draw from the hash, through
        the shares' cumulative sum."""
        h = hashlib.blake2b(f"{self.seed}:{key}".encode(), digest_size=8).digest()
        u = int.from_bytes(h, "big") / 2.0 ** 64
        return self.adapters[min(bisect.bisect_right(self._cum, u), len(self.adapters) - 1)]

    def assign(self, item: WorkItem) -> WorkItem:
        item.model = self.pick(item.session_id if item.session_id is not None else item.request_id)
        for c in item.companions:
            self.assign(c)
        return item


class WithAdapters:
    """A workload's items with their adapters set; its other attributes (a trace's ``table``,
    ``expected_turns``) are the workload's, and ``followup`` (later turns, a task's calls) sets
    the adapter of what it returns."""

    def __init__(self, items, mix: AdapterMix):
        self._items, self.mix = items, mix
        inner = getattr(items, "followup", None)
        if inner is not None:
            def followup(rec):
                nxt = inner(rec)
                if nxt is None:
                    return None
                if isinstance(nxt, list):
                    return [(mix.assign(it), wait) for it, wait in nxt]
                item, wait = nxt
                return mix.assign(item), wait
            self.followup = followup

    def __iter__(self) -> Iterator[WorkItem]:
        return (self.mix.assign(it) for it in self._items)

    def __getattr__(self, name):
        if name.startswith("_"):  # (unpickling looks up names before _items exists)
            raise AttributeError(name)
        return getattr(self._items, name)
