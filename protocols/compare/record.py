"""A comparison's record, ``comparison.json``: of a comparison's (or an ablation's) configs run
in blocks (``write_comparison``, paired), and for ``tokenfactory compare`` of experiments run
separately, read from their folders (or MLflow), and the comparison printed.

Experiments run separately were not interleaved: a load point's replicates are its runs (a
sweep's repeats of it, or a comparison's blocks), grouped by the point's label, nothing pairs a
run of one with a run of the other, so the difference is unpaired (Welch), and the table says
so; experiments whose fixed conditions differ (model, tokenizer, precision, sampling, workload,
SLO) are refused unless ``--allow KEY`` names the difference under test.  The statistics and
verdicts: ``metrics.comparison``.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from conf.load_point import split_repeat
from conf.schema import COMPARED_METRICS
from harness import experiment_record, results_io
from harness.experiment_record import ProtocolRecord, search_results
from metrics.answer import Answer, comparison_answer
from metrics.comparison import (
    comparable,
    compare_runs,
    compare_tables,
    fixed_differences,
    format_comparison,
)
from metrics.emulation import kind_of_runs, refusal
from metrics.quality_gate import gate_search


def write_comparison(exp, table: pa.Table, record: dict, quality: dict | None) -> dict:
    """``comparison.json`` of the configs run in blocks (each config against the baseline, at
    every load point and, with ``protocol.search=slo``, at the highest load under the SLO),
    printed; returns its metrics for the MLflow parent run."""
    searches = search_results(exp.out)
    if quality:
        searches = [gate_search(s, quality["configs"].get(s.get("config") or "")) for s in searches]
    comparison = compare_runs(table, exp.cfg.protocol, record, searches, baseline=exp.baseline,
                              quality=quality)
    if "config" in table.column_names:  # each config's kind of numbers: measured, or emulated (how)
        comparison["kinds"] = {c: kind_of_runs(table.filter(pc.equal(table.column("config"), c)))
                               for c in comparison["configs"]}
    results_io.write_json(exp.out / results_io.COMPARISON, comparison)
    print(format_comparison(comparison), flush=True)
    return comparison.get("mlflow_metrics", {})


def comparison_answer_of(exp, rows: list[dict], record: dict) -> Answer | None:
    """The comparison's (or the ablation's) answer (``metrics.answer.comparison_answer``) from the
    ``comparison.json`` just written and its runs."""
    path = exp.out / results_io.COMPARISON
    if not path.exists():
        return None
    currency = next((str(r["cost_currency"]) for r in rows if r.get("cost_currency")), "")
    return comparison_answer(results_io.read_json(path), rows, record.get("slo") or {}, currency,
                             protocol=str(exp.cfg.protocol.name))


COMPARISON_RECORD = ProtocolRecord(write_comparison, (results_io.COMPARISON,), answer=comparison_answer_of)


def _experiment_runs(path: Path) -> tuple[pa.Table, dict]:
    """An experiment's load-point runs (``runs.parquet``, else its run folders), one row per
    replicate of a point, and its fixed conditions."""
    if (path / results_io.RUNS_TABLE).exists():
        table = _replicate_labels(results_io.read_parquet(path / results_io.RUNS_TABLE))
    else:
        rows = experiment_record.run_rows(path)
        if not rows:
            raise ValueError(f"{path}: no finished run (no summary.json) to compare")
        table = experiment_record.runs_table(rows)
    if "role" in table.column_names:  # probes and search steps are not replicates of a point
        table = table.filter(pc.equal(table.column("role"), "point"))
    if not table.num_rows:
        raise ValueError(f"{path}: no finished load point to compare")
    record = results_io.read_json(path / results_io.EXPERIMENT, {})
    fixed = record.get("fixed_conditions") or {}
    if not fixed:
        for d in sorted(path.rglob(results_io.RUN_META)):
            meta = results_io.read_json(d)
            fixed.setdefault(meta.get("config") or "", meta.get("fixed_conditions") or {})
    return table, fixed


def compare_experiments(paths: list[str], allow: set[str], metrics: list[str] | None = None,
                        confidence: float = 0.95, margin: float = 0.02, adjust: str = "none",
                        tracking_uri: str | None = None, allow_emulated: bool = False) -> dict:
    """The comparison of experiments run separately (unpaired); each is one group, named by its
    folder (and its config, for a comparison's configs)."""
    groups: dict[str, pa.Table] = {}
    fixed: dict[str, dict] = {}
    import tempfile

    from harness.report.source import resolve, safe_part

    downloads = Path(tempfile.mkdtemp(prefix="tokenfactory-compare-"))  # MLflow experiments, read once
    for arg in paths:
        # a results folder, or an MLflow experiment's name
        path = resolve(arg, dest=downloads / safe_part(arg), tracking_uri=tracking_uri)
        table, fx = _experiment_runs(path)
        configs = sorted(set(table.column("config").to_pylist())) if "config" in table.column_names else [""]
        for c in configs:
            name = path.name + (f"/{c}" if c else "")
            if name in groups:
                name = f"{path.parent.name}/{name}"
            groups[name] = table.filter(pc.equal(table.column("config"), c)) if "config" in \
                table.column_names else table
            fixed[name] = fx.get(c) or next(iter(fx.values()), {})
    if len(groups) < 2:
        raise ValueError("tokenfactory compare needs at least two experiments (or configs) to compare")
    kinds = {name: kind_of_runs(t) for name, t in groups.items()}
    mixed = None if allow_emulated else refusal(kinds, "--allow-emulated")
    if mixed:
        raise ValueError(mixed)
    diffs = fixed_differences(fixed)
    refused = {k: v for k, v in diffs.items() if k not in allow}
    if refused:
        lines = [f"  {k}: " + ", ".join(f"{n}={v}" for n, v in vals.items()) for k, vals in refused.items()]
        raise ValueError("these experiments differ in fixed conditions:\n" + "\n".join(lines) +
                         f"\nif that difference is what is under test, say so: --allow {','.join(refused)}")
    names = list(groups)
    cols = set.intersection(*(set(t.column_names) for t in groups.values()))
    metrics = [m for m in (metrics or [m for m in _default_metrics() if comparable(m, cols)])]
    points = compare_tables(groups, metrics, names[0], paired=False, confidence=confidence, margin=margin,
                            adjust=adjust)
    out = {"kind": "unpaired",
           "method_note": "unpaired (Welch): experiments run separately, not interleaved, so no run pairs with "
                          "another; a load point's replicates are its repeats (or blocks)",
           "configs": names, "baseline": names[0], "confidence": confidence, "adjust": adjust, "min_effect": margin,
           "points": points, "fixed_condition_differences": diffs, "allowed": sorted(allow),
           "kinds": kinds, "allow_emulated": allow_emulated}
    rows = [{**r, "config": name} for name, t in groups.items() for r in t.to_pylist()]
    slo = fixed[names[0]].get("slo") if isinstance(fixed[names[0]].get("slo"), dict) else {}
    currency = next((str(r["cost_currency"]) for r in rows if r.get("cost_currency")), "")
    out["answer"] = comparison_answer(out, rows, slo, currency).to_dict()
    return out


def _replicate_labels(table: pa.Table) -> pa.Table:
    """A ``runs.parquet`` written when each repeat of a point had its own label ("... #r"):
    the point's label, and the repeat in ``repeat`` (``conf.load_point.split_repeat``)."""
    if "label" not in table.column_names:
        return table
    split = [split_repeat(str(v)) for v in table.column("label").to_pylist()]
    if all(r is None for _, r in split):
        return table
    table = table.set_column(table.column_names.index("label"), "label", pa.array([lab for lab, _ in split]))
    old = table.column("repeat").to_pylist() if "repeat" in table.column_names else [None] * table.num_rows
    repeat = pa.array([int(o or r or 0) for o, (_, r) in zip(old, split)], pa.int64())
    if "repeat" in table.column_names:
        return table.set_column(table.column_names.index("repeat"), "repeat", repeat)
    return table.append_column("repeat", repeat)


def _default_metrics() -> list[str]:
    return list(COMPARED_METRICS)
