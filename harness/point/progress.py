"""A point's tqdm bars (``progress=true``): the requests being built ahead, then those finished."""

from __future__ import annotations

import sys


class Progress:
    """tqdm bars (``progress=true``): the requests being built ahead, then those finished."""

    def __init__(self, on: bool, label: str, total: int | None):
        self.on = on
        self.label = label                   # "[index/points] title"
        self.total = total                   # the requests to send (None: bound by duration)
        self.bars: list = []
        self.done_bar = None
        self.counts = {"ok": 0, "fail": 0}

    def _bar(self, **kw):
        from tqdm import tqdm

        bar = tqdm(file=sys.stderr, dynamic_ncols=True, **kw)
        self.bars.append(bar)
        return bar

    def preparing(self, total: int | None):
        """The per-request tick of building requests ahead (loadgen.prepare)."""
        bar = self._bar(total=total, desc=f"{self.label}: preparing", unit="req", leave=False) if self.on else None
        return bar.update if bar is not None else (lambda _n: None)

    def on_done(self, rec) -> None:
        self.counts["ok" if rec.status == "ok" else "fail"] += 1
        if not self.on:
            return
        if self.done_bar is None:  # made at the first answer, after any preparation bar
            self.done_bar = self._bar(total=self.total, desc=self.label, unit="req")
        self.done_bar.update(1)
        self.done_bar.set_postfix(ok=self.counts["ok"], failed=self.counts["fail"], refresh=False)

    def close(self) -> None:
        for bar in self.bars:
            bar.close()

