"""Estimates per group of runs (one row a run): means and ratios of totals across repeats."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from metrics.statistics.bootstrap import N_RESAMPLES, ratio_ci
from metrics.statistics.estimate import Estimate, mean_ci


def _columns(runs) -> dict:
    """A pyarrow Table or a dict of columns -> dict name -> column (list or array)."""
    if hasattr(runs, "column_names"):
        return {name: runs.column(name) for name in runs.column_names}
    return dict(runs)


def _as_float(col) -> np.ndarray:
    if hasattr(col, "to_numpy"):  # pyarrow: nulls become NaN
        col = col.to_numpy(zero_copy_only=False)
    return np.asarray([math.nan if x is None else x for x in col] if isinstance(col, list) else col,
                      dtype=np.float64)


def _as_list(col) -> list:
    return col.to_pylist() if hasattr(col, "to_pylist") else list(col)


def _groups(cols: dict, group_by: Sequence[str], n_rows: int) -> dict[tuple, np.ndarray]:
    """Group key (tuple of the group_by values) -> row indices, in order of first appearance."""
    keys = list(zip(*[_as_list(cols[g]) for g in group_by])) if group_by else [()] * n_rows
    out: dict[tuple, list] = {}
    for i, k in enumerate(keys):
        out.setdefault(tuple(k), []).append(i)
    return {k: np.asarray(v, dtype=np.intp) for k, v in out.items()}


def aggregate_runs(runs, metrics: Sequence[str] = (), group_by: Sequence[str] = ("config", "load_point"), *,
                   ratios: Mapping[str, tuple] | None = None, confidence: float = 0.95,
                   n_resamples: int = N_RESAMPLES, seed: int | None = 0) -> dict[tuple, dict[str, Estimate]]:
    """Per group and metric, the estimate across the group's runs (one row a run).

    ``runs``: a pyarrow Table (e.g. ``runs.parquet``) or a dict of equal-length columns.
    ``metrics``: columns averaged per run -> :func:`mean_ci`.  ``ratios``: name ->
    (numerator column, denominator column[, scale]) -> :func:`ratio_ci` of the totals, e.g.
    ``{"cost_per_mtok_good": ("cost_total", "good_output_tokens", 1e6)}``; a name in both
    ``metrics`` and ``ratios`` is computed as the ratio.  Returns {group key tuple: {name:
    Estimate}}, groups in order of first appearance; ``group_by=()`` gives one group ``()``.
    """
    cols = _columns(runs)
    ratios = dict(ratios or {})
    needed = list(group_by) + [m for m in metrics if m not in ratios] + [c for r in ratios.values() for c in r[:2]]
    missing = [c for c in needed if c not in cols]
    if missing:
        raise KeyError(f"aggregate_runs: no column(s) {missing}; have {sorted(cols)}")
    n_rows = len(next(iter(cols.values()))) if cols else 0
    floats = {c: _as_float(cols[c]) for c in dict.fromkeys(needed[len(group_by):])}
    out: dict[tuple, dict[str, Estimate]] = {}
    for key, rows in _groups(cols, group_by, n_rows).items():
        res: dict[str, Estimate] = {}
        for m in metrics:
            if m not in ratios:
                res[m] = mean_ci(floats[m][rows], confidence)
        for name, spec in ratios.items():
            num, den, scale = (*spec, 1.0)[:3]
            res[name] = ratio_ci(floats[num][rows], floats[den][rows], scale=scale, confidence=confidence,
                                 n_resamples=n_resamples, seed=seed)
        out[key] = res
    return out

