"""The prefix tree read from block hash ids: segments cut where the calls sharing a run part
ways, and where a run must stop to leave a call a token of its own."""

from __future__ import annotations

from loadgen.workloads.traces.block_prefix_tree import shared_prefixes


def test_a_common_run_then_group_runs_then_private_blocks():
    lists = [[0, 1, 10, 11, 100], [0, 1, 10, 11, 200], [0, 1, 20, 300], [0, 1, 400], [9]]
    tree, paths, shared = shared_prefixes(lists, [5 * 16, 5 * 16, 4 * 16, 3 * 16, 16], 16)
    assert tree == {"h0": 32, "h0/h10": 32}
    assert paths == ["h0/h10", "h0/h10", "h0", "h0", ""]
    assert shared == [64, 64, 32, 32, 0]


def test_a_run_stopped_short_for_one_call_cuts_the_segment_for_all():
    # the first call's 3 blocks are all shared, but it has only 40 tokens: 2 blocks of 16 are its prefix
    tree, paths, shared = shared_prefixes([[1, 2, 3], [1, 2, 3, 4], [1, 2, 3, 5]], [40, 64, 64], 16)
    assert tree == {"h1": 32, "h1/h3": 16}
    assert paths == ["h1", "h1/h3", "h1/h3"] and shared == [32, 48, 48]
