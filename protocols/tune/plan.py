"""The tune protocol: search the knob space for the cheapest config that meets the SLO.

``protocol=tune`` gives a search space (``protocol.space``: a config key -> a list of choices,
or a range ``{low, high, log, step}``, both ends included), a budget of suggestions
(``protocol.trials``), a sampler (``tpe``, ``grid``, ``random``) and an objective.  An Optuna
study (``protocols.tune.run`` runs it, ask and tell) suggests the configs from the space as
distributions (``search_space``); each trial is a sweep with ``search=slo``, judged by
``metrics.tune_verdict`` (feasible, the objective, the best trial, the Pareto front).

Here: the space, its distributions and sampler, and the trials' table.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.samplers import BaseSampler, GridSampler, RandomSampler, TPESampler

RANGE_FIELDS = ("low", "high", "log", "step")
MAX_GRID = 10000


@dataclass(frozen=True)
class Knob:
    """One dimension of the space: ``choices``, or a range from ``low`` to ``high`` (both in)."""
    key: str
    choices: tuple | None = None
    low: float | None = None
    high: float | None = None
    log: bool = False
    step: float | None = None
    integer: bool = False

    def grid(self) -> list:
        """Every value the grid sampler visits (a range needs a step, or integers)."""
        if self.choices is not None:
            return list(self.choices)
        if self.integer and not self.log:
            step = int(self.step or 1)
            n = (int(self.high) - int(self.low)) // step + 1
            values = list(range(int(self.low), int(self.high) + 1, step))
        elif not self.integer and self.step is not None:
            n = int(round((self.high - self.low) / self.step)) + 1
            values = [round(self.low + i * self.step, 12) for i in range(n)]
        else:
            raise ValueError(f"protocol.space.{self.key}: protocol.sampler=grid needs choices, integers or a step "
                             f"(a {'log ' if self.log else ''}range has no grid)")
        if n > MAX_GRID:
            raise ValueError(f"protocol.space.{self.key}: {n} grid values (more than {MAX_GRID}); give a step")
        return values


def _scalar(v) -> bool:
    return isinstance(v, (str, int, float, bool)) and not (isinstance(v, float) and not math.isfinite(v))


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def parse_knob(key: str, spec) -> Knob:
    name = f"protocol.space.{key}"
    if isinstance(spec, (list, tuple)):
        choices = tuple(spec)
        if not choices:
            raise ValueError(f"{name}: an empty list of choices")
        bad = [c for c in choices if not _scalar(c)]
        if bad:
            raise ValueError(f"{name}: choices must be strings, numbers or booleans (Hydra's choice() and "
                             f"optuna's categorical take nothing else), got {bad[0]!r}")
        if len({(type(c), c) for c in choices}) != len(choices):
            raise ValueError(f"{name}: a choice is listed twice: {list(choices)}")
        return Knob(key, choices=choices)
    if isinstance(spec, dict):
        unknown = set(spec) - set(RANGE_FIELDS)
        if unknown:
            raise ValueError(f"{name}: unknown field(s) {sorted(unknown)}; a range has {', '.join(RANGE_FIELDS)}")
        low, high, step, log = spec.get("low"), spec.get("high"), spec.get("step"), spec.get("log", False)
        if not (_number(low) and _number(high)):
            raise ValueError(f"{name}: a range needs numbers low and high, got low={low!r} high={high!r}")
        if not low < high:
            raise ValueError(f"{name}: low={low} must be below high={high}")
        if not isinstance(log, bool):
            raise ValueError(f"{name}.log={log!r}: expected true or false")
        if log and low <= 0:
            raise ValueError(f"{name}: a log range needs low > 0, got {low}")
        if step is not None:
            if not (_number(step) and step > 0):
                raise ValueError(f"{name}.step={step!r}: expected a number > 0")
            if log:
                raise ValueError(f"{name}: give log or step, not both (optuna samples a log range without steps)")
        integer = all(isinstance(v, int) and not isinstance(v, bool) for v in (low, high) + (() if step is None
                                                                                             else (step,)))
        if integer and step is not None and (high - low) % step:
            raise ValueError(f"{name}: high - low = {high - low} is not a multiple of step={step}")
        if not integer and step is not None and abs((high - low) / step - round((high - low) / step)) > 1e-9:
            raise ValueError(f"{name}: high - low = {high - low:g} is not a multiple of step={step:g}")
        return Knob(key, low=low, high=high, log=log, step=step, integer=integer)
    raise ValueError(f"{name}: expected a list of choices or a range {{low, high, log, step}}, got {spec!r}")


def parse_space(space) -> list[Knob]:
    """``protocol.space`` (a mapping, plain containers) -> its knobs; ValueError naming the key."""
    if not space:
        raise ValueError("protocol.space: give the knobs to search, e.g. 'protocol.space={engine.features."
                         "max_num_seqs: [4, 8, 16], engine.features.max_num_batched_tokens: {low: 256, high: 2048, "
                         "log: true}}'")
    if not isinstance(space, dict):
        raise ValueError(f"protocol.space: expected a mapping of config key -> choices or range, got {space!r}")
    knobs = []
    for key, spec in space.items():
        key = str(key)
        if key.startswith(("+", "~", "hydra.")) or not key.replace("_", "").replace(".", "").isalnum():
            raise ValueError(f"protocol.space.{key}: a knob is an existing config key such as "
                             "engine.features.max_num_seqs")
        if key.split(".", 1)[0] in ("protocol", "output_dir"):
            raise ValueError(f"protocol.space.{key}: the tune's own settings cannot be tuned")
        knobs.append(parse_knob(key, spec))
    return knobs


def grid_size(knobs: list[Knob]) -> int:
    return math.prod(len(k.grid()) for k in knobs)


# ------------------------------------------------------------------------------------ the study
def override_literal(v) -> str:
    """A value in Hydra's override grammar (strings quoted): a trial's params as overrides."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return repr(v)
    if "'" not in v:
        return f"'{v}'"
    if '"' not in v:
        return f'"{v}"'
    raise ValueError(f"choice {v!r} holds both quote characters; Hydra's override syntax cannot quote it")


def distribution(knob: Knob, grid: bool = False) -> BaseDistribution:
    """The knob as an Optuna distribution, both ends of a range included: categorical over its
    choices (for the grid sampler, over every grid value), else an integer or float range, on a
    log scale or stepped."""
    if knob.choices is not None or grid:
        return CategoricalDistribution(list(knob.choices if knob.choices is not None else knob.grid()))
    if knob.integer:
        return IntDistribution(int(knob.low), int(knob.high), log=knob.log, step=int(knob.step or 1))
    return FloatDistribution(float(knob.low), float(knob.high), log=knob.log, step=knob.step)


def search_space(knobs: list[Knob], grid: bool = False) -> dict[str, BaseDistribution]:
    return {k.key: distribution(k, grid) for k in knobs}


STARTUP_TRIALS = 3


def startup_trials(given: int | None) -> int:
    """TPE's random suggestions before it models the results: optuna's default of 10 would
    leave a budget of 8 purely random; fixed rather than a share of the budget, so a resumed
    tune with a bigger budget replays the same suggestions."""
    return int(given) if given else STARTUP_TRIALS


class AskTellGridSampler(GridSampler):
    """Optuna's grid sampler, for a study driven by ask and tell: Optuna's stops the study once
    the grid is visited, which only ``study.optimize`` allows; here the tune's budget (at most
    the grid's size) ends it."""

    def after_trial(self, study, trial, state, values) -> None:
        return None


def make_sampler(sampler: str, knobs: list[Knob], seed: int, startup: int | None = None) -> BaseSampler:
    """``protocol.sampler`` as Optuna's sampler, seeded: ``tpe`` (``startup_trials`` random
    suggestions first), ``random``, or ``grid`` (every combination of the knobs' grid values,
    in a seeded order)."""
    if sampler == "grid":
        return AskTellGridSampler({k.key: k.grid() for k in knobs}, seed=seed)
    if sampler == "random":
        return RandomSampler(seed=seed)
    if sampler == "tpe":
        return TPESampler(seed=seed, n_startup_trials=startup_trials(startup))
    raise ValueError(f"protocol.sampler={sampler!r}: expected tpe, grid or random")


def describe_sampler(sampler: str, seed: int, startup: int | None = None) -> str:
    """The sampler as the record and the plan name it."""
    if sampler == "tpe":
        return f"optuna TPESampler(seed={seed}, n_startup_trials={startup_trials(startup)})"
    return f"optuna {'GridSampler' if sampler == 'grid' else 'RandomSampler'}(seed={seed})"


# ------------------------------------------------------------------------------------ the table
def _fmt(v) -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return "inf" if math.isinf(v) else f"{v:.4g}"
    return str(v)


def format_table(record: dict) -> str:
    """The tune's trials as a table: params, feasibility, max load, goodput, cost, objective."""
    keys = [k["key"] for k in record["space"]]
    best = (record.get("best") or {}).get("trial")
    front = {t["trial"] for t in record.get("pareto_front", [])}
    head = ["trial", *keys, "feasible", "max load", "goodput rps", "cost/Mtok good", record["objective"], "note"]
    rows = []
    for t in record["trials"]:
        marks = (["best"] if t["trial"] == best else []) + (["pareto"] if t["trial"] in front else [])
        note = ", ".join(marks + [x for x in (t.get("why"), t.get("note")) if x])
        rows.append([str(t["trial"]), *(_fmt(t["params"].get(k)) for k in keys), _fmt(t.get("feasible")),
                     _fmt(t.get("max_load_under_slo")), _fmt(t.get("goodput_rps")),
                     _fmt(t.get("cost_per_mtok_good")), _fmt(t.get("objective") if t.get("feasible") else None),
                     note[:90]])
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [head, *rows]]
    return "\n".join(lines)


def _grid(head: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in [head, *rows])


def screen_table(screened: dict) -> str:
    """The screen (``protocols.tune.screen``): every config on the model, each figure labelled modelled."""
    keys = list(screened["configs"][0]["params"]) if screened["configs"] else []
    finalists = {json.dumps(f, sort_keys=True) for f in screened["finalists"]}
    head = ["rank", *keys, "max load (modelled)", f"{screened['objective']} (modelled)", "note"]
    rows = [[_fmt(c.get("rank")), *(_fmt(c["params"][k]) for k in keys), _fmt(c["max_load_under_slo"]),
             _fmt(c["objective"] if c["feasible"] else None),
             ("finalist: to be measured" if json.dumps(c["params"], sort_keys=True) in finalists
              else "modelled only, not measured") if c["feasible"] else (c.get("why") or "")[:70]]
            for c in sorted(screened["configs"], key=lambda c: (c.get("rank") or math.inf))]
    return (f"screen on the scheduler model ({len(screened['configs'])} configs at {len(screened['rates'])} rates, "
            f"{screened['requests_per_rate']} requests each): MODELLED figures, not measurements\n" + _grid(head, rows))


def finalists_table(record: dict) -> str:
    """Each finalist's modelled figures beside its measured ones, and whether they disagree."""
    s = record["screen"]
    keys = [k["key"] for k in record["space"]]
    head = ["trial", *keys, "max load modelled", "measured", f"{record['objective']} modelled", "measured",
            "disagrees"]
    rows = []
    for f in s["finalists"]:
        me = f["measured"] or {}
        rows.append([_fmt(f["trial"]), *(_fmt(f["params"][k]) for k in keys), _fmt(f["modelled"]["max_load_under_slo"]),
                     _fmt(me.get("max_load_under_slo")), _fmt(f["modelled"]["objective"]),
                     _fmt(me.get("objective") if me.get("feasible") else None),
                     "not validated" if f["disagrees"] is None and f["measured"] else _fmt(f["disagrees"])])
    return (f"finalists, modelled vs measured (model: {s['validated']}; search tolerance "
            f"{record['search']['tolerance']:.0%}):\n" + _grid(head, rows))
