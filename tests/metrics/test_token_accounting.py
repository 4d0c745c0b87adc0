"""metrics.token_accounting: the rows' prefix-cache hit rate (overall, warm-up in or out, per
prefix group, per task node, per replica) and the client-server token count reconciliation."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa

from metrics.replicas import replica_summary
from metrics.token_accounting import cache_summary, cached_share, hit_rate, mismatch_line, mismatch_summary


def _table(**cols) -> pa.Table:
    n = len(next(iter(cols.values())))
    cols.setdefault("warmup", [False] * n)
    cols.setdefault("status", ["ok"] * n)
    return pa.table(cols)


def test_hit_rate_is_token_weighted_and_skips_unreported_rows():
    # (10 + 0 + 30) / (20 + 40 + 40); the row with cached None is not in either sum
    assert hit_rate([10, 0, 30, np.nan], [20, 40, 40, 1000]) == 0.4
    assert math.isnan(hit_rate([np.nan], [10]))
    assert math.isnan(hit_rate([0], [0]))
    np.testing.assert_array_equal(cached_share([8, 0, np.nan, 1], [16, 4, 4, 0]), [0.5, 0.0, np.nan, np.nan])


def test_cache_summary_warmup_groups_and_nodes():
    t = _table(cached_tokens=[100, 0, 48, 16, None, 64],
               prompt_tokens=[100, 64, 64, 32, 64, 64],
               warmup=[True, False, False, False, False, False],
               prefix_group=[0, 0, 0, 1, 1, None],
               node=[None, "plan", "plan", "act", "act", "act"])
    s = cache_summary(t)
    assert s["cache_hit_rate"] == (0 + 48 + 16 + 64) / (64 + 64 + 32 + 64)   # measured, reporting rows
    assert s["cache_hit_rate_all"] == (100 + 128) / (100 + 224)             # warm-up included
    assert (s["cached_tokens_total"], s["cached_tokens_rows"]) == (128, 4)
    assert s["cache_hit_rate_by_prefix_group"] == {"0": 48 / 128, "1": 16 / 32}
    assert s["cache_hit_rate_by_node"] == {"act": 80 / 96, "plan": 48 / 128}


def test_cache_summary_of_a_file_without_the_column():
    s = cache_summary(_table(prompt_tokens=[10, 20]))
    assert math.isnan(s["cache_hit_rate"]) and s["cached_tokens_rows"] == 0
    assert s["cache_hit_rate_by_prefix_group"] == {}


def test_mismatch_counts_only_completed_measured_rows_with_both_counts():
    t = _table(server_output_tokens=[10, 11, 10, 20, 7, 5, None],
               client_output_tokens=[10, 10, 7, 10, 7, 1, 3],
               status=["ok", "ok", "ok", "ok", "ok", "timeout", "ok"],
               warmup=[False, False, False, False, True, False, False])
    m = mismatch_summary(t, tolerance=1, threshold=0.5)
    # compared: rows 0-3 (row 4 warm-up, row 5 failed, row 6 no usage): diffs 0, 1, 3, 10
    assert m["token_counts_compared"] == 4
    assert m["token_mismatch_rate"] == 0.5           # |3| and |10| exceed 1
    assert m["token_mismatch_mean_abs"] == 14 / 4 and m["token_mismatch_max_abs"] == 10
    assert m["token_mismatch_mean"] == 14 / 4
    # row 6 completed without usage: its output tokens are the client's (the warning that changes the answer)
    assert m["token_counts_client_only"] == 1
    assert mismatch_summary(_table(client_output_tokens=[3]))["token_counts_client_only"] == 0  # no such column
    assert m["token_counts_disagree"] is False       # 0.5 is not above the threshold 0.5
    assert mismatch_line(m) is None
    m = mismatch_summary(t, tolerance=0, threshold=0.5)
    assert m["token_mismatch_rate"] == 0.75 and m["token_counts_disagree"] is True
    line = mismatch_line(m)
    assert "75.0% of 4 requests" in line and "max 10" in line and "client.token_mismatch_threshold=0.5" in line
    assert "emulated" not in line
    # on Dynamo's mocker (random token ids) the line says the disagreement is expected
    assert mismatch_line({**m, "emulated": True}).startswith(line + "; expected on emulated workers")


def test_bos_counted_on_every_request_shows_as_mean_plus_one():
    t = _table(server_output_tokens=[5, 9, 3], client_output_tokens=[4, 8, 2])
    m = mismatch_summary(t, tolerance=0, threshold=0.01)
    assert (m["token_mismatch_rate"], m["token_mismatch_mean"], m["token_counts_disagree"]) == (1.0, 1.0, True)
    assert mismatch_summary(t)["token_counts_disagree"] is False  # default tolerance 1: within it


def test_no_rows_to_compare():
    m = mismatch_summary(_table(server_output_tokens=[3], client_output_tokens=[None]))
    assert m["token_counts_compared"] == 0 and math.isnan(m["token_mismatch_rate"])
    assert m["token_counts_disagree"] is False


def test_per_replica_cache_hit_rate_from_rows_warmup_included():
    t = _table(replica=["r0", "r0", "r1", "r1"], cached_tokens=[0, 30, 10, None],
               prompt_tokens=[40, 40, 20, 20], warmup=[True, False, False, False],
               ttft_s=[0.1] * 4, output_tokens=[1] * 4)
    per = replica_summary(t)["replicas"]
    assert per["r0"]["cache_hit_rate"] == 30 / 80
    assert per["r1"]["cache_hit_rate"] == 10 / 20
