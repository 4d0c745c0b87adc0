"""One record per experiment: ``experiment.json`` (the plan, configs, seed and block order,
fixed conditions, SLO, which of the seed's seven steps ran and why the others did not) and
``runs.parquet`` (one row per finished run: config, block, load point, every scalar of its
``summary.json``), both rebuilt from the run folders, so a resumed or interrupted
experiment's record always says what is on disk.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from conf.load_point import split_repeat
from conf.schema import Deployment, Router, group, typed_engine
from harness import results_io
from harness.answer_record import answer_fields
from harness.quality_gate import emulated_outputs, format_quality, gate_enabled, judge
from harness.results_io import HEADERS_KEY, SECRET_KEY
from metrics.quality_gate import gate_row

RUN_KEYS = ("config", "block", "role", "label", "load_kind", "offered_load", "repeat", "run_dir")

STEPS = {
    1: "fix model version, tokenizer, weight and KV precision, sampling and a quality gate",
    2: "keep the workload's length distributions, shared prefixes, arrivals, concurrency and cache state",
    3: "record devices, parallelism, software commit, batch sizes and memory budget",
    4: "sweep several load points; TTFT, ITL/TPOT, completion, rejection, throughput, resources, "
       "energy and full-window cost",
    5: "ablate one change at a time and explain how the bottleneck moves",
    6: "compare by cost under quality and SLO met, with intervals over repeats",
    7: "shadow traffic, then a small share; keep the rollback; promote on business metrics",
}


@dataclass(frozen=True)
class ProtocolRecord:
    """A protocol's own part of an experiment's record, beside ``experiment.json`` and
    ``runs.parquet`` (each protocol's ``record`` module: the sweep's aggregates, the
    comparison's ``comparison.json``, the ablation's ``ablation.json``).  ``write``: (the
    experiment, its runs table, its experiment.json record, the quality verdict or None) -> the
    aggregate metrics for the MLflow parent run; ``files``: what it writes in the experiment's
    folder (logged to MLflow beside experiment.json); ``answer``: (the experiment, its runs' rows,
    its experiment.json record) -> its answer (``metrics.answer.Answer``, or None), kept in
    experiment.json as ``answer`` (``harness.answer_record``)."""
    write: Callable[[Any, pa.Table, dict, dict | None], dict]
    files: tuple[str, ...] = ()
    answer: Callable[[Any, list[dict], dict], Any] | None = None


def _redact_override(o: str) -> str:
    key, _, _ = o.partition("=")
    parts = key.split(".")
    secret = SECRET_KEY.search(parts[-1]) or any(HEADERS_KEY.search(p) for p in parts)  # a header's value too
    return f"{key}=***redacted***" if secret else o


def seven_steps(cfg, design, done: bool, *, points: int, configs: int,
                promotion_how: str | None = None) -> list[dict]:
    """Which of the seed's seven steps this experiment covered, and why the others not.
    ``design``: its protocol's (``protocols.designs``); ``done``: some run finished; ``points``:
    load points planned; ``configs``: configs compared (or arms); ``promotion_how``: what the
    promotion did, once it has."""
    wl = cfg.workload
    stress = []
    if "stress" in wl and float(wl.stress.long_tail.fraction or 0) > 0:
        stress.append("long tail")
    if "stress" in wl and "burst" in wl.stress and float(wl.stress.burst.factor or 1) > 1:
        stress.append("burst")
    return steps_record([
        (1, done, "fixed conditions recorded with every run (run.json, experiment.json); " + (
            f"quality gate: greedy outputs on {int(cfg.quality.num_prompts)} fixed prompts against the baseline's"
            + (" and an evaluation command" if cfg.quality.eval_command else "") + " (experiment.json quality_gate)"
            if gate_enabled(cfg, design)
            else "no quality gate: an emulated engine's outputs are random tokens (quality.enabled=true forces it)"
            if cfg.quality.enabled is None and design.quality_gate and emulated_outputs(cfg)
            else "no quality gate (quality.enabled=true, or a compare/ablation/tune protocol)")),
        (2, done, f"workload.json per run ({wl.name}); cache state {cfg.engine.cache_state}"
                  + (f"; stress: {', '.join(stress)}" if stress else "; no stress variant configured")),
        (3, done, "provenance.json per run: engine version, flags, effective config, devices, harness commit; "
                  "topology: " + topology_text(cfg)),
        (4, done and points > 1, f"{points} load point(s)" + ("" if points > 1 else ": a single point is not a sweep")),
        (5, design.ablation and done, f"{configs} arms in blocks, effects and interactions ({results_io.ABLATION})"
         if design.ablation else "not an ablation (protocol=ablation)"),
        (6, design.in_blocks and done, f"{configs} configs in {int(cfg.protocol.repeats)} blocks, paired intervals "
         f"({results_io.COMPARISON})" if design.in_blocks else "one config: nothing to compare (protocol=compare)"),
        (7, design.promotion and promotion_how is not None, promotion_how or "not a promotion (protocol=promote)"),
    ])


def topology_text(cfg) -> str:
    """What serves the load, as configured (each run's provenance.json has the deployment as it ran:
    every replica's command, address and placement, the router's version and policy)."""
    dep, router = group(cfg, "deployment", Deployment), group(cfg, "router", Router)
    eng = typed_engine(cfg.engine)
    engine = eng.name
    tp = getattr(eng.features, "tensor_parallel_size", None)  # not every engine's features have one
    par = f", TP={tp}" if tp else ""
    ext = list(eng.replica_urls)
    if ext:
        return (f"{len(ext)} replicas already up (engine.replica_urls) behind router={router.name} "
                f"(policy {router.policy or 'its default'})")
    if dep.kind == "single":
        urls = list(eng.replica_metrics_urls)
        return (f"one endpoint with {len(urls)} replicas scraped (engine.replica_metrics_urls)" if urls
                else f"one {engine} engine{par}")
    where = dep.backend + (f", cores {list(dep.placement.cpus)}" if dep.placement.cpus else "") + (
        f", devices {list(dep.placement.devices)}" if dep.placement.devices else "")
    policy = f"policy {router.policy}" if router.policy else "policy: each config's, else the router's default"
    if dep.kind == "replicas":
        auto = dep.autoscale
        scaled = (f", autoscaled {auto.min_replicas}..{auto.max_replicas} by {auto.signal} "
                  "(autoscale.json in each run)" if auto.enabled else "")
        return (f"{int(dep.replicas)} x {engine}{par} behind router={router.name} ({policy}){scaled}; "
                f"placement {where}")
    return (f"disaggregated {int(dep.prefill)} prefill : {int(dep.decode)} decode x {engine}{par}, KV connector "
            f"{dep.kv_connector or 'the engine default'}, behind router={router.name} ({policy}); placement {where}")


def steps_record(steps: list[tuple[int, bool, str]]) -> list[dict]:
    """experiment.json's ``steps``: each of the seven with whether it ran, how, and what it is."""
    return [{"step": step, "ran": bool(ran), "how": how, "what": STEPS[step]} for step, ran, how in steps]


def experiment_record(cfg, *, status: str, out: Path, overrides: list[str], configs: dict[str, list[str]],
                      baseline: str, steps: list[dict], seed: int | None = None, **fields) -> dict:
    """``experiment.json``, built the same way for every protocol: what ran (experiment,
    protocol, status, folder, seed), the command's overrides and each config's, the baseline,
    the protocol's own ``fields`` (blocks and load points, the tune's record, the promotion's
    stages ...), the SLO and workload, and the seven steps.  Every override of a secret key and
    every secret value in the SLO and the workload is redacted, whatever the protocol."""
    return {
        "experiment": str(cfg.experiment), "protocol": str(cfg.protocol.name), "status": status,
        "output_dir": str(out), "seed": int(cfg.seed if seed is None else seed),
        "base_overrides": [_redact_override(o) for o in overrides],
        "configs": {name: [_redact_override(str(o)) for o in ovs] for name, ovs in configs.items()},
        "baseline": baseline,
        **fields,
        "slo": results_io.redact(_container(cfg.slo)),
        "workload": results_io.redact(_container(cfg.workload)),
        "steps": steps,
    }


def run_rows(out: Path) -> list[dict]:
    """Every finished run under ``out``: its run.json keys and its summary's scalars.  A load
    point's ``label`` is the same for each of its repeats (``repeat`` says which), also for
    folders written when each repeat had a label of its own (``conf.load_point.split_repeat``)."""
    rows = []
    for d in sorted(p.parent for p in out.rglob(results_io.SUMMARY)):
        meta = results_io.read_json(d / results_io.RUN_META, {})
        summary = results_io.read_json(d / results_io.SUMMARY)
        load = meta.get("load") or {}
        label, old_repeat = split_repeat(str(meta.get("label", d.name)))
        row = {"config": meta.get("config") or "", "block": int(meta.get("block") or 0),
               "role": meta.get("role") or "point", "label": label,
               "load_kind": load.get("kind"), "offered_load": summary.get("offered_load"),
               "repeat": int(meta.get("repeat") or old_repeat or 0),
               "run_dir": str(d.relative_to(out)) if d != out else "."}
        for k, v in summary.items():
            if k not in row and (v is None or isinstance(v, (bool, int, float, str))):
                row[k] = _number(v)
        rows.append(row)
    return rows


def _number(v):
    # summary.json writes non-finite floats as null / "inf": read them back as floats
    if v in ("inf", "-inf"):
        return math.inf if v == "inf" else -math.inf
    return v


def runs_table(rows: list[dict]) -> pa.Table:
    """``runs.parquet``: one column per key any run has (a run without it: null)."""
    keys: dict[str, None] = {}
    for r in rows:
        keys.update(dict.fromkeys(r))
    cols = {}
    for k in keys:
        vals = [r.get(k) for r in rows]
        kinds = {type(v) for v in vals if v is not None}
        if kinds <= {bool}:
            typ = pa.bool_()
        elif kinds <= {int, float, bool}:
            typ = pa.float64() if float in kinds or k not in ("block", "repeat") else pa.int64()
            vals = [None if v is None else (float(v) if typ == pa.float64() else int(v)) for v in vals]
        else:
            typ = pa.string()
            vals = [None if v is None else str(v) for v in vals]
        cols[k] = pa.array(vals, type=typ)
    return pa.table(cols) if cols else pa.table({k: pa.array([], pa.string()) for k in RUN_KEYS})


def write_runs_table(out: Path, rows: list[dict]) -> pa.Table:
    """``runs.parquet`` of ``rows`` in the folder ``out`` (whole or not at all); returns the table."""
    table = runs_table(rows)
    results_io.write_parquet(out / results_io.RUNS_TABLE, table)
    return table


def write_experiment(out: Path, record: dict, rows: list[dict] | None = None) -> pa.Table | None:
    """An experiment's record in ``out``: ``runs.parquet`` of ``rows`` (None or none: left as it
    is), then ``experiment.json``, each whole or not at all; returns the runs table (or None)."""
    table = write_runs_table(out, rows) if rows else None
    results_io.write_json(out / results_io.EXPERIMENT, record)
    return table


def experiment_json(exp, status: str, runs: list[dict]) -> dict:
    """A sweep's, comparison's or ablation's ``experiment.json`` (``experiment_record``)."""
    configs = {s.config: s.overrides for s in exp.sessions if s.config}
    fixed: dict[str, dict] = {}
    for d in sorted(exp.out.rglob(results_io.RUN_META)):
        meta = results_io.read_json(d)
        fixed.setdefault(meta.get("config") or "", meta.get("fixed_conditions") or {})
    blocks: dict[int, list[str]] = {}
    for s in exp.sessions:
        if s.config:
            blocks.setdefault(s.block, []).append(s.config)
    steps = seven_steps(exp.cfg, exp.design, bool(runs), points=len(exp.plan), configs=len(exp.configs))
    return experiment_record(
        exp.cfg, status=status, out=exp.out, overrides=exp.base_overrides, configs=configs or {"": []},
        baseline=exp.baseline if configs else "", steps=steps,
        blocks=[{"block": b, "order": order} for b, order in sorted(blocks.items())],
        load_points=load_points(exp.plan), runs_planned=sum(len(s.runs) for s in exp.sessions),
        runs_finished=len(runs), convergence=exp.convergence, fixed_conditions=fixed)


def load_points(plan) -> list[dict]:
    """The plan's load points, once each, with how many repeats of each it has."""
    points: dict[str, dict] = {}
    for r in plan:
        points.setdefault(r.label, {"label": r.label, "load": r.load, "repeats": 0})["repeats"] += 1
    return list(points.values())


def _container(node):
    from omegaconf import OmegaConf

    return OmegaConf.to_container(node, resolve=True)


def write_plan(exp, status: str) -> None:
    """``experiment.json`` as the plan stands (written before the first run and after the last)."""
    write_experiment(exp.out, experiment_json(exp, status, run_rows(exp.out)))


def search_results(out: Path) -> list[dict]:
    """Every session's ``search.json`` (``protocol.search=slo``)."""
    return [results_io.read_json(p) for p in sorted(out.rglob("search.json"))]


def write_record(exp) -> dict:
    """``runs.parquet``, ``experiment.json`` and the protocol's own records (``exp.records``:
    each a ``ProtocolRecord``); returns the aggregate metrics for the MLflow parent run (a
    sweep's: per load point, over its repeats; a comparison's: per config and point)."""
    rows = run_rows(exp.out)
    if not rows:
        return {}
    quality = judge_quality(exp)
    if quality:
        rows = [gate_row(r, quality["configs"].get(r.get("config") or "")) for r in rows]
    record = experiment_json(exp, _status(exp, rows), rows)
    if quality:
        record["quality_gate"] = quality
        print(format_quality(quality), flush=True)
    table = write_experiment(exp.out, record, rows)
    aggregates: dict = {}
    for r in exp.records:
        aggregates.update(r.write(exp, table, record, quality))
    answer = next((r.answer(exp, rows, record) for r in exp.records if r.answer is not None), None)
    record.update(answer_fields(answer, rows))
    write_experiment(exp.out, record)
    return aggregates


def judge_quality(exp) -> dict | None:
    """The quality gate's verdict per config from the sessions' ``quality.json`` (None when
    the gate is off or no session has outputs yet)."""
    if not gate_enabled(exp.cfg, exp.design):
        return None
    sessions = [(s.config or "", s.block, exp.session_dir(s)) for s in exp.sessions]
    q = judge(sessions, exp.baseline if exp.multi else "", exp.cfg.quality)
    return q if q["configs"] else None


def _status(exp, rows: list[dict]) -> str:
    planned = sum(len(s.runs) for s in exp.sessions)
    return "complete" if len(rows) >= planned else "incomplete"
