"""Greedy outputs of the same request on both sides, paired for ``metrics.output_agreement``.

Texts are cut into tokens by the served model's tokenizer when one is known, else compared
character by character (said so in ``unit``).  A request whose two sides have not both finished
``ok`` is not compared.  At most ``keep`` pairs are held (the oldest are dropped first).
"""

from __future__ import annotations

from collections import OrderedDict


class PairBook:
    def __init__(self, tokenizer=None, keep: int = 100_000):
        self.tokenizer = tokenizer
        self.unit = "tokens" if tokenizer is not None else "characters"
        self.keep = keep
        self._open: OrderedDict[str, dict] = OrderedDict()

    def tokens(self, text: str) -> list:
        if self.tokenizer is None:
            return list(text)
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    def add(self, request_id: str, side: str, text: str | None, ok: bool) -> tuple[list, list] | None:
        """One side's output; returns (incumbent tokens, candidate tokens) once both are in."""
        entry = self._open.setdefault(request_id, {})
        entry[side] = text if ok else None
        if len(entry) < 2:
            while len(self._open) > self.keep:
                self._open.popitem(last=False)
            return None
        del self._open[request_id]
        a, b = entry.get("incumbent"), entry.get("candidate")
        if a is None or b is None:
            return None
        return self.tokens(a), self.tokens(b)
