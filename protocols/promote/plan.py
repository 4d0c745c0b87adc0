"""Step 7's plan and its stage machine: shadow, then growing canary shares, a gate at the end
of each stage, guards that roll back at once.

Pure logic (no clock, no network): ``protocols.promote.run`` feeds it the time, the candidate's
request count, gate results and guard trips, and applies what it decides.

- A stage is ready for its gate once it has run ``min_duration_s`` and the candidate has served
  (or, in shadow, run) ``min_requests`` requests; at ``max_duration_s`` it is gated whatever it
  has.
- Gate ``advance``: the next stage starts (after the last one: ``promote``).  ``rollback``: the
  candidate is worse beyond a margin with confidence.  ``extend``: not shown either way yet; the
  stage is gated again once it has run another ``min_duration_s`` (at least ``regate_s``) and at
  ``max_duration_s``, where an undecided gate rolls back: a candidate is promoted only on
  evidence.
- A guard trip rolls back at once, mid-stage.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from omegaconf import OmegaConf


@dataclass
class Stage:
    name: str
    mode: str             # shadow | canary
    share: float          # the candidate's share of callers (canary)
    mirror: float         # share of candidate-served requests also run on the incumbent
    min_requests: int
    min_duration_s: float
    max_duration_s: float

    @property
    def proxy_mode(self) -> tuple[str, float, float]:
        return self.mode, self.share, self.mirror


def plan_stages(protocol_cfg) -> list[Stage]:
    """``protocol.stages`` -> stages with names, checked (errors name the key)."""
    raw = OmegaConf.to_container(protocol_cfg.stages, resolve=True) if not isinstance(protocol_cfg.stages, list) \
        else protocol_cfg.stages
    if not raw:
        raise ValueError("protocol.stages: at least one stage is needed")
    stages, seen = [], set()
    for i, s in enumerate(raw):
        s = dict(s)
        key = f"protocol.stages[{i}]"
        mode = s.get("mode", "canary")
        share = float(s.get("share", 0.0))
        if mode == "canary" and share <= 0:
            raise ValueError(f"{key}.share={share}: a canary stage needs a share > 0 (0 is a shadow stage)")
        if mode == "shadow" and share:
            raise ValueError(f"{key}.share={share}: a shadow stage serves every caller from the incumbent; "
                             "give mode=canary for a share")
        mirror = float(s.get("mirror", 0.0))
        if mode == "canary" and share >= 1.0 and mirror <= 0:
            raise ValueError(f"{key}: share=1 leaves the incumbent no requests to be compared with on the same "
                             "period; give it a mirror > 0 (a share of the requests also run on the incumbent)")
        name = s.get("name") or ("shadow" if mode == "shadow" else f"canary_{share * 100:g}")
        if name in seen:
            raise ValueError(f"{key}.name={name!r} is used twice")
        seen.add(name)
        lo, hi = float(s.get("min_duration_s", 60.0)), float(s.get("max_duration_s", 600.0))
        if lo > hi:
            raise ValueError(f"{key}: min_duration_s={lo:g} > max_duration_s={hi:g}")
        stages.append(Stage(name, mode, share, mirror, int(s.get("min_requests", 64)), lo, hi))
    return stages


@dataclass
class Decision:
    t_s: float             # seconds since the promotion started
    stage: str
    action: str            # start | advance | extend | rollback | promote | end
    reason: str
    numbers: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)


class StageMachine:
    """``state``: running, promoted, rolled_back, or ended (traffic stopped before a decision)."""

    def __init__(self, stages: list[Stage], regate_s: float = 10.0):
        self.stages = stages
        self.regate_s = regate_s
        self.i = 0
        self.state = "running"
        self.started_s = 0.0
        self.next_look_s: float | None = None
        self.looks = 0
        self.decisions: list[Decision] = []

    @property
    def stage(self) -> Stage:
        return self.stages[self.i]

    @property
    def done(self) -> bool:
        return self.state != "running"

    def start(self, t_s: float) -> Decision:
        return self._begin(t_s, "start", f"stage {self.stage.name} ({self._describe(self.stage)})")

    def _begin(self, t_s: float, action: str, reason: str, numbers: dict | None = None) -> Decision:
        self.started_s = t_s
        self.next_look_s = None
        self.looks = 0
        return self._log(Decision(t_s, self.stage.name, action, reason, numbers or {}))

    @staticmethod
    def _describe(s: Stage) -> str:
        if s.mode == "shadow":
            return "shadow: every caller on the incumbent, a copy to the candidate"
        return f"canary: {s.share:.0%} of callers on the candidate" + (f", {s.mirror:.0%} of theirs mirrored"
                                                                     if s.mirror else "")

    def _log(self, d: Decision) -> Decision:
        self.decisions.append(d)
        return d

    def gate_due(self, t_s: float, candidate_requests: int) -> bool:
        """Whether the stage's gate should run now."""
        if self.done:
            return False
        s, ran = self.stage, t_s - self.started_s
        if ran >= s.max_duration_s:
            return True
        if self.next_look_s is not None:
            return t_s >= self.next_look_s
        return ran >= s.min_duration_s and candidate_requests >= s.min_requests

    def on_gate(self, t_s: float, outcome: str, reasons: list[str], numbers: dict | None = None) -> Decision:
        """Apply a gate's outcome (``advance`` | ``extend`` | ``rollback``)."""
        s, ran = self.stage, t_s - self.started_s
        self.looks += 1
        numbers = {**(numbers or {}), "look": self.looks, "stage_s": ran}
        why = "; ".join(reasons)
        if outcome == "rollback":
            self.state = "rolled_back"
            return self._log(Decision(t_s, s.name, "rollback", f"gate: {why}", numbers))
        if outcome == "extend":
            if ran >= s.max_duration_s:
                self.state = "rolled_back"
                return self._log(Decision(t_s, s.name, "rollback", f"no decision by max_duration_s="
                                          f"{s.max_duration_s:g}: {why}", numbers))
            self.next_look_s = min(t_s + max(s.min_duration_s, self.regate_s), self.started_s + s.max_duration_s)
            return self._log(Decision(t_s, s.name, "extend", f"gate undecided, again at "
                                      f"{self.next_look_s:.0f} s: {why}", numbers))
        if outcome != "advance":
            raise ValueError(f"unknown gate outcome {outcome!r}")
        if self.i == len(self.stages) - 1:
            self.state = "promoted"
            return self._log(Decision(t_s, s.name, "promote", f"gate: {why}", numbers))
        self._log(Decision(t_s, s.name, "advance", f"gate: {why}", numbers))
        self.i += 1
        return self._begin(t_s, "start", f"stage {self.stage.name} ({self._describe(self.stage)})")

    def on_guard(self, t_s: float, trips: list[dict]) -> Decision:
        self.state = "rolled_back"
        return self._log(Decision(t_s, self.stage.name, "rollback",
                                  "guard: " + "; ".join(t["reason"] for t in trips), {"trips": trips}))

    def on_end(self, t_s: float, why: str) -> Decision:
        self.state = "ended"
        return self._log(Decision(t_s, self.stage.name, "end", why))
