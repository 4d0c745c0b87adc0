"""``protocol=tune protocol.screen=model``: every config of the space ranked on the engine's
scheduler model first, so that only the finalists are measured.

- The model: the base experiment (``protocol.base_experiment``: a finished sweep of the config
  with no knob set, open-loop runs) gives the request mix and the engine's recorded knobs; the
  scheduler model (``protocols.plan.scheduler``: Dynamo's replay) is timed by
  ``protocol.profile`` (else the ``perf_data.npz`` in the base experiment) and run by
  ``protocol.dynamo_python`` (else ``$TOKENFACTORY_DYNAMO_PYTHON``).
- Each config of the space's grid (every knob a key the model knows:
  ``protocols.plan.modelled.CONFIG_KNOBS``) is the base's knobs with the config's on top,
  replayed at a ladder of rates from ``protocol.search_low`` to ``protocol.search_high``, each
  ``1 + protocol.search_tolerance`` times the last (as fine as the measured search),
  ``protocol.screen_requests`` requests a rate (``protocols.plan.modelled.ladder_capacity``).
  Its modelled max load under the SLO is the highest rate whose point passes the run-level
  check (``ConfigCapacity.max_load``); its modelled objective, the figures at that point
  (``metrics.tune_verdict.modelled_figures``).
- The finalists: the ``protocol.finalists`` best feasible configs by the modelled objective
  (ties: the grid's order).  Every figure here is modelled and recorded as such
  (``source: modelled``); what the tune reports as its result is measured (``protocols.tune.run``).
"""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

from omegaconf import OmegaConf

from harness.errors import UserError
from metrics import tune_verdict
from metrics.slo import SLO
from protocols.plan import scheduler as sched
from protocols.plan.capacity import read_experiment
from protocols.plan.modelled import (
    CONFIG_KNOBS,
    describe_knobs,
    ladder_capacity,
    model_knobs,
    rate_ladder,
    recorded_knobs,
    recorded_layout,
)

SCREEN_FILE = "screen.json"


def check(cfg, knobs) -> None:
    """What the screen needs, checked before anything runs (ValueError naming the key)."""
    p = cfg.protocol
    unknown = [k.key for k in knobs if k.key not in CONFIG_KNOBS]
    if unknown:
        raise ValueError(f"protocol.space.{unknown[0]}: protocol.screen=model ranks knobs the scheduler model knows "
                         f"({', '.join(CONFIG_KNOBS)})")
    for k in knobs:
        k.grid()        # a range needs a step or integers: the screen visits every config
    if not p.base_experiment:
        raise ValueError("protocol.screen=model needs protocol.base_experiment: a finished sweep of the config with "
                         "no knob set (its requests and recorded knobs drive the model)")
    if cfg.load.kind not in ("constant", "poisson", "gamma"):
        raise ValueError(f"protocol.screen=model: load={cfg.load.kind} is closed-loop; the model is screened at "
                         "request rates (load=constant or poisson)")
    if not (p.search_low and p.search_high):
        raise ValueError("protocol.screen=model: give protocol.search_low and protocol.search_high (req/s): the "
                         "rates the model is screened at")


def base_capacity(folder: str):
    caps = read_experiment(folder)
    if len(caps) != 1:
        raise UserError(f"protocol.base_experiment={folder}: {len(caps)} configs ({', '.join(c.name for c in caps)}); "
                        "give a sweep of the one config the knobs change")
    return caps[0]


def screen(cfg, knobs) -> dict:
    """Every config of the grid on the model, ranked, with the finalists (module doc)."""
    p = cfg.protocol
    base = base_capacity(str(p.base_experiment))
    python = sched.dynamo_python(p.dynamo_python)
    profile = sched.find_profile(p.profile or p.base_experiment)
    if python is None or profile is None:
        raise UserError("protocol.screen=model needs the scheduler model: "
                        + "; ".join(w for w, ok in (("a profile (protocol.profile, or perf_data.npz in "
                                                     "protocol.base_experiment)", profile is not None),
                                                    ("the Dynamo venv (protocol.dynamo_python, "
                                                     "TOKENFACTORY_DYNAMO_PYTHON)", python is not None)) if not ok))
    recorded = recorded_knobs(base)
    workers, mode = recorded_layout(base)
    model = sched.SchedulerModel(python, profile, recorded, replica_workers=workers, router_mode=mode)
    rates = rate_ladder(float(p.search_low), float(p.search_high), float(p.search_tolerance))
    slo_cfg = OmegaConf.to_container(cfg.slo, resolve=True)
    slo = SLO.from_config(slo_cfg)
    cost = OmegaConf.to_container(cfg.cost, resolve=True)
    objective = str(p.objective)
    configs = []
    for combo in itertools.product(*(k.grid() for k in knobs)):
        params = {k.key: v for k, v in zip(knobs, combo)}
        try:
            mk = model_knobs(params, "protocol.space")
        except ValueError as e:
            raise UserError(str(e)) from None
        changed = dataclasses.replace(model, knobs={**recorded, **mk})
        try:
            cap = ladder_capacity(describe_knobs(mk), base, changed, rates, int(p.screen_requests),
                                  constant=cfg.load.kind == "constant", seed=int(cfg.seed))
        except (RuntimeError, ValueError) as e:
            raise UserError(f"protocol.screen=model, {describe_knobs(mk)}: {e}") from None
        load = cap.max_load(slo, 1, slo_cfg.get("min_attainment"))["mean"]
        entry = {"params": params, "source": "modelled", "engine_args": changed.knobs,
                 "max_load_under_slo": load, "feasible": load > 0}
        if load > 0:
            at = next(q for q in cap.points[1] if q.rate_rps == load)
            figs = tune_verdict.modelled_figures(slo, cost, load, at.ttft_s, at.tpot_s, at.output_tokens, at.failed)
            entry.update({k: figs[k] for k in ("goodput_rps", "cost_per_mtok_good", "goodput_per_dollar",
                                                "slo_attainment")})
            entry["objective"] = figs[objective]
        else:
            entry.update(objective=tune_verdict.study_value(None, objective),
                         why=f"no rate from {rates[0]:g} to {rates[-1]:g} req/s meets the SLO on the model")
        configs.append(entry)
    sign = 1 if tune_verdict.DIRECTIONS[objective] == "minimize" else -1
    ranked = sorted((i for i, c in enumerate(configs) if c["feasible"]), key=lambda i: (sign * configs[i]["objective"],
                                                                                       i))
    for rank, i in enumerate(ranked):
        configs[i]["rank"] = rank + 1
    finalists = [configs[i]["params"] for i in ranked[:int(p.finalists)]]
    return {"source": "modelled", "model": {**model.describe(), "recorded_knobs": recorded},
            "base_experiment": str(Path(str(p.base_experiment))), "base_config": base.name,
            "rates": rates, "requests_per_rate": int(p.screen_requests), "objective": objective,
            "configs": configs, "finalists": finalists}
