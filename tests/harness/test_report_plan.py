"""The plan page's cost figure (``harness.report.plan``) with an interval reaching +inf: plan.json
writes it "inf" (resamples with no good token), the bar is drawn to its value."""

from harness.report.plan import error_bar, figures


def test_an_infinite_upper_bound_is_drawn_to_the_value():
    m = {"value": 2.0, "interval": [1.5, "inf"]}
    assert error_bar(m) == (0.5, 0.0)
    assert error_bar({"value": 2.0, "interval": [1.0, 2.5]}) == (1.0, 0.5)
    assert error_bar({"value": "inf", "interval": ["inf", "inf"]}) == (0.0, 0.0)
    doc = {"confidence": 0.95, "candidates": {},
           "plans": [{"variant": "tight", "slo": {"ttft_ms": 400.0, "percentile": 99},
                      "configs": {"a": {"metrics": {"cost_per_mtok_good": m}}}}]}
    cost = next(f for f in figures(doc) if f.section == "cost")
    bar = cost.fig.data[0]
    assert list(bar.y) == [2.0] and list(bar.error_y.array) == [0.0] and list(bar.error_y.arrayminus) == [0.5]
