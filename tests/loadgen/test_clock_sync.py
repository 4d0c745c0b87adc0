"""Clock offsets from round trips, the piecewise-linear clock model, and the merge of worker
parts onto the driver's clock (loadgen/clock_sync.py, loadgen/workers.merge_parts): the
arithmetic the Ray backend rests on, without Ray."""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow.parquet as pq
import pytest

from loadgen.clock_sync import ClockModel, ClockPoint, ClockSample, best_of, convert_table, measure
from loadgen.records import RecordWriter, RequestRecord
from loadgen.workers import merge_parts


def test_offset_and_bound_of_one_round_trip():
    # remote = driver + 1_000_000; the remote read 30 us after the send, the reply took 70 us
    s = ClockSample(t_send=5_000, t_remote=5_000 + 30_000 + 1_000_000, t_recv=5_000 + 100_000)
    assert s.rtt_ns == 100_000
    assert s.offset_ns == 1_000_000 + 30_000 - 50_000  # midpoint: off by the asymmetry, 20 us
    p = best_of([s])
    assert p.error_ns == 50_000 and abs(p.offset_ns - 1_000_000) <= p.error_ns


def test_best_of_takes_the_shortest_round_trip():
    samples = [ClockSample(0, 900, 2_000), ClockSample(10_000, 10_600, 11_000), ClockSample(20_000, 21_000, 24_000)]
    p = best_of(samples)
    assert (p.offset_ns, p.error_ns, p.samples) == (100, 500, 3)
    with pytest.raises(ValueError, match="no clock round trips"):
        best_of([])
    with pytest.raises(ValueError, match="ended before it started"):
        best_of([ClockSample(10, 5, 0)])


def test_measure_with_a_simulated_remote_whose_bound_holds():
    """A remote clock 7 ms ahead, asymmetric random delays: every estimate within its bound,
    and more round trips never make the bound worse."""
    rng = np.random.default_rng(1)
    t = [1_000_000_000]

    def now():
        return t[0]

    def remote():
        t[0] += int(rng.exponential(40_000)) + 5_000   # request's way
        r = t[0] + 7_000_000
        t[0] += int(rng.exponential(120_000)) + 5_000  # reply's way (slower)
        return r

    prev = None
    for n in (1, 4, 16, 64):
        p = measure(remote, n, now)
        assert abs(p.offset_ns - 7_000_000) <= p.error_ns
        if prev is not None:
            assert p.error_ns <= prev.error_ns * 3  # a fresh draw, but the best of more is tight
        prev = p
    assert prev.error_ns < 60_000


def test_model_follows_drift_and_converts_both_ways():
    """Remote runs 50 ppm fast from an offset of 3 s: measurements every second, each exact to
    its bound; conversion between them is within the model's stated error."""
    m = ClockModel()
    truth_off = lambda t_remote: 3_000_000_000 + (t_remote - 10**12) * 50e-6 / (1 + 50e-6)  # noqa: E731
    for k in range(6):
        tr = 10**12 + k * 1_000_000_000
        m.add(ClockPoint(tr, int(truth_off(tr)) + (150 if k % 2 else -150), 200, 16))
    assert m.measurement_error_ns == 200 and m.interpolation_error_ns == 0
    assert m.drift_ppm == pytest.approx(50, abs=0.1)  # (+-150 ns of noise at the ends, over 5 s)
    t_remote = np.array([10**12 + 2_500_000_000, 10**12 + 4_200_000_000], dtype=np.int64)
    got = m.to_driver(t_remote)
    want = t_remote - np.array([truth_off(x) for x in t_remote])
    assert np.all(np.abs(got - want) <= m.error_ns)
    t0 = 10**12  # the start time on the remote's clock, with the latest offset
    assert m.to_remote(t0) == t0 + m.points[-1].offset_ns
    d = m.describe()
    assert d["error_ms"] == pytest.approx(0.0002) and d["measurements"] == 6
    assert d["min_rtt_ms"] == pytest.approx(0.0004)


def test_interpolation_error_counts_only_what_the_bounds_cannot_explain():
    m = ClockModel()
    for tr, off in ((0, 0), (1_000, 5_000), (2_000, 0)):  # a 5 us bump in the middle, bounds of 1 us
        m.add(ClockPoint(tr, off, 1_000, 8))
    assert m.interpolation_error_ns == 5_000 - 1_000 - 1_000
    assert m.error_ns == 1_000 + 3_000
    with pytest.raises(ValueError, match="no clock measurement"):
        ClockModel().to_driver([1])


def _rec(rid: str, base: int, chunks: int, **kw) -> RequestRecord:
    return RequestRecord(request_id=rid, scheduled_ns=base, slot_ns=base, sent_ns=base + 100,
                         first_token_ns=base + 1_000, end_ns=base + 1_000 * chunks, done_ns=base + 1_000 * chunks + 5,
                         chunk_ns=[base + 1_000 * (i + 1) for i in range(chunks)], chunk_tokens=[1] * chunks,
                         status="ok", **kw)


def test_merge_converts_each_workers_part_to_the_driver_clock(tmp_path):
    """Two workers' parts, one on a clock 5 s ahead and one 2 s behind: the merged file has
    every row once, on the driver's clock, marked with its worker; nulls stay null."""
    offsets = [5_000_000_000, -2_000_000_000]
    models = []
    for off in offsets:
        m = ClockModel()
        m.add(ClockPoint(0, off, 100, 16))
        models.append(m)
    parts, ids = [], itertools.count()
    for w, off in enumerate(offsets):
        part = str(tmp_path / f"requests.parquet.ray{w}")
        wr = RecordWriter(part)
        for k in range(3):
            driver_base = 10_000_000_000 + 1_000_000 * k
            wr.append(_rec(f"r{next(ids)}", driver_base + off, 3 + k))
        wr.append(RequestRecord(request_id=f"r{next(ids)}", scheduled_ns=None, status="cancelled"))
        wr.close()
        parts.append(part)
    out = RecordWriter(tmp_path / "requests.parquet")
    seen = merge_parts(parts, out, convert=lambda w, t: convert_table(t, models[w]))
    out.close()
    t = pq.read_table(tmp_path / "requests.parquet").to_pylist()
    assert len(t) == 8 and seen == {f"r{i}" for i in range(8)}
    assert [r["worker"] for r in t] == [0] * 4 + [1] * 4
    for r in t:
        if r["status"] == "cancelled":
            assert r["scheduled_ns"] is None and r["chunk_ns"] == []
            continue
        base = r["scheduled_ns"]
        assert 10_000_000_000 <= base <= 10_002_000_000  # back on the driver's clock
        assert r["sent_ns"] == base + 100 and r["done_ns"] == r["end_ns"] + 5
        assert r["chunk_ns"] == [base + 1_000 * (i + 1) for i in range(len(r["chunk_ns"]))]


def test_merge_refuses_a_request_recorded_twice(tmp_path):
    parts = []
    for w in range(2):
        part = str(tmp_path / f"p{w}")
        wr = RecordWriter(part)
        wr.append(_rec("same", 1_000, 1))
        wr.close()
        parts.append(part)
    out = RecordWriter(tmp_path / "requests.parquet")
    with pytest.raises(RuntimeError, match="recorded by two workers"):
        merge_parts(parts, out)
    out.abort()
