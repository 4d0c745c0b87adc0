"""Configs never run: a measured config with other engine knobs, served by the engine's
scheduler model (Dynamo's replay, ``protocols.plan.scheduler``) with the knobs changed.  Its
figures are modelled, and marked so wherever they appear (plan.json, the console, the pages),
with the model's validated error beside them (``metrics.model_error``) or "not validated".

The knobs (``model_knobs``) are the mocker's engine args (``max_num_seqs``,
``max_num_batched_tokens``, ``enable_chunked_prefill``, ``enable_prefix_caching``,
``block_size``, ``num_gpu_blocks``) or the config keys that set them (``CONFIG_KNOBS``:
``engine.features.max_num_seqs`` ...); on top of those the base's runs recorded
(``protocols.plan.scheduler.engine_knobs``).

A modelled config's operating points (``modelled_capacity``): each of its base's runs, its own
offered requests (arrival times, prompt and output tokens: ``capacity.run_requests``) replayed
by the scheduler with the modelled knobs, spread round-robin over the run's replicas.  Per point:
the base run's offered load per replica; per request the replay's TTFT and TPOT; failed = the
requests the replay did not complete; in flight per replica by Little's law,
sum(E2EL) / (last completion - first arrival) / replicas.  So its capacity under an SLO
(``ConfigCapacity.max_load``) and its fleet simulation come from the model alone, on the same
loads and blocks the base was measured at.

The knobs the base's runs recorded: ``recorded_knobs``; the validated error beside a modelled
figure: ``residuals_error`` (the scheduler's cases of ``protocol.residuals``).

The tune's screen (``ladder_capacity``): a request mix (the base's completed requests) replayed
at a ladder of rates, each rate one point of ``requests`` requests (arrivals evenly spaced for
``load=constant``, else Poisson, seeded).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np

from harness import results_io
from metrics.model_error import validated_error
from protocols.plan.capacity import ConfigCapacity, OperatingPoint, run_requests
from protocols.plan.scheduler import KNOBS, SchedulerModel, engine_knobs, replica_layout

# config keys -> the mocker's knob they set (vLLM/SGLang features, transformers' names, the mocker's own)
CONFIG_KNOBS = {
    "engine.features.max_num_seqs": "max_num_seqs",
    "engine.features.max_num_batched_tokens": "max_num_batched_tokens",
    "engine.features.max_batch_tokens": "max_num_batched_tokens",
    "engine.features.chunked_prefill": "enable_chunked_prefill",
    "engine.features.prefix_caching": "enable_prefix_caching",
    "engine.features.kv_cache_blocks": "num_gpu_blocks",
    "engine.mocker.block_size": "block_size",
    "engine.mocker.num_gpu_blocks": "num_gpu_blocks",
}


def model_knobs(given: dict, where: str) -> dict:
    """``given`` (mocker knob names or ``CONFIG_KNOBS`` keys -> values) as the mocker's engine
    args, checked: integers >= 1, booleans for ``enable_*``.  ValueError naming ``where``.KEY."""
    out = {}
    for key, value in (given or {}).items():
        knob = CONFIG_KNOBS.get(str(key), str(key))
        if knob not in KNOBS:
            raise ValueError(f"{where}.{key}: not a knob the scheduler model knows (the mocker's "
                             f"{', '.join(KNOBS)}, or {', '.join(CONFIG_KNOBS)})")
        if knob.startswith("enable_"):
            if not isinstance(value, bool):
                raise ValueError(f"{where}.{key}={value!r}: expected true or false")
        elif isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{where}.{key}={value!r}: expected an integer >= 1")
        if knob in out and out[knob] != value:
            raise ValueError(f"{where}.{key}: sets {knob} again, to another value ({out[knob]!r} and {value!r})")
        out[knob] = value
    return out


def _provenance(c: ConfigCapacity) -> dict:
    """The first of the candidate's runs' ``provenance.json`` that reads ({} where none does)."""
    for pts in c.points.values():
        for pt in pts:
            f = Path(pt.run_dir) / results_io.PROVENANCE if pt.run_dir else None
            if f is not None and f.is_file():
                try:
                    return results_io.read_json(f)
                except (OSError, ValueError):  # ResultsFileError is a ValueError: try the next run
                    continue
    return {}


def recorded_knobs(c: ConfigCapacity) -> dict:
    """The engine's knobs from the first of the candidate's runs with a ``provenance.json``."""
    return engine_knobs(_provenance(c))


def recorded_layout(c: ConfigCapacity) -> tuple[int, str]:
    """(workers in one replica, their router mode) as the candidate's runs deployed it
    (``protocols.plan.scheduler.replica_layout``)."""
    return replica_layout(_provenance(c))


def residuals_error(residuals) -> dict | None:
    """The scheduler model's validated error (``metrics.model_error.validated_error``) from a
    residuals file's scheduler cases (``protocols.plan.residuals``: per case and metric, error =
    predicted / measured - 1); None where it has none.  Its source says whether the file calls
    its cases held out."""
    if residuals is None:
        return None
    rows = [{"metric": metric, "error": p / y - 1}
            for (model, _case), metrics in residuals.cases.items() if model == "scheduler"
            for metric, (p, y) in metrics.items() if y]
    held = {True: "held out", False: "not held out"}.get(residuals.held_out, "held out or not: unsaid")
    cases = sorted({case for model, case in residuals.cases if model == "scheduler"})
    return validated_error(rows, f"{residuals.path}: {len(cases)} scheduler case(s), {held}")


def describe_knobs(knobs: dict) -> str:
    return ", ".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in knobs.items())


def _point(got: list, streams: list, rate_rps: float, size: int, block: int, run_dir: str,
           offered_failed: int = 0) -> OperatingPoint:
    """One point from its streams' replays (module doc)."""
    arr = np.concatenate([s[0] for s in streams])
    pr = np.concatenate([s[1] for s in streams]).astype(np.int64)
    ou = np.concatenate([s[2] for s in streams]).astype(np.int64)
    ttft = np.concatenate([g[0] for g in got])
    tpot = np.concatenate([g[1] for g in got])
    done = np.isfinite(ttft)
    e2el = ttft + np.nan_to_num(tpot) * np.maximum(ou - 1, 0)
    window = float(np.max((arr + e2el)[done]) - arr.min()) if done.any() else 0.0
    in_flight = float(e2el[done].sum() / window / size) if window > 0 else 0.0
    tpot_done = np.where(ou[done] > 1, tpot[done], np.nan)
    return OperatingPoint(rate_rps=rate_rps, in_flight=in_flight, prompt_tokens=pr[done], ttft_s=ttft[done],
                          tpot_s=tpot_done, output_tokens=ou[done], failed=int((~done).sum()),
                          block=block, run_dir=run_dir)


def _split(arrival, prompt, output, size: int) -> list[tuple]:
    """A run's requests over its replicas, round-robin (the plan's default router)."""
    return [(arrival[k::size], prompt[k::size], output[k::size]) for k in range(size)]


def modelled_capacity(name: str, base: ConfigCapacity, model: SchedulerModel, knobs: dict) -> ConfigCapacity:
    """``base`` with ``knobs`` changed, its every run replayed by ``model`` (module doc): one
    call for all of them (``SchedulerModel.serve``: its workers replay the streams side by side)."""
    jobs = []   # (size, base point, its streams)
    for size, pts in base.points.items():
        for p in pts:
            if p.run_dir:
                arr, pr, ou, _ = run_requests(p.run_dir)
            else:   # a hand-built point: its completed requests, Poisson at its rate (seeded by its place)
                rng = np.random.default_rng(len(jobs))
                n = p.prompt_tokens.size
                arr = np.cumsum(rng.exponential(1.0 / (p.rate_rps * size), n)) if n else np.zeros(0)
                pr, ou = p.prompt_tokens, p.output_tokens
            if arr.size:
                jobs.append((size, p, _split(arr, pr, ou, size)))
    if not jobs:
        raise ValueError(f"{base.name}: no run with requests to replay")
    got = model.serve([s for _, _, streams in jobs for s in streams])
    points: dict[int, list[OperatingPoint]] = {}
    at = 0
    for size, p, streams in jobs:
        mine = got[at:at + len(streams)]
        at += len(streams)
        points.setdefault(size, []).append(_point(mine, streams, p.rate_rps, size, p.block, p.run_dir))
    notes = [f"modelled, never run: {base.name} ({base.source}, {base.origin}) with {describe_knobs(knobs)}; each of "
             f"its {len(jobs)} runs' requests replayed by the engine's scheduler model with those knobs"]
    return dataclasses.replace(base, name=name, source="modelled", points=points, notes=notes, corrections=None)


def ladder_capacity(name: str, base: ConfigCapacity, model: SchedulerModel, rates: list[float], requests: int,
                    constant: bool, seed: int = 0) -> ConfigCapacity:
    """The base's completed requests (its smallest size's runs, pooled) replayed at each rate
    of ``rates`` on one replica, ``requests`` a rate (module doc)."""
    pool = [p for p in base.points[base.sizes[0]] if p.prompt_tokens.size]
    prompt = np.concatenate([p.prompt_tokens for p in pool])
    output = np.concatenate([p.output_tokens for p in pool])
    rng = np.random.default_rng(seed)
    streams = []
    for r in rates:
        pick = rng.integers(0, prompt.size, requests)
        gaps = np.full(requests, 1.0 / r) if constant else rng.exponential(1.0 / r, requests)
        arr = np.cumsum(gaps) - gaps[0]
        streams.append((arr, prompt[pick], output[pick]))
    got = model.serve(streams)
    points = {1: [_point([g], [s], float(r), 1, 0, "") for g, s, r in zip(got, streams, rates)]}
    return dataclasses.replace(base, name=name, source="modelled", points=points, corrections=None,
                               notes=[f"modelled: {requests} requests of {base.name}'s mix at each of "
                                      f"{len(rates)} rates, replayed by the engine's scheduler model"])


def rate_ladder(low: float, high: float, tolerance: float) -> list[float]:
    """Rates from ``low`` to ``high`` (both in), each ``1 + tolerance`` times the one before:
    the model's max load is as fine as the measured search's bracket."""
    n = max(int(math.ceil(math.log(high / low) / math.log1p(tolerance))), 1)
    return [float(low * (high / low) ** (i / n)) for i in range(n + 1)]
