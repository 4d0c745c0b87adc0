"""What a deployment is, for its records: its topology (kind, pools, router, placement,
autoscaling), its provenance (the first replica's as the engine's, each replica's command and
address, the router's) and each replica's record, stopped ones included."""

from __future__ import annotations

from engines.base import redact_argv


def topology(d) -> dict:
    """The seven-step record's devices and topology of deployment ``d``: kind, pools, router
    and placement."""
    roles = d.roles()
    pools: dict[str, list[str]] = {}
    for name, role in roles.items():
        pools.setdefault(role, []).append(name)
    out = {"kind": d.kind, "replicas": len(d.replicas),
           "pools": {role: len(names) for role, names in pools.items()},
           "replica_names": pools, "router": d.router.name, "router_policy": d.router.policy_used,
           "backend": "external" if d.external else d.dep.backend}
    if d.kind == "disaggregated":
        out["prefill_decode"] = f"{len(pools.get('prefill', []))}:{len(pools.get('decode', []))}"
        out["kv_connector"] = d.dep.kv_connector
    if d.placer is not None:
        out["placement"] = d.placer.provenance()
    if not d.external and d.dep.autoscale.enabled:  # the count above is the one serving now
        out["autoscale"] = {"min_replicas": d.dep.autoscale.min_replicas,
                            "max_replicas": d.dep.autoscale.max_replicas,
                            "started_with": d.dep.replicas,
                            "replicas_run": sorted(r.replica for r in d.replicas + d.retired)}
    return out


def provenance(d) -> dict:
    """The first replica's provenance as the engine's (every replica runs the same config),
    each replica's command and address, and the router's."""
    base = d.first.provenance()
    base["command"] = None
    base["deployment"] = topology(d)
    base["replicas"] = replica_records(d, {d.first.replica: {"engine_version": base.get("engine_version")}})
    base["router"] = d.router.provenance()
    return base


def replica_records(d, known: dict | None = None) -> dict:
    """Each replica's address, role, command and version (those autoscaling started and
    stopped included, ``stopped: true``); ``known``: entries already recorded, kept."""
    known = known or {}
    out = {}
    for r in d.replicas + d.retired:
        rec = {"base_url": r.base_url, "role": d.roles()[r.replica],
               "command": redact_argv(r.process.argv) if r.process is not None else None,
               **known.get(r.replica, {})}
        if "engine_version" not in rec:
            rec["engine_version"] = r.version() if r not in d.retired else None
        if r in d.retired:
            rec["stopped"] = True
        out[r.replica] = rec
    return out
