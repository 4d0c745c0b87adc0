"""A load point, in the words every layer shares: a run of a plan (``RunSpec``), its title,
its x value (``offered_load``) and the repeat an old folder's label names (``split_repeat``).

Pure, and below both the protocols that plan load points (``protocols.sweep.load_points``)
and the machinery that runs and reads them (``harness.point``, ``harness.report``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field


@dataclass
class RunSpec:
    """One run: a load point (``label``, the same for each of its repeats) and which repeat.
    A sweep's repeats of a point are replicates of it: grouped by ``label`` wherever runs are
    compared or aggregated; each still has its own folder."""
    index: int
    label: str
    load: dict                       # the load config of this run (load group merged with the point)
    repeat: int = 0
    subdir: str | None = None        # folder under the sweep's output_dir; None = output_dir itself
    tags: dict = field(default_factory=dict)
    repeats: int = 1                 # how many repeats of this point the plan has

    @property
    def title(self) -> str:
        """The run for people (progress, logs, MLflow): the point, and which repeat if several."""
        return run_title(self.label, self.repeat, self.repeats)


def run_title(label: str, repeat: int, repeats: int) -> str:
    return f"{label} (repeat {repeat})" if repeats > 1 else label


_REPEAT_SUFFIX = re.compile(r"^(.*) #(\d+)$")


def split_repeat(label: str) -> tuple[str, int | None]:
    """A load point's label and the repeat it names: folders written before repeats were
    replicates labelled each repeat ``"<point> #<r>"``; read that as (point, r)."""
    m = _REPEAT_SUFFIX.match(label)
    return (m.group(1), int(m.group(2))) if m else (label, None)


def offered_load(load: dict) -> float | None:
    """The x value of a load point: requests/s offered (open loop) or concurrency (closed loop)."""
    if load.get("kind") == "concurrency":
        return float(load["concurrency"]) if load.get("concurrency") is not None else None
    return float(load["rate"]) if load.get("rate") is not None else None
