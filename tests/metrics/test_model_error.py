"""The model's validated error and a measurement's disagreement with it, by hand."""

import pytest

from metrics.model_error import describe, disagreement, validated_error

ROWS = [{"metric": "slo_attainment", "error": -0.02}, {"metric": "goodput_rps", "error": 0.04},
        {"metric": "p90_ttft_ms", "error": -0.12}, {"metric": "paid_replica_seconds", "error": 0.5},
        {"metric": "p50_ttft_ms", "error": None}]


def test_validated_error_is_the_worst_request_metric():
    err = validated_error(ROWS, "plan.json")
    # the bill's 50 % is not a request metric; p90 TTFT's -12 % is the worst of those
    assert err == {"bound": pytest.approx(0.12), "metric": "p90_ttft_ms", "source": "plan.json",
                   "per_metric": {"slo_attainment": -0.02, "goodput_rps": 0.04, "p90_ttft_ms": -0.12}}
    assert describe(err) == "validated error ±12% (worst: p90_ttft_ms; plan.json)"
    assert validated_error([{"metric": "scale_ups", "error": 1}], "x") is None and describe(None) == "not validated"


def test_disagreement_beyond_the_bound_and_the_search_tolerance():
    # modelled 12, measured 8: +50 %, beyond 12 % + 10 %
    assert disagreement(12.0, 8.0, 0.12, 0.1) == {"error": 0.5, "limit": pytest.approx(0.22), "disagrees": True}
    assert disagreement(9.0, 8.0, 0.12, 0.1)["disagrees"] is False                  # +12.5 %
    assert disagreement(9.0, 8.0, None, 0.1) == {"error": 0.125, "limit": None, "disagrees": None}
    assert disagreement(9.0, 0.0, 0.1, 0.1)["disagrees"] is None
    assert disagreement(None, 8.0, 0.1, 0.1)["error"] is None
