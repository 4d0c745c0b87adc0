"""The scheduler model's approximation (protocols.plan.stretches) without Dynamo: which stretches
are replayed, with which lead-ins, how they are packed, and how the others get their latencies,
against a fake replay whose latencies depend on the load of the last 60 s (an engine with
memory) and which records the ground truth of the whole stream."""

import numpy as np
import pytest

from conf.schema import Autoscale
from engines.autoscale_policy import ScalingPolicy
from metrics.fleet import request_metrics
from metrics.slo import SLO
from protocols.plan import scheduler as sched
from protocols.plan import stretches as st
from protocols.plan.fleet import FleetSimulation
from protocols.plan.traffic import Traffic
from tests.protocols.plan import fake_replay, slot_replay
from tests.protocols.plan.capacity_fixtures import capacity
from tests.protocols.plan.test_scheduler import TABLES

MEMORY_S = 60.0


def fake_replay_fn(calls: list):
    """A replay whose TTFT is 20 ms + 0.02 ms a prompt token + 4 ms per request arrived in the 60 s
    before (counted in the stream it is given, as an engine's backlog), TPOT 5 ms + 0.5 ms per
    such request; each call's streams are logged."""
    def replay(streams):
        calls.append([len(s[0]) for s in streams])
        out = []
        for arr, prompt, _out in (s[:3] for s in streams):
            arr = np.asarray(arr, float)
            recent = np.arange(arr.size) - np.searchsorted(arr, arr - MEMORY_S)
            out.append((0.020 + 2e-5 * np.asarray(prompt) + 0.004 * recent, 0.005 + 5e-4 * recent))
        return out
    return replay


def day(n=20_000, seed=1):
    """A diurnal-like stream: the rate swings 1:4 over its span; prompts 100..2000, outputs 10..500."""
    rng = np.random.default_rng(seed)
    u = np.cumsum(rng.exponential(1.0, n))
    span = u[-1]
    t = np.linspace(0, 1, 1001)
    rate = 1.0 + 3.0 * np.sin(np.pi * t) ** 2          # 1 .. 4, relative
    cum = np.concatenate([[0], np.cumsum((rate[1:] + rate[:-1]) / 2 * np.diff(t))])
    arr = np.interp(u / span, cum / cum[-1], t) * (n / 2.0)    # mean 2 req/s
    return arr, rng.integers(100, 2001, n), rng.integers(10, 501, n)


def test_exact_replays_the_whole_stream():
    arr, p, o = day(2000)
    assert st.plan_sample(arr, p, o, st.StretchSample(1.0), 0) is None
    assert st.plan_sample(arr, p, o, st.StretchSample(0.99, stretch_s=60), 0) is None   # all stretches: whole
    calls = []
    got, notes = st.serve_sampled([(arr, p, o)], fake_replay_fn(calls), st.StretchSample(1.0), [0])
    assert calls == [[2000]] and notes == [None] and got[0][0].size == 2000


def test_strata_and_sample():
    """M stretches holding requests, n = round(fraction x M) strata of equal count by score,
    one stretch drawn in each; the lead-in requests come before the stretch and are not kept."""
    arr, p, o = day()
    s = st.StretchSample(0.3, stretch_s=300, lead_s=120)
    plan = st.plan_sample(arr, p, o, s, seed=7)
    m = int(np.unique(np.floor(arr / 300)).size)
    assert plan.stratum.size == m == 34 and plan.chosen.size == round(0.3 * m) == 10
    assert np.bincount(plan.stratum).tolist() == [4, 3, 4, 3, 3, 4, 3, 4, 3, 3]
    assert sorted(plan.stratum[plan.chosen]) == list(range(10))
    # too few stretches for the fraction: MIN_STRATA of them
    assert st.plan_sample(arr, p, o, st.StretchSample(0.1, stretch_s=300), 7).chosen.size == st.MIN_STRATA == 8
    # the strata order the stretches by score: every stretch of stratum 0 scores below stratum 2's
    _, score, _ = st.stretch_scores(arr, p, o, 300)
    assert score[plan.stratum == 0].max() <= score[plan.stratum == 9].min()
    kept = plan.replay[plan.keep]
    assert set(plan.stretch[kept]) == set(plan.chosen.tolist())
    assert kept.size == np.isin(plan.stretch, plan.chosen).sum()     # every request of a chosen stretch
    lead = plan.replay[~plan.keep]
    assert lead.size > 0
    for i in lead:                # within 120 s before the start of a chosen stretch
        starts = np.floor(arr[kept] / 300).astype(int) * 300.0
        assert np.any((arr[i] < starts) & (arr[i] >= starts - 120))
    # packed: in order, each block gap_s after the last arrival of the one before
    assert np.all(np.diff(plan.arrival) > 0)
    for b in range(1, int(plan.block.max()) + 1):
        assert plan.arrival[plan.block == b][0] - plan.arrival[plan.block == b - 1][-1] == pytest.approx(s.gap_s)
    again = st.plan_sample(arr, p, o, s, seed=7)
    assert np.array_equal(again.chosen, plan.chosen)                    # seeded: the same sample
    assert not np.array_equal(st.plan_sample(arr, p, o, s, seed=8).chosen, plan.chosen)


def test_replayed_stretches_get_their_exact_records_and_the_rest_their_strata():
    """With a lead-in at least the engine's memory, a replayed stretch's records are the exact
    replay's, bit for bit; the others take a donor of their stratum; the stream's percentiles,
    attainment and goodput land near the exact ones (the fake is harsher than the mocker: its
    latency is proportional to the last minute's arrivals, so 10 of 34 stretches are replayed)."""
    arr, p, o = day()
    s = st.StretchSample(0.3, stretch_s=300, lead_s=MEMORY_S)
    calls = []
    replay = fake_replay_fn(calls)
    truth = replay([(arr, p, o)])[0]
    got, notes = st.serve_sampled([(arr, p, o)], replay, s, [3])
    ttft, tpot = got[0]
    plan = st.plan_sample(arr, p, o, s, 3)
    kept = plan.replay[plan.keep]
    assert np.array_equal(ttft[kept], truth[0][kept]) and np.array_equal(tpot[kept], truth[1][kept])
    assert np.all(np.isfinite(ttft)) and ttft.size == arr.size
    # the replay saw only the sample (its lead-ins and stretches) and, beside it, the lead-in check's
    # (the same stretches after 2 x 60 s: with the fake's 60 s memory, the same records, so kept)
    wide = st.plan_sample(arr, p, o, s.check(), 3)
    jobs = -(-(int(plan.block.max()) + 1) // st.BLOCKS_PER_JOB)
    assert sum(calls[1][:jobs]) == plan.replay.size < 0.4 * arr.size
    assert sum(calls[1][jobs:]) == wide.replay.size < 0.5 * arr.size
    assert notes[0]["replayed_whole"] == 0 and notes[0]["lead_in_shift"] == 0.0
    n = notes[0]
    assert (n["stretches"], n["replayed_stretches"], n["undrained_blocks"]) == (34, 10, 0)
    assert n["replayed_requests"] == kept.size and n["lead_in_requests"] == plan.replay.size - kept.size
    # an unreplayed request's latencies are a donor's of its stratum's replayed stretch
    other = np.flatnonzero(~np.isin(plan.stretch, plan.chosen))
    pool = {g: truth[0][plan.stretch == c] for g, c in enumerate(plan.chosen)}
    g = plan.stratum[plan.stretch[other]]
    assert all(np.isin(ttft[i], pool[k]) for i, k in zip(other[:300], g[:300]))
    slo = SLO(ttft_ms=600, tpot_ms=70)
    ex = request_metrics(slo, np.ones(arr.size, bool), truth[0], truth[1], o, float(arr[-1]))
    ap = request_metrics(slo, np.ones(arr.size, bool), ttft, tpot, o, float(arr[-1]))
    assert ex["slo_attainment"] == pytest.approx(0.357, abs=0.001)
    for k in ("p50_ttft_ms", "p90_ttft_ms", "p99_ttft_ms", "p50_tpot_ms", "p90_tpot_ms"):
        assert ap[k] == pytest.approx(ex[k], rel=0.04), k
    assert ap["goodput_rps"] == pytest.approx(ex["goodput_rps"], rel=0.02)
    assert ap["slo_attainment"] == pytest.approx(ex["slo_attainment"], abs=0.01)


def test_a_stream_is_split_into_jobs_of_eight_blocks():
    arr, p, o = day(40_000)
    s = st.StretchSample(0.3, stretch_s=120, lead_s=30)
    calls = []
    got, notes = st.serve_sampled([(arr, p, o), (arr[:50], p[:50], o[:50])], fake_replay_fn(calls), s, [0, 1])
    plan = st.plan_sample(arr, p, o, s, 0)
    blocks = int(plan.block.max()) + 1
    wide = st.plan_sample(arr, p, o, s.check(), 0)
    jobs = -(-blocks // st.BLOCKS_PER_JOB)
    # the sample's jobs, its lead-in check's, and the short stream: whole, one job
    assert len(calls[0]) == jobs + -(-(int(wide.block.max()) + 1) // st.BLOCKS_PER_JOB) + 1
    assert sum(calls[0][:jobs]) == plan.replay.size and sum(calls[0][jobs:-1]) == wide.replay.size
    assert calls[0][-1] == 50
    assert notes[1] is None and got[1][0].size == 50 and got[0][0].size == 40_000


def test_undrained_blocks_are_counted():
    """A block whose last request finishes after the next block's first arrival says the replica
    was near capacity; the note says the approximation does not hold there."""
    arr, p, o = day(5000)
    s = st.StretchSample(0.2, stretch_s=120, lead_s=30, gap_s=10.0)
    slow = lambda streams: [(np.full(len(x[0]), 100.0), np.full(len(x[0]), 0.1)) for x in streams]  # noqa: E731
    got, notes = st.serve_sampled([(arr, p, o)], slow, s, [0])
    assert notes[0]["undrained_blocks"] == notes[0]["blocks"] - 1 > 0
    assert notes[0]["max_drain_s"] > 100.0
    assert "had not drained 10 s after their last arrival" in st.combine(notes, s)["text"]


def test_combine_sums_and_labels():
    a = {"streams": 1, "requests": 100, "stretches": 20, "replayed_stretches": 1, "replayed_requests": 5,
         "lead_in_requests": 2, "blocks": 1, "undrained_blocks": 0, "max_drain_s": 3.0}
    b = {**a, "requests": 300, "replayed_requests": 15, "max_drain_s": 7.0}
    s = st.StretchSample(0.05)
    c = st.combine([a, None, b], s)
    assert (c["stretches"], c["replayed_stretches"], c["replayed_share"], c["max_drain_s"]) == (40, 2, 0.05, 7.0)
    assert c["text"].startswith("approximate: 5.0% of the replicas' stretches replayed (2 of 40, 300 s each")
    assert "5.0% of the requests" in c["text"]
    assert st.combine([None, None], s) is None


def test_scheduler_model_samples_caches_and_labels(tmp_path):
    """The model with a sample: full-length arrays, its note read back from the cache, its own
    cache key (an exact replay's key is unchanged), and the label in describe()."""
    py = fake_replay.python(tmp_path)
    try:
        arr, p, o = day(3000)
        np.savez(tmp_path / "perf_data.npz", **TABLES)
        exact = sched.SchedulerModel(py, tmp_path / "perf_data.npz", {"max_num_seqs": 8}, cache_dir=tmp_path / "c")
        approx = sched.SchedulerModel(py, tmp_path / "perf_data.npz", {"max_num_seqs": 8}, cache_dir=tmp_path / "c",
                                      sample=st.StretchSample(0.1, stretch_s=60, lead_s=20))
        assert exact.key((arr, p, o)) != approx.key((arr, p, o))
        assert "approximate" not in exact.describe()
        assert approx.describe()["approximate"]["text"].startswith("approximate: 10% of each replica's 60 s")
        got, note = approx.serve_noted([(arr, p, o)])
        assert got[0][0].size == 3000 and np.allclose(got[0][0], 0.05)
        assert note["replayed_stretches"] == st.MIN_STRATA and note["text"].startswith("approximate: ")
        # the sample, and its lead-in check beside it (a constant TTFT: the same records, the sample kept)
        wide = st.plan_sample(arr, p, o, approx.sample.check(), int(approx.key((arr, p, o))[:15], 16)).replay.size
        replays = [note["replayed_requests"] + note["lead_in_requests"], wide]
        assert sorted(fake_replay.log(tmp_path)[1]) == sorted(replays) and note["replayed_whole"] == 0
        again, note2 = approx.serve_noted([(arr, p, o)])
        assert note2 == note and sorted(fake_replay.log(tmp_path)[1]) == sorted(replays)
    finally:
        sched.close_workers()


def test_fleet_result_carries_the_note(tmp_path):
    py = fake_replay.python(tmp_path)
    try:
        rng = np.random.default_rng(0)
        arr = np.cumsum(rng.exponential(0.5, 2000))
        tr = Traffic(arr, np.full(2000, 100), np.full(2000, 21), float(arr[-1]) + 1, "test")
        pol = ScalingPolicy(Autoscale(capacity_rps=4.0, min_replicas=1, max_replicas=1, cold_start_s=1.0, window_s=5.0))
        np.savez(tmp_path / "perf_data.npz", **TABLES)
        model = sched.SchedulerModel(py, tmp_path / "perf_data.npz", {}, cache_dir=tmp_path / "c",
                                     sample=st.StretchSample(0.2, stretch_s=60, lead_s=10))
        res = FleetSimulation(tr, capacity(), pol, SLO(), scheduler=model).run()
        assert res["completed"] == 2000 and res["replay_sample"]["replayed_stretches"] == 8
        assert res["replay_sample"]["stretches"] == 17
    finally:
        sched.close_workers()


def _good_tokens(ttft, tpot, o, arr) -> float:
    slo = SLO(ttft_ms=2000, tpot_ms=50)
    return request_metrics(slo, np.ones(arr.size, bool), ttft, tpot, o, float(arr[-1]))["good_output_throughput"]


def test_a_day_past_capacity_is_replayed_whole_and_says_why():
    """A 4-slot replica whose diurnal day peaks at 1.11x its capacity: a backlog builds over
    hours, no 120 s lead-in holds it, and the sample put the cost per good token 7 to 40 % below
    the exact replay's.  Doubling the lead-in moves the replayed stretches' latencies: the stream
    is replayed whole, so its cost is the exact one, and the note says why."""
    arr, p, o = slot_replay.diurnal_day(1.11)
    replay = slot_replay.replay(4)
    exact = replay([(arr, p, o)])[0]
    s = st.StretchSample(0.1)
    for seed in range(3):
        got, notes = st.serve_sampled([(arr, p, o)], replay, s, [seed])
        assert np.array_equal(got[0][0], exact[0]) and np.array_equal(got[0][1], exact[1])
        assert _good_tokens(*got[0], o, arr) == _good_tokens(*exact, o, arr)
        n = notes[0]
        assert n["replayed_whole"] == 1 and n["lead_in_shift"] > st.LEAD_IN_TOLERANCE
        assert (n["replayed_stretches"], n["replayed_requests"]) == (n["stretches"], arr.size)
        text = st.combine(notes, s)["text"]
        assert text.startswith("exact replay, the sample refused: 1 of 1 sampled stream(s) replayed whole")
        assert "240 s lead-in" in text


def test_a_day_within_capacity_keeps_its_sample():
    """The same replica peaking at 0.8x its capacity: the lead-in holds (the doubled lead-in gives
    the same records), the sample stands and its cost per good token is within 1 % of exact."""
    arr, p, o = slot_replay.diurnal_day(0.8)
    replay = slot_replay.replay(4)
    exact = replay([(arr, p, o)])[0]
    s = st.StretchSample(0.1)
    got, notes = st.serve_sampled([(arr, p, o)], replay, s, [0])
    n = notes[0]
    assert n["replayed_whole"] == 0 and n["lead_in_shift"] < 1e-9      # the same records, to rounding
    assert n["replayed_stretches"] == 29 < n["stretches"]
    assert _good_tokens(*got[0], o, arr) == pytest.approx(_good_tokens(*exact, o, arr), rel=0.01)
    assert "replayed whole" not in st.combine(notes, s)["text"]
