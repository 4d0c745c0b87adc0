"""The per-replica summary and the imbalance across replicas, recomputed by hand from rows."""

from __future__ import annotations

import math

import pyarrow as pa

from metrics.replicas import replica_order, replica_summary


def _rows(spec: list[tuple]) -> pa.Table:
    """spec: (replica, warmup, status, ttft_s, output_tokens)."""
    cols = list(zip(*spec))
    return pa.table({"replica": pa.array(cols[0], pa.string()), "warmup": pa.array(cols[1], pa.bool_()),
                     "status": pa.array(cols[2], pa.string()), "ttft_s": pa.array(cols[3], pa.float64()),
                     "output_tokens": pa.array(cols[4], pa.int64())})


ROWS = _rows([
    ("r0", True, "ok", 9.0, 100),      # warm-up: counted nowhere
    ("r0", False, "ok", 0.10, 10),
    ("r0", False, "ok", 0.30, 20),
    ("r0", False, "timeout", None, 5),  # served, not completed: a request, not its tokens
    ("r1", False, "ok", 0.20, 7),
    ("r1", False, "ok", 0.40, 3),
    ("unknown", False, "connection_error", None, None),
    ("r1", False, "ok", 0.60, 1),
    ("r0", False, "ok", 0.50, 2),
])
ENGINE = {"r0": {"engine_prefix_cache_hit_rate": 0.8, "engine_waiting_mean": 3.0, "engine_waiting_max": 6.0,
                 "engine_kv_cache_usage_mean": 0.6, "engine_kv_cache_usage_max": 0.9, "engine_mean_queue_ms": 40.0},
          "r1": {"engine_prefix_cache_hit_rate": 0.2, "engine_waiting_mean": 1.0, "engine_waiting_max": 2.0,
                 "engine_kv_cache_usage_mean": 0.2, "engine_kv_cache_usage_max": 0.3, "engine_mean_queue_ms": 10.0},
          "r2": {"engine_prefix_cache_hit_rate": math.nan, "engine_waiting_mean": 0.0,
                 "engine_kv_cache_usage_mean": 0.1}}  # idle: no rows, still a replica


def test_per_replica_values_and_imbalance_by_hand():
    out = replica_summary(ROWS, ENGINE)
    per = out["replicas"]
    assert list(per) == ["r0", "r1", "r2"]
    measured = 8
    assert per["r0"]["requests"] == 4 and per["r1"]["requests"] == 3 and per["r2"]["requests"] == 0
    assert per["r0"]["load_share"] == 4 / measured and per["r1"]["load_share"] == 3 / measured
    assert per["r0"]["output_tokens"] == 10 + 20 + 2 and per["r1"]["output_tokens"] == 7 + 3 + 1
    assert math.isclose(per["r0"]["ttft_p50_ms"], 300.0) and math.isclose(per["r1"]["ttft_p50_ms"], 400.0)
    assert math.isnan(per["r2"]["ttft_p50_ms"])
    assert per["r0"]["prefix_cache_hit_rate"] == 0.8 and per["r1"]["waiting_max"] == 2.0
    assert per["r0"]["mean_queue_ms"] == 40.0 and "mean_queue_ms" not in per["r2"]
    shares = [4 / 8, 3 / 8, 0.0]
    assert math.isclose(out["replica_load_imbalance"], max(shares) / (sum(shares) / 3))
    assert math.isclose(out["replica_kv_usage_imbalance"], 0.6 / ((0.6 + 0.2 + 0.1) / 3))
    assert math.isclose(out["replica_queue_imbalance"], 3.0 / ((3.0 + 1.0 + 0.0) / 3))
    assert math.isclose(out["replica_hit_rate_spread"], 0.8 - 0.2)
    assert out["replicas_unknown_share"] == 1 / measured and out["replica_count"] == 3
    assert math.isclose(sum(v["load_share"] for v in per.values()) + out["replicas_unknown_share"], 1.0)


def test_even_load_is_one_and_rows_alone_suffice():
    t = _rows([("r0", False, "ok", 0.1, 1), ("r1", False, "ok", 0.1, 1)])
    out = replica_summary(t)
    assert out["replica_load_imbalance"] == 1.0 and out["replicas_unknown_share"] == 0.0
    assert math.isnan(out["replica_kv_usage_imbalance"]) and math.isnan(out["replica_hit_rate_spread"])


def test_single_engine_adds_nothing():
    assert replica_summary(_rows([("r0", False, "ok", 0.1, 1), ("r0", False, "ok", 0.2, 1)])) == {}
    assert replica_summary(_rows([("unknown", False, "ok", 0.1, 1)]), {}) == {}
    old = pa.table({"warmup": [False], "status": ["ok"], "ttft_s": [0.1], "output_tokens": [1]})
    assert replica_summary(old) == {}  # a file from before the replica column


def test_replica_names_sort_by_number():
    assert sorted(["r10", "r2", "d0", "p1", "p0"], key=replica_order) == ["d0", "p0", "p1", "r2", "r10"]


def test_the_unknown_replica_is_the_records_own():
    """metrics imports no loadgen: its name for a row with no replica must stay the records'."""
    from loadgen.records import UNKNOWN_REPLICA as written
    from metrics.replicas import UNKNOWN_REPLICA as read

    assert read == written == "unknown"


# ------------------------------------------------------------ disaggregated pools (issue 31)
def _pd_rows(decode: list[str]) -> pa.Table:
    """The client's rows of a prefill/decode deployment: each names the decode worker that
    answered (the header the client sees); no row names a prefill worker."""
    return _rows([(d, False, "ok", 0.1, 4) for d in decode])


PD2 = {"p0": "prefill", "p1": "prefill", "d0": "decode", "d1": "decode"}


def _counted(requests: float, **more) -> dict:
    return {"engine_inference_time_count": requests, "engine_waiting_mean": 0.0, **more}


def test_a_balanced_2p2d_deployment_reads_one_per_pool():
    engine = {"p0": _counted(10), "p1": _counted(10), "d0": _counted(10), "d1": _counted(10)}
    out = replica_summary(_pd_rows(["d0", "d1"] * 10), engine, PD2)
    per = out["replicas"]
    assert [per[r]["pool"] for r in ("d0", "d1", "p0", "p1")] == ["decode", "decode", "prefill", "prefill"]
    # the decode pool's shares from the rows, the prefill pool's from the engines' request counters
    assert per["d0"]["load_share"] == per["d1"]["load_share"] == 0.5 and per["d0"]["load_share_from"] == "rows"
    assert per["p0"]["load_share"] == per["p1"]["load_share"] == 0.5
    assert per["p0"]["load_share_from"] == "engine_inference_time_count"
    assert out["pool_load_imbalance"] == {"decode": 1.0, "prefill": 1.0}
    assert out["replica_load_imbalance"] == 1.0         # main: max 0.5 / mean 0.25 = 2.0


def test_a_balanced_1p1d_deployment_reads_one():
    engine = {"p0": _counted(20), "d0": _counted(20)}
    out = replica_summary(_pd_rows(["d0"] * 20), engine, {"p0": "prefill", "d0": "decode"})
    assert out["replicas"]["p0"]["load_share"] == 1.0 and out["replicas"]["d0"]["load_share"] == 1.0
    assert out["pool_load_imbalance"] == {"decode": 1.0, "prefill": 1.0}
    assert out["replica_load_imbalance"] == 1.0         # main: 2.0


def test_prefill_shares_from_prompt_tokens_and_an_uneven_pool():
    engine = {"p0": {"engine_prompt_tokens": 300.0}, "p1": {"engine_prompt_tokens": 100.0},
              "d0": _counted(10), "d1": _counted(10)}
    out = replica_summary(_pd_rows(["d0", "d1"] * 10), engine, PD2)
    assert out["replicas"]["p0"]["load_share"] == 0.75 and out["replicas"]["p1"]["load_share"] == 0.25
    assert out["replicas"]["p0"]["load_share_from"] == "engine_prompt_tokens"
    assert out["pool_load_imbalance"] == {"decode": 1.0, "prefill": 1.5}
    assert out["replica_load_imbalance"] == 1.5          # the worse pool


def test_prefill_shares_nothing_says_are_unknown_not_zero():
    engine = {"p0": {"engine_waiting_mean": 0.0}, "p1": {"engine_waiting_mean": 0.0}}
    out = replica_summary(_pd_rows(["d0", "d1", "d0", "d1"]), engine, PD2)
    assert out["replicas"]["p0"]["load_share"] is None and out["replicas"]["p0"]["load_share_from"] == "unknown"
    assert out["replicas"]["p0"]["requests"] is None      # no row and no counter says how many it served
    assert out["pool_load_imbalance"] == {"decode": 1.0, "prefill": None}
    assert out["replica_load_imbalance"] == 1.0           # over the pools whose shares are known
    # a pool of one replica took all of its pool's work: no counter needed to say so
    one = replica_summary(_pd_rows(["d0", "d1"]), {"p0": {}}, {"p0": "prefill", "d0": "decode", "d1": "decode"})
    assert one["replicas"]["p0"]["load_share"] == 1.0 and one["pool_load_imbalance"]["prefill"] == 1.0


def test_engine_values_forgotten_after_a_restart_leave_the_shares_they_gave_unknown():
    from metrics.replicas import forget_engine_values

    engine = {"p0": _counted(30, engine_prefix_cache_hit_rate=0.5), "p1": _counted(10), "d0": _counted(10),
              "d1": _counted(10)}
    out = replica_summary(_pd_rows(["d0", "d1"] * 10), engine, PD2)
    assert out["replica_load_imbalance"] == 1.5
    forget_engine_values(out)
    assert "prefix_cache_hit_rate" not in out["replicas"]["p0"]
    assert out["replicas"]["p0"]["load_share"] is None and out["replicas"]["d0"]["load_share"] == 0.5
    assert out["pool_load_imbalance"] == {"decode": 1.0, "prefill": None} and out["replica_load_imbalance"] == 1.0
