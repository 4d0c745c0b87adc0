"""The plan's candidates (``protocols.plan.run``, step 1 and 2 of its module doc): every config of
the finished experiments (``protocol.experiments``), configs of one experiment that differ only in
their deployment size merged into one candidate measured at several sizes, aiconfigurator's
estimated configs (``protocol.estimates``) with their checks, each candidate's cost profile and
replica model, the modelled configs (``protocol.modelled``) and the model's held-out residuals."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from omegaconf import OmegaConf

from conf.schema import typed
from harness import results_io
from harness.errors import UserError
from protocols.plan import scheduler as sched
from protocols.plan.capacity import ConfigCapacity, read_experiment
from protocols.plan.modelled import recorded_knobs, recorded_layout
from protocols.plan.residuals import DEFAULT as RESIDUALS_DEFAULT
from protocols.plan.residuals import Residuals, read_residuals
from protocols.plan.stretches import StretchSample

SIZE_KEYS = ("deployment.replicas", "deployment.placement")


def candidates(p) -> list[ConfigCapacity]:
    """The candidates of ``protocol.experiments`` (module doc), filtered by ``protocol.configs``."""
    if not p.experiments and not p.estimates:
        raise UserError("tokenfactory plan needs finished experiments: tokenfactory plan RESULTS_DIR ... "
                        "(or protocol.experiments=[DIR, ...]; or estimated configs, protocol.estimates=[...])")
    out = []
    for folder in p.experiments:
        caps = read_experiment(folder)
        exp = results_io.read_json(Path(folder) / results_io.EXPERIMENT, {})
        out += merge_sizes(Path(folder).name, caps, exp.get("configs") or {})
    out += estimated(p)
    names = [c.name for c in out]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        for c in out:
            if c.name in dup:
                c.name = f"{Path(c.origin).name}:{c.name}"
    if p.configs:
        want = [str(x) for x in p.configs]
        known = {c.name for c in out}
        missing = [w for w in want if w not in known]
        if missing:
            raise UserError(f"protocol.configs: {', '.join(missing)} not among the experiments' candidates "
                            f"({', '.join(sorted(known))})")
        out = [c for c in out if c.name in want]
    return out


def merge_sizes(folder: str, caps: list[ConfigCapacity], overrides: dict) -> list[ConfigCapacity]:
    """Configs that differ only in deployment size become one candidate (module doc)."""
    groups: dict[tuple, list[ConfigCapacity]] = {}
    for c in caps:
        rest = tuple(sorted(o for o in overrides.get(c.name, []) if not str(o).startswith(SIZE_KEYS)))
        groups.setdefault(rest, []).append(c)
    out = []
    for members in groups.values():
        sizes = [s for c in members for s in c.sizes]
        if len(members) == 1 or len(set(sizes)) != len(sizes):
            out += members
            continue
        first = members[0]
        merged = ConfigCapacity(
            name=folder if len(groups) == 1 else f"{folder}:{first.name}", source=first.source, origin=first.origin,
            points={s: pts for c in members for s, pts in c.points.items()},
            cold_start_s=min((c.cold_start_s for c in members), key=lambda x: (not x, 0)) or [],
            cost=first.cost, slo=first.slo, workload=first.workload,
            notes=[f"configs {', '.join(c.name for c in members)} of {first.origin} are one candidate measured at "
                   f"{', '.join(map(str, sorted(sizes)))} replicas"] + [n for c in members for n in c.notes])
        # a replica's cold start: the smallest deployment's (one replica starting, not a whole deployment)
        smallest = min(members, key=lambda c: c.sizes[0])
        merged.cold_start_s = list(smallest.cold_start_s)
        out.append(merged)
    return out


def estimated(p) -> list[ConfigCapacity]:
    """``protocol.estimates``: configs whose capacity aiconfigurator estimates (hardware not at
    hand), marked estimated wherever they appear (``protocols.plan.estimates``)."""
    if not p.estimates:
        return []
    from conf.schema import PlanEstimate
    from protocols.plan.estimates import estimated_capacity

    out = []
    for i, node in enumerate(p.estimates):
        key = f"protocol.estimates[{i}]"
        try:
            spec = typed(node, PlanEstimate)
        except Exception as e:  # noqa: BLE001 - OmegaConf names the key in its message
            raise UserError(f"{key}: {e}") from None
        out.append(estimated_capacity(spec, python=p.estimator_python, key=key))
    return out


def estimate_checks(p, cands: list[ConfigCapacity]) -> dict:
    """Per estimated candidate: its points beside their roofline bounds (an estimate faster
    than the bound is flagged) and, where measured runs of the same config exist, its error."""
    from conf.schema import PlanEstimate
    from protocols.plan.estimates import estimate_error, measured_counterparts

    out = {}
    measured = [c for c in cands if c.source == "measured"]  # an estimate is checked against measurements only
    for node in p.estimates or []:
        spec = typed(node, PlanEstimate)
        est = next((c for c in cands if c.source == "estimated" and c.name == spec.name), None)
        if est is None:
            continue
        pts = [{"in_flight": q.in_flight, "rate_rps": q.rate_rps, "ttft_ms": float(q.ttft_s[0]) * 1e3,
                "tpot_ms": float(q.tpot_s[0]) * 1e3, "roofline": q.roofline} for q in est.points.get(1, [])]
        errors = {m.name: estimate_error(est, m) for m in measured_counterparts(spec, measured)}
        out[spec.name] = {"origin": est.origin, "points": pts, "faster_than_roofline":
                          [q["in_flight"] for q in pts if (q["roofline"] or {}).get("faster_than_roofline")],
                          "error_against_measured": errors or None, "notes": est.notes}
    return out


def replica_models(p, cands: list[ConfigCapacity]) -> dict[str, tuple[dict, sched.SchedulerModel | None]]:
    """Per candidate, its replica model (``protocol.replica_model``; ``protocols.plan.scheduler``):
    ({"model", "reason", and for the scheduler its profile and engine args}, the scheduler
    model or None for processor sharing).  The profile: ``protocol.profile``, else a
    ``perf_data.npz`` in the candidate's experiment folder (a ``tokenfactory profile``'s)."""
    python = sched.dynamo_python(p.dynamo_python)
    given = sched.find_profile(p.profile)
    if p.profile and given is None:
        raise UserError(f"protocol.profile={p.profile}: no {sched.PROFILE_NPZ} there (a tokenfactory profile "
                        "folder or its perf_data.npz)")
    out = {}
    for c in cands:
        profile = given or (sched.find_profile(c.origin) if c.source != "estimated" else None)
        try:
            model, why = sched.choose(str(p.replica_model), profile, python)
        except ValueError as e:
            raise UserError(f"{c.name}: {e}") from None
        if model == "processor_sharing":
            out[c.name] = ({"model": model, "reason": why}, None)
            continue
        knobs = recorded_knobs(c)
        workers, mode = recorded_layout(c)
        s = sched.SchedulerModel(python, profile, knobs, replica_workers=workers, router_mode=mode,
                                 sample=StretchSample(float(p.replay_sample), float(p.replay_stretch_s),
                                                      float(p.replay_lead_s)))
        out[c.name] = ({"model": model, "reason": why, **s.describe(),
                        "knobs_from": "the runs' provenance.json" if knobs else "none recorded: the mocker's defaults",
                        "routing_note": "replica start, drain and bill times, and least-loaded routing, follow "
                                        "the processor-sharing model; each replica's requests are served by the "
                                        "scheduler"}, s)
    return out


def assign_costs(cands: list[ConfigCapacity], cfg) -> None:
    """Each candidate's cost profile: ``protocol.costs[name]`` (a conf/cost/ profile's name), else
    the profile its runs were priced with, else the plan's own ``cost``."""
    from conf.compose import compose_config

    node = cfg.protocol.costs
    if node is not None and not OmegaConf.is_dict(node):
        raise UserError(f"protocol.costs: expected a mapping config name -> cost profile, got {node!r}")
    given = OmegaConf.to_container(node, resolve=True) if node is not None else {}
    unknown = set(given) - {c.name for c in cands}
    if unknown:
        raise UserError(f"protocol.costs: {', '.join(sorted(unknown))} not among the candidates "
                        f"({', '.join(c.name for c in cands)})")
    own = OmegaConf.to_container(cfg.cost, resolve=True)
    for c in cands:
        if c.name in given:
            try:
                c.cost = OmegaConf.to_container(compose_config([f"cost={given[c.name]}"]).cost, resolve=True)
            except Exception as e:  # noqa: BLE001 - Hydra names the missing option in its message
                raise UserError(f"protocol.costs.{c.name}={given[c.name]}: {e}") from None
            c.notes.append(f"priced with cost={given[c.name]} (protocol.costs)")
        elif not c.cost:
            c.cost = own
            c.notes.append("its runs recorded no cost profile: priced with the plan's own cost=...")


def modelled_candidates(p, cands: list[ConfigCapacity], models: dict) -> list[ConfigCapacity]:
    """``protocol.modelled``: configs never run, each a candidate with other engine knobs served
    by the scheduler model with them (``protocols.plan.modelled``); ``models`` gets theirs."""
    from conf.schema import PlanModelled
    from protocols.plan.modelled import describe_knobs, model_knobs, modelled_capacity

    out = []
    by_name = {c.name: c for c in cands}
    for i, node in enumerate(p.modelled or []):
        key = f"protocol.modelled[{i}]"
        try:
            spec = typed(node, PlanModelled)
            knobs = model_knobs(spec.knobs, f"{key}.knobs")
        except Exception as e:  # noqa: BLE001 - OmegaConf and model_knobs name the key in their message
            raise UserError(f"{key}: {e}") from None
        if not knobs:
            raise UserError(f"{key}.knobs: give the knob(s) it changes, e.g. {{max_num_seqs: 32}}")
        base = by_name.get(spec.base)
        if base is None:
            raise UserError(f"{key}.base={spec.base}: not among the candidates ({', '.join(by_name)})")
        if base.source not in ("measured", "emulated"):
            raise UserError(f"{key}.base={spec.base}: a {base.source} candidate; a modelled config changes a "
                            "measured (or emulated) one")
        if spec.name in by_name or spec.name in models:
            raise UserError(f"{key}.name={spec.name}: already a candidate's name")
        info, model = models[base.name]
        if model is None:
            raise UserError(f"{key}: a modelled config needs the scheduler model for {base.name}, which has "
                            f"processor sharing ({info['reason']}): give protocol.profile and the Dynamo venv")
        changed = dataclasses.replace(model, knobs={**model.knobs, **knobs})
        try:
            cap = modelled_capacity(spec.name, base, changed, knobs)
        except (RuntimeError, ValueError) as e:
            raise UserError(f"{key}: {e}") from None
        what = {"base": base.name, "knobs": knobs, "base_knobs": dict(model.knobs)}
        models[spec.name] = ({**info, **changed.describe(), "knobs_from": f"{base.name}'s runs, then {key}.knobs "
                              f"({describe_knobs(knobs)})", "modelled": what}, changed)
        by_name[spec.name] = cap
        out.append(cap)
    return out


def read_model_error(p) -> Residuals | None:
    """The model's held-out residuals (``protocol.residuals``, null: the shipped default), or None
    where ``protocol.model_error=false``."""
    if not p.model_error:
        return None
    return read_residuals(str(p.residuals) if p.residuals else RESIDUALS_DEFAULT)
