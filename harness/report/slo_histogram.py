"""A run's requests reduced to what lets a page recompute SLO attainment, goodput and good tokens
at any TTFT, TPOT and E2E thresholds, with a stated worst-case error, without per-request rows.

Per run: for each of TTFT, TPOT and E2EL (milliseconds, completed measured requests) the sorted
values cut into bins, each of at most ``max(1, n // BINS)`` requests (n: every measured request,
failed ones included: the attainment's denominator) and, unless it holds one request, at most
T / ``BINS`` output tokens (T: the completed requests' output tokens; ``_bins`` closes a bin at
whichever comes first), each bin kept as the lowest and highest value in it (rounded outwards to
``DIGITS`` significant digits where that keeps neighbouring bins apart; exact where the bin holds
one value); then a sparse 3-D histogram of (TTFT bin, TPOT bin, E2EL bin) cells with the requests
and output tokens in each (sorted by cell, as base64 varints of the steps between cells, the
counts and the token sums: ``encode``).  Bin 0 of a dimension holds the requests without a value
there (TPOT of a one-token output: passes the TPOT SLO, as ``metrics.slo.slo_pass`` says; a
missing TTFT or E2EL fails its SLO).

At thresholds t (None: no SLO on that dimension) a bin passes when its highest value is <= t, fails
when its lowest is > t, and straddles t otherwise.  A cell is surely good when every dimension
passes, possibly good when none fails.  ``bounds`` returns both counts (and token sums); the page
shows their midpoint, which is off from the exact count by at most half their difference: the
requests in straddled bins not failing elsewhere.  Sorted bins never overlap, so a threshold
straddles one bin per dimension at most, and a bin of one value (one request, or ties) never does:

- requests: a straddled bin holds at most n // BINS, so the midpoint is off by at most
  3 / (2 BINS) of n: ``WORST_CASE_PP`` = 0.5 percentage points of attainment with ``BINS`` = 300;
- output tokens: a straddled bin holds at most T / BINS, so the good tokens' midpoint is off by at
  most 3 / (2 BINS) of T: 0.5 % of the run's output tokens (``WORST_CASE_PP`` again).  A bound on
  requests alone says nothing about tokens: one straddled bin of long generations can hold a tenth
  of them;
- a run of fewer than 2 x ``BINS`` requests has bins of one request each, kept exactly: it is exact.
"""

from __future__ import annotations

import base64
import math
from dataclasses import dataclass

import numpy as np
import pyarrow.compute as pc

from harness import results_io

BINS = 300
DIGITS = 5
DIMS = (("ttft_ms", "ttft_s"), ("tpot_ms", "tpot_s"), ("e2el_ms", "e2el_s"))
# The worst-case error, one straddled bin per dimension, halved: in percentage points of attainment,
# and in per cent of the run's output tokens for good tokens (module doc).
WORST_CASE_PP = 100 * len(DIMS) / (2 * BINS)
COLUMNS = ["status", "warmup", "output_tokens"] + [c for _, c in DIMS]


def _round_out(v: np.ndarray, up: bool) -> np.ndarray:
    """``v`` rounded to DIGITS significant digits away from the bin's inside (down for a lowest
    value, up for a highest), so a rounded edge never changes a pass into a fail or back."""
    out = np.asarray(v, dtype=np.float64).copy()
    nz = out != 0
    scale = 10.0 ** (DIGITS - 1 - np.floor(np.log10(np.abs(out[nz]))))
    out[nz] = (np.ceil if up else np.floor)(out[nz] * scale) / scale
    # float division can land a hair inside; step one ulp outwards where it did
    bad = (out > v) if not up else (out < v)
    out[bad] = np.nextafter(out[bad], -np.inf if not up else np.inf)
    return out


def _cuts(tokens_sorted: np.ndarray, per_bin: int, cap: float) -> np.ndarray:
    """Where each bin starts (indices into the sorted values): greedily, a bin takes the next values
    while it holds fewer than ``per_bin`` and their tokens stay within ``cap``; a value whose own
    tokens exceed ``cap`` gets a bin to itself.  One step per bin, not per value."""
    n = tokens_sorted.size
    incl = np.cumsum(tokens_sorted, dtype=np.float64)
    excl = incl - tokens_sorted
    starts, s = [], 0
    while s < n:
        starts.append(s)
        by_tokens = int(np.searchsorted(incl, excl[s] + cap, side="right"))
        s = max(s + 1, min(s + per_bin, by_tokens))
    return np.asarray(starts, dtype=np.int64)


def _bins(values_ms: np.ndarray, tokens: np.ndarray, per_bin: int, cap: float) -> tuple[np.ndarray, list, list]:
    """(bin index of each value, 1-based, 0 for NaN; lowest and highest value of each bin)."""
    idx = np.zeros(values_ms.size, dtype=np.int64)
    finite = np.isfinite(values_ms)
    order = np.argsort(values_ms[finite], kind="stable")
    s = values_ms[finite][order]
    starts = _cuts(tokens[finite][order], per_bin, cap)
    ends = np.append(starts[1:], s.size)
    ranked = np.empty(order.size, dtype=np.int64)
    ranked[order] = np.repeat(np.arange(starts.size), ends - starts) + 1
    idx[finite] = ranked
    lo_exact, hi_exact = s[starts], s[ends - 1]
    lo, hi = _round_out(lo_exact, up=False), _round_out(hi_exact, up=True)
    # where rounding made neighbours overlap, keep their exact values: sorted bins never overlap, so
    # a threshold straddles one bin per dimension at most (the bound in the module doc); a bin of one
    # value keeps it exactly, so it never straddles (small runs are exact)
    clash = np.flatnonzero(hi[:-1] > lo[1:])
    hi[clash], lo[clash + 1] = hi_exact[clash], lo_exact[clash + 1]
    one = lo_exact == hi_exact
    lo[one], hi[one] = lo_exact[one], hi_exact[one]
    return idx, [float(x) for x in lo], [float(x) for x in hi]


def from_columns(status, output_tokens, ttft_s, tpot_s, e2el_s) -> dict:
    """The histogram of one run's measured requests (columns as in ``requests.parquet``)."""
    status = np.asarray(status).astype(str)
    ok = status == "ok"
    n = int(status.size)
    per_bin = max(1, n // BINS)
    toks = np.nan_to_num(np.asarray(output_tokens, dtype=np.float64)[ok]).astype(np.int64)
    total = int(toks.sum())
    cap = total / BINS if total else math.inf
    cols = {"ttft_s": ttft_s, "tpot_s": tpot_s, "e2el_s": e2el_s}
    edges, index = {}, []
    for name, col in DIMS:
        v = np.asarray(cols[col], dtype=np.float64)[ok] * 1e3  # as metrics.slo.slo_pass compares
        i, lo, hi = _bins(v, toks, per_bin, cap)
        edges[name] = {"lo": lo, "hi": hi}
        index.append(i)
    sizes = [len(edges[name]["lo"]) + 1 for name, _ in DIMS]
    flat = (index[0] * sizes[1] + index[1]) * sizes[2] + index[2]
    cells, inverse = np.unique(flat, return_inverse=True)
    counts = np.bincount(inverse, minlength=cells.size)
    tokens = np.bincount(inverse, weights=toks, minlength=cells.size).astype(np.int64)
    return {"n": n, "per_bin": per_bin, "tokens": total, "edges": edges,
            "cells": {"delta": encode(np.diff(cells, prepend=0)), "count": encode(counts), "tokens": encode(tokens)}}


def encode(values) -> str:
    """Non-negative integers as base64 of their LEB128 varints (7 bits a byte, low first; the high
    bit says another byte follows): a cell's three numbers take about 5 bytes, not 11 as JSON text."""
    a = np.asarray(values, dtype=np.uint64)
    nbytes = np.ones(a.size, dtype=np.int64)
    rest = a >> np.uint64(7)
    while rest.any():
        nbytes += rest > 0
        rest >>= np.uint64(7)
    out = np.zeros(int(nbytes.sum()), dtype=np.uint8)
    start = np.cumsum(nbytes) - nbytes
    for k in range(int(nbytes.max(initial=0))):
        m = nbytes > k
        byte = (a[m] >> np.uint64(7 * k)) & np.uint64(0x7F)
        out[start[m] + k] = byte | (np.uint64(0x80) * (nbytes[m] > k + 1))
    return base64.b64encode(out.tobytes()).decode("ascii")


def decode(text: str) -> np.ndarray:
    """The integers ``encode`` wrote (the page's script decodes them the same way)."""
    raw = np.frombuffer(base64.b64decode(text), dtype=np.uint8)
    last = np.flatnonzero(raw < 0x80)  # each value ends at a byte without the high bit
    first = np.concatenate([[0], last[:-1] + 1])
    out = np.zeros(last.size, dtype=np.int64)
    for k in range(int((last - first).max(initial=-1)) + 1):
        m = first + k <= last
        out[m] += (raw[first[m] + k].astype(np.int64) & 0x7F) << (7 * k)
    return out


def read(path) -> dict | None:
    """The histogram of the run whose ``requests.parquet`` is ``path`` (None when it has none)."""
    try:
        pf = results_io.open_parquet(path)
    except FileNotFoundError:
        return None
    have = set(pf.schema_arrow.names)
    t = pf.read(columns=[c for c in COLUMNS if c in have])
    if "warmup" in have:
        t = t.filter(pc.invert(t.column("warmup")))

    def col(c):
        return t.column(c).to_numpy(zero_copy_only=False) if c in have else np.full(t.num_rows, np.nan)
    return from_columns(col("status"), col("output_tokens"), col("ttft_s"), col("tpot_s"), col("e2el_s"))


@dataclass(frozen=True)
class Bounds:
    """Good requests and their output tokens at some thresholds: surely (low) and possibly (high)."""

    n: int
    low: int
    high: int
    tokens_low: int
    tokens_high: int
    tokens_total: int = 0  # every completed request's output tokens (the token bound's base)

    @property
    def good(self) -> float:
        return (self.low + self.high) / 2

    @property
    def tokens(self) -> float:
        return (self.tokens_low + self.tokens_high) / 2

    @property
    def attainment(self) -> float:
        return self.good / self.n if self.n else math.nan

    @property
    def error(self) -> float:
        """The most the attainment can be off: half the possibly-but-not-surely share."""
        return (self.high - self.low) / 2 / self.n if self.n else 0.0

    @property
    def tokens_error(self) -> float:
        """The most the good tokens can be off, as a share of the run's output tokens."""
        return (self.tokens_high - self.tokens_low) / 2 / self.tokens_total if self.tokens_total else 0.0


def _states(edges: dict, limit: float | None, nan_passes: bool) -> np.ndarray:
    """Per bin (bin 0 first): 0 pass, 1 straddle, 2 fail."""
    lo, hi = np.asarray(edges["lo"]), np.asarray(edges["hi"])
    if limit is None:
        return np.zeros(lo.size + 1, dtype=np.int64)
    real = np.where(hi <= limit, 0, np.where(lo > limit, 2, 1))
    return np.concatenate([[0 if nan_passes else 2], real])


def bounds(h: dict, ttft_ms: float | None, tpot_ms: float | None, e2el_ms: float | None) -> Bounds:
    """The counts the page computes (its JavaScript does the same) at these thresholds."""
    limits = {"ttft_ms": ttft_ms, "tpot_ms": tpot_ms, "e2el_ms": e2el_ms}
    states = [_states(h["edges"][name], limits[name], name == "tpot_ms") for name, _ in DIMS]
    sizes = [s.size for s in states]
    flat = np.cumsum(decode(h["cells"]["delta"]))
    k = flat % sizes[2]
    j = (flat // sizes[2]) % sizes[1]
    i = flat // (sizes[2] * sizes[1])
    worst = np.maximum(np.maximum(states[0][i], states[1][j]), states[2][k])
    count, tokens = decode(h["cells"]["count"]), decode(h["cells"]["tokens"])
    sure, maybe = worst == 0, worst <= 1
    return Bounds(h["n"], int(count[sure].sum()), int(count[maybe].sum()), int(tokens[sure].sum()),
                  int(tokens[maybe].sum()), int(h.get("tokens", tokens.sum())))
