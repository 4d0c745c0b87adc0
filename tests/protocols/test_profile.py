"""protocol=profile: its plan (the ladders as runs), its record's mocker file (read back the way
Dynamo's mocker reads it) and, marked, whole runs against the fake server (slow: the figures
against its configured timing) and `transformers serve` (integration)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from conf.compose import compose_config
from harness.errors import UserError
from metrics import profile as fit
from protocols.profile import record
from protocols.profile.plan import DECODE, MIXED, PREFILL
from protocols.profile.run import plan
from protocols.registry import Invocation, get_protocol
from tests.engine_steps import closed_loop_rows

REPO = Path(__file__).resolve().parents[2]


def _cfg(*overrides):
    return compose_config(["protocol=profile", "workload=synthetic", *overrides])


def test_plan_is_a_prefill_ladder_then_decode_ladders():
    cfg = _cfg("protocol.prefill_lengths=[64,256]", "protocol.prefill_requests=3",
               "protocol.decode_prompt_lengths=[128,1024]", "protocol.decode_concurrency=[1,4]",
               "protocol.decode_output_tokens=32", "protocol.decode_waves=2", "protocol.warmup_requests=0",
               "protocol.mixed_concurrency=0")
    steps = plan(cfg)
    assert [s.spec.label for s in steps] == ["prefill in=64", "prefill in=256", "decode in=128 c=1",
                                              "decode in=128 c=4", "decode in=1024 c=1", "decode in=1024 c=4"]
    assert [s.phase for s in steps] == [PREFILL] * 2 + [DECODE] * 4
    # prefill: one output token, one request at a time; decode: concurrency x waves requests
    assert [(s.prompt_tokens, s.output_tokens, s.spec.load["concurrency"], s.spec.load["num_requests"])
            for s in steps] == [(64, 1, 1, 3), (256, 1, 1, 3), (128, 32, 1, 2), (128, 32, 4, 8),
                                (1024, 32, 1, 2), (1024, 32, 4, 8)]
    assert {s.spec.load["kind"] for s in steps} == {"concurrency"}
    assert {s.spec.load["warmup_requests"] for s in steps} == {0}
    assert len({s.spec.subdir for s in steps}) == 6 and [s.spec.index for s in steps] == list(range(6))
    assert steps[3].workload == {"input_tokens": 128, "output_tokens": 32, "input_dist": {"kind": "fixed"},
                                 "output_dist": {"kind": "fixed", "min": None, "max": None},
                                 "prefix_groups": {"count": 0, "prefix_tokens": 0},
                                 "stress": {"long_tail": {"fraction": 0.0}}}


def test_the_mixed_ladder_runs_each_prefill_length_among_decodes_of_spread_lengths():
    steps = plan(_cfg("protocol.prefill_lengths=[64,256]", "protocol.decode_prompt_lengths=[128]",
                      "protocol.decode_concurrency=[1,4]", "protocol.mixed_concurrency=3",
                      "protocol.mixed_requests=30", "protocol.mixed_output_tokens=40"))
    mixed = [s for s in steps if s.phase == MIXED]
    assert [s.spec.label for s in mixed] == ["mixed in=64 c=3", "mixed in=256 c=3"]
    assert [(s.prompt_tokens, s.spec.load["concurrency"], s.spec.load["num_requests"]) for s in mixed] == [
        (64, 3, 30), (256, 3, 30)]
    assert mixed[1].workload["output_dist"] == {"kind": "uniform", "min": 20, "max": 60}
    assert mixed[1].workload["output_tokens"] == 40 and mixed[1].spec.subdir == "mixed/in=00256-c=0003"


def test_a_steps_workload_merges_over_a_synthetic_one_with_prefixes_and_a_tail():
    from omegaconf import OmegaConf

    cfg = _cfg("workload.prefix_groups.count=4", "workload.prefix_groups.prefix_tokens=32",
               "workload.stress.long_tail.fraction=0.1", "workload.input_dist.kind=uniform",
               "protocol.mixed_concurrency=0")
    w = OmegaConf.merge(cfg.workload, plan(cfg)[-1].workload)
    assert (w.input_tokens, w.output_tokens, w.input_dist.kind, w.prefix_groups.count,
            w.stress.long_tail.fraction) == (1024, 64, "fixed", 0, 0.0)


def test_decode_warmup_requests_fill_whole_waves():
    steps = plan(_cfg("protocol.decode_concurrency=[1,4]", "protocol.decode_prompt_lengths=[128]",
                      "protocol.decode_waves=2", "protocol.warmup_requests=1"))
    dec = [s.spec.load for s in steps if s.phase == DECODE]
    # concurrency 4 x 2 waves = 8 requests sent: 1 warm-up + 7 measured; concurrency 1: 1 + 1
    assert [(d["concurrency"], d["warmup_requests"], d["num_requests"]) for d in dec] == [(1, 1, 1), (4, 1, 7)]


def test_default_plan_fits_the_tiny_models_context():
    cfg = _cfg()
    steps = plan(cfg)
    assert len(steps) == 6 + 2 * 5 + 6
    assert max(s.prompt_tokens + s.output_tokens for s in steps) <= 2048


@pytest.mark.parametrize("overrides, message", [
    (["workload=azure"], "runs workload=synthetic, not workload=azure"),
    (["protocol.prefill_lengths=[128]"], "at least 2 distinct lengths"),
    (["protocol.decode_prompt_lengths=[64]", "protocol.decode_concurrency=[1]"], "the decode fit needs at least 2"),
    (["engine.max_model_len=512", "protocol.prefill_lengths=[64,600]", "protocol.mixed_concurrency=0"],
     r"protocol.prefill_lengths: \[600\] \+ 1 output token\(s\) exceed the engine's max length 512"),
    # the mixed ladder's outputs (up to 3/2 of 32) follow its prompts
    (["engine.max_model_len=512", "protocol.prefill_lengths=[64,480]"],
     r"protocol.prefill_lengths: \[480\] \+ 48 output token\(s\) exceed the engine's max length 512"),
    (["protocol.decode_concurrency=[0,2]"], r"protocol.decode_concurrency\[0\]=0: must be >= 1"),
])
def test_a_bad_plan_is_one_clear_error(overrides, message):
    with pytest.raises(UserError, match=message):
        plan(_cfg(*overrides))


def test_profile_is_a_protocol_of_the_registry():
    p = get_protocol("profile")
    assert p.design.name == "profile" and not p.design.in_blocks


def test_a_multirun_of_a_profile_is_refused():
    with pytest.raises(UserError, match=r"drop -m \(it sweeps engine.features.max_num_seqs\)"):
        get_protocol("profile").run(_cfg(), Invocation(swept_keys=frozenset({"engine.features.max_num_seqs"})))


def test_dry_run_prints_the_plan_and_writes_nothing(tmp_path, capsys):
    out = get_protocol("profile").run(_cfg(f"output_dir={tmp_path}/out", "protocol.dry_run=true",
                                           "protocol.prefill_lengths=[64,128]", "protocol.decode_concurrency=[1,2]",
                                           "protocol.decode_prompt_lengths=[128]", "protocol.mixed_concurrency=0"),
                                     Invocation())
    said = capsys.readouterr().out
    assert "plan (4 runs, 1 engine launch)" in said
    assert "decode in=128 c=2: 3 requests (+1 warm-up) of 128 in / 64 out" in said
    assert out == tmp_path / "out" and not out.exists()


def _tables():
    pre = {"a_ms": 10.0, "b_ms_per_token": 0.02, "c_ms_per_token2": 1e-5}
    dec = {"alpha_ms": 6.0, "beta_ms_per_seq": 0.5, "gamma_ms_per_kv_token": 1e-4}
    return fit.mocker_tables(pre, dec, isl_range=(64, 1792), kv_max=16 * 1088, ctx_max=1088, resolution=7)


def test_mocker_file_reads_back_as_dynamo_reads_it(tmp_path):
    path = tmp_path / record.MOCKER_FILE
    record.write_mocker_npz(path, _tables())
    assert not list(tmp_path.glob("*.partial"))
    # the mocker's check (dynamo/mocker/utils/planner_profiler_perf_data_converter.py,
    # is_mocker_format_npz): a .npz file holding these five keys ...
    with np.load(path) as data:
        assert {"prefill_isl", "prefill_ttft_ms", "decode_active_kv_tokens", "decode_context_length",
                "decode_itl"}.issubset(data.keys())
        arrays = {k: data[k] for k in data.keys()}
    # ... and its Rust reader (PerfModel::from_npz): float64 arrays, 1-D but decode_itl, whose
    # rows run along decode_active_kv_tokens and columns along decode_context_length; both
    # interpolation axes strictly increasing
    assert all(a.dtype == np.float64 for a in arrays.values())
    assert arrays["prefill_isl"].shape == arrays["prefill_ttft_ms"].shape == (7,)
    assert arrays["decode_itl"].shape == (arrays["decode_active_kv_tokens"].size, arrays["decode_context_length"].size)
    for k in ("prefill_isl", "decode_active_kv_tokens", "decode_context_length"):
        assert np.all(np.diff(arrays[k]) > 0), k
    assert arrays["prefill_ttft_ms"][0] == pytest.approx(10 + 0.02 * 64 + 1e-5 * 64 ** 2)
    assert arrays["decode_itl"][-1, -1] == pytest.approx(6 + 0.5 * 16 + 1e-4 * 16 * 1088)


def test_mocker_file_with_a_misshapen_table_is_not_written(tmp_path):
    t = _tables()
    t["decode_itl"] = t["decode_itl"][:, :3]
    with pytest.raises(ValueError, match=r"decode_itl has shape \(7, 3\), not \(kv, context\) = \(7, 7\)"):
        record.write_mocker_npz(tmp_path / record.MOCKER_FILE, t)
    assert not list(tmp_path.iterdir())


def test_dynamos_own_check_accepts_the_file(tmp_path):
    conv = pytest.importorskip("dynamo.mocker.utils.planner_profiler_perf_data_converter")
    path = tmp_path / record.MOCKER_FILE
    record.write_mocker_npz(path, _tables())
    assert conv.is_mocker_format_npz(path)


# --- whole runs -----------------------------------------------------------------------------
TTFT_MS, GAP_MS, CHUNKS = 40.0, 10.0, 8


@pytest.mark.slow
def test_profile_of_the_fake_server_recovers_its_timing(tmp_path, mlflow_uri, tiny_model):
    """The fake answers every request after TTFT_MS, then CHUNKS tokens GAP_MS apart, whatever the
    prompt length or concurrency: the prefill fit is flat at TTFT_MS (plus the client's own
    sub-millisecond path) and the step GAP_MS at every batch."""
    from tests.fake_server import FakeServer

    env = {**os.environ, "PYTHONPATH": str(REPO), "MLFLOW_TRACKING_URI": mlflow_uri}
    with FakeServer() as srv:
        p = subprocess.run(
            [sys.executable, "-m", "harness.cli", "run", "protocol=profile", "engine=openai",
             f"engine.base_url={srv.base_url}", f"engine.model=fake-ttft_ms:{TTFT_MS:g}-gap_ms:{GAP_MS:g}-n:{CHUNKS}",
             f"engine.tokenizer={tiny_model}", "engine.continuous_usage=true", "progress=false",
             f"output_dir={tmp_path}/out", "protocol.prefill_lengths=[32,64,128]", "protocol.prefill_requests=3",
             "protocol.decode_prompt_lengths=[32,96]", "protocol.decode_concurrency=[1,4]",
             f"protocol.decode_output_tokens={CHUNKS}", "protocol.decode_waves=1", "protocol.warmup_requests=0",
             "protocol.resolution=5", "protocol.mixed_concurrency=0"],
            capture_output=True, text=True, timeout=400, cwd=tmp_path, env=env)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    out = tmp_path / "out"
    rec = json.loads((out / record.PROFILE_FILE).read_text())
    assert rec["runs_finished"] == rec["runs_planned"] == 3 + 4
    # every measurement has its requests: one folder per ladder step
    assert len(list(out.rglob("requests.parquet"))) == 7
    pre, dec = rec["prefill_fit"], rec["decode_fit"]
    for pt in rec["prefill_points"]:
        assert pt["requests"] == 3 and TTFT_MS <= pt["prefill_ms"] < TTFT_MS + 15
    for L, y in zip(pre["prompt_tokens"], pre["fitted_ms"]):
        assert TTFT_MS <= y < TTFT_MS + 15, (L, y)
    for pt in rec["decode_points"]:
        assert pt["requests"] == pt["concurrency"] and GAP_MS <= pt["step_ms"] < GAP_MS + 4
        assert pt["batch"] == pytest.approx(pt["concurrency"], rel=0.1)
    assert all(GAP_MS - 1 <= y < GAP_MS + 4 for y in dec["fitted_ms"])
    with np.load(out / record.MOCKER_FILE) as data:
        assert data["decode_itl"].shape == (5, 5) and data["prefill_isl"].tolist() == [32.0, 56.0, 80.0, 104.0, 128.0]
        assert np.all((data["prefill_ttft_ms"] >= TTFT_MS) & (data["prefill_ttft_ms"] < TTFT_MS + 15))
    # each step ran with its own lengths (EngineSession.use_workload): its folder's config says so
    cfg = yaml.safe_load((out / "prefill" / "in=00128" / "config.yaml").read_text())
    assert (cfg["workload"]["input_tokens"], cfg["workload"]["output_tokens"]) == (128, 1)
    cfg = yaml.safe_load((out / "decode" / "in=00096-c=0004" / "config.yaml").read_text())
    assert (cfg["workload"]["input_tokens"], cfg["workload"]["output_tokens"], cfg["load"]["concurrency"]) == (96, 8, 4)
    exp = json.loads((out / "experiment.json").read_text())
    assert exp["protocol"] == "profile" and exp["status"] == "complete" and len(exp["load_points"]) == 7


@pytest.mark.integration
def test_profile_of_transformers_serve(tmp_path):
    """The embedded engine (`transformers serve`, the tiny model) on a tiny ladder: every step
    runs, both fits are made from positive figures, and the mocker's file is written."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    p = subprocess.run(
        [sys.executable, "-m", "harness.cli", "run", "protocol=profile", "engine=transformers", "progress=false",
         "mlflow.enabled=false", f"output_dir={tmp_path}/out", "protocol.prefill_lengths=[32,512]",
         "protocol.prefill_requests=2", "protocol.decode_prompt_lengths=[32,512]", "protocol.decode_concurrency=[1,2]",
         "protocol.decode_output_tokens=8", "protocol.decode_waves=1", "protocol.warmup_requests=0"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-4000:]
    rec = json.loads((tmp_path / "out" / record.PROFILE_FILE).read_text())
    # 2 prefill + 4 decode + 2 mixed runs (the prefill lengths again, at concurrency 4)
    assert rec["runs_finished"] == 8 and "fit_error" not in rec and len(rec["mixed_points"]) == 2
    assert all(pt["prefill_ms"] > 0 for pt in rec["prefill_points"])
    assert all(pt["step_ms"] > 0 and pt["requests"] == pt["concurrency"] for pt in rec["decode_points"])
    assert (tmp_path / "out" / record.MOCKER_FILE).exists()


def _write_run(d: Path, rows: list[dict], summary: dict) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    d.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows), d / "requests.parquet")
    (d / "summary.json").write_text(json.dumps(summary))


def test_record_from_run_folders_puts_the_engines_histograms_beside_the_clients(tmp_path):
    """profile.json from finished run folders: a prefill run's median TTFT and vLLM's mean
    prefill time, a decode run's step from its chunks and vLLM's mean decode time per token."""
    steps = plan(_cfg("protocol.prefill_lengths=[64,512]", "protocol.decode_prompt_lengths=[128]",
                      "protocol.decode_concurrency=[1,2]", "protocol.decode_output_tokens=5",
                      "protocol.mixed_concurrency=0"))
    ms = 1_000_000
    for s, ttft in zip(steps[:2], (20.0, 60.0)):
        rows = [{"status": "ok", "warmup": w, "ttft_s": (ttft if not w else 500.0) / 1e3,
                 "prompt_tokens": s.prompt_tokens, "output_tokens": 1, "first_token_ns": 0, "end_ns": 0,
                 "chunk_ns": [0], "chunk_tokens": [1]}
                for w in (True, False, False, False)]
        _write_run(tmp_path / s.spec.subdir, rows, {"engine_mean_prefill_ms": ttft - 2})
    for s, gap in zip(steps[2:], (10, 14)):
        c = s.concurrency
        rows = [{"status": "ok", "warmup": False, "ttft_s": 0.02, "prompt_tokens": 128, "output_tokens": 5,
                 "first_token_ns": 0, "end_ns": 4 * gap * ms, "chunk_ns": [i * gap * ms for i in range(5)],
                 "chunk_tokens": [1] * 5} for _ in range(c)]
        _write_run(tmp_path / s.spec.subdir, rows, {"engine_mean_decode_ms": 4 * (gap - 1)})
    rec = record.write_profile(tmp_path, steps, 4)
    assert rec["runs_finished"] == 4 and "fit_error" not in rec
    pre = {p["prompt_tokens"]: p for p in rec["prefill_points"]}
    assert pre[64]["prefill_ms"] == pytest.approx(20.0) and pre[64]["requests"] == 3  # the warm-up left out
    assert pre[512]["engine_prefill_ms"] == pytest.approx(58.0)
    dec = rec["decode_points"]
    assert [d["step_ms"] for d in dec] == pytest.approx([10.0, 14.0])
    assert [d["engine_step_ms"] for d in dec] == pytest.approx([9.0, 13.0])
    assert [d["batch"] for d in dec] == pytest.approx([1.0, 2.0]) and dec[0]["context"] == pytest.approx(130.5)
    # two points each: the fits pass through them
    assert rec["prefill_fit"]["fitted_ms"] == pytest.approx([20.0, 60.0], abs=1e-6)
    assert rec["decode_fit"]["fitted_ms"] == pytest.approx([10.0, 14.0], abs=1e-6)
    assert not rec["decode_fit"]["identifiable"] and "not identifiable" in rec["notes"][0]
    assert json.loads((tmp_path / record.PROFILE_FILE).read_text())["runs_planned"] == 4
    with np.load(tmp_path / record.MOCKER_FILE) as data:
        assert data["prefill_isl"].tolist() == [64.0, 213.33333333333334, 362.6666666666667, 512.0]
        assert data["prefill_ttft_ms"][-1] == pytest.approx(60.0, abs=1e-6)


def test_record_without_enough_runs_says_why_and_writes_no_mocker_file(tmp_path):
    steps = plan(_cfg("protocol.prefill_lengths=[64,512]", "protocol.decode_prompt_lengths=[128]",
                      "protocol.decode_concurrency=[1,2]"))
    _write_run(tmp_path / steps[0].spec.subdir, [{"status": "ok", "warmup": False, "ttft_s": 0.02,
                                                  "prompt_tokens": 64, "output_tokens": 1}], {})
    rec = record.write_profile(tmp_path, steps, 4)
    assert rec["runs_finished"] == 1 and rec["fit_error"].startswith("the prefill fit needs at least 2 prompt lengths")
    assert not (tmp_path / record.MOCKER_FILE).exists()


def test_source_engine_draws_the_mocker_tables_from_the_engines_histograms(tmp_path):
    test_record_from_run_folders_puts_the_engines_histograms_beside_the_clients(tmp_path)
    steps = plan(_cfg("protocol.prefill_lengths=[64,512]", "protocol.decode_prompt_lengths=[128]",
                      "protocol.decode_concurrency=[1,2]", "protocol.decode_output_tokens=5",
                      "protocol.mixed_concurrency=0"))
    rec = record.write_profile(tmp_path, steps, 4, source="engine")
    assert rec["engine_prefill_fit"]["fitted_ms"] == pytest.approx([18.0, 58.0], abs=1e-6)
    assert rec["mocker"]["from"] == "engine_prefill_fit, engine_decode_fit"
    with np.load(tmp_path / record.MOCKER_FILE) as data:
        assert data["prefill_ttft_ms"][-1] == pytest.approx(58.0, abs=1e-6)
    m = record.parent_metrics(rec)
    assert m["profile_prefill_a_ms"] == pytest.approx(rec["prefill_fit"]["coefficients"]["a_ms"])
    assert m["profile_engine_decode_alpha_ms"] == pytest.approx(rec["engine_decode_fit"]["coefficients"]["alpha_ms"])


def test_source_engine_without_histograms_says_so(tmp_path):
    steps = plan(_cfg("protocol.prefill_lengths=[64,512]", "protocol.decode_prompt_lengths=[128]",
                      "protocol.decode_concurrency=[1,2]", "protocol.decode_output_tokens=5",
                      "protocol.mixed_concurrency=0"))
    for s in steps:
        rows = [{"status": "ok", "warmup": False, "ttft_s": 0.02, "prompt_tokens": s.prompt_tokens,
                 "output_tokens": s.output_tokens, "first_token_ns": 0, "end_ns": 4_000_000 * (s.output_tokens - 1),
                 "chunk_ns": [i * 4_000_000 for i in range(s.output_tokens)], "chunk_tokens": [1] * s.output_tokens}]
        _write_run(tmp_path / s.spec.subdir, rows, {})
    rec = record.write_profile(tmp_path, steps, 4, source="engine")
    assert "prefill_fit" in rec and "engine_prefill_fit" not in rec
    assert rec["fit_error"].startswith("protocol.source=engine: the engine's phase histograms")
    assert rec["fit_error"].endswith("it exports none; use protocol.source=client")
    assert not (tmp_path / record.MOCKER_FILE).exists()


def test_record_fits_the_prefill_a_step_carries_from_the_mixed_runs(tmp_path):
    """The mixed runs of an engine whose step takes 5 ms plus 10 + 0.05*L ms for a prefill of L
    in it (tests.engine_steps): the fit recovers the increment, not the TTFT."""
    steps = plan(_cfg("protocol.prefill_lengths=[64,512]", "protocol.decode_prompt_lengths=[128]",
                      "protocol.decode_concurrency=[1,2]", "protocol.decode_output_tokens=5",
                      "protocol.mixed_concurrency=4"))
    ms = 1_000_000
    for s in steps:
        if s.phase == PREFILL:
            rows = [{"status": "ok", "warmup": False, "ttft_s": (20.0 + 0.1 * s.prompt_tokens) / 1e3,
                     "prompt_tokens": s.prompt_tokens, "output_tokens": 1}] * 3
        elif s.phase == DECODE:
            rows = [{"status": "ok", "warmup": False, "ttft_s": 0.02, "prompt_tokens": 128, "output_tokens": 5,
                     "first_token_ns": 0, "end_ns": 20 * ms, "chunk_ns": [i * 5 * ms for i in range(5)],
                     "chunk_tokens": [1] * 5}] * s.concurrency
        else:
            rows = closed_loop_rows(4, 40, 5.0, 10.0 + 0.05 * s.prompt_tokens, prompt_tokens=s.prompt_tokens)
        _write_run(tmp_path / s.spec.subdir, rows, {})
    rec = record.write_profile(tmp_path, steps, 4)
    assert [p["prefill_in_step_ms"] for p in rec["mixed_points"]] == pytest.approx([13.2, 35.6], abs=0.5)
    got = rec["prefill_in_step_fit"]
    assert got["model"] == "prefill_in_step_ms = a + b*L + c*L^2"
    assert got["fitted_ms"] == pytest.approx([13.2, 35.6], abs=0.5)
    assert record.parent_metrics(rec)["profile_prefill_in_step_a_ms"] == pytest.approx(got["coefficients"]["a_ms"])
