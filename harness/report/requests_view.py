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
import pyarrow.parquet as pq

from harness.report.data import Run

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


def _num_chunks(path) -> int:
    md = pq.ParquetFile(path).metadata
    names = [md.schema.column(i).path for i in range(md.num_columns)]
    idx = next((i for i, n in enumerate(names) if n.startswith("chunk_ns")), None)
    if idx is None:
        return 0
    return sum(md.row_group(g).column(idx).num_values for g in range(md.num_row_groups))


def _np(t: pa.Table, name: str) -> np.ndarray:
    return np.asarray(t.column(name).to_numpy(zero_copy_only=False), dtype=np.float64)


def _bin_means(times: np.ndarray, values: np.ndarray, edges: np.ndarray) -> list:
    idx = np.searchsorted(edges, times, side="right") - 1
    keep = (idx >= 0) & (idx < len(edges) - 1) & np.isfinite(values)
    sums = np.bincount(idx[keep], weights=values[keep], minlength=len(edges) - 1)
    counts = np.bincount(idx[keep], minlength=len(edges) - 1)
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


def _timeline(run: Run, t: pa.Table) -> Timeline | None:
    sent, done = _np(t, "sent_ns"), _np(t, "done_ns")
    done = np.where(np.isnan(done), _np(t, "end_ns"), done)
    ok = np.isfinite(sent)
    if not ok.any():
        return None
    t0, t1 = float(np.nanmin(sent)), float(np.nanmax(np.where(np.isfinite(done), done, sent)))
    if t1 <= t0:
        t1 = t0 + 1e9
    edges = np.linspace(t0, t1, TIMELINE_BINS + 1)
    centres = (edges[:-1] + edges[1:]) / 2
    width_s = (edges[1] - edges[0]) / 1e9
    s_sorted, d_sorted = np.sort(sent[ok]), np.sort(done[np.isfinite(done)])
    in_flight = np.searchsorted(s_sorted, centres, side="right") - np.searchsorted(d_sorted, centres, side="right")
    path = run.dir / "requests.parquet"
    exact = _num_chunks(path) <= MAX_CHUNKS
    if exact:
        ch = pq.read_table(path, columns=["chunk_ns", "chunk_tokens"])
        times = np.asarray(pc.list_flatten(ch.column("chunk_ns")).to_numpy(zero_copy_only=False), dtype=np.float64)
        toks = np.asarray(pc.list_flatten(ch.column("chunk_tokens")).to_numpy(zero_copy_only=False), dtype=np.float64)
        per_bin = np.histogram(times, bins=edges, weights=toks)[0] if times.size else np.zeros(TIMELINE_BINS)
    else:
        per_bin = _spread_tokens(_np(t, "first_token_ns"), _np(t, "end_ns"), _np(t, "output_tokens"), edges)
    tl = Timeline(t=[round(float(c - t0) / 1e9, 4) for c in centres], in_flight=in_flight.tolist(),
                  out_tps=[round(float(v), 3) for v in per_bin / width_s], tps_exact=exact)
    tel_path = run.dir / "telemetry.parquet"
    if tel_path.exists():
        tel = pq.read_table(tel_path, columns=["time_ns", "source", "name", "value"],
                            filters=[("source", "in", ["engine", "nvml", "dcgm"])])
        src, name = tel.column("source").to_pylist(), tel.column("name").to_pylist()
        times, vals = _np(tel, "time_ns"), _np(tel, "value")
        for key in TELEMETRY:
            m = np.array([s == "engine" and n == key for s, n in zip(src, name)], dtype=bool)
            if m.any():
                tl.engine[key] = _bin_means(times[m], vals[m] * (100.0 if key == "kv_cache_usage" else 1.0), edges)
        for dev in sorted({n[:-len(".power_w")] for s, n in zip(src, name) if s in ("nvml", "dcgm")
                           and n and n.endswith(".power_w")}):
            m = np.array([n == f"{dev}.power_w" for n in name], dtype=bool)
            vals_dev = _bin_means(times[m], vals[m], edges)
            if any(v is not None for v in vals_dev):
                tl.power[dev] = vals_dev
    return tl


def read_run(run: Run, timeline: bool = True) -> RunView | None:
    """The run's requests reduced (None when it has no ``requests.parquet``)."""
    path = run.dir / "requests.parquet"
    if not path.exists():
        return None
    have = set(pq.ParquetFile(path).schema_arrow.names)
    t = pq.read_table(path, columns=[c for c in COLUMNS if c in have])
    measured = t.filter(pc.invert(t.column("warmup"))) if "warmup" in have else t
    status = measured.column("status").to_numpy(zero_copy_only=False).astype(str)
    done = measured.filter(pa.array(status == "ok"))
    lat = {c: (v[np.isfinite(v)] if (v := _np(done, c)).size else v) for c, _ in LATENCIES if c in have}
    errors = Counter(e for e in measured.column("error").to_pylist() if e) if "error" in have else Counter()
    return RunView(lat, _timeline(run, t) if timeline else None, errors.most_common(3), measured.num_rows)


def cdf(values: np.ndarray) -> tuple[list, list]:
    """(quantiles in ms, probabilities in %) on the fixed grid; empty when there are no values."""
    if values.size == 0:
        return [], []
    q = np.quantile(values, PROBS) * 1e3
    return [round(float(v), 4) for v in q], [round(float(p) * 100, 3) for p in PROBS]
