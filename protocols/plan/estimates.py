"""Estimated capacity for hardware not at hand: a config's operating points from NVIDIA's
aiconfigurator (a performance model built on kernels measured per GPU and engine), beside the
roofline bound of ``metrics.roofline``, and the estimate's error where measured runs exist.

aiconfigurator runs in its own interpreter (``.ci/aiconfigurator_venv.sh``, found through
``protocol.estimator_python``) as a subprocess: ``aiconfigurator_points.py`` beside this module
is run there and writes aiconfigurator's result row for each concurrency as JSON.  Nothing of
aiconfigurator is imported here.

A replica is one aiconfigurator deployment unit: one worker of ``tp x pp`` GPUs (aggregated),
or one prefill/decode set of ``prefill_workers`` + ``decode_workers`` workers (disaggregated).
Each evaluated concurrency ``c`` (requests in flight per replica) gives one ``OperatingPoint``
with ``estimated=True``:

- ``in_flight = c``;
- ``rate_rps = c / (TTFT + TPOT x (osl - 1))``: Little's law, L = lambda W, with W a request's
  time in the replica (its end-to-end latency at fixed isl/osl);
- ``requests`` alike requests, each with the model's TTFT and TPOT at ``c``, ``isl`` prompt and
  ``osl`` output tokens.  A model gives means, so a point has no spread: its percentiles are
  the model's means (said in the capacity's ``notes``).

Each point records its roofline bound (``roofline_beside``) and ``faster_than_roofline`` when
the estimate beats it, which no hardware can.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from conf.schema import PlanEstimate
from harness.errors import UserError
from metrics import roofline as rl
from protocols.plan.capacity import ConfigCapacity, OperatingPoint

ESTIMATOR = "aiconfigurator"
SCRIPT = Path(__file__).with_name("aiconfigurator_points.py")
BUILD = "bash .ci/aiconfigurator_venv.sh"
TIMEOUT_S = 600.0
# aiconfigurator's systems -> conf/hardware profiles with the same GPU's datasheet peaks
SYSTEM_HARDWARE = {"h100_sxm": "h100", "h200_sxm": "h200", "b200_sxm": "b200"}
# aiconfigurator's quantisation modes -> (weights' precision, matmuls' precision)
QUANT_DTYPES = {"bfloat16": ("bf16", "bf16"), "float16": ("fp16", "fp16"), "half": ("fp16", "fp16"),
                "fp8": ("fp8", "fp8"), "fp8_block": ("fp8", "fp8"), "fp8_static": ("fp8", "fp8"),
                "fp8_ootb": ("fp8", "fp8"), "sq": ("int8", "int8"), "int8": ("int8", "int8"),
                "int8_wo": ("int8", "bf16"), "int4_wo": ("int4", "bf16"), "nvfp4": ("fp4", "fp4"),
                "nvfp4_wo": ("fp4", "bf16"), "w4a16_nvfp4": ("fp4", "bf16")}
# a measured median this far from the estimate's isl/osl: the error compares different workloads
WORKLOAD_TOLERANCE = 0.10


# ------------------------------------------------------------------------------------ the estimator
def default_estimator_python() -> Path:
    """Where ``.ci/aiconfigurator_venv.sh`` builds the venv (``$TOKENFACTORY_CACHE`` or
    ``~/.cache/tokenfactory``, then ``aiconfigurator-venv/bin/python``)."""
    cache = os.environ.get("TOKENFACTORY_CACHE") or str(Path.home() / ".cache" / "tokenfactory")
    return Path(cache) / "aiconfigurator-venv" / "bin" / "python"


def estimator_python(setting: str | None) -> str:
    """The interpreter aiconfigurator runs in: ``protocol.estimator_python``, else the default
    venv; one message naming the key and how to build it when it is not there."""
    path = Path(setting) if setting else default_estimator_python()
    if not (path.is_file() and os.access(path, os.X_OK)):
        given = "protocol.estimator_python" if setting else "protocol.estimator_python=null (the default venv)"
        raise UserError(f"{given}: no Python at {path} to run aiconfigurator in: build its venv with "
                        f"`{BUILD}` (it prints the interpreter) or set protocol.estimator_python=PATH")
    return str(path)


def estimator_request(spec: PlanEstimate, key: str = "protocol.estimates[0]") -> dict:
    """What ``aiconfigurator_points.py`` is asked: the spec with the per-phase defaults filled."""
    if not spec.concurrencies:
        raise UserError(f"{key}.concurrencies: empty; give the requests in flight per replica to evaluate")
    if spec.disaggregated:
        bad = [c for c in spec.concurrencies if c % spec.decode_workers]
        if bad:
            raise UserError(f"{key}.concurrencies: {bad} not multiples of decode_workers={spec.decode_workers} "
                            "(a prefill/decode set's requests in flight are spread over its decode workers)")
    return {"model": spec.model, "system": spec.system, "backend": spec.backend, "version": spec.version,
            "isl": spec.isl, "osl": spec.osl, "tp": spec.tp, "pp": spec.pp, "disaggregated": spec.disaggregated,
            "prefill_tp": spec.prefill_tp or spec.tp, "prefill_pp": spec.pp, "prefill_workers": spec.prefill_workers,
            "prefill_batch_size": spec.prefill_batch_size, "decode_tp": spec.decode_tp or spec.tp,
            "decode_pp": spec.pp, "decode_workers": spec.decode_workers,
            "concurrencies": sorted({int(c) for c in spec.concurrencies})}


def run_estimator(spec: PlanEstimate, python: str, key: str = "protocol.estimates[0]",
                  timeout_s: float = TIMEOUT_S) -> dict:
    """aiconfigurator's output for ``spec`` (``aiconfigurator_points.py`` run by ``python``)."""
    request = estimator_request(spec, key)
    with tempfile.TemporaryDirectory(prefix="tf-estimate-") as tmp:
        req_path, out_path = Path(tmp) / "request.json", Path(tmp) / "out.json"
        req_path.write_text(json.dumps(request))
        try:
            proc = subprocess.run([python, str(SCRIPT), str(req_path), str(out_path)], capture_output=True,
                                  text=True, timeout=timeout_s, check=False,
                                  env={**os.environ, "HF_HUB_OFFLINE": "1"})  # a plan fetches nothing
        except subprocess.TimeoutExpired:
            raise UserError(f"{key}: aiconfigurator ran past {timeout_s:.0f} s ({python})") from None
        out = None
        if out_path.is_file():
            try:
                out = json.loads(out_path.read_text())
            except ValueError:
                out = None
    if isinstance(out, dict) and "error" in out:
        err = out["error"]
        if err.get("field") == "estimator_python":
            raise UserError(f"protocol.estimator_python: {err.get('message')}: build aiconfigurator's venv with "
                            f"`{BUILD}` (it prints the interpreter) or set protocol.estimator_python=PATH")
        raise UserError(f"{key}.{err.get('field', 'model')}: {err.get('message')}")
    if proc.returncode != 0 or not isinstance(out, dict):
        tail = "\n".join((proc.stderr or "").strip().splitlines()[-15:])
        raise UserError(f"{key}: aiconfigurator failed (exit {proc.returncode}, {python}); "
                        f"is it the venv `{BUILD}` builds?\n{tail}")
    return out


# ------------------------------------------------------------------------------------ profiles
def estimate_profiles(spec: PlanEstimate, key: str = "protocol.estimates[0]") -> tuple[dict | None, dict | None]:
    """(the conf/hardware profile of the roofline beside the estimate, the conf/cost profile a
    replica is priced with), each composed with its schema's defaults; None where there is none
    (a system not in ``SYSTEM_HARDWARE`` and no ``hardware`` given; no ``cost``)."""
    hardware = spec.hardware or SYSTEM_HARDWARE.get(spec.system)
    return (_profile("hardware", hardware, key) if hardware else None,
            _profile("cost", spec.cost, key) if spec.cost else None)


def _profile(group: str, name: str, key: str) -> dict:
    from hydra.errors import HydraException
    from omegaconf import OmegaConf

    from conf.compose import compose_config

    try:
        cfg = compose_config([f"{group}={name}"])
    except HydraException as e:
        raise UserError(f"{key}.{group}={name}: {str(e).splitlines()[0]}") from None
    return OmegaConf.to_container(cfg[group], resolve=True)


# ------------------------------------------------------------------------------------ roofline
def _dtypes(mode: str | None) -> tuple[str, str]:
    if mode is None:
        return "bf16", "bf16"
    if mode not in QUANT_DTYPES:
        raise ValueError(f"aiconfigurator quantisation {mode!r} has no roofline precision")
    return QUANT_DTYPES[mode]


def roofline_beside(shape: rl.ModelShape, profile: Mapping, *, isl: int, osl: int, ttft_s: float, tpot_s: float,
                    prefill_devices: int, decode_devices: int, decode_batch: int, gemm: str | None = None,
                    kvcache: str | None = None) -> dict:
    """The roofline lower bounds an estimated point must respect, and whether it does:

    - prefill: ``prefill_bound`` of one ``isl``-token prompt on the prefill worker's
      ``prefill_devices`` GPUs: no request's TTFT can be shorter;
    - decode: ``decode_bound`` of one step of ``decode_batch`` sequences at a context of
      ``isl + osl / 2`` (the mean over a request's output) on ``decode_devices`` GPUs: the mean
      TPOT cannot be shorter (the step's bound grows with context and batch, and is convex in
      the context, so the bound at the mean context is at most the mean of the bounds).

    ``faster_than_roofline``: TTFT below the prefill bound or TPOT below the decode bound (an
    impossible estimate).  ``kv_fits``: the decode batch's KV at ``isl + osl`` fits beside the
    weights (``kv_capacity``; None without a memory size).  The bounds assume perfect tensor
    parallelism and no communication, which keeps them lower bounds."""
    weights, compute = _dtypes(gemm)
    kv = _dtypes(kvcache)[0] if kvcache else weights
    context = isl + osl // 2
    rp = rl.rates({**profile, "num_accelerators": prefill_devices}, compute)
    rd = rl.rates({**profile, "num_accelerators": decode_devices}, compute)
    pre = rl.prefill_bound(shape, 1, isl, rp, weights, kv)
    dec = rl.decode_bound(shape, decode_batch, context, rd, weights, kv)
    cap = rl.kv_capacity(shape, rd, weights, kv, decode_batch, isl + osl)
    return {"hardware": profile.get("name"), "dtype": weights, "compute_dtype": compute, "kv_dtype": kv,
            "prefill_devices": prefill_devices, "decode_devices": decode_devices,
            "prefill_s": pre.seconds, "prefill_limit": pre.limit, "decode_batch": decode_batch,
            "decode_context": context, "decode_step_s": dec.seconds, "decode_limit": dec.limit,
            "ttft_over_bound": ttft_s / pre.seconds, "tpot_over_bound": tpot_s / dec.seconds,
            "kv_fits": None if cap is None else cap.fits,
            "faster_than_roofline": bool(ttft_s < pre.seconds or tpot_s < dec.seconds)}


def _decode_batch(row: dict, disaggregated: bool, concurrency: int, ttft_s: float, tpot_s: float, osl: int) -> int:
    """Sequences in a decode step: a decode worker's batch (disaggregated), else the share of the
    ``c`` in-flight requests that are decoding, c x TPOT (osl - 1) / (TTFT + TPOT (osl - 1))
    (Little's law for the decode phase), rounded down so the bound stays a lower bound."""
    if disaggregated:
        return max(1, int(row.get("(d)bs") or concurrency))
    decode = tpot_s * (osl - 1)
    return max(1, math.floor(concurrency * decode / (ttft_s + decode)))


# ------------------------------------------------------------------------------------ capacity
def capacity_from_output(spec: PlanEstimate, out: Mapping, *, key: str = "protocol.estimates[0]",
                         hardware: Mapping | None = None, cost: Mapping | None = None) -> ConfigCapacity:
    """The ``ConfigCapacity`` of aiconfigurator's output ``out`` for ``spec`` (module doc), each
    point with its roofline bound where ``hardware`` (a conf/hardware profile) is given."""
    tool = f"{out.get('tool', ESTIMATOR)} {out.get('tool_version', '?')}"
    version = out.get("backend_version") or spec.version or "?"
    if spec.disaggregated:
        ptp, dtp = spec.prefill_tp or spec.tp, spec.decode_tp or spec.tp
        unit = (f"one prefill/decode set: {spec.prefill_workers} prefill worker(s) of tp{ptp} pp{spec.pp} + "
                f"{spec.decode_workers} decode worker(s) of tp{dtp} pp{spec.pp}")
        gpus = (spec.prefill_workers * ptp + spec.decode_workers * dtp) * spec.pp
        pdev, ddev = ptp * spec.pp, dtp * spec.pp
    else:
        unit = f"one aggregated worker of tp{spec.tp} pp{spec.pp}"
        gpus = pdev = ddev = spec.tp * spec.pp
    origin = (f"estimated by {tool}: {spec.model} on {spec.system}, {spec.backend} {version}, "
              f"{'disaggregated' if spec.disaggregated else 'aggregated'} tp{spec.tp} pp{spec.pp}, "
              f"isl {spec.isl}, osl {spec.osl}, concurrencies {','.join(map(str, sorted(set(spec.concurrencies))))}")
    notes = [f"estimated, not measured ({tool}): every request of a point has the model's mean TTFT and TPOT at "
             "that concurrency, so a point has no spread and its percentiles are the model's means",
             f"a replica is {unit} ({gpus} GPU(s) of {spec.system})",
             "rate_rps = concurrency / (TTFT + TPOT x (osl - 1)): Little's law over a request's time in the replica",
             f"cold start {spec.cold_start_s:g} s is an assumption ({key}.cold_start_s), not a measurement"]
    if cost and cost.get("num_gpus") is not None and int(cost["num_gpus"]) != gpus:
        notes.append(f"cost profile {spec.cost} prices {cost['num_gpus']} GPU(s); a replica here holds {gpus}")
    shape = None
    if hardware is None:
        notes.append(f"no roofline beside the estimate: no conf/hardware profile for system {spec.system} "
                     f"(set {key}.hardware=NAME)")
    elif out.get("model_config"):
        try:
            shape = rl.shape_from_config(out["model_config"], f"aiconfigurator's config of {spec.model}")
        except ValueError as e:
            notes.append(f"no roofline beside the estimate: {e}")
    else:
        notes.append("no roofline beside the estimate: the estimator gave no model config")
    for f in out.get("failures") or []:
        notes.append(f"concurrency {f.get('concurrency')}: no estimate ({f.get('error')}): left out")
    n = spec.requests
    points = []
    for row in out.get("rows") or []:
        c = float(row.get("concurrency") or 0)
        ttft_ms, tpot_ms = row.get("ttft"), row.get("tpot")   # aiconfigurator's unit
        if not c > 0 or ttft_ms is None or tpot_ms is None or not ttft_ms > 0 or not tpot_ms > 0:
            notes.append(f"concurrency {row.get('concurrency')}: aiconfigurator gave no positive TTFT/TPOT: left out")
            continue
        ttft_s, tpot_s = ttft_ms / 1e3, tpot_ms / 1e3
        latency = ttft_s + tpot_s * (spec.osl - 1)
        bound = None
        if shape is not None:
            batch = _decode_batch(row, spec.disaggregated, int(c), ttft_s, tpot_s, spec.osl)
            prefix = "(p)" if spec.disaggregated else ""
            dprefix = "(d)" if spec.disaggregated else ""
            try:
                bound = roofline_beside(shape, hardware, isl=spec.isl, osl=spec.osl, ttft_s=ttft_s, tpot_s=tpot_s,
                                        prefill_devices=pdev, decode_devices=ddev, decode_batch=batch,
                                        gemm=row.get(f"{prefix}gemm"), kvcache=row.get(f"{dprefix}kvcache"))
            except ValueError as e:
                notes.append(f"concurrency {int(c)}: no roofline bound ({e})")
            if bound and bound["faster_than_roofline"]:
                notes.append(f"concurrency {int(c)}: the estimate is faster than the roofline bound "
                             f"(TTFT {ttft_s * 1e3:.3g} ms vs >= {bound['prefill_s'] * 1e3:.3g} ms, "
                             f"TPOT {tpot_s * 1e3:.3g} ms vs >= {bound['decode_step_s'] * 1e3:.3g} ms on "
                             f"{bound['hardware']}): impossible; kept, flagged faster_than_roofline")
        if row.get("kv_cache_warning"):
            notes.append(f"concurrency {int(c)}: {row['kv_cache_warning']}")
        points.append(OperatingPoint(
            rate_rps=c / latency, in_flight=c,
            prompt_tokens=np.full(n, spec.isl, dtype=np.int64), ttft_s=np.full(n, ttft_s),
            tpot_s=np.full(n, tpot_s), output_tokens=np.full(n, spec.osl, dtype=np.int64),
            block=0, run_dir=f"{ESTIMATOR}:concurrency={int(c)}", estimated=True, roofline=bound))
    if not points:
        raise UserError(f"{key}: aiconfigurator gave no usable point for concurrencies "
                        f"{sorted(set(spec.concurrencies))}" + (f" ({notes[-1]})" if out.get("failures") else ""))
    points.sort(key=lambda p: p.in_flight)
    return ConfigCapacity(name=spec.name, source="estimated", origin=origin, points={1: points},
                          cold_start_s=[float(spec.cold_start_s)], cost=dict(cost) if cost else None, slo=None,
                          workload={"name": "synthetic", "input_tokens": spec.isl, "output_tokens": spec.osl},
                          notes=notes)


def estimated_capacity(spec: PlanEstimate, *, python: str | None = None, key: str = "protocol.estimates[0]",
                       timeout_s: float = TIMEOUT_S) -> ConfigCapacity:
    """A config's capacity estimated by aiconfigurator (module doc): ``spec`` one entry of
    ``protocol.estimates`` (``key`` names it in messages), ``python`` the
    ``protocol.estimator_python`` setting (None: the default venv)."""
    interpreter = estimator_python(python)
    hardware, cost = estimate_profiles(spec, key)
    out = run_estimator(spec, interpreter, key, timeout_s)
    return capacity_from_output(spec, out, key=key, hardware=hardware, cost=cost)


# ------------------------------------------------------------------------------------ error
def measured_counterparts(spec: PlanEstimate, measured: list[ConfigCapacity]) -> list[ConfigCapacity]:
    """The measured configs an estimate is checked against: named ``spec.compare_with``, else
    ``spec.name`` (also as the ``NAME`` of ``EXPERIMENT:NAME``)."""
    target = spec.compare_with or spec.name
    return [m for m in measured if m.source != "estimated" and (m.name == target or m.name.endswith(f":{target}"))]


def _curve(points: list[OperatingPoint], by: str) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """The estimated curve against its load, in order of requests in flight; by rate, only up to
    the first point whose rate does not rise (past saturation a rate matches two loads)."""
    pts = sorted(points, key=lambda p: p.in_flight)
    if by == "rate":
        keep = [pts[0]]
        for p in pts[1:]:
            if p.rate_rps <= keep[-1].rate_rps:
                break
            keep.append(p)
        pts = keep
    xs = np.array([p.rate_rps if by == "rate" else p.in_flight for p in pts])
    ys = {"ttft_s": np.array([float(np.mean(p.ttft_s)) for p in pts]),
          "tpot_s": np.array([float(np.mean(p.tpot_s)) for p in pts]),
          "throughput_rps": np.array([p.rate_rps for p in pts]),
          "in_flight": np.array([p.in_flight for p in pts])}
    return xs, ys


def _rel(est: float, meas: float) -> float | None:
    return (est - meas) / meas if meas and math.isfinite(meas) and math.isfinite(est) else None


def estimate_error(estimated: ConfigCapacity, measured: ConfigCapacity, by: str = "in_flight") -> list[dict]:
    """The estimate's relative error against measured runs of the same config, one row per
    measured run (every deployment size and block; loads are per replica on both sides).

    The estimated curve (its points at deployment size 1) is interpolated linearly at the run's
    load, ``by`` its mean requests in flight (``in_flight``) or its offered rate (``rate``: up to
    the estimated rate's peak); a
    load outside the estimated range gets ``within_estimates: false`` and no errors (nothing is
    extrapolated).  Measured: TTFT and TPOT medians over the run's completed requests, and its
    throughput, offered rate x completed / (completed + failed) requests/s per replica.
    ``*_rel_error`` = (estimated - measured) / measured.  ``workload_differs``: the run's median
    prompt or output tokens is more than 10 % from the estimate's isl / osl (then the two
    describe different requests)."""
    if by not in ("in_flight", "rate"):
        raise ValueError(f"by={by!r}: expected in_flight or rate")
    est_points = estimated.points.get(1) or estimated.points[estimated.sizes[0]]
    xs, ys = _curve(est_points, by)
    isl = (estimated.workload or {}).get("input_tokens")
    osl = (estimated.workload or {}).get("output_tokens")
    rows = []
    for size in measured.sizes:
        for p in measured.points[size]:
            done = int(p.ttft_s.size)
            x = p.rate_rps if by == "rate" else p.in_flight
            meas = {"ttft_s": float(np.median(p.ttft_s)) if done else math.nan,
                    "tpot_s": float(np.nanmedian(p.tpot_s)) if done and np.isfinite(p.tpot_s).any() else math.nan,
                    "throughput_rps": p.rate_rps * done / (done + p.failed) if done + p.failed else math.nan,
                    "in_flight": p.in_flight}
            prompt = float(np.median(p.prompt_tokens)) if done else math.nan
            output = float(np.median(p.output_tokens)) if done else math.nan
            differs = bool((isl and abs(prompt / isl - 1) > WORKLOAD_TOLERANCE)
                           or (osl and abs(output / osl - 1) > WORKLOAD_TOLERANCE))
            inside = bool(xs.size and xs[0] <= x <= xs[-1])
            row = {"config": measured.name, "estimated_config": estimated.name, "replicas": size,
                   "block": p.block, "run_dir": p.run_dir, "by": by, "load": x, "within_estimates": inside,
                   "completed": done, "failed": p.failed, "measured_prompt_tokens": prompt,
                   "measured_output_tokens": output, "workload_differs": differs}
            for name, m in meas.items():
                e = float(np.interp(x, xs, ys[name])) if inside else None
                row[f"{name}_measured"] = m
                row[f"{name}_estimated"] = e
                row[f"{name}_rel_error"] = _rel(e, m) if e is not None else None
            rows.append(row)
    rows.sort(key=lambda r: (r["replicas"], r["load"], r["block"]))
    return rows
