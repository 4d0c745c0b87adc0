"""The plan's scheduler model, gated on its held-out error (as aiconfigurator gates its own):
a real vLLM CPU run's requests (tests/fixtures/plan_heldout_vllm_cpu/case.json) replayed through
Dynamo's replay (``protocols.plan.scheduler``), timed by the ``tokenfactory profile`` of the same
engine (its perf_data.npz beside it, and the profile.json holding its mixed ladder's fit),
fitted on the profile's own runs only; the predicted
TTFT and TPOT p50/p90, attainment and goodput must stay within the bounds below of what the
engine measured.  Skips without TOKENFACTORY_DYNAMO_PYTHON (.ci/dynamo_venv.sh builds the venv).

The fixture was written by ``benchmarks/plan_heldout.py ... --fixture`` (docs/measured/plan.md,
"Held out"): the case, the bounds' source figures and the commands are there.  A bound is the
error measured when the fixture was taken plus a margin, so a change to the replay, the profile's
tables or the first-token correction that makes the prediction worse fails here.
"""

import json
import os
from pathlib import Path

import numpy as np
import pytest

from metrics.fleet import request_metrics
from metrics.prediction_error import error
from metrics.slo import SLO
from protocols.plan import scheduler as sched

pytestmark = pytest.mark.integration

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "plan_heldout_vllm_cpu"
SLO_USED = SLO(ttft_ms=500, tpot_ms=50)
# |error| allowed per metric: relative for latencies and goodput, points for attainment.  The
# case (docs/measured/plan.md, "Held out, on a quiet host"): the sweep's point near the knee,
# 11 req/s, against the profile taken right after the sweep's last points (mixed ladder
# included: a step carrying a prefill costs the measured increment), both with nothing else
# running; its error when it was taken: TTFT p50 -51.7 %, p90 -59.9 % (vLLM CPU held some
# streams back and sent them at once, which moves tokens into the TTFT), TPOT p50 +25.6 %,
# p90 +26.2 %, end to end p50 -2.0 %, p90 +13.1 %, attainment +1.7 points, goodput +1.7 %.
# The replay is deterministic (simulated time), so each bound is that error plus a margin for
# other Dynamo releases: the check catches the model getting worse, no more.
BOUNDS = {"p50_ttft_ms": 0.60, "p90_ttft_ms": 0.68, "p50_tpot_ms": 0.33, "p90_tpot_ms": 0.33,
          "p50_e2el_ms": 0.10, "p90_e2el_ms": 0.20, "slo_attainment": 8.0, "goodput_rps": 0.08}


def _stats(case, ttft, tpot, done):
    keep = ~np.asarray(case["warmup"], dtype=bool)
    arr = np.asarray(case["arrival_s"], dtype=np.float64)[keep]
    return request_metrics(SLO_USED, np.asarray(done, dtype=bool)[keep], np.asarray(ttft, dtype=np.float64)[keep],
                           np.asarray(tpot, dtype=np.float64)[keep],
                           np.asarray(case["output_tokens"])[keep], float(arr.max() - arr.min()))


def test_prediction_error_on_the_stored_case_stays_within_its_bounds(tmp_path):
    py = os.environ.get("TOKENFACTORY_DYNAMO_PYTHON")
    if not py:
        pytest.skip("TOKENFACTORY_DYNAMO_PYTHON not set (.ci/dynamo_venv.sh builds the venv)")
    case = json.loads((FIXTURE / "case.json").read_text())
    model = sched.SchedulerModel(sched.dynamo_python(py), FIXTURE / "perf_data.npz", case["knobs"],
                                 cache_dir=tmp_path)   # a fresh replay, never a cached one
    ttft, tpot = model.serve([(np.asarray(case["arrival_s"]), np.asarray(case["prompt_tokens"]),
                               np.asarray(case["output_tokens"]))])[0]
    none = lambda xs: np.array([np.nan if x is None else x for x in xs], dtype=np.float64)  # noqa: E731
    measured = _stats(case, none(case["ttft_s"]), none(case["tpot_s"]), case["completed"])
    predicted = _stats(case, ttft, tpot, ~np.isnan(ttft))
    assert predicted["completed"] == measured["requests"]       # the replay completes every request
    errors = {m: error(m, predicted[m], measured[m]) for m in BOUNDS}
    over = {m: round(e, 3) for m, e in errors.items() if e is None or abs(e) > BOUNDS[m]}
    assert not over, f"prediction error beyond its bound: {over} (bounds {BOUNDS})"
