"""Dynamo mocker timing for a Llama-3.1-8B on one H200, from aiconfigurator's estimates.

The mocker's own ``--aic-perf-model`` needs aiconfigurator importable inside Dynamo's venv; the
pinned ai-dynamo 1.4.2 venv (.ci/dynamo_venv.sh) has no aiconfigurator, so the worker cannot
start with those flags.  Instead this writes a ``perf_data.npz`` (``--planner-profile-data``)
from aiconfigurator 0.12.0's H200 estimates for vLLM 0.24.0
(tests/fixtures/aiconfigurator_llama31_8b_h200_vllm.json: ISL 1024, OSL 256, batch 1/8/32),
through the profile protocol's own fits and writer:

- prefill: one prompt length in the estimates, so ``prefill_ms(L) = b*L`` with ``b`` =
  TTFT(batch 1) / 1024 (compute-bound prefill scales with the prompt's tokens);
- decode: ``step_ms(B) = alpha + beta*B`` fitted to TPOT at batch 1, 8, 32 (one context
  length: the per-KV-token term is not identifiable and is 0, ``metrics.profile.fit_decode``).

``python -m tests.engines.h200_timing DIR`` writes ``DIR/aic_h200_llama31_8b_perf_data.npz``
and prints its path (for a command-line run: ``engine.mocker.planner_profile_data=PATH``).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from metrics import profile as fit
from protocols.profile.record import write_mocker_npz

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "aiconfigurator_llama31_8b_h200_vllm.json"
NAME = "aic_h200_llama31_8b_perf_data.npz"


def estimates() -> dict:
    """The prefill and decode coefficients from the fixture (module doc)."""
    est = json.loads(FIXTURE.read_text())
    rows = sorted(est["rows"], key=lambda r: r["bs"])
    isl, osl = est["request"]["isl"], est["request"]["osl"]
    one = rows[0]
    prefill = {"a_ms": 0.0, "b_ms_per_token": float(one["ttft"]) / isl, "c_ms_per_token2": 0.0}
    ctx = isl + osl / 2  # mean tokens in a sequence's cache over its decode
    decode = fit.fit_decode([r["bs"] for r in rows], [r["bs"] * ctx for r in rows], [r["tpot"] for r in rows])
    return {"prefill": prefill, "decode": decode["coefficients"], "context": ctx,
            "batch_max": max(r["bs"] for r in rows)}


def write(out_dir: Path, *, max_len: int = 4096, max_batch: int = 1024) -> Path:
    """The NPZ in ``out_dir``, covering prompts up to ``max_len`` and ``max_batch`` sequences
    of up to ``max_len`` tokens (the mocker extrapolates linearly beyond its grid)."""
    e = estimates()
    tables = fit.mocker_tables(e["prefill"], e["decode"], isl_range=(1.0, float(max_len)),
                               kv_max=float(max_batch * max_len), ctx_max=float(max_len),
                               batch_max=float(max_batch), resolution=50)
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / NAME
    write_mocker_npz(path, tables)
    return path


if __name__ == "__main__":
    print(write(Path(sys.argv[1])))
