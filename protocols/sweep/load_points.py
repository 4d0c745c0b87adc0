"""Plans: a protocol config -> the ordered list of runs (load points) to execute.

``protocol=sweep`` runs each entry of ``protocol.load_points`` (a mapping merged over
``load``) against one engine kept up across them; with no list it is a single run of
``load``; ``protocol.repeats`` runs of each point, every repeat of a point under the same
label (replicates of it: ``repeat`` says which).  Plans are pure data so they can be
printed, resumed and tested without an engine.  A run (``RunSpec``) and its words are
``conf.load_point``: the machinery reads them too.
"""

from __future__ import annotations

import re

from omegaconf import DictConfig, OmegaConf

from conf.load_point import RunSpec


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.=-]+", "_", text).strip("_")


def load_label(load: dict) -> str:
    kind = load.get("kind")
    if kind == "concurrency":
        return f"concurrency={load.get('concurrency')}"
    if kind == "trace":
        return "trace" + (f" x{load.get('time_scale')}" if load.get("time_scale") not in (None, 1, 1.0) else "")
    return f"{kind} rate={load.get('rate')}"


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
