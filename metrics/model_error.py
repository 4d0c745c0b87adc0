"""The plan's model against measurement: the validated error a modelled figure carries, and
whether a measurement disagrees with the model beyond it.

- Validated error (``validated_error``): from a validation's rows (``protocols.plan.validation``:
  per metric, error = (predicted - measured) / measured), over the request metrics a modelled
  config is ranked by, ``VALIDATED_METRICS``: bound = max |error|, with the metric it comes
  from.  One conservative figure: the worst of the model's held-out errors.
- Disagreement (``disagreement``): a modelled figure m against its measurement x (both
  finite, x != 0): error = m / x - 1; it disagrees when |error| > bound + tolerance, the
  tolerance being what the measurement itself is resolved to (the SLO search's bracket,
  ``protocol.search_tolerance``).  Without a bound (the model not validated) nothing is judged:
  the error is reported, ``disagrees`` is None.
"""

from __future__ import annotations

import math

VALIDATED_METRICS = ("slo_attainment", "goodput_rps", "good_output_throughput", "p50_ttft_ms", "p90_ttft_ms")
NOT_VALIDATED = "not validated"


def validated_error(rows: list[dict] | None, source: str) -> dict | None:
    """{bound, metric, per_metric, source} from a validation's rows (module doc); None where no
    row of ``VALIDATED_METRICS`` has a finite error."""
    per = {r["metric"]: float(r["error"]) for r in rows or []
           if r.get("metric") in VALIDATED_METRICS and isinstance(r.get("error"), (int, float))
           and math.isfinite(r["error"])}
    if not per:
        return None
    worst = max(per, key=lambda m: abs(per[m]))
    return {"bound": abs(per[worst]), "metric": worst, "per_metric": per, "source": source}


def describe(err: dict | None) -> str:
    """The validated error as the console and the pages say it."""
    if not err:
        return NOT_VALIDATED
    return f"validated error ±{err['bound']:.0%} (worst: {err['metric']}; {err['source']})"


def disagreement(modelled: float | None, measured: float | None, bound: float | None, tolerance: float) -> dict:
    """{error, limit, disagrees} of a modelled figure against its measurement (module doc)."""
    if modelled is None or measured is None or not (math.isfinite(modelled) and math.isfinite(measured)) \
            or measured == 0:
        return {"error": None, "limit": None, "disagrees": None}
    error = modelled / measured - 1
    if bound is None:
        return {"error": error, "limit": None, "disagrees": None}
    limit = bound + tolerance
    return {"error": error, "limit": limit, "disagrees": abs(error) > limit}
