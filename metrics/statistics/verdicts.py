"""Who wins a comparison: a difference's interval against a margin."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

from metrics.statistics.differences import Difference
from metrics.statistics.estimate import Estimate

OUTCOMES = ("a_better", "b_better", "equivalent", "no_significant_difference", "insufficient_data")


@dataclass(frozen=True)
class Verdict:
    """``outcome``: one of :data:`OUTCOMES`; ``text`` for people; ``significant``: the interval
    excludes zero (true also for an effect too small to win); ``judged``: ``relative`` (the
    interval of (B - A)/A against ``margin``) or ``absolute`` (a side's mean was 0: B - A against
    ``margin``, in the metric's unit)."""

    outcome: str
    text: str
    relative: Estimate
    margin: float
    higher_is_better: bool
    significant: bool = False
    confidence: float = 0.95
    judged: str = "relative"

    def to_dict(self) -> dict:
        d = asdict(self)
        d["relative"] = self.relative.to_dict()
        return d


def verdict(diff: Difference | Estimate, margin: float = 0.02, higher_is_better: bool = True,
            confidence: float = 0.95, labels: tuple[str, str] | None = None,
            absolute_margin: float | None = None) -> Verdict:
    """Who wins, from the relative difference r = (B - A)/A and its interval [lo, hi].

    - winner when the interval excludes 0 (lo > 0 or hi < 0) AND |r| > ``margin``: B when r > 0
      and higher is better (throughput, goodput) or r < 0 and lower is better (latency, cost);
    - ``equivalent`` when -margin <= lo and hi <= margin (a significant effect smaller than the
      margin lands here or in the next case, never as a winner);
    - ``no_significant_difference`` otherwise (``significant`` tells an interval that excludes
      0 but is not inside the margin);
    - ``insufficient_data`` when the interval is missing (fewer than 2 blocks, undefined ratio).

    Where A's or B's mean is 0 (``Difference.judged == "absolute"``: an error rate that was 0) the
    relative difference is undefined; the same rules then apply to the absolute difference
    B - A and its interval, with ``absolute_margin`` (in the metric's unit; default ``margin``:
    for a rate, 0.02 = 2 percentage points).

    ``confidence`` must be the interval's own level: a verdict cannot change it.
    """
    absolute = isinstance(diff, Difference) and diff.judged == "absolute"
    rel = diff.absolute if absolute else (diff.relative if isinstance(diff, Difference) else diff)
    if absolute:
        margin = margin if absolute_margin is None else absolute_margin
    if labels is None:
        labels = diff.labels if isinstance(diff, Difference) else ("A", "B")
    if not math.isclose(rel.confidence, confidence):
        raise ValueError(f"the interval is at {rel.confidence:.0%}, the verdict asked for {confidence:.0%}")
    la, lb = labels
    v, lo, hi = rel.value, rel.low, rel.high
    conf = f"{confidence:.0%}" if round(confidence * 100, 6).is_integer() else f"{confidence:.2%}"  # 99.55%
    judged = "absolute" if absolute else "relative"

    def make(outcome: str, text: str, significant: bool = False) -> Verdict:
        return Verdict(outcome, text, rel, margin, higher_is_better, significant, confidence, judged)

    if rel.n < 2 or any(math.isnan(x) for x in (v, lo, hi)):
        return make("insufficient_data", f"insufficient data to compare {lb} with {la} ({rel.note or 'no interval'})")
    if absolute:
        detail = (f"{lb} - {la} = {v:+.4g} [{lo:+.4g}, {hi:+.4g}] at {conf}, n={rel.n} (a mean of 0: the absolute "
                  f"difference is judged); margin ±{margin:.4g}; {'higher' if higher_is_better else 'lower'} is better")
    else:
        detail = (f"({lb} - {la})/{la} = {v:+.1%} [{lo:+.1%}, {hi:+.1%}] at {conf}, n={rel.n}; "
                  f"margin ±{margin:.1%}; {'higher' if higher_is_better else 'lower'} is better")
    significant = lo > 0 or hi < 0
    if significant and abs(v) > margin:
        b_wins = (v > 0) == higher_is_better
        winner, loser = (lb, la) if b_wins else (la, lb)
        # the improvement in the winner's favour, as a magnitude and its interval
        mlo, mhi = (lo, hi) if v > 0 else (-hi, -lo)
        size = f"{abs(v):.4g} [{mlo:.4g}, {mhi:.4g}]" if absolute else f"{abs(v):.1%} [{mlo:.1%}, {mhi:.1%}]"
        return make("b_better" if b_wins else "a_better", f"{winner} better than {loser} by {size} ({detail})", True)
    if lo >= -margin and hi <= margin:
        within = f"{margin:.4g}" if absolute else f"{margin:.0%}"
        return make("equivalent", f"{la} and {lb} equivalent within {within} ({detail})", significant)
    if significant:
        text = (f"no practically significant difference: significant at {conf} "
                f"but the effect is below the margin ({detail})")
    else:
        text = f"no significant difference at {conf} ({detail})"
    return make("no_significant_difference", text, significant)

