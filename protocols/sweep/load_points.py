"""Plans: a protocol config -> the ordered list of runs (load points) to execute.

``protocol=sweep`` runs each entry of ``protocol.load_points`` (a mapping merged over
``load``) against one engine kept up across them; with no list it is a single run of
``load``; ``protocol.repeats`` runs of each point, every repeat of a point under the same
label (replicates of it: ``repeat`` says which).  Plans are pure data so they can be
printed, resumed and tested without an engine.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from omegaconf import DictConfig, OmegaConf


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


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", text).strip("_")


def load_label(load: dict) -> str:
    kind = load.get("kind")
    if kind == "concurrency":
        return f"concurrency={load.get('concurrency')}"
    if kind == "trace":
        return "trace" + (f" x{load.get('time_scale')}" if load.get("time_scale") not in (None, 1, 1.0) else "")
    return f"{kind} rate={load.get('rate')}"


def offered_load(load: dict) -> float | None:
    """The x value of a load point: requests/s offered (open loop) or concurrency (closed loop)."""
    if load.get("kind") == "concurrency":
        return float(load["concurrency"]) if load.get("concurrency") is not None else None
    return float(load["rate"]) if load.get("rate") is not None else None


def plan_runs(cfg: DictConfig, repeats: int | None = None, points: list | None = None) -> list[RunSpec]:
    """The load points of one engine session; ``repeats`` (default ``protocol.repeats``) runs of
    each, in a sweep; a comparison repeats whole blocks instead and passes 1.  ``points``
    (default ``protocol.load_points``) are those a probe placed."""
    base = OmegaConf.to_container(cfg.load, resolve=True)
    if points is None:
        points = OmegaConf.to_container(cfg.protocol.load_points, resolve=True)
    repeats = int(cfg.protocol.repeats if repeats is None else repeats)
    return runs_from_points(base, points, repeats)


def runs_from_points(base: dict, points: list, repeats: int = 1, prefix: str = "") -> list[RunSpec]:
    """A run per point (a mapping merged over ``base``, or a bare number: the rate, or the
    concurrency for a closed loop), ``repeats`` times; folders under ``prefix`` when given."""
    if repeats < 1:
        raise ValueError(f"protocol.repeats must be >= 1, got {repeats}")
    if points is None or len(points) == 0:
        runs = [dict(base)]
        single = repeats == 1 and not prefix
    else:
        runs = []
        for i, p in enumerate(points):
            if isinstance(p, (int, float)):  # shorthand: a bare number is the rate (or concurrency)
                p = {"concurrency" if base.get("kind") == "concurrency" else "rate": p}
            if not isinstance(p, dict):
                raise ValueError(f"protocol.load_points[{i}]: expected a mapping like {{rate: 2}}, got {p!r}")
            unknown = set(p) - set(base) - {"kind"}
            if unknown:
                raise ValueError(f"protocol.load_points[{i}]: unknown load field(s) {sorted(unknown)}; "
                                 f"known: {sorted(base)}")
            runs.append({**base, **p})
        single = False
    out = []
    for r in range(repeats):
        for load in runs:
            idx = len(out)
            label = load_label(load)
            # the folder keeps the repeat in its name (as it always had: an interrupted sweep resumes)
            folder = label + (f" #{r}" if repeats > 1 else "")
            sub = None if single else prefix + f"{idx:02d}-{_slug(folder.replace(' ', '-'))}"
            out.append(RunSpec(index=idx, label=label, load=load, repeat=r, subdir=sub, repeats=repeats))
    return out
