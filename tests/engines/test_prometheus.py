import math

import pytest

from engines import prometheus
from tests.engine_cfg import FIXTURES


def test_parse_labels_escapes_special_values_and_timestamps():
    text = ('# HELP x_total help text\n# TYPE x_total counter\n'
            'x_total{a="1",b="q\\"uote\\\\back\\nline"} 3.5 1700000000000\n'
            'y NaN\nz{le="+Inf"} +Inf\nw -Inf\nv 1e3\n')
    samples, types = prometheus.parse(text)
    assert types == {"x_total": "counter"}
    assert samples[0].labels == {"a": "1", "b": 'q"uote\\back\nline'}
    assert samples[0].value == 3.5
    assert math.isnan(samples[1].value)
    assert samples[2].value == math.inf and samples[2].labels == {"le": "+Inf"}
    assert samples[3].value == -math.inf
    assert samples[4].value == 1000.0


def test_total_sums_over_labels_and_filters():
    samples, _ = prometheus.parse((FIXTURES / "sglang_metrics.txt").read_text())
    assert prometheus.total(samples, "sglang:num_running_reqs") == 23.0
    assert prometheus.total(samples, "sglang:cached_tokens_total") == 2.5e6
    assert prometheus.total(samples, "sglang:cached_tokens_total", {"cache_source": "host"}) == 5e5
    assert prometheus.total(samples, "sglang:no_such_metric") is None


def test_real_vllm_page_parses():
    samples, types = prometheus.parse((FIXTURES / "vllm_0.32.0_metrics.txt").read_text())
    assert types["vllm:prefix_cache_hits_total"] == "counter"
    assert prometheus.total(samples, "vllm:prefix_cache_hits_total") == 18432.0
    assert prometheus.total(samples, "vllm:request_success_total") == 41.0


@pytest.mark.parametrize("line,err", [('x{a="1 2', "unterminated"), ("x", "no value"), ("x abc", "bad value"),
                                      ('x{1a="b"} 2', "bad label name"), ("9x 1", "bad metric name")])
def test_malformed_lines_name_their_line(line, err):
    with pytest.raises(prometheus.ExpositionError, match=f"line 2: {err}"):
        prometheus.parse("ok 1\n" + line + "\n")


def test_summed_adds_each_name_over_pages_and_leaves_out_names_no_page_has():
    from engines.prometheus import summed

    assert summed([{"running": 2.0, "waiting": 1.0}, {"running": 3.0}, {}]) == {"running": 5.0, "waiting": 1.0}
    assert summed([]) == {}
