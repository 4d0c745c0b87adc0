"""telemetry.sampling: edges only where the engine computes on this host's CPUs."""

import pytest

from metrics.telemetry import sampling
from metrics.telemetry.sampling import EDGES, PERIODIC, on_this_host, sampling_mode


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000", "http://localhost:8000/metrics", "http://[::1]:9/x",
                                 "http://0.0.0.0:8000", "127.0.0.2:80"])
def test_loopback_and_unspecified_are_this_host(url):
    assert on_this_host(url)


def test_an_address_of_this_host_is_this_host(monkeypatch):
    monkeypatch.setattr(sampling, "own_addresses", lambda: {"10.1.2.3"})
    assert on_this_host("http://10.1.2.3:8000")
    assert not on_this_host("http://10.1.2.4:8000")


def test_a_name_that_does_not_resolve_is_elsewhere():
    assert not on_this_host("http://no-such-host.invalid:8000")


def test_auto_edges_for_a_local_engine_without_a_gpu():
    mode, why = sampling_mode("auto", ["http://127.0.0.1:8000", "http://127.0.0.1:8000/metrics"], gpu_seen=False)
    assert mode == EDGES and "this host's CPUs" in why


def test_auto_periodic_with_a_gpu_or_an_engine_elsewhere():
    assert sampling_mode("auto", ["http://127.0.0.1:8000"], gpu_seen=True) == (PERIODIC, "auto: this host has a GPU")
    mode, why = sampling_mode("auto", ["http://127.0.0.1:8000", "http://no-such-host.invalid:1/metrics"],
                              gpu_seen=False)
    assert mode == PERIODIC and "no-such-host.invalid" in why  # one replica away: its host is not ours
    assert sampling_mode("auto", [], gpu_seen=False)[0] == PERIODIC
    assert sampling_mode("auto", ["http://127.0.0.1:8000"], gpu_seen=False, emulated=True) == (
        PERIODIC, "auto: the engine emulates its timing")  # Dynamo's mocker: no compute to disturb


@pytest.mark.parametrize("mode", ["periodic", "edges"])
def test_a_mode_named_is_kept(mode):
    assert sampling_mode(mode, ["http://127.0.0.1:8000"], gpu_seen=False) == (mode, f"telemetry.sampling={mode}")
    assert sampling_mode(mode, ["http://no-such-host.invalid:1"], gpu_seen=True)[0] == mode


def test_an_unknown_mode_names_the_key():
    with pytest.raises(ValueError, match="telemetry.sampling='sometimes'"):
        sampling_mode("sometimes", [], gpu_seen=False)
