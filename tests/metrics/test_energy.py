"""Energy integration on synthetic telemetry: counter vs trapezoid, wraps, resets, the energy block."""

import math

import numpy as np
import pytest

from metrics.energy import (
    counter_energy,
    energy_summary,
    power_energy,
    steady_capacity,
    steady_state_interval,
    tokens_between,
)
from metrics.telemetry.index import TelemetryIndex
from tests.telemetry_fixtures import S, energy_at, gpu_rows, nan, request_table, telemetry_table


def test_counter_and_trapezoid_agree_on_constant_power():
    t = np.arange(0, 101) * 0.1 * S
    counter = 1e6 + 200.0 * t / S
    power = np.full(t.shape, 200.0)
    a, b = int(1.05 * S), int(8.95 * S)  # edges between samples: interpolated
    c = counter_energy(t, counter, a, b)
    p = power_energy(t, power, a, b)
    assert c["energy_j"] == pytest.approx(200 * 7.9)
    assert p["energy_j"] == pytest.approx(200 * 7.9)
    assert c["covered_s"] == pytest.approx(7.9)


def test_counter_and_trapezoid_on_a_ramp():
    # P(t) = 100 + 20 t W, E(t) = 100 t + 10 t^2 J; edges on sample times, so both are exact.
    t = np.arange(0, 21) * 0.5
    e = 100 * t + 10 * t ** 2
    p = 100 + 20 * t
    a, b = 1.0, 9.0
    exact = 100 * (b - a) + 10 * (b ** 2 - a ** 2)
    assert counter_energy(t * S, e, a * S, b * S)["energy_j"] == pytest.approx(exact)
    assert power_energy(t * S, p, a * S, b * S)["energy_j"] == pytest.approx(exact)


def test_trapezoid_misses_a_spike_the_counter_sees():
    # 1 s sampling, a 0.2 s 1000 W burst between samples: the counter keeps it, power samples cannot.
    t = np.arange(0, 11) * 1.0
    e = 100 * t + np.where(t >= 5, 1000 * 0.2, 0.0)
    p = np.full(t.shape, 100.0)
    assert counter_energy(t * S, e, 0, 10 * S)["energy_j"] == pytest.approx(1200.0)
    assert power_energy(t * S, p, 0, 10 * S)["energy_j"] == pytest.approx(1000.0)


def test_counter_wrap_with_known_range():
    rng = 262143.328850  # a RAPL max_energy_range_uj / 1e6
    v = (262_000.0 + 50.0 * np.arange(10)) % rng  # wraps once between samples 2 and 3
    t = np.arange(10) * S
    r = counter_energy(t, v, 0, 9 * S, wrap_j=rng)
    assert r["wraps"] == 1 and r["resets"] == 0
    assert r["energy_j"] == pytest.approx(450.0)


def test_counter_reset_without_range_counts_energy_since_reset():
    # NVML's counter restarts from 0 when the driver reloads: after the reset, 20 J were used.
    t = np.array([0, 1, 2, 3]) * S
    v = np.array([5000.0, 5100.0, 20.0, 120.0])
    r = counter_energy(t, v, 0, 3 * S)
    assert r["resets"] == 1
    assert r["energy_j"] == pytest.approx(100 + 20 + 100)


def test_window_outside_samples_is_not_covered():
    t = np.array([5, 6]) * S
    r = counter_energy(t, np.array([0.0, 10.0]), 0, 2 * S)
    assert nan(r["energy_j"]) and r["covered_s"] == 0
    r = power_energy(t, np.array([5.0, 5.0]), 0, 5.5 * S)
    assert r["energy_j"] == pytest.approx(2.5) and r["covered_s"] == pytest.approx(0.5)


def _marks(a, b):
    return [(a, "mark", "idle_baseline_start", math.nan, None), (b, "mark", "idle_baseline_end", math.nan, None)]


def test_energy_block_from_nvml_counters_with_idle_baseline():
    # two GPUs, idle 50 W until t=2 s, then 250 W; window [0, 10]; baseline = the first 2 s
    rows = gpu_rows("gpu0") + gpu_rows("gpu1", offset_j=7.0e5) + _marks(0.0, 2.0)
    tel = telemetry_table(rows)
    out = energy_summary(tel, 0, 10 * S, good_tokens=4200, all_tokens=6000)
    per_gpu = energy_at(10.0)  # 100 + 2000
    assert out["energy_available"] is True
    assert out["energy_source"] == "nvml" and out["energy_scope"] == "accelerators"
    assert out["energy_method"] == "counter" and out["energy_devices"] == 2
    assert out["energy_j"] == pytest.approx(2 * per_gpu)
    assert out["energy_coverage"] == pytest.approx(1.0)
    assert out["mean_power_w"] == pytest.approx(2 * per_gpu / 10)
    assert out["energy_per_good_token_j"] == pytest.approx(2 * per_gpu / 4200)
    assert out["energy_per_token_j"] == pytest.approx(2 * per_gpu / 6000)
    assert out["good_tokens_per_joule"] == pytest.approx(4200 / (2 * per_gpu))
    assert out["tokens_per_joule"] == pytest.approx(6000 / (2 * per_gpu))
    assert out["idle_power_w"] == pytest.approx(100.0)  # 2 GPUs x 50 W
    assert out["idle_energy_j"] == pytest.approx(1000.0)
    assert out["idle_energy_share"] == pytest.approx(1000.0 / (2 * per_gpu))


def test_energy_falls_back_to_power_and_says_why():
    rows = gpu_rows("gpu0") + gpu_rows("gpu1", counter=False)
    rows.append((0.0, "nvml", "gpu1.energy_counter_j", math.nan, "unavailable: NVMLError_NotSupported: Not Supported"))
    out = energy_summary(telemetry_table(rows), int(0.5 * S), int(9.5 * S), 100, 100)
    assert out["energy_method"] == "mixed"
    exact = energy_at(9.5) - energy_at(0.5)
    # gpu1's trapezoid is off only in the 0.1 s step where power jumps
    assert out["energy_j"] == pytest.approx(2 * exact, rel=0.01)
    assert any("gpu1: integrated power" in n and "NotSupported" in n for n in out["energy_notes"])
    only_power = energy_summary(telemetry_table(gpu_rows(counter=False)), 0, 10 * S, 1, 1)
    assert only_power["energy_method"] == "power_integration"


def test_unavailable_energy_is_nan_with_reasons_never_zero():
    rows = [(0.0, "nvml", "unavailable", math.nan, "NVML did not start: no NVIDIA GPU"),
            (0.0, "dcgm", "unavailable", math.nan, "telemetry.dcgm.url is not set"),
            (0.0, "rapl", "unavailable", math.nan, "/sys/class/powercap does not exist"),
            (0.0, "host", "mem_used_bytes", 1e9, None)]
    reqs = request_table([{"sent": 0.0, "done": 1.0}, {"sent": 0.5, "done": 1.5}])
    out = energy_summary(telemetry_table(rows), 0, 2 * S, 20, 20, requests=reqs, capacity=2)
    assert out["energy_available"] is False
    for k in ("energy_j", "energy_per_good_token_j", "energy_per_token_j", "tokens_per_joule", "idle_energy_share",
              "steady_energy_per_token_j", "mean_power_w"):
        assert nan(out[k]), k
    why = out["energy_unavailable_reason"]
    assert "nvml: NVML did not start" in why and "dcgm: telemetry.dcgm.url" in why and "rapl: /sys" in why
    assert out["idle_unavailable_reason"] == why
    # the steady interval itself is still found from the records; only its energy is missing
    assert out["steady_window_s"] == pytest.approx(0.5)
    assert out["steady_unavailable_reason"] == why
    none = energy_summary(None, 0, S, 1, 1)
    assert none["energy_available"] is False and "no power or energy samples" in none["energy_unavailable_reason"]


def test_dcgm_is_used_when_nvml_is_absent_and_rapl_only_gives_cpu_scope():
    rows = gpu_rows("gpu0", source="dcgm", counter=True, power=True)
    rows.append((0.0, "nvml", "unavailable", math.nan, "no NVML"))
    out = energy_summary(telemetry_table(rows), 0, 10 * S, 1, 1)
    assert out["energy_source"] == "dcgm" and out["energy_j"] == pytest.approx(energy_at(10.0))
    rapl = [(t, "rapl", "package-0.energy_counter_j", 10.0 * t, None) for t in range(11)]
    out = energy_summary(telemetry_table(rapl), 0, 10 * S, 1, 1)
    assert out["energy_scope"] == "cpu_packages" and out["energy_j"] == pytest.approx(100.0)
    both = energy_summary(telemetry_table(rapl + gpu_rows("gpu0")), 0, 10 * S, 1, 1)
    assert both["energy_scope"] == "accelerators" and both["energy_j"] == pytest.approx(energy_at(10.0))
    assert both["cpu_package_energy_j"] == pytest.approx(100.0)


def test_rapl_wrap_range_row_is_used():
    rng = 1000.0
    rows = [(0.0, "rapl", "package-0.energy_counter_range_j", rng, None)]
    rows += [(t, "rapl", "package-0.energy_counter_j", (900.0 + 40.0 * t) % rng, None) for t in range(11)]
    out = energy_summary(telemetry_table(rows), 0, 10 * S, 1, 1)
    assert out["energy_j"] == pytest.approx(400.0) and out["energy_counter_wraps"] == 1


def _closed_loop_c2():
    # C = 2: full at t=1, dips between a completion and the next send are instantaneous,
    # the final drain starts at t=7 (r3 done, nothing sent after).
    return request_table([
        {"sent": 0.0, "done": 4.0, "output_tokens": 8},
        {"sent": 1.0, "done": 3.0, "output_tokens": 4},
        {"sent": 3.0, "done": 6.0, "output_tokens": 6},
        {"sent": 4.0, "done": 7.0, "output_tokens": 6},
        {"sent": 6.0, "done": 8.0, "output_tokens": 4},
    ])


def test_steady_state_starts_after_warmup():
    # C = 2; two warm-up requests fill the batch from t=0 to t=5; measured ones follow.
    reqs = request_table([
        {"sent": 0.0, "done": 5.0, "warmup": True},
        {"sent": 0.1, "done": 5.2, "warmup": True},
        {"sent": 5.0, "done": 7.0},
        {"sent": 5.2, "done": 8.0},
        {"sent": 7.0, "done": 9.0},
    ])
    # at t=5 a warm-up request is still in flight beside the first measured one: the batch is full
    assert steady_state_interval(reqs, 2) == ((5 * S, 8 * S), "")
    assert steady_state_interval(request_table([{"sent": 0.0, "warmup": True}]), 1)[0] is None


def test_steady_state_interval_closed_loop():
    reqs = _closed_loop_c2()
    iv, why = steady_state_interval(reqs, 2)
    assert why == "" and iv == (1 * S, 7 * S)
    iv3, why3 = steady_state_interval(reqs, 3)
    assert iv3 is None and "never reached" in why3
    # tokens: chunks spread from sent+0.1 to done; count those in [1, 7] by hand
    expected = 0
    for sent, done, k in [(0, 4, 8), (1, 3, 4), (3, 6, 6), (4, 7, 6), (6, 8, 4)]:
        expected += int(sum(1 <= c <= 7 for c in np.linspace(sent + 0.1, done, k)))
    assert tokens_between(reqs, 1 * S, 7 * S) == expected


def test_steady_state_energy_beside_the_full_window():
    reqs = _closed_loop_c2()
    tel = telemetry_table([(t / 10, "nvml", "gpu0.energy_counter_j", 300.0 * t / 10, None) for t in range(0, 101)])
    out = energy_summary(tel, 0, 10 * S, good_tokens=28, all_tokens=28, requests=reqs, capacity=2)
    toks = tokens_between(reqs, 1 * S, 7 * S)
    assert out["energy_j"] == pytest.approx(3000.0)            # the full window, 10 s
    assert out["steady_energy_j"] == pytest.approx(1800.0)     # 6 s at 300 W
    assert out["steady_window_s"] == pytest.approx(6.0)
    assert out["steady_output_tokens"] == toks
    assert out["steady_energy_per_token_j"] == pytest.approx(1800.0 / toks)
    assert out["energy_per_token_j"] == pytest.approx(3000.0 / 28)


def test_steady_capacity_from_load():
    assert steady_capacity({"kind": "concurrency", "concurrency": 8}) == (8, "")
    assert steady_capacity({"kind": "poisson", "rate": 2, "max_concurrency": 16}) == (16, "")
    c, why = steady_capacity({"kind": "poisson", "rate": 2})
    assert c is None and "open-loop" in why


def test_nothing_good_gives_infinite_energy_per_good_token_with_reason():
    out = energy_summary(telemetry_table(gpu_rows()), 0, 10 * S, good_tokens=0, all_tokens=500)
    assert out["energy_per_good_token_j"] == math.inf
    assert "no good output tokens" in out["energy_per_good_token_reason"]
    assert out["energy_per_token_j"] == pytest.approx(energy_at(10.0) / 500)


def test_telemetry_index_reads_marks_and_notes():
    rows = gpu_rows(counter=False) + _marks(1.0, 2.0)
    rows.append((0.0, "nvml", "gpu0.energy_counter_j", math.nan, "unavailable: NVMLError_NotSupported"))
    t = TelemetryIndex(telemetry_table(rows))
    assert t.interval("idle_baseline_start", "idle_baseline_end") == (1 * S, 2 * S)
    assert "NotSupported" in t.quantity_notes[("nvml", "gpu0")]
    assert set(t.series["nvml"]["gpu0"]) == {"power_w"}
