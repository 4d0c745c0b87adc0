"""The plan's warnings, once per kind, ranked by what they change (``harness.caveats``' ``Caveat``
and ranks; the kinds here, so that module does not learn the plan).

Each warning the plan gives (a candidate skipped at an SLO, the traffic's checks, an impossible
estimate, each plan entry's own) is a ``Finding``: its kind, the candidate, the plan it concerns
(None: the candidate's inputs, whatever the plan) and its words, kept in plan.json's ``warnings``
as before.  ``plan_caveats`` gives one line per kind with the candidates named and the plans each
concerns counted, in rank order: first what changes the pick or its cost (a candidate not planned,
a policy that cannot keep up at the peak, an impossible estimate, a replay sample refused or not
drained); then what limits it (capacities estimated, emulated or modelled, requests served outside
the measurements, a cost that is a lower bound).  The console prints them after the plans and
before the answer; the plan's page on its first screen.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from harness.caveats import CHANGES, LIMITS, Caveat, split_reason

NOT_PLANNED, CANNOT_KEEP_UP, IMPOSSIBLE_ESTIMATE = "not_planned", "cannot_keep_up", "impossible_estimate"
OUTSIDE_MEASUREMENTS, OTHER_MIX = "outside_measurements", "other_length_mix"


@dataclass(frozen=True)
class Finding:
    """One warning as the plan gave it: ``plan`` is its index in plan.json's ``plans`` (None: the
    candidate's inputs)."""
    kind: str
    name: str
    plan: int | None
    text: str


def plan_label(plan: Mapping, slo_text: Callable[[dict], str]) -> str:
    return f"{plan['variant']}, {slo_text(plan['slo'])}"


def _who(hits: Sequence[Finding], plans: int) -> str:
    """'slow in 2 of 2 plans, est in 1 of 2 plans' (a candidate-level finding: its name alone)."""
    out = []
    for name in dict.fromkeys(h.name for h in hits):
        where = {h.plan for h in hits if h.name == name and h.plan is not None}
        out.append(f"{name} in {len(where)} of {plans} plan{'s' if plans > 1 else ''}" if where else name)
    return ", ".join(out)


def _count(hits: Sequence[Finding]) -> str:
    n = len({h.name for h in hits})
    return f"{n} candidate{'s' if n > 1 else ''}"


@dataclass(frozen=True)
class Kind:
    """A kind of finding and its line: ``words`` with ``{count}`` (the candidates), ``{who}`` (each
    with the plans it concerns) and ``{heads}`` (the reasons' first words) filled from its hits."""
    name: str
    rank: int
    words: str

    def say(self, hits: Sequence[Finding], plans: int) -> str:
        heads = ", ".join(dict.fromkeys(split_reason(h.text)[0].split(":")[0] for h in hits))
        return self.words.format(count=_count(hits), who=_who(hits, plans), heads=heads)


KINDS = (
    Kind(NOT_PLANNED, CHANGES, "{count} not planned: {who} ({heads}): left out of the pick"),
    Kind(CANNOT_KEEP_UP, CHANGES, "the policy cannot keep up at the peak for {who}: arrivals above max_replicas x "
         "capacity (raise deployment.autoscale.max_replicas)"),
    Kind(IMPOSSIBLE_ESTIMATE, CHANGES, "{count} estimated faster than the roofline bound: {who}: an impossible "
         "estimate"),
    Kind("replay_sample", CHANGES, "the replay sample refused or not drained for {who}: a replica near or past "
         "capacity, where a sample underestimates latency and cost"),
    Kind("estimated", LIMITS, "{count} estimated, not measured: {who}: capacity from a performance model's estimate"),
    Kind("emulated", LIMITS, "EMULATED: {who}: capacity from runs on an emulated engine, its latencies from a model, "
         "not a measurement"),
    Kind("modelled", LIMITS, "{count} modelled, never run: {who}: measure before acting on it (protocol=tune)"),
    Kind(OUTSIDE_MEASUREMENTS, LIMITS, "served outside the measurements: {who}: longer prompts, more replicas or a "
         "higher rate than any measured run; their intervals are marked"),
    Kind(OTHER_MIX, LIMITS, "capacity measured on another prompt-length mix than the traffic's: {who}"),
    Kind("cost_lower_bound", LIMITS, "cost a lower bound for {who}: owned hardware, and the plan simulates no "
         "energy, so electricity is left out of the cost"),
)


def entry_findings(doc: Mapping) -> list[Finding]:
    """What plan.json's entries say of themselves: their capacity's source, a replay sample refused
    or undrained, a bill that leaves a line out."""
    out = []
    for i, plan in enumerate(doc.get("plans") or []):
        for name, e in (plan.get("configs") or {}).items():
            if e.get("source") in ("estimated", "emulated", "modelled"):
                origin = ((doc.get("candidates") or {}).get(name) or {}).get("origin")
                out.append(Finding(e["source"], name, i, f"{name}: {origin or e['source']}"))
            sample = e.get("replay_sample") or {}
            if sample.get("replayed_whole") or sample.get("undrained_blocks"):
                out.append(Finding("replay_sample", name, i, f"{name}: {sample.get('text')}"))
            if (e.get("cost") or {}).get("cost_complete") is False:
                out.append(Finding("cost_lower_bound", name, i, f"{name}: " + "; ".join(e["cost"].get("cost_notes")
                                                                                       or ["cost incomplete"])))
    return out


def plan_caveats(findings: Sequence[Finding], doc: Mapping, label: Callable[[Mapping], str]) -> list[Caveat]:
    """Every kind some finding has, once, in rank order (``KINDS`` order within a rank); the
    detail: each finding's words, under its plan's ``label``."""
    plans = doc.get("plans") or []
    every = [*findings, *entry_findings(doc)]
    out = []
    for k in KINDS:
        hits = list(dict.fromkeys(f for f in every if f.kind == k.name))
        if hits:
            detail = [(f"{label(plans[h.plan])}: " if h.plan is not None else "") + h.text for h in hits]
            out.append(Caveat(k.name, k.rank, k.say(hits, len(plans)), tuple(detail)))
    return sorted(out, key=lambda c: c.rank)
