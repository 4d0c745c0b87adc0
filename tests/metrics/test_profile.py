"""metrics/profile.py: the profile's per-run figures and fits recover known step times from
synthetic request rows whose timing is built from them."""

from __future__ import annotations

import math

import numpy as np
import pytest

from metrics import profile
from tests.engine_steps import closed_loop_rows

MS = 1_000_000  # ns


def _prefill_rows(L: int, ttft_ms: list[float]) -> list[dict]:
    return [{"status": "ok", "warmup": False, "ttft_s": t / 1e3, "prompt_tokens": L, "output_tokens": 1}
            for t in ttft_ms]


def _decode_rows(P: int, n_out: int, c: int, waves: int, step, t0: int = 0) -> list[dict]:
    """``waves`` waves of ``c`` requests in lockstep: prompt ``P``, ``n_out`` output tokens, one a
    chunk; the gap before token j (j = 1 .. n_out-1) is ``step(c, kv)`` with kv = c * (P + j)."""
    rows, t = [], t0
    for _ in range(waves):
        first = t + 50 * MS
        chunks = [first]
        for j in range(1, n_out):
            chunks.append(chunks[-1] + round(step(c, c * (P + j)) * MS))
        rows += [{"status": "ok", "warmup": False, "prompt_tokens": P, "output_tokens": n_out, "first_token_ns": first,
                  "end_ns": chunks[-1], "chunk_ns": list(chunks), "chunk_tokens": [1] * n_out} for _ in range(c)]
        t = chunks[-1] + 5 * MS
    return rows


def test_prefill_fit_recovers_a_quadratic_within_half_a_percent():
    a, b, c = 12.0, 0.05, 2e-5  # ms, ms/token, ms/token^2
    rng = np.random.default_rng(3)
    lengths = [64, 128, 256, 512, 1024, 1792]
    pts = []
    for L in lengths:
        truth = a + b * L + c * L * L
        # five requests with +-1 % noise: the median is the point
        pts.append(profile.prefill_point(_prefill_rows(L, list(truth * (1 + rng.uniform(-0.01, 0.01, 5)))), L))
    fit = profile.fit_prefill([p["prompt_tokens"] for p in pts], [p["prefill_ms"] for p in pts])
    co = fit["coefficients"]
    # the curve within 0.5 % everywhere on the ladder, the coefficients within a few percent
    want = np.array([a + b * L + c * L * L for L in lengths])
    assert np.max(np.abs(profile.prefill_ms_at(co, lengths) / want - 1)) < 0.005
    assert co["a_ms"] == pytest.approx(a, rel=0.05)
    assert co["b_ms_per_token"] == pytest.approx(b, rel=0.1)
    assert co["c_ms_per_token2"] == pytest.approx(c, rel=0.05)
    assert fit["max_abs_rel"] < 0.01 and len(fit["residual_ms"]) == 6


def test_prefill_point_leaves_out_warmup_and_failed_requests():
    rows = _prefill_rows(256, [10.0, 11.0, 12.0])
    rows += [{**rows[0], "ttft_s": 5.0, "warmup": True}, {**rows[0], "ttft_s": 9.0, "status": "timeout"}]
    p = profile.prefill_point(rows, 256)
    assert p["requests"] == 3 and p["prefill_ms"] == pytest.approx(11.0) and p["prompt_tokens"] == 256


def test_decode_fit_recovers_step_time_over_batch_and_context():
    alpha, beta, gamma = 8.0, 0.4, 2e-4  # ms, ms per sequence, ms per KV token
    def step(B, kv):
        return alpha + beta * B + gamma * kv
    pts = []
    for P in (128, 1024):
        for c in (1, 2, 4, 8, 16):
            pts.append(profile.decode_point(_decode_rows(P, 33, c, 2, step), P))
    for p in pts:
        assert p["batch"] == pytest.approx(p["requests"] / 2, abs=1e-9)  # lockstep waves: exactly c decoding
        # the median token sits at context P + O/2, where the truth is the figure
        assert p["step_ms"] == pytest.approx(step(p["batch"], p["kv_tokens"]), abs=2e-6)
    fit = profile.fit_decode([p["batch"] for p in pts], [p["kv_tokens"] for p in pts], [p["step_ms"] for p in pts])
    co = fit["coefficients"]
    assert fit["identifiable"]
    assert co["alpha_ms"] == pytest.approx(alpha, rel=1e-4)
    assert co["beta_ms_per_seq"] == pytest.approx(beta, rel=1e-3)
    assert co["gamma_ms_per_kv_token"] == pytest.approx(gamma, rel=1e-3)
    assert fit["rms_ms"] < 1e-4


def test_decode_fit_with_one_context_length_leaves_gamma_out():
    def step(B, kv):
        return 5.0 + 0.5 * B
    pts = [profile.decode_point(_decode_rows(256, 17, c, 1, step), 256) for c in (1, 4, 16)]
    fit = profile.fit_decode([p["batch"] for p in pts], [p["kv_tokens"] for p in pts], [p["step_ms"] for p in pts])
    assert not fit["identifiable"] and fit["coefficients"]["gamma_ms_per_kv_token"] == 0.0
    assert fit["coefficients"]["alpha_ms"] == pytest.approx(5.0, rel=1e-4)
    assert fit["coefficients"]["beta_ms_per_seq"] == pytest.approx(0.5, rel=1e-4)


def test_decode_batch_is_the_requests_decoding_when_each_token_arrived():
    # spans [0, 10], [5, 15], [20, 30]; tokens at 7 (two decoding), 12 (one), 25 (one)
    assert profile.decode_batch([0, 5, 20], [10, 15, 30], [7, 12, 25]) == pytest.approx(4 / 3)
    # a span's own ends count: a token at a request's last chunk is in its batch
    assert profile.decode_batch([0, 0], [10, 10], [10]) == 2.0
    assert math.isnan(profile.decode_batch([0], [10], []))


def test_a_warmup_request_decoding_beside_the_measured_ones_counts_in_their_batch():
    def step(B, kv):
        return 10.0
    rows = _decode_rows(128, 9, 4, 1, step)
    rows[0]["warmup"] = True  # one of the four is warm-up: three measured, but a batch of four
    p = profile.decode_point(rows, 128)
    assert p["requests"] == 3 and p["batch"] == pytest.approx(4.0) and p["step_ms"] == pytest.approx(10.0)
    # a straggler decoding alone afterwards: its 8 tokens in a batch of 1, the others' 24 in 4
    rows += _decode_rows(128, 9, 1, 1, step, t0=rows[-1]["end_ns"] + 1)
    assert profile.decode_point(rows, 128)["batch"] == pytest.approx((24 * 4 + 8 * 1) / 32)


def test_multi_token_chunks_are_attributed_per_token():
    # two tokens a chunk every 20 ms: each token's ITL is 10 ms, so the step is 10 ms
    r = {"status": "ok", "warmup": False, "prompt_tokens": 100, "output_tokens": 9, "first_token_ns": 0,
         "end_ns": 80 * MS, "chunk_ns": [0, 20 * MS, 40 * MS, 60 * MS, 80 * MS], "chunk_tokens": [1, 2, 2, 2, 2]}
    p = profile.decode_point([r], 100)
    assert p["step_ms"] == pytest.approx(10.0) and p["context"] == pytest.approx(104.5)


def test_tokens_read_together_share_the_gap_before_their_read():
    # vLLM CPU streams one token an event, but the client often reads several events at once (75 %
    # of the gaps of a profile's c=8 run were exactly 0 ns): events stamped with one read time are
    # one chunk. Here a step of 10 ms, the tokens read in bursts of 1, 3 and 4: every token's
    # ITL is 10 ms (30 ms / 3, 40 ms / 4), so the step is 10 ms, where counting each event on its
    # own gives the median 0.
    times = [0, 10, 40, 40, 40, 80, 80, 80, 80]
    r = {"status": "ok", "warmup": False, "prompt_tokens": 100, "output_tokens": 9, "first_token_ns": 0,
         "end_ns": 80 * MS, "chunk_ns": [t * MS for t in times], "chunk_tokens": [1] * 9}
    p = profile.decode_point([r], 100)
    assert p["step_ms"] == pytest.approx(10.0) and p["mean_itl_ms"] == pytest.approx(10.0)
    assert p["p90_itl_ms"] == pytest.approx(10.0)
    # the batch is still counted at every token's own arrival: one request, 8 tokens after its first
    assert p["batch"] == pytest.approx(1.0)


def test_engine_step_is_mean_decode_time_over_tokens_after_the_first():
    assert profile.engine_step_ms(630.0, 64) == pytest.approx(10.0)
    assert math.isnan(profile.engine_step_ms(None, 64)) and math.isnan(profile.engine_step_ms(5.0, 1))


def test_a_fit_needs_two_points_and_says_so():
    with pytest.raises(ValueError, match="at least 2 prompt lengths"):
        profile.fit_prefill([128], [10.0])
    with pytest.raises(ValueError, match="at least 2 decode runs"):
        profile.fit_decode([1.0, float("nan")], [100.0, 200.0], [5.0, 6.0])


def test_mocker_tables_evaluate_the_fits_on_dynamos_grid():
    pre = {"a_ms": 10.0, "b_ms_per_token": 0.1, "c_ms_per_token2": 0.0}
    dec = {"alpha_ms": 4.0, "beta_ms_per_seq": 1.0, "gamma_ms_per_kv_token": 0.001}
    t = profile.mocker_tables(pre, dec, isl_range=(64, 1792), kv_max=16 * 1088, ctx_max=1088, resolution=5)
    assert set(t) == set(profile.MOCKER_KEYS) and all(v.dtype == np.float64 for v in t.values())
    assert t["prefill_isl"].tolist() == [64.0, 496.0, 928.0, 1360.0, 1792.0]
    assert t["prefill_ttft_ms"][-1] == pytest.approx(10 + 179.2)
    assert t["decode_itl"].shape == (5, 5)
    kv, ctx = t["decode_active_kv_tokens"], t["decode_context_length"]
    assert kv[0] == 0 and kv[-1] == 16 * 1088 and ctx[0] == 1 and ctx[-1] == 1088
    # at the far corner: B = kv / ctx = 16 sequences of 1088 tokens
    assert t["decode_itl"][-1, -1] == pytest.approx(4 + 16 + 0.001 * 16 * 1088)
    # no KV: one sequence (B floored at 1), nothing read
    assert t["decode_itl"][0, 2] == pytest.approx(5.0)
    # much KV over a 1-token context: 17408 "sequences" uncapped, as Dynamo's converter has it ...
    assert t["decode_itl"][-1, 0] == pytest.approx(4 + 17408 + 0.001 * 17408)
    # ... held at the largest batch measured with batch_max
    capped = profile.mocker_tables(pre, dec, isl_range=(64, 1792), kv_max=16 * 1088, ctx_max=1088, batch_max=16,
                                   resolution=5)
    assert capped["decode_itl"][-1, 0] == pytest.approx(4 + 16 + 0.001 * 17408)
    assert capped["decode_itl"][-1, -1] == pytest.approx(t["decode_itl"][-1, -1])


def test_a_prefill_in_a_step_is_what_it_adds_to_the_others_gap():
    rows = closed_loop_rows(c=4, n_requests=60, step_ms=5.0, prefill_ms=30.0)
    p = profile.mixed_point(rows, 256)
    # a step with one prefill in it: 35 ms (reads up to 0.3 ms late on either end)
    assert p["step_with_prefill_ms"] == pytest.approx(35.0, abs=0.3)
    assert p["step_ms"] == pytest.approx(5.0, abs=0.3)
    assert p["prefill_in_step_ms"] == pytest.approx(30.0, abs=0.5)
    assert p["steps_with_prefill"] > 100 and p["requests"] == 60


def test_a_mixed_run_without_a_prefill_among_decodes_has_no_figure():
    # one request at a time: no other request decodes while one is prefilled
    rows = closed_loop_rows(c=1, n_requests=5, step_ms=5.0, prefill_ms=30.0)
    p = profile.mixed_point(rows, 256)
    assert p["steps_with_prefill"] == 0 and math.isnan(p["prefill_in_step_ms"])
    assert p["step_ms"] == pytest.approx(5.0, abs=0.3)


def test_tokens_read_with_the_first_token_are_no_decode_step():
    # vLLM CPU on two cores at times holds a whole stream back and sends it in one read (a decode
    # run of a profile, 2026-12-02: both requests of a c=1 run, 64 tokens each, in one read at
    # 200 ms): no gap was seen, so no step is measured from them, where their 63 zeros made the
    # run's step 0 ms and pulled the decode fit's fixed cost down. A request read in two parts
    # counts only the tokens after its first read.
    burst = {"status": "ok", "warmup": False, "prompt_tokens": 128, "output_tokens": 64, "first_token_ns": 0,
             "end_ns": 0, "chunk_ns": [0] * 64, "chunk_tokens": [1] * 64}
    p = profile.decode_point([burst, dict(burst)], 128)
    assert math.isnan(p["step_ms"]) and p["requests"] == 2 and p["decode_requests"] == 0
    # half its tokens in the first read, then a token every 4 ms: the step is 4 ms
    times = [0] * 5 + [4 * MS * k for k in range(1, 6)]
    part = {"status": "ok", "warmup": False, "prompt_tokens": 128, "output_tokens": 10, "first_token_ns": 0,
            "end_ns": times[-1], "chunk_ns": times, "chunk_tokens": [1] * 10}
    p = profile.decode_point([burst, part], 128)
    assert p["step_ms"] == pytest.approx(4.0) and p["mean_itl_ms"] == pytest.approx(4.0)
    assert p["decode_requests"] == 1
