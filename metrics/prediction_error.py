"""A model's prediction against a real run of the same requests: one record per case and metric.

Both sides are ``metrics.fleet.request_metrics`` over the same requests (warm-up rows left out
of the statistics on both sides) and the same window, so only the model differs:

- latencies (``p50_ttft_ms``, ``p90_ttft_ms``, ``p50_tpot_ms``, ``p90_tpot_ms``) and
  ``goodput_rps``: ``error`` = (predicted - measured) / measured, relative;
- ``slo_attainment``: ``error`` = 100 * (predicted - measured), in percentage points.

``within`` says whether |error| is inside the aim of ``BOUNDS`` (10 % for latencies, 5 points
of attainment, 5 % of goodput); a residual with a measured value of 0 has no relative error
(``error`` None, ``within`` None).
"""

from __future__ import annotations

import math

METRICS = ("p50_ttft_ms", "p90_ttft_ms", "p50_tpot_ms", "p90_tpot_ms", "slo_attainment", "goodput_rps")
POINTS = {"slo_attainment"}
BOUNDS = {"p50_ttft_ms": 0.10, "p90_ttft_ms": 0.10, "p50_tpot_ms": 0.10, "p90_tpot_ms": 0.10,
          "slo_attainment": 5.0, "goodput_rps": 0.05}


def error(metric: str, predicted: float, measured: float) -> float | None:
    """The error of one metric (module doc); None where it is undefined."""
    if predicted is None or measured is None or math.isnan(predicted) or math.isnan(measured):
        return None
    if metric in POINTS:
        return 100.0 * (predicted - measured)
    return (predicted - measured) / measured if measured else None


def residuals(case: str, predicted: dict, measured: dict, metrics=METRICS) -> list[dict]:
    """``{case, metric, predicted, measured, error, error_kind, within}`` per metric."""
    out = []
    for m in metrics:
        p, r = predicted.get(m), measured.get(m)
        e = error(m, p, r)
        out.append({"case": case, "metric": m, "predicted": p, "measured": r, "error": e,
                    "error_kind": "points" if m in POINTS else "relative",
                    "within": None if e is None else abs(e) <= BOUNDS[m]})
    return out
