"""Per-request data and telemetry, reduced to what a page can carry whatever the run's size:
latency CDFs as quantiles on a fixed grid of probabilities (pooled over a load point's
repeats), per-run timelines in at most ``TIMELINE_BINS`` bins, and the most frequent error
texts.  An experiment of 100 runs and a million requests thus gives a few hundred kB of
figure data (``benchmarks/report_scale.py``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from harness import results_io
from harness.report.data import Run
from metrics.token_accounting import cached_share

# Probabilities of the CDF grid: every percent to p90, finer in the tail, then the maximum.
PROBS = np.unique(np.concatenate([np.linspace(0, 0.9, 91), np.linspace(0.9, 0.99, 46), np.linspace(0.99, 0.999, 19),
                                  [0.9995, 1.0]]))
TIMELINE_BINS = 200
# Above this many chunks in a run, output tokens/s spreads each request's tokens evenly between its
# first and last chunk instead of reading every chunk's time (the figure says which).
MAX_CHUNKS = 3_000_000
LATENCIES = (("ttft_s", "TTFT"), ("tpot_s", "TPOT"), ("e2el_s", "E2EL"))
COLUMNS = ["sent_ns", "done_ns", "end_ns", "first_token_ns", "status", "warmup", "output_tokens", "error",
           "ttft_s", "tpot_s", "e2el_s"]
TELEMETRY = {"running": "engine running", "waiting": "engine waiting", "kv_cache_usage": "KV cache usage"}


@dataclass
class Timeline:
    t: list                            # bin centres, seconds from the run's first send
    in_flight: list
    out_tps: list
    tps_exact: bool                    # from every chunk's time, or spread between first and last chunk
    engine: dict = field(default_factory=dict)   # common name -> values per bin (None: no sample)
    power: dict = field(default_factory=dict)    # device -> watts per bin


@dataclass
class RunView:
    latencies: dict                    # column -> completed, measured requests' values (seconds)
    timeline: Timeline | None
    errors: list                       # (text, count), most frequent first
    n: int
    # completed, measured rows that report cached_tokens: (cached share of the prompt, TTFT in s)
    cache_ttft: tuple | None = None


def _num_chunks(pf) -> int:
    md = pf.metadata
    names = [md.schema.column(i).path for i in range(md.num_columns)]
    idx = next((i for i, n in enumerate(names) if n.startswith("chunk_ns")), None)
    if idx is None:
        return 0
    return sum(md.row_group(g).column(idx).num_values for g in range(md.num_row_groups))


def _np(t: pa.Table, name: str) -> np.ndarray:
    return np.asarray(t.column(name).to_numpy(zero_copy_only=False), dtype=np.float64)


def _bin_index(times: np.ndarray, t0: float, width: float, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Equal-width bins: (bin of each time, which times fall in [t0, t0 + n * width]; the last
    edge belongs to the last bin, as in np.histogram)."""
    idx = np.floor((times - t0) / width)
    keep = (idx >= 0) & (times <= t0 + n * width)
    return np.minimum(idx[keep], n - 1).astype(np.int64), keep


def _bin_means(times: np.ndarray, values: np.ndarray, t0: float, width: float, n: int) -> list:
    idx, keep = _bin_index(times, t0, width, n)
    v = values[keep]
    finite = np.isfinite(v)
    sums = np.bincount(idx[finite], weights=v[finite], minlength=n)
    counts = np.bincount(idx[finite], minlength=n)
    with np.errstate(invalid="ignore", divide="ignore"):
        means = sums / counts
    return [None if c == 0 else round(float(m), 6) for m, c in zip(means, counts)]


def _spread_tokens(first: np.ndarray, last: np.ndarray, toks: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """Tokens per bin with each request's tokens spread evenly over [first, last] chunk."""
    ok = np.isfinite(first) & np.isfinite(last) & np.isfinite(toks) & (toks > 0)
    f, la, k = first[ok], last[ok], toks[ok]
    span = np.maximum(la - f, 1.0)
    cum = np.empty(len(edges))
    for i, e in enumerate(edges):  # tokens produced by time e: sum of each request's share so far
        cum[i] = float(np.sum(k * np.clip((e - f) / span, 0.0, 1.0)))
    return np.diff(cum)


def _telemetry(tl: Timeline, path, t0: float, width: float, n: int) -> None:
    tel = results_io.read_parquet(path, columns=["time_ns", "source", "name", "value"])
    src = tel.column("source")
    tel = tel.filter(pc.is_in(src, value_set=pa.array(["engine", "nvml", "dcgm"])))
    src, name = tel.column("source"), tel.column("name")
    times, vals = _np(tel, "time_ns"), _np(tel, "value")
    is_engine = np.asarray(pc.equal(src, "engine").to_numpy(zero_copy_only=False), dtype=bool)
    for key in TELEMETRY:
        m = is_engine & np.asarray(pc.equal(name, key).fill_null(False).to_numpy(zero_copy_only=False), dtype=bool)
        if m.any():
            tl.engine[key] = _bin_means(times[m], vals[m] * (100.0 if key == "kv_cache_usage" else 1.0), t0, width, n)
    names = [x for x in pc.unique(name).to_pylist() if x and x.endswith(".power_w")]
    for dev_name in sorted(names):
        m = ~is_engine & np.asarray(pc.equal(name, dev_name).fill_null(False).to_numpy(zero_copy_only=False),
                                    dtype=bool)
        watts = _bin_means(times[m], vals[m], t0, width, n)
        if any(v is not None for v in watts):
            tl.power[dev_name[:-len(".power_w")]] = watts


def _timeline(run: Run, t: pa.Table, chunks: pa.Table | None) -> Timeline | None:
    sent, done = _np(t, "sent_ns"), _np(t, "done_ns")
    done = np.where(np.isnan(done), _np(t, "end_ns"), done)
    ok = np.isfinite(sent)
    if not ok.any():
        return None
    t0, t1 = float(np.nanmin(sent)), float(np.nanmax(np.where(np.isfinite(done), done, sent)))
    if t1 <= t0:
        t1 = t0 + 1e9
    n = TIMELINE_BINS
    edges = np.linspace(t0, t1, n + 1)
    width = edges[1] - edges[0]
    centres = (edges[:-1] + edges[1:]) / 2
    s_sorted, d_sorted = np.sort(sent[ok]), np.sort(done[np.isfinite(done)])
    in_flight = np.searchsorted(s_sorted, centres, side="right") - np.searchsorted(d_sorted, centres, side="right")
    if chunks is not None:
        times = np.asarray(pc.list_flatten(chunks.column("chunk_ns")).to_numpy(zero_copy_only=False), dtype=np.float64)
        toks = np.asarray(pc.list_flatten(chunks.column("chunk_tokens")).to_numpy(zero_copy_only=False),
                          dtype=np.float64)
        idx, keep = _bin_index(times, t0, width, n)
        per_bin = np.bincount(idx, weights=toks[keep], minlength=n)
    else:
        per_bin = _spread_tokens(_np(t, "first_token_ns"), _np(t, "end_ns"), _np(t, "output_tokens"), edges)
    tl = Timeline(t=[round(float(c - t0) / 1e9, 4) for c in centres], in_flight=in_flight.tolist(),
                  out_tps=[round(float(v), 3) for v in per_bin / (width / 1e9)], tps_exact=chunks is not None)
    tel_path = run.dir / results_io.TELEMETRY
    if tel_path.exists():
        _telemetry(tl, tel_path, t0, width, n)
    return tl


def read_run(run: Run, timeline: bool = True) -> RunView | None:
    """The run's requests reduced (None when it has no ``requests.parquet``)."""
    path = run.dir / results_io.REQUESTS
    if not path.exists():
        return None
    pf = results_io.open_parquet(path)
    have = set(pf.schema_arrow.names)
    exact = timeline and {"chunk_ns", "chunk_tokens"} <= have and _num_chunks(pf) <= MAX_CHUNKS
    cols = [c for c in COLUMNS + ["cached_tokens", "prompt_tokens"] if c in have] + (
        ["chunk_ns", "chunk_tokens"] if exact else [])
    t = pf.read(columns=cols)
    measured = t.filter(pc.invert(t.column("warmup"))) if "warmup" in have else t
    status = measured.column("status").to_numpy(zero_copy_only=False).astype(str)
    done = measured.filter(pa.array(status == "ok"))
    lat = {c: (v[np.isfinite(v)] if (v := _np(done, c)).size else v) for c, _ in LATENCIES if c in have}
    errors = Counter(e for e in measured.column("error").to_pylist() if e) if "error" in have else Counter()
    tl = _timeline(run, t, t.select(["chunk_ns", "chunk_tokens"]) if exact else None) if timeline else None
    cache_ttft = None
    if {"cached_tokens", "prompt_tokens"} <= have and "ttft_s" in have:
        share, ttft = cached_share(_np(done, "cached_tokens"), _np(done, "prompt_tokens")), _np(done, "ttft_s")
        keep = np.isfinite(share) & np.isfinite(ttft)
        cache_ttft = (share[keep], ttft[keep]) if keep.any() else None
    return RunView(lat, tl, errors.most_common(3), measured.num_rows, cache_ttft)


def read_runs(runs: list[Run]) -> dict:
    """run dir -> RunView, read on a thread per core (parquet decoding and numpy release the GIL)."""
    import os
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=max(1, min(4, os.cpu_count() or 1))) as pool:
        return dict(zip([r.dir for r in runs], pool.map(read_run, runs)))


def cdf(values: np.ndarray) -> tuple[list, list]:
    """(quantiles in ms, probabilities in %) on the fixed grid; empty when there are no values."""
    if values.size == 0:
        return [], []
    q = np.quantile(values, PROBS) * 1e3
    return [round(float(v), 4) for v in q], [round(float(p) * 100, 3) for p in PROBS]
