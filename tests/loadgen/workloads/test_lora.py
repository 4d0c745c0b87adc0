"""workload.lora: each request's adapter drawn from the configured shares (explicit, uniform or
Zipf), seeded, one adapter per session, and a bad mix named by its key."""

from __future__ import annotations

import collections

import pytest

from conf.schema import LoraMix
from loadgen.workloads.item import WorkItem
from loadgen.workloads.lora import AdapterMix, WithAdapters

N = 4000
TOL = 0.03  # > 3 binomial standard deviations at N=4000 (sqrt(0.25 / 4000) = 0.0079)


def _shares(mix: AdapterMix, n: int = N) -> dict:
    counts = collections.Counter(mix.pick(f"req-{i}") for i in range(n))
    return {a: counts[a] / n for a in mix.adapters}


def test_explicit_shares_within_tolerance():
    mix = AdapterMix.from_config(LoraMix(adapters=["a", "b", "c"], shares=[7, 2, 1]), seed=0)
    assert mix.shares == pytest.approx([0.7, 0.2, 0.1])
    got = _shares(mix)
    for a, want in zip("abc", (0.7, 0.2, 0.1)):
        assert abs(got[a] - want) < TOL, (a, got)


def test_uniform_is_the_default():
    mix = AdapterMix.from_config(LoraMix(adapters=["a", "b"]), seed=3)
    assert mix.shares == [0.5, 0.5]
    got = _shares(mix)
    assert abs(got["a"] - 0.5) < TOL and abs(got["b"] - 0.5) < TOL


def test_zipf_ranks_in_listed_order():
    mix = AdapterMix.from_config(LoraMix(adapters=["r1", "r2", "r3", "r4"], dist="zipf", zipf_s=1.0), seed=0)
    h = 1 + 1 / 2 + 1 / 3 + 1 / 4
    want = [1 / h, 1 / 2 / h, 1 / 3 / h, 1 / 4 / h]  # 0.48, 0.24, 0.16, 0.12
    assert mix.shares == pytest.approx(want)
    got = _shares(mix)
    assert [got[a] for a in mix.adapters] == sorted(got.values(), reverse=True)
    for a, w in zip(mix.adapters, want):
        assert abs(got[a] - w) < TOL, (a, got)
    steeper = AdapterMix.from_config(LoraMix(adapters=["r1", "r2"], dist="zipf", zipf_s=2.0), seed=0)
    assert steeper.shares == pytest.approx([0.8, 0.2])


def test_seeded_and_independent_of_order():
    cfg = LoraMix(adapters=["a", "b"])
    one = [AdapterMix.from_config(cfg, 7).pick(f"req-{i}") for i in range(200)]
    backwards = [AdapterMix.from_config(cfg, 7).pick(f"req-{i}") for i in reversed(range(200))][::-1]
    other = [AdapterMix.from_config(cfg, 8).pick(f"req-{i}") for i in range(200)]
    assert one == backwards
    assert sum(x != y for x, y in zip(one, other)) > 50  # another seed: another draw (about half differ)


def test_items_turns_and_followups_get_their_sessions_adapter():
    mix = AdapterMix.from_config(LoraMix(adapters=["a", "b", "c"]), seed=0)

    class Trace:
        table = "the trace's table"

        def __iter__(self):
            return iter([WorkItem(f"s{i}-0", "p", 1, 1, session_id=f"s{i}") for i in range(30)])

        def followup(self, rec):
            return WorkItem(rec.request_id[:-1] + "1", "p", 1, 1, session_id=rec.session_id, turn=1), 0.0

    w = WithAdapters(Trace(), mix)
    first = list(w)
    assert w.table == "the trace's table"
    assert {it.model for it in first} == {"a", "b", "c"}
    for it in first:
        nxt, _ = w.followup(it)
        assert nxt.model == it.model == mix.pick(it.session_id)


@pytest.mark.parametrize("cfg, key", [
    (LoraMix(adapters=["a", "b"], shares=[1.0]), "workload.lora.shares has 1 weights for 2 adapters"),
    (LoraMix(adapters=["a", "a"]), "workload.lora.adapters"),
    (LoraMix(adapters=["a", "b"], shares=[0, 0]), "workload.lora.shares=[0.0, 0.0]"),
    (LoraMix(shares=[1.0]), "workload.lora.shares is set but workload.lora.adapters is empty"),
])
def test_bad_mix_names_the_key(cfg, key):
    with pytest.raises(ValueError, match=key.replace("[", r"\[").replace("]", r"\]")):
        AdapterMix.from_config(cfg, 0)


def test_no_adapters_no_mix():
    assert AdapterMix.from_config(LoraMix(), 0) is None
