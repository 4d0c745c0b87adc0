"""A plan's capacity: read from a finished experiment, capacity at any SLO, block resamples."""

import math

import numpy as np
import pyarrow.parquet as pq
import pytest

from harness.errors import UserError
from metrics.slo import SLO
from protocols.plan.capacity import read_experiment, resamples
from tests.protocols.plan.capacity_fixtures import capacity
from tests.synthetic_experiment import write_experiment


def test_max_load_per_block_at_any_slo():
    cap = capacity()
    loose = cap.max_load(SLO(ttft_ms=1000))
    assert loose["per_block"] == [4.0, 4.0, 4.0] and loose["first_fail"] == [8.0, 8.0, 8.0]
    tight = cap.max_load(SLO(ttft_ms=150))
    # block 2's light point has TTFT 0.1 x 1.1 = 110 ms, its 4 req/s point 220 ms
    assert tight["per_block"] == [1.0, 1.0, 1.0]
    assert cap.max_load(SLO(ttft_ms=50))["mean"] == 0.0


def test_resamples_are_the_exact_bootstrap_for_few_blocks():
    r = resamples([0, 1, 2], 200)
    assert len(r) == math.comb(5, 3)
    assert sum(w for _, w in r) == pytest.approx(1.0)
    assert dict(r)[(0, 0, 0)] == pytest.approx(1 / 27) and dict(r)[(0, 1, 2)] == pytest.approx(6 / 27)
    drawn = resamples(list(range(8)), 50, seed=1)
    assert len(drawn) == 50 and all(len(b) == 8 for b, _ in drawn)


def test_with_blocks_keeps_a_block_drawn_twice_twice():
    cap = capacity()
    sub = cap.with_blocks([2, 2, 0])
    assert len(sub.points[1]) == 9
    assert sorted({p.ttft_s[0] for p in sub.points[1] if p.rate_rps == 1.0}) == pytest.approx([0.1, 0.11])


def test_read_a_synthetic_experiment(tmp_path):
    exp = write_experiment(tmp_path / "exp", requests=40, rates=(5.0, 10.0))
    caps = {c.name: c for c in read_experiment(exp)}
    assert set(caps) == {"fast", "slow"}
    fast = caps["fast"]
    assert fast.sizes == [1] and fast.blocks == [0, 1, 2] and len(fast.points[1]) == 6
    p = fast.points[1][0]
    rows = pq.read_table(p.run_dir + "/requests.parquet", columns=["warmup"]).column("warmup").to_pylist()
    assert p.ttft_s.size + p.failed == rows.count(False)       # warm-up rows left out
    assert np.all(np.diff(p.prompt_tokens) >= 0)
    assert fast.max_load(SLO(ttft_ms=400, tpot_ms=40))["mean"] > 0


def test_a_folder_without_runs_is_named(tmp_path):
    with pytest.raises(UserError, match="not a finished experiment"):
        read_experiment(tmp_path)
