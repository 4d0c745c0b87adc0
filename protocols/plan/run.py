"""``tokenfactory plan EXPERIMENT... [overrides]`` (``protocol=plan``): the fleet for a traffic
source, sized and priced from finished experiments' measured capacity; no engine starts.

1. Candidates (``candidates``): every config of the experiments (``protocol.experiments``);
   configs of one experiment that differ only in their deployment size
   (``deployment.replicas``/``deployment.placement``) are one candidate measured at several
   sizes, named after the experiment's folder (the scaling the deployments issue measured).
2. The traffic (``protocols.plan.traffic``), the SLOs (``slo.*`` then ``protocol.slos``), the
   policy (``deployment.autoscale``, then each ``protocol.variants`` entry on top of it), and
   per candidate its capacity under each SLO (the policy's ``capacity_rps`` unless set) and
   its cold start.
3. One simulation per (SLO or variant, candidate) on every block's runs, and one per block
   resample (``protocols.plan.capacity.resamples``), in parallel processes.  The verdict folds
   in the model's held-out error beside them (``protocol.residuals``, ``protocols.plan.residuals``;
   ``metrics.plan_pick``) and states the chance that the runner-up is the cheaper.
4. plan.json (``protocols.plan.record``) and plan.html (``harness.report.plan``); with
   ``protocol.validate=RUN_DIR`` also the prediction's error against a real replay
   (``protocols.plan.validation``).
"""

from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from omegaconf import OmegaConf

from conf.schema import Autoscale, Slo, typed
from engines.autoscale_policy import ScalingPolicy
from harness import results_io
from harness.errors import UserError
from harness.lifecycle import Ending, Lifecycle, run_lifecycle
from harness.mlflow_log import MlflowLogger
from metrics.answer import plan_answer
from metrics.cost import fleet_cost, per_million
from metrics.plan_pick import runner_up_text
from metrics.slo import SLO, run_meets_slo
from protocols.plan import record
from protocols.plan.answer import answer_plan
from protocols.plan.candidates import (
    assign_costs,
    candidates,
    estimate_checks,
    modelled_candidates,
    read_model_error,
    replica_models,
)
from protocols.plan.capacity import ConfigCapacity, resamples
from protocols.plan.caveats import (
    CANNOT_KEEP_UP,
    IMPOSSIBLE_ESTIMATE,
    NOT_PLANNED,
    OTHER_MIX,
    OUTSIDE_MEASUREMENTS,
    Finding,
    plan_caveats,
    plan_label,
)
from protocols.plan.fleet import calibrate
from protocols.plan.modelled import residuals_error
from protocols.plan.residuals import DEFAULT as RESIDUALS_DEFAULT
from protocols.plan.residuals import Residuals, read_residuals
from protocols.plan.simulations import Job, simulate_all
from protocols.plan.traffic import Traffic, build_traffic

PLAN_FILE = results_io.PLAN


def run_plan(cfg, overrides: list[str] | None = None, explicit: frozenset[str] = frozenset()) -> Path:
    """The plan (module doc) on the run lifecycle (``harness.lifecycle``): no engine starts and no
    parent run of its own; plan.json and its page, then the answer printed last."""
    p = cfg.protocol
    out = Path(cfg.output_dir or Path("results") / str(cfg.experiment) / ("plan-" + results_io.new_run_id()))
    started = time.time()
    inputs = plan_inputs(cfg, explicit)
    plans, jobs = plan_jobs(inputs, int(p.resamples), int(p.seed))
    if not any(pl["configs"] for pl in plans):
        raise UserError("no candidate can be planned:\n  " + "\n  ".join(inputs.warnings))
    print(f"plan: {len(inputs.cands)} candidate(s), {len(plans)} plan(s), {len(jobs)} simulations of "
          f"{len(inputs.traffic)} requests over {inputs.traffic.duration_s:g} s", flush=True)
    if p.dry_run:
        print_dry_run(inputs, plans)
        return out
    steps = PlanRun(cfg, out, inputs, plans, jobs, list(overrides or []), started)
    return run_lifecycle(cfg, out, steps, options=Lifecycle(parent=None, resume_hint=None))


@dataclass
class PlanInputs:
    """What the plan simulates, assembled and checked before any simulation (module doc, 1 and 2)."""
    cands: list[ConfigCapacity]
    residuals: Residuals | None         # the model's held-out residuals (None: protocol.model_error=false)
    model_err: dict | None              # the validated error beside modelled configs
    models: dict                        # candidate -> (its replica model described, the scheduler model or None)
    traffic: Traffic
    slos: list[tuple[dict, SLO]]
    variants: list[tuple[str, list[str], Autoscale]]
    initial: int                        # replicas at the start
    estimates: dict                     # estimate_checks
    warnings: list[str]
    findings: list[Finding]             # the warnings with their kind, candidate and plan (protocols.plan.caveats)

    def warn(self, kind: str, name: str, plan: int | None, text: str, said: str | None = None) -> None:
        """A warning: ``said`` (else ``text``) in plan.json's ``warnings``, ``text`` its finding's words."""
        self.warnings.append(said or text)
        self.findings.append(Finding(kind, name, plan, text))


def plan_inputs(cfg, explicit: frozenset[str]) -> PlanInputs:
    p = cfg.protocol
    cands = candidates(p)
    residuals = read_model_error(p)       # a bad file fails before any simulation
    assign_costs(cands, cfg)
    if p.calibrate:
        for c in cands:
            c.corrections = calibrate(c, seed=int(p.seed))
    models = replica_models(p, cands)
    cands += modelled_candidates(p, cands, models)
    # the validated error beside modelled configs: the scheduler's cases in the residuals (read for
    # them even where protocol.model_error=false keeps the verdict on the capacity's resamples alone)
    model_err = residuals_error(residuals if residuals is not None or not p.modelled else
                                read_residuals(str(p.residuals) if p.residuals else RESIDUALS_DEFAULT))
    traffic = build_traffic(cfg)
    slos = plan_slos(cfg, cands, explicit)
    variants = plan_variants(cfg)
    estimates = estimate_checks(p, cands)
    initial = int(cfg.deployment.replicas) if cfg.deployment.kind == "replicas" else 1
    # the traffic's own notes are in plan.json's traffic
    inputs = PlanInputs(cands, residuals, model_err, models, traffic, slos, variants, initial, estimates, [], [])
    for name, chk in estimates.items():
        if chk["faster_than_roofline"]:
            inputs.warn(IMPOSSIBLE_ESTIMATE, name, None, f"{name} (estimated): faster than the roofline bound at "
                        f"{chk['faster_than_roofline']} in flight: an impossible estimate")
    return inputs


def plan_jobs(inputs: PlanInputs, limit: int, seed: int) -> tuple[list[dict], list[Job]]:
    """One plan per SLO (and per variant, at the first SLO), and its simulations: each candidate on
    every block's runs, and on each resample of its blocks; ``inputs.warnings`` gets what is skipped."""
    jobs, plans = [], []
    for si, (slo_cfg, slo) in enumerate(inputs.slos):
        for vname, vover, auto in inputs.variants:
            if si > 0 and vname != "base":
                continue           # variants are planned at the first SLO only
            plan = {"slo": slo_cfg, "variant": vname, "variant_overrides": vover, "initial_replicas": inputs.initial,
                    "configs": {}, "skipped": {}}
            for cap in inputs.cands:
                jobs += candidate_jobs(inputs, plan, len(plans), cap, auto, slo, limit, seed)
            plans.append(plan)
    return plans, jobs


def candidate_jobs(inputs: PlanInputs, plan: dict, index: int, cap: ConfigCapacity, auto: Autoscale, slo: SLO,
                   limit: int, seed: int) -> list[Job]:
    """A candidate's entry in ``plan`` and its simulations (none: skipped, and why)."""
    slo_cfg = plan["slo"]
    why, policy, capacity = policy_for(cap, auto, slo, slo_cfg)
    if why:
        plan["skipped"][cap.name] = why
        inputs.warn(NOT_PLANNED, cap.name, index, why, said=f"{cap.name} at {_slo_text(slo_cfg)}: {why}")
        return []
    model, scheduler = inputs.models[cap.name]
    plan["configs"][cap.name] = {"policy": policy.record(), "capacity": capacity, "source": cap.source,
                                 "replica_model": model}
    if cap.source == "modelled":
        plan["configs"][cap.name]["modelled"] = model["modelled"]
    for kind, text in check_inputs(cap, inputs.traffic, policy, capacity):
        inputs.warn(kind, cap.name, index, text)
    # the policy's capacity is the measured one unless set: each resample measures its own
    sized = auto.capacity_rps is None
    jobs = [Job(index, cap.name, None, 1.0, cap, policy, slo, slo_cfg, sized, scheduler)]
    for j, (blocks, w) in enumerate(resamples(cap.blocks, limit, seed)):
        if len(cap.blocks) > 1:
            jobs.append(Job(index, cap.name, blocks, w, cap, policy, slo, slo_cfg, sized, scheduler))
            if scheduler is None:
                # the same resample on a redrawn day: pick_wrong's SLO check (protocols.plan.day_draws)
                jobs.append(Job(index, cap.name, blocks, w, cap, policy, slo, slo_cfg, sized, scheduler, day=j))
    return jobs


def print_dry_run(inputs: PlanInputs, plans: list[dict]) -> None:
    for c in inputs.cands:
        print(f"  {c.name}: {c.source} from {c.origin}, sizes {c.sizes}, blocks {c.blocks}")
    print_caveats(caveats_of(inputs, {"plans": plans}))
    print("dry run: nothing simulated, nothing written")


class PlanRun:
    """The plan's steps on the run lifecycle: the simulations, plan.json and its page; its answer."""

    def __init__(self, cfg, out: Path, inputs: PlanInputs, plans: list[dict], jobs: list[Job], overrides: list[str],
                 started: float):
        self.cfg, self.out, self.inputs, self.plans, self.jobs = cfg, out, inputs, plans, jobs
        self.overrides, self.started = overrides, started

    def run_steps(self, parent: MlflowLogger | None) -> None:
        p, inputs = self.cfg.protocol, self.inputs
        results = simulate_all(self.jobs, inputs.traffic, str(p.routing), inputs.initial, int(p.seed),
                               int(p.workers))
        resampled = fill_plans(self.plans, self.jobs, results, float(p.confidence), inputs)
        for plan, rs in zip(self.plans, resampled):
            pick_cheapest(plan, rs, inputs, p)
        doc = self.plan_doc()
        doc["answer"] = plan_answer(doc).to_dict()   # in plan.json before its page: the page opens with it
        self.out.mkdir(parents=True, exist_ok=True)
        results_io.write_json(self.out / PLAN_FILE, doc)
        print_plan(doc)
        from harness.report.plan import write_plan_page
        page = write_plan_page(self.out)
        print(f"plan: {self.out / PLAN_FILE}\nreport: {page}", flush=True)

    def record_as(self, status: str) -> None:
        return None   # plan.json is its record; no experiment.json (it runs nothing)

    def ending(self, status: str) -> Ending:
        return Ending(answer=answer_plan(self.out))

    def plan_doc(self) -> dict:
        """plan.json (``protocols.plan.record``), with the validation against a replay where asked."""
        p, inputs, plans = self.cfg.protocol, self.inputs, self.plans
        doc = {"kind": "plan", "output_dir": str(self.out), "created_unix": self.started, "elapsed_s": None,
               "traffic": inputs.traffic.describe(), "routing": str(p.routing), "initial_replicas": inputs.initial,
               "confidence": float(p.confidence), "min_effect": float(p.min_effect), "resamples": int(p.resamples),
               "candidates": {c.name: {**describe_candidate(c), "replica_model": inputs.models[c.name][0]}
                              for c in inputs.cands},
               "plans": plans, "answers": record.answers(plans), "estimates": inputs.estimates,
               "cost_lower_bound": record.cost_lower_bound(plans),
               "model_error": ({"applied": True, **inputs.residuals.describe()} if inputs.residuals is not None else
                               {"applied": False, "why": "protocol.model_error=false: the capacity's resamples alone"}),
               "warnings": sorted(set(inputs.warnings)),
               "overrides": self.overrides}
        model_err = inputs.model_err
        if p.validate:
            from protocols.plan.validation import validate
            doc["validation"] = validate(Path(str(p.validate)), plans[0], SLO.from_config(plans[0]["slo"]),
                                         inputs.traffic)
            if model_err is None:
                model_err = own_model_error(doc)
        mark_modelled(doc, model_err)
        doc["caveats"] = caveats_of(inputs, doc)
        doc["elapsed_s"] = time.time() - self.started
        return doc


def caveats_of(inputs: PlanInputs, doc: dict) -> list[dict]:
    """plan.json's ``caveats``: its warnings once per kind, ranked (``protocols.plan.caveats``)."""
    return [c.to_dict() for c in plan_caveats(inputs.findings, doc, lambda plan: plan_label(plan, _slo_text))]


def print_caveats(caveats: list[dict]) -> None:
    """After the plans, before the answer: one line a kind, its rank said (as ``harness.caveats.console_lines``)."""
    if caveats:
        print("warnings, by what they change:")
        for c in caveats:
            print(f"  [{c['rank']}] {c['text']}")


def fill_plans(plans: list[dict], jobs: list[Job], results: list[dict], confidence: float,
               inputs: PlanInputs) -> list[dict[str, list]]:
    """Each plan entry's figures from its simulations: the point estimate's, and its interval over
    the resamples; returns per plan each config's resamples (figure, weight) for the verdict."""
    for job, res in zip(jobs, results):
        res.update(costs(job.capacity, res, job.policy))
        entry = plans[job.plan]["configs"][job.name]
        if job.day is not None:
            entry.setdefault("redrawn", []).append(res)
        elif job.blocks is None:
            entry["point"] = res
        else:
            entry.setdefault("resampled", []).append((res, job.weight))
    out = []
    for index, plan in enumerate(plans):
        resampled = {}
        for name, entry in plan["configs"].items():
            point, rs, days = entry.pop("point"), entry.pop("resampled", []), entry.pop("redrawn", [])
            # each resample's own SLO check: the chance the pick is wrong counts a config missing it in its plan,
            # judged on the resample's redrawn day where there is one (record.redrawn_day_check)
            resampled[name] = [({**{m: r.get(m) for m in record.PLAN_METRICS}, "meets_slo": meets(r, plan["slo"]),
                                 **record.redrawn_day_check(r, days[i] if i < len(days) else None,
                                                            meets(days[i], plan["slo"]) if i < len(days) else None,
                                                            float(np.sum(inputs.traffic.output_tokens)))}, w)
                               for i, (r, w) in enumerate(rs)]
            entry.update(metrics=record.config_entry(point, resampled[name], confidence),
                         meets_slo=meets(point, plan["slo"]), slo_met_percentiles=point["slo_met"],
                         outside_measurements_share=point["outside_measurements_share"],
                         outside_measurements=point["outside_measurements_share"] > 0,
                         scale_ups=point["scale_ups"], scale_downs=point["scale_downs"],
                         start_delay_s=point["start_delay_s"], cost=point["cost"],
                         replay_sample=point.get("replay_sample"),
                         timeline=point["timeline"], decisions=point["decisions"],
                         resamples=len(rs))
            said = keep_up(point, entry["policy"])
            entry["warnings"] = [w for _, w in said]
            for kind, w in said:
                inputs.warn(kind, name, index, w, said=f"{name} ({plan['variant']}, {_slo_text(plan['slo'])}): {w}")
        out.append(resampled)
    return out


def pick_cheapest(plan: dict, resampled: dict[str, list], inputs: PlanInputs, p) -> None:
    """Each config's model error and cost resamples, then the plan's cheapest config and how sure."""
    factors = {}
    for name, entry in plan["configs"].items():
        entry["model_error"] = model_error_for(inputs.residuals, entry["replica_model"]["model"])
        # each block resample's cost and weight: the verdict's probability recomputes from these
        entry["cost_resamples"] = [[r["cost_per_mtok_good"], w] for r, w in resampled[name]]
        # and pick_wrong from these: each resample's SLO check and cost on its redrawn day
        entry["meets_slo_resamples"] = [r.get("meets_slo_redrawn", r.get("meets_slo")) for r, _ in resampled[name]]
        entry["redrawn_day_costs"] = [r.get("cost_redrawn", r["cost_per_mtok_good"]) for r, _ in resampled[name]]
        factors[name] = entry["model_error"]["factors"]
        entry["metrics"]["cost_per_mtok_good"]["interval_with_model_error"] = record.model_error_interval(
            resampled[name], factors[name], float(p.confidence))
    random = {c.name: random_draws(len(c.blocks), int(p.resamples)) for c in inputs.cands}
    plan["cheapest"] = record.cheapest(plan["configs"], resampled, float(p.confidence), float(p.min_effect),
                                       factors=factors, random=random)


# ------------------------------------------------------------------------------ modelled configs
def own_model_error(doc: dict) -> dict | None:
    """This plan's validation as the scheduler model's error, where its validated candidate ran on it."""
    from metrics.model_error import validated_error

    val = doc["validation"]
    model = (doc["candidates"].get(val["config"]) or {}).get("replica_model") or {}
    if model.get("model") != "scheduler":
        return None
    return validated_error(val["rows"], f"this plan's validation: {val['config']} against {val['run']}")


def mark_modelled(doc: dict, err: dict | None) -> None:
    """Every modelled candidate and plan entry carries the validated error, or "not validated";
    a cheapest verdict that falls on a modelled config says it was never run."""
    from metrics.model_error import describe

    for c in doc["candidates"].values():
        if c["source"] == "modelled":
            c["replica_model"]["modelled"].update(validated_error=err, validated=describe(err))
    for plan in doc["plans"]:
        for name, e in plan["configs"].items():
            if e["source"] == "modelled":
                e["modelled"] = doc["candidates"][name]["replica_model"]["modelled"]
        pick = plan["cheapest"].get("config")
        if pick and plan["configs"].get(pick, {}).get("source") == "modelled":
            plan["cheapest"]["modelled"] = True
            plan["cheapest"]["verdict"] += (f" (modelled, never run: {describe(err)}; measure it before acting on it, "
                                            "e.g. protocol=tune)")


# ------------------------------------------------------------------------------ inputs
def model_error_for(residuals: Residuals | None, model: str) -> dict:
    """A plan config's model error: its replica model's held-out cases and their cost factors
    (``metrics.plan_pick.cost_factor``), or why it has none (its verdict then stands on the
    capacity's resamples alone)."""
    if residuals is None:
        return {"model": model, "cases": [], "factors": [], "why": "protocol.model_error=false"}
    f = residuals.factors(model)
    out = {"model": model, "cases": f.cases, "factors": f.values, "file": residuals.path,
           "held_out": residuals.held_out}
    if not f.values:
        out["why"] = f"no held-out case of the {model} model in {residuals.path}: the capacity's resamples alone"
    return out


def random_draws(blocks: int, limit: int) -> bool:
    """Whether ``protocols.plan.capacity.resamples`` draws at random (more distinct multisets of
    ``blocks`` blocks than ``limit``) rather than enumerating the exact bootstrap."""
    return blocks > 1 and limit > 0 and math.comb(2 * blocks - 1, blocks) > limit


def plan_slos(cfg, cands: list[ConfigCapacity], explicit: frozenset[str] = frozenset()) -> list[tuple[dict, SLO]]:
    """``slo.*`` (where the command line sets it, or the candidates' experiments ran with
    different SLOs), else the SLO the experiments all ran with; then ``protocol.slos``."""
    base = OmegaConf.to_container(cfg.slo, resolve=True)
    recorded = {json.dumps(c.slo, sort_keys=True) for c in cands if c.slo}
    if not any(k == "slo" or k.startswith("slo.") for k in explicit) and len(recorded) == 1:
        base = {**base, **json.loads(recorded.pop())}
    out = [(base, SLO.from_config(base))]
    for i, extra in enumerate(cfg.protocol.slos or []):
        if not isinstance(extra, (dict, type(cfg.slo))) and not OmegaConf.is_dict(extra):
            raise UserError(f"protocol.slos[{i}]={extra!r}: expected a mapping of slo fields ({{ttft_ms: 500}})")
        try:
            merged = OmegaConf.to_container(OmegaConf.merge(OmegaConf.structured(Slo), base, extra), resolve=True)
        except Exception as e:  # noqa: BLE001 - OmegaConf raises several kinds; the key is in the message
            raise UserError(f"protocol.slos[{i}]: {e}") from None
        out.append((merged, SLO.from_config(merged)))
    return out


def plan_variants(cfg) -> list[tuple[str, list[str], Autoscale]]:
    base = cfg.deployment.autoscale
    out = [("base", [], typed(base, Autoscale))]
    given = cfg.protocol.variants
    if given is not None and not OmegaConf.is_dict(given):
        raise UserError(f"protocol.variants: expected a mapping name -> list of deployment.autoscale overrides, "
                        f"got {given!r}")
    for name, over in (OmegaConf.to_container(given, resolve=True) if given is not None else {}).items():
        if not isinstance(over, list):
            raise UserError(f"protocol.variants.{name}: expected a list of deployment.autoscale overrides "
                            f"(['cold_start_s=10']), got {over!r}")
        try:
            node = OmegaConf.merge(base, OmegaConf.from_dotlist([str(o).removeprefix("deployment.autoscale.")
                                                                 for o in over]))
            out.append((str(name), [str(o) for o in over], typed(node, Autoscale)))
        except Exception as e:  # noqa: BLE001
            raise UserError(f"protocol.variants.{name}: {e}") from None
    return out


def policy_for(cap: ConfigCapacity, auto: Autoscale, slo: SLO, slo_cfg: dict):
    """(why it cannot be planned or "", the policy, the capacity it was sized by)."""
    size = cap.sizes[0]
    capacity = cap.max_load(slo, size, slo_cfg.get("min_attainment"))
    capacity["size"] = size
    if capacity["mean"] <= 0:
        lo = capacity["measured_range"][0]
        return (f"no measured point meets the SLO ({_slo_text(slo_cfg)}): its lowest load, {lo:.3g} req/s per "
                f"replica at {size} replica(s), already fails; measure lower loads (protocol.search_low) or relax "
                "the SLO", None, capacity)
    if capacity["mean"] >= capacity["measured_range"][1]:
        capacity["note"] = ("the SLO holds at every measured load: the capacity is at least this (outside the "
                            "measurements above it)")
    try:
        policy = ScalingPolicy(auto, measured_capacity_rps=capacity["mean"], measured_cold_start_s=cap.cold_start())
    except ValueError as e:
        return str(e), None, capacity
    if policy.cold_start_s is None:
        return ("no measured cold start (engine_startup_s) in its runs: set deployment.autoscale.cold_start_s",
                None, capacity)
    return "", policy, capacity


def check_inputs(cap: ConfigCapacity, traffic: Traffic, policy: ScalingPolicy,
                 capacity: dict) -> list[tuple[str, str]]:
    """What makes the plan leave the measurements or the policy fall behind, said up front: (its
    kind, ``protocols.plan.caveats``; its words)."""
    w = []
    longest = max(int(p.prompt_tokens.max()) for pts in cap.points.values() for p in pts if p.prompt_tokens.size)
    over = float((traffic.prompt_tokens > longest).mean()) if len(traffic) else 0.0
    if over > 0:
        w.append((OUTSIDE_MEASUREMENTS,
                  f"{cap.name}: {over:.1%} of the traffic's prompts are longer than any measured one "
                  f"({longest} tokens): served outside the measurements"))
    mp = [np.median(p.prompt_tokens) for pts in cap.points.values() for p in pts if p.prompt_tokens.size]
    tp = float(np.median(traffic.prompt_tokens)) if len(traffic) else 0.0
    if mp and not (0.5 * min(mp) <= tp <= 2 * max(mp)):
        w.append((OTHER_MIX,
                  f"{cap.name}: the traffic's median prompt ({tp:.0f} tokens) is far from the measured runs' "
                  f"({min(mp):.0f}..{max(mp):.0f}): its capacity was measured on another length mix"))
    auto = policy.autoscale
    _, peak = traffic.rate_profile(max(auto.window_s, 1.0))
    top = float(peak.max()) if peak.size else 0.0
    max_cap = auto.max_replicas * (policy.capacity_rps or 0)
    if top > max_cap > 0:
        w.append((CANNOT_KEEP_UP,
                  f"{cap.name}: the traffic's peak ({top:.3g} req/s over {auto.window_s:g} s) is above "
                  f"max_replicas={auto.max_replicas} x capacity {policy.capacity_rps:.3g} req/s = {max_cap:.3g}: the "
                  "policy cannot keep up at the peak (raise deployment.autoscale.max_replicas)"))
    measured_max = max(cap.sizes) * capacity["measured_range"][1]
    if top > measured_max:
        w.append((OUTSIDE_MEASUREMENTS,
                  f"{cap.name}: the traffic's peak ({top:.3g} req/s) is above every measured load "
                  f"({capacity['measured_range'][1]:.3g} req/s per replica at up to {max(cap.sizes)} replicas): "
                  "the peak's intervals are outside the measurements"))
    return w


def keep_up(point: dict, policy: dict) -> list[tuple[str, str]]:
    """A simulated plan entry's own warnings: (its kind, ``protocols.plan.caveats``; its words)."""
    w = []
    tl = point["timeline"]
    rates, paid = np.asarray(tl["rate_rps"]), np.asarray(tl["replicas_paid"])
    cap = policy.get("capacity_rps") or 0
    at_max = (paid >= policy["max_replicas"]) & (rates > policy["max_replicas"] * cap) if cap else np.zeros(0, bool)
    if at_max.any():
        w.append((CANNOT_KEEP_UP,
                  f"the policy could not keep up for {at_max.sum() * tl['bucket_s']:g} s: at max_replicas="
                  f"{policy['max_replicas']} with arrivals above their capacity"))
    if point["outside_measurements_share"] > 0:
        w.append((OUTSIDE_MEASUREMENTS,
                  f"{point['outside_measurements_share']:.1%} of requests were served outside the measurements "
                  "(more replicas, more in flight, a higher rate or a longer prompt than any measured run): its "
                  "intervals are marked as outside the measurements"))
    return w


def meets(point: dict, slo_cfg: dict) -> bool:
    """A plan meets the SLO as a run does: the run-level check (``metrics.slo.run_meets_slo``)
    over its simulated requests (one never served counts as failed)."""
    slo = SLO.from_config(slo_cfg)
    return run_meets_slo([] if point["slo_met"] else ["the percentiles"], completed=int(point["completed"]),
                         failed=int(point["requests"]) - int(point["completed"]), percentile=slo.percentile,
                         attainment=point["slo_attainment"], min_attainment=slo_cfg.get("min_attainment"))[0]


def costs(cap: ConfigCapacity, res: dict, policy: ScalingPolicy) -> dict:
    if not cap.cost:
        return {"cost": None, "cost_total": math.nan, "cost_per_mtok_good": math.nan, "headroom_cost": math.nan}
    c = fleet_cost(cap.cost, res["paid_replica_seconds"], res["window_s"])
    one = fleet_cost(cap.cost, 3600.0, 3600.0)["cost_total"] - sum(
        v for k, v in fleet_cost(cap.cost, 0.0, 3600.0)["cost_lines"].items() if k.startswith("extra."))
    over = res.get("overprovisioned_replica_seconds") or 0.0
    return {"cost": c, "cost_total": c["cost_total"],
            "cost_per_mtok_good": per_million(c["cost_total"], res["output_tokens_good"]),
            "headroom_cost": over / 3600.0 * one}


def describe_candidate(c: ConfigCapacity) -> dict:
    corr = {str(s): {"in_flight": n.tolist(), "ttft_factor": a.tolist(), "tpot_factor": b.tolist()}
            for s, (n, a, b) in (c.corrections or {}).items()}
    return {"source": c.source, "origin": c.origin, "sizes": c.sizes, "blocks": c.blocks,
            "calibration": corr or None,
            "cold_start_s": c.cold_start_s, "cost": c.cost, "slo_measured": c.slo,
            "workload": {k: (c.workload or {}).get(k) for k in ("name", "path", "max_output_tokens", "on_too_long")},
            "points": {str(s): [{"block": p.block, "rate_rps": p.rate_rps, "in_flight": p.in_flight,
                                 "requests": int(p.ttft_s.size), "failed": p.failed,
                                 "p50_ttft_ms": _pct(p.ttft_s, 50), "p99_ttft_ms": _pct(p.ttft_s, 99),
                                 "p50_tpot_ms": _pct(p.tpot_s, 50), "p99_tpot_ms": _pct(p.tpot_s, 99),
                                 "estimated": p.estimated, "run_dir": p.run_dir}
                                for p in sorted(pts, key=lambda p: (p.block, p.rate_rps))]
                       for s, pts in c.points.items()},
            "notes": c.notes}


def _pct(v, q):
    v = np.asarray(v, dtype=np.float64)
    v = v[np.isfinite(v)]
    return float(np.percentile(v, q) * 1e3) if v.size else None


def _slo_text(slo_cfg: dict) -> str:
    parts = [f"{k}={v:g}" for k, v in slo_cfg.items() if k.endswith("_ms") and v is not None]
    return ", ".join(parts) + f" at p{slo_cfg.get('percentile', 99):g}"


def _est(m: dict, key: str, fmt: str) -> str:
    v, iv = m[key]["value"], m[key]["interval"]
    return (fmt.format(v) if v is not None else "-") + (f" [{fmt.format(iv[0])}, {fmt.format(iv[1])}]" if iv else "")


def print_plan(doc: dict) -> None:
    from harness.report.plan import modelled_text  # the page's words for a modelled config, on the console too

    for plan in doc["plans"]:
        print(f"\n{plan['variant']} policy, SLO {_slo_text(plan['slo'])}:")
        for name, e in plan["configs"].items():
            m = e["metrics"]
            on_sched = (e.get("replica_model") or {}).get("model") == "scheduler"
            approx = (e.get("replay_sample") or {}).get("text") or \
                ((e.get("replica_model") or {}).get("approximate") or {}).get("text")
            sched_mark = (f"  [replicas: the engine's scheduler{'; ' + approx if approx else ''}]"
                          if on_sched else "")
            mark = (f"  [{e['source']}]" if e.get("source") in ("estimated", "emulated") else
                    f"  [{modelled_text(e['modelled'])}]" if e.get("source") == "modelled" else
                    "  [outside the measurements]" if e["outside_measurements"] else "")

            with_model = m["cost_per_mtok_good"].get("interval_with_model_error")
            model_iv = (f" (with the model's error [{with_model[0]:.4g}, {with_model[1]:.4g}])"
                        if with_model else "")
            print(f"  {name}: attainment {_est(m, 'slo_attainment', '{:.3f}')}, cost "
                  f"{_est(m, 'cost_per_mtok_good', '{:.4g}')}{model_iv} per M good tok, replicas peak "
                  f"{m['replicas_max']['value']} mean {_est(m, 'replicas_mean', '{:.2f}')}"
                  f"{'' if e['meets_slo'] else ', misses the SLO'}{mark}{sched_mark}")
        for name, why in plan["skipped"].items():
            print(f"  {name}: not planned: {why}")
        print(f"  -> {plan['cheapest']['verdict']}")
        print(f"     {runner_up_text(plan['cheapest'])}")
    if "caveats" not in doc:   # a plan.json from before its warnings were ranked
        if doc.get("cost_lower_bound"):
            print(f"note: {doc['cost_lower_bound']['reason']}")
        for w in doc["warnings"]:
            print(f"warning: {w}")
    else:
        print_caveats(doc["caveats"])
