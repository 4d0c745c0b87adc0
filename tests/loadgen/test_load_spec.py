"""loadgen.load_spec: the typed load config held (not copied), the requests to send counted once."""

import pytest

from conf.schema import Load
from loadgen.load_spec import LoadSpec


def test_from_load_holds_the_typed_config_and_counts_the_warm_up_on_top():
    spec = LoadSpec.from_load({"kind": "constant", "rate": 5, "num_requests": 10, "warmup_requests": 3})
    assert isinstance(spec.load, Load)
    t = spec.load
    assert (t.kind, t.rate, t.num_requests, t.drain_timeout_s) == ("constant", 5, 10, 120)
    assert spec.requests_to_send == 13 and spec.stop_when_saturated is None
    assert LoadSpec.from_load({"kind": "poisson", "rate": 1, "duration_s": 2}).requests_to_send is None


def test_of_counts_the_requests_to_send_with_the_warm_up_and_no_drain_timeout():
    spec = LoadSpec.of(kind="concurrency", concurrency=4, requests_to_send=12, warmup_requests=2)
    assert (spec.load.num_requests, spec.requests_to_send, spec.load.warmup_requests) == (10, 12, 2)
    assert spec.load.drain_timeout_s is None and spec.stop_when_saturated is False
    share = spec.share(5, 3, concurrency=2, warmup_requests=1)
    assert (share.requests_to_send, share.load.num_requests, share.load.concurrency, share.prewarm_connections) == \
        (5, 4, 2, 3)
    assert spec.load.concurrency == 4  # the point's load is left as it was


@pytest.mark.parametrize("kwargs, match", [
    ({"kind": "poisson", "rate": 1, "requests_to_send": 0}, "load.num_requests must be >= 1, got 0"),
    ({"kind": "poisson"}, "set load.num_requests or load.duration_s"),
    ({"kind": "concurrency", "requests_to_send": 3}, "load.concurrency must be >= 1"),
    ({"kind": "gamma", "requests_to_send": 3}, "load.rate must be > 0 for load=gamma"),
])
def test_validate_names_the_config_key(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LoadSpec.of(**kwargs).validate()
