"""The report's SLO histogram (harness/report/slo_histogram.py): at any thresholds, the midpoint of
its surely-good and possibly-good counts is within the stated bound of the exact count
(``metrics.slo.good_mask``), the bound is at most WORST_CASE_PP, and small runs are exact.  Good
tokens are held to their own bound, 0.5 % of the run's output tokens, on data made to break a bound
on requests alone (a few long generations)."""

from __future__ import annotations

import numpy as np
import pytest

from harness.report import slo_histogram as sh
from metrics.slo import SLO, good_mask


def _requests(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    status = np.where(rng.random(n) < 0.03, "http_error", "ok").astype(object)
    toks = rng.integers(1, 300, n)
    ttft = rng.lognormal(np.log(0.08), 0.5, n)
    tpot = np.where(toks > 1, rng.lognormal(np.log(0.012), 0.3, n), np.nan)
    tpot[:n // 20] = 0.0125  # a tie: many requests at one value, cut across bins
    e2el = ttft + np.nan_to_num(tpot) * (toks - 1)
    for a in (ttft, tpot, e2el):
        a[status != "ok"] = np.nan
    return status, toks, ttft, tpot, e2el


def _exact(slo: SLO, status, toks, ttft, tpot, e2el):
    good = good_mask(slo, status, ttft, tpot, e2el)
    return int(good.sum()), int(np.where(good, toks, 0).sum())


@pytest.mark.parametrize("n", [20_000, 3_001])
def test_midpoint_within_the_stated_bound_at_any_thresholds(n):
    cols = _requests(n)
    status, toks, ttft, tpot, e2el = cols
    h = sh.from_columns(status, toks, ttft, tpot, e2el)
    assert h["n"] == n and sh.decode(h["cells"]["count"]).sum() == int((status == "ok").sum())
    assert sh.decode(h["cells"]["tokens"]).sum() == int(toks[status == "ok"].sum())
    rng = np.random.default_rng(1)
    # thresholds drawn from the data itself (on values, between them) and from no SLO at all
    picks = [(None, None, None), (None, 12.5, None)]
    for _ in range(300):
        def pick(a):
            v = a[np.isfinite(a)]
            x = float(rng.choice(v)) * 1e3
            return None if rng.random() < 0.2 else (x if rng.random() < 0.5 else x * (1 + 1e-7))
        picks.append((pick(ttft), pick(tpot), pick(e2el)))
    worst = 0.0
    for t in picks:
        b = sh.bounds(h, *t)
        good, tokens = _exact(SLO(*t), *cols)
        assert b.low <= good <= b.high, t
        assert b.tokens_low <= tokens <= b.tokens_high, t
        assert abs(b.attainment - good / n) <= b.error + 1e-12
        assert b.error * 100 <= sh.WORST_CASE_PP + 1e-9
        # good tokens: within the page's per-run bound, itself at most 0.5 % of the run's output tokens
        assert abs(b.tokens - tokens) <= b.tokens_error * h["tokens"] + 1e-9
        assert b.tokens_error * 100 <= sh.WORST_CASE_PP + 1e-9
        worst = max(worst, b.error)
    assert sh.WORST_CASE_PP == 0.5
    assert worst > 0  # the test's thresholds did land inside bins


def _long_generations(n: int = 3_000, seed: int = 5):
    """1 % of the requests generate 80 x the tokens, so their latencies sort together at the top of E2E
    (and near each other in TTFT): a bin of those holds a tenth of the run's tokens."""
    rng = np.random.default_rng(seed)
    status = np.where(rng.random(n) < 0.02, "http_error", "ok").astype(object)
    long = np.zeros(n, bool)
    long[rng.choice(n, n // 100, replace=False)] = True
    toks = np.where(long, rng.integers(7_000, 9_000, n), rng.integers(50, 150, n))
    ttft = np.where(long, rng.normal(0.2, 0.001, n), rng.lognormal(np.log(0.08), 0.5, n))
    tpot = rng.lognormal(np.log(0.012), 0.2, n)
    e2el = ttft + tpot * (toks - 1)
    for a in (ttft, tpot, e2el):
        a[status != "ok"] = np.nan
    return status, toks, ttft, tpot, e2el, long


def test_good_tokens_within_the_stated_bound_with_long_generations():
    status, toks, ttft, tpot, e2el, long = _long_generations()
    cols = (status, toks, ttft, tpot, e2el)
    h = sh.from_columns(*cols)
    total = int(toks[status == "ok"].sum())
    assert h["n"] == 3_000 and h["per_bin"] == 10
    rng = np.random.default_rng(2)
    # adversarial thresholds: on and just above the long generations' own latencies, and elsewhere
    ok_long = long & (status == "ok")
    picks = [(float(a) * 1e3 * f, None, None) for a in ttft[ok_long] for f in (1, 1 + 1e-9)]
    picks += [(None, None, float(a) * 1e3 * f) for a in e2el[ok_long] for f in (1, 1 + 1e-9)]
    picks += [(float(rng.choice(ttft[status == "ok"])) * 1e3, float(rng.choice(tpot[status == "ok"])) * 1e3,
               float(rng.choice(e2el[status == "ok"])) * 1e3) for _ in range(100)]
    bill, duration = 12.5, 600.0
    worst = 0.0
    for t in picks:
        b = sh.bounds(h, *t)
        good, tokens = _exact(SLO(*t), *cols)
        off = abs(b.tokens - tokens)
        # the stated bound: 0.5 % of the run's output tokens, never more
        assert off <= sh.WORST_CASE_PP / 100 * total + 1e-9, (t, off / total, off / max(tokens, 1))
        # and the per-run bound the page shows at these thresholds holds too
        assert b.tokens_low <= tokens <= b.tokens_high and off <= b.tokens_error * total + 1e-9
        assert b.tokens_error * 100 <= sh.WORST_CASE_PP + 1e-12
        # good tokens/s and cost per M good tokens: within what that bound on tokens allows
        e = b.tokens_error * total
        assert abs(b.tokens / duration - tokens / duration) <= e / duration + 1e-9
        assert 1e6 * bill / (tokens + e) - 1e-9 <= 1e6 * bill / b.tokens <= 1e6 * bill / max(tokens - e, 1e-300)
        assert abs(b.attainment - good / 3_000) <= b.error + 1e-12 and b.error * 100 <= sh.WORST_CASE_PP + 1e-12
        worst = max(worst, b.tokens_error)
    assert worst > 0  # some threshold did fall inside a bin of long generations
    assert h["tokens"] == total  # the base the page states the bound on


def test_a_run_under_two_bins_a_request_is_exact_at_any_threshold():
    """Bins of one request each (n < 2 x BINS) keep their value exactly: values that agree to 5
    significant digits and a threshold between them still decide every request."""
    n = 2 * sh.BINS - 1
    rng = np.random.default_rng(4)
    base = 0.1 + np.arange(n) * 1e-10  # 100.0000000 ms, 100.0000001 ms, ...: equal to 5 digits
    ttft, tpot, e2el = rng.permutation(base), rng.permutation(base) / 10, rng.permutation(base) * 20
    status, toks = np.array(["ok"] * n, dtype=object), rng.integers(1, 5_000, n)
    h = sh.from_columns(status, toks, ttft, tpot, e2el)
    assert h["per_bin"] == 1
    for k in range(0, n, 7):
        for t in [(ttft[k] * 1e3, None, None), (None, tpot[k] * 1e3 * (1 + 1e-12), None),
                  (None, None, e2el[k] * 1e3 * (1 - 1e-12)), (ttft[k] * 1e3, tpot[k] * 1e3, e2el[k] * 1e3)]:
            b = sh.bounds(h, *t)
            assert (b.low, b.tokens_low) == (b.high, b.tokens_high) == _exact(SLO(*t), status, toks, ttft, tpot, e2el)


def test_a_small_run_is_exact():
    cols = _requests(250, seed=3)
    h = sh.from_columns(*cols)
    assert h["per_bin"] == 1
    for t in [(100.0, 12.0, 2000.0), (50.0, None, None), (None, None, 900.0)]:
        b = sh.bounds(h, *t)
        assert (b.low, b.tokens_low) == (b.high, b.tokens_high) == _exact(SLO(*t), *cols)


def test_edges_are_rounded_outwards_and_never_overlap():
    v = np.array([1.000001, 1.000002, 1.000003, 1.000004, 2.5, 2.5, 2.5, 7.123456789]) / 1e3
    h = sh.from_columns(np.array(["ok"] * 8), np.ones(8), v, v, v)
    lo, hi = np.array(h["edges"]["ttft_ms"]["lo"]), np.array(h["edges"]["ttft_ms"]["hi"])
    assert np.all(hi[:-1] <= lo[1:]) and np.all(lo <= hi)
    assert np.all(lo <= np.sort(v * 1e3)) and np.all(hi >= np.sort(v * 1e3))


def test_varints_round_trip():
    values = np.array([0, 1, 127, 128, 300, 16_383, 16_384, 27_270_901, 2**40 + 5], dtype=np.int64)
    assert sh.decode(sh.encode(values)).tolist() == values.tolist()
    assert sh.decode(sh.encode([])).tolist() == []
    assert len(sh.encode(np.ones(300, dtype=np.int64))) == 400  # one byte a small value, base64's 4/3
