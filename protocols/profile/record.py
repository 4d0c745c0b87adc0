"""The profile's record, rebuilt from its run folders: ``profile.json`` (every ladder step's
figures, the fits and their residuals, the prefill in a step's where the mixed ladder ran;
``metrics.profile``) and ``perf_data.npz``, the
file Dynamo's mocker reads with ``--planner-profile-data`` (the five float64 arrays of
``metrics.profile.MOCKER_KEYS``; ``write_mocker_npz``)."""

from __future__ import annotations

import io
import math
from pathlib import Path

import numpy as np

from harness import results_io
from metrics import profile as fit
from protocols.profile.plan import DECODE, MIXED, PREFILL, Step

PROFILE_FILE = results_io.PROFILE
MOCKER_FILE = results_io.PROFILE_TABLE
COLUMNS = ("status", "warmup", "ttft_s", "prompt_tokens", "output_tokens", "first_token_ns", "end_ns", "chunk_ns",
           "chunk_tokens")


def _rows(run_dir: Path) -> list[dict]:
    path = run_dir / results_io.REQUESTS
    if not path.exists():
        return []
    table = results_io.read_parquet(path)
    return table.select([c for c in COLUMNS if c in table.column_names]).to_pylist()


def step_figures(out: Path, step: Step) -> dict | None:
    """One ladder step's figures from its run folder (None before it has run)."""
    d = out / step.spec.subdir
    if not results_io.run_complete(d):
        return None
    summary = results_io.read_json(d / results_io.SUMMARY)
    rows = _rows(d)
    base = {"label": step.spec.label, "run_dir": step.spec.subdir, "phase": step.phase,
            "concurrency": step.concurrency, "planned_output_tokens": step.output_tokens}
    if step.phase == PREFILL:
        got = fit.prefill_point(rows, step.prompt_tokens)
        got["engine_prefill_ms"] = _num(summary.get("engine_mean_prefill_ms"))
    elif step.phase == MIXED:
        got = fit.mixed_point(rows, step.prompt_tokens)
    else:
        got = fit.decode_point(rows, step.prompt_tokens)
        got["engine_step_ms"] = fit.engine_step_ms(summary.get("engine_mean_decode_ms"), got["output_tokens"])
    return {**base, **got}


def _num(v) -> float:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else math.nan


def _fits(pre: list[dict], dec: list[dict], prefill_key: str, step_key: str) -> tuple[dict, dict]:
    return (fit.fit_prefill([f["prompt_tokens"] for f in pre], [f[prefill_key] for f in pre]),
            fit.fit_decode([f["batch"] for f in dec], [f["kv_tokens"] for f in dec], [f[step_key] for f in dec]))


def profile_json(out: Path, steps: list[Step], resolution: int, source: str = "client") -> tuple[dict, dict | None]:
    """``profile.json``'s content and the mocker's arrays (None where a fit could not be made:
    the record's ``fit_error`` says why).  The client's figures are always fitted
    (``prefill_fit``, ``decode_fit``); the engine's histograms too where it exports them
    (``engine_prefill_fit``, ``engine_decode_fit``); ``source`` (``protocol.source``) says whose
    fits the mocker's tables are drawn from."""
    figures = [f for f in (step_figures(out, s) for s in steps) if f is not None]
    pre = [f for f in figures if f["phase"] == PREFILL]
    dec = [f for f in figures if f["phase"] == DECODE]
    mixed = [f for f in figures if f["phase"] == MIXED]
    record: dict = {"kind": "measured", "formulas": "metrics/profile.py", "source": source, "prefill_points": pre,
                    "decode_points": dec, "mixed_points": mixed, "runs_planned": len(steps),
                    "runs_finished": len(figures)}
    notes: list[str] = [f"{f['label']}: every request's tokens came in its first read (the engine held the stream "
                        "back): no decode step measured, left out of the fit" for f in dec
                        if f.get("requests") and not f.get("decode_requests")]
    if mixed:
        try:
            record["prefill_in_step_fit"] = fit.fit_prefill([f["prompt_tokens"] for f in mixed],
                                                            [f["prefill_in_step_ms"] for f in mixed])
            record["prefill_in_step_fit"]["model"] = "prefill_in_step_ms = a + b*L + c*L^2"
        except ValueError as e:
            notes.append(f"the mixed ladder: {e}; the scheduler model charges a step the prefill's whole TTFT")
    try:
        record["prefill_fit"], record["decode_fit"] = _fits(pre, dec, "prefill_ms", "step_ms")
    except ValueError as e:
        record["fit_error"] = str(e)
        return record, None
    engine_note = None
    if any(math.isfinite(f["engine_prefill_ms"]) for f in pre) or any(math.isfinite(f["engine_step_ms"]) for f in dec):
        try:
            record["engine_prefill_fit"], record["engine_decode_fit"] = _fits(pre, dec, "engine_prefill_ms",
                                                                              "engine_step_ms")
        except ValueError as e:
            engine_note = f"the engine's histograms: {e}"
            notes.append(engine_note)
    chosen = "engine_" if source == "engine" else ""
    if f"{chosen}prefill_fit" not in record:
        record["fit_error"] = ("protocol.source=engine: the engine's phase histograms (vLLM's "
                               "vllm:request_prefill_time_seconds, vllm:request_decode_time_seconds) gave no fit"
                               + (f" ({engine_note})" if engine_note else "; it exports none")
                               + "; use protocol.source=client")
        record["notes"] = notes
        return record, None
    prefill, decode = record[f"{chosen}prefill_fit"], record[f"{chosen}decode_fit"]
    if not decode["identifiable"]:
        notes.append("one context length among the decode runs: gamma (per KV token) is not identifiable "
                     "and is 0; give protocol.decode_prompt_lengths two or more lengths")
    record["notes"] = notes
    lengths = prefill["prompt_tokens"]
    longest = max(f["context"] for f in dec if math.isfinite(f["context"]))
    ctx_max = max(f["prompt_tokens"] + f["planned_output_tokens"] for f in dec)
    batch_max = max(f["batch"] for f in dec if math.isfinite(f["batch"]))
    tables = fit.mocker_tables(prefill["coefficients"], decode["coefficients"], isl_range=(min(lengths), max(lengths)),
                               kv_max=batch_max * max(longest, ctx_max), ctx_max=ctx_max, batch_max=batch_max,
                               resolution=resolution)
    record["mocker"] = {"file": MOCKER_FILE, "flag": f"--planner-profile-data {MOCKER_FILE}",
                        "from": f"{chosen}prefill_fit, {chosen}decode_fit",
                        "arrays": {k: list(v.shape) for k, v in tables.items()},
                        "prefill_isl_range": [float(tables["prefill_isl"][0]), float(tables["prefill_isl"][-1])],
                        "decode_active_kv_tokens_max": float(tables["decode_active_kv_tokens"][-1]),
                        "decode_context_length_max": float(tables["decode_context_length"][-1]),
                        "decode_batch_max": batch_max}
    return record, tables


def write_mocker_npz(path: Path, tables: dict) -> None:
    """The mocker's NPZ, written whole or not at all: each of ``MOCKER_KEYS`` as a float64
    array (its Rust reader takes float64 only; ``decode_itl`` 2-D, rows along
    ``decode_active_kv_tokens``, columns along ``decode_context_length``)."""
    missing = [k for k in fit.MOCKER_KEYS if k not in tables]
    if missing:
        raise ValueError(f"the mocker's tables lack {missing}")
    arrays = {k: np.ascontiguousarray(tables[k], dtype=np.float64) for k in fit.MOCKER_KEYS}
    if arrays["decode_itl"].shape != (arrays["decode_active_kv_tokens"].size, arrays["decode_context_length"].size):
        raise ValueError(f"decode_itl has shape {arrays['decode_itl'].shape}, not (kv, context) = "
                         f"({arrays['decode_active_kv_tokens'].size}, {arrays['decode_context_length'].size})")
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    results_io.replace_whole(path, lambda tmp: tmp.write_bytes(buf.getvalue()))


def write_profile(out: Path, steps: list[Step], resolution: int, source: str = "client") -> dict:
    """``profile.json`` and (where the fits could be made) ``perf_data.npz`` in ``out``; returns
    the record."""
    record, tables = profile_json(out, steps, resolution, source)
    if tables is not None:
        write_mocker_npz(out / MOCKER_FILE, tables)
    results_io.write_json(out / PROFILE_FILE, record)
    return record


def parent_metrics(record: dict) -> dict:
    """The fits' coefficients and residual sizes, for the MLflow parent run."""
    m: dict = {}
    for key in ("prefill_fit", "decode_fit", "engine_prefill_fit", "engine_decode_fit", "prefill_in_step_fit"):
        f = record.get(key)
        if f:
            m.update({f"profile_{key.removesuffix('fit')}{k}": v for k, v in f["coefficients"].items()})
            m[f"profile_{key}_rms_ms"] = f["rms_ms"]
            m[f"profile_{key}_max_abs_rel"] = f["max_abs_rel"]
    return m
