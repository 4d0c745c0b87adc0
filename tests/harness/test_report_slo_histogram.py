"""The report's SLO histogram (harness/report/slo_histogram.py): at any thresholds, the midpoint of
its surely-good and possibly-good counts is within the stated bound of the exact count
(``metrics.slo.good_mask``), the bound is at most WORST_CASE_PP, and small runs are exact."""

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
        worst = max(worst, b.error)
    assert sh.WORST_CASE_PP == 0.5
    assert worst > 0  # the test's thresholds did land inside bins


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
