"""Statistics across repeats: intervals, comparisons between configs, verdicts, convergence.

A run is one replicate.  Requests inside a run share the engine's state, its warm-up, the
host's noise, so they are correlated: every interval here treats the *run* as the sample,
never the request.  Within-run figures (order-statistic bounds of a percentile, MLPerf early
stopping) live in ``metrics.percentiles``; :func:`within_run_percentile` only wraps them and
labels them "within run".

Configs are run in blocks: in each block every config runs once, in a random order, so block
``i`` of config A and block ``i`` of config B are paired (:func:`paired_difference`); runs
made separately are compared with Welch's interval (:func:`unpaired_difference`).

Methods (``Estimate.method``):
- ``student-t``: mean x̄ ± t(1-α/2, n-1) · s/√n, s the sample standard deviation (ddof=1).
- ``bca-bootstrap`` / ``percentile-bootstrap``: ``scipy.stats.bootstrap`` over repeats (10,000
  resamples by default, seeded).  BCa when it can be computed; when it cannot (degenerate
  data, too few distinct resamples: scipy warns or returns NaN) the percentile interval of
  the *same* resamples, said so in ``note``.
- ``cluster ...-bootstrap``: percentiles pooled across runs, resampling runs (not requests).
- ``paired student-t``, ``unpaired (Welch)``, ``delta (student-t)``: see the functions.
- ``order-statistic (within run)``: ``metrics.percentiles.order_statistic_ci``.

Every bootstrap is seeded (``seed``, default 0, or a ``rng``): the same call gives the same
interval.

Modules: ``estimate`` (the :class:`Estimate`, Student-t intervals, convergence), ``bootstrap``
(BCa and the ratio of totals), ``pooled_percentiles``, ``differences`` (paired, Welch),
``ratios`` (B vs A for a ratio of totals), ``verdicts``, ``aggregate`` (per group of runs).
"""

from metrics.statistics.aggregate import aggregate_runs
from metrics.statistics.bootstrap import N_RESAMPLES, bootstrap_ci, ratio_ci
from metrics.statistics.differences import Difference, paired_difference, unpaired_difference
from metrics.statistics.estimate import Estimate, converged, log_ratio_ci, mean_ci
from metrics.statistics.pooled_percentiles import PooledQuantile, pooled_percentile_ci, within_run_percentile
from metrics.statistics.ratios import ratio_difference
from metrics.statistics.verdicts import OUTCOMES, Verdict, verdict

__all__ = ["N_RESAMPLES", "OUTCOMES", "Difference", "Estimate", "PooledQuantile", "Verdict", "aggregate_runs",
           "bootstrap_ci", "converged", "log_ratio_ci", "mean_ci", "paired_difference", "pooled_percentile_ci",
           "ratio_ci", "ratio_difference", "unpaired_difference", "verdict", "within_run_percentile"]
