"""Runs in aiconfigurator's own interpreter (``.ci/aiconfigurator_venv.sh``), never imported by
the harness: ``python aiconfigurator_points.py REQUEST.json OUT.json``.

REQUEST is what ``protocols.plan.estimates`` asks (model, system, backend and version, isl/osl,
parallelism, aggregated or prefill/decode, the concurrencies); OUT gets, for each concurrency,
aiconfigurator's own result row (``cli_estimate(...).get()``: ``ttft`` and ``tpot`` in ms,
``concurrency``, ``seq/s``, ``tokens/s``, ``num_total_gpus``, quantisation modes, ...), the
Hugging Face config it modelled (for the roofline beside it) and the versions it resolved.  A
bad input writes ``{"error": {"field", "message"}}`` and exits 2.  The output goes to a file,
not stdout, because aiconfigurator prints its own log lines there.

Only standard-library imports besides aiconfigurator: this file runs without tokenfactory.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib.util
import json
import math
import os
import sys
from importlib import metadata

TOOL = "aiconfigurator"


class BadInput(Exception):
    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


def _known_models() -> set[str]:
    from aiconfigurator.sdk import common
    return set(common.DefaultHFModels)


def _check_model(model: str) -> None:
    """A model aiconfigurator ships a config for, or a local folder with config.json; nothing
    is fetched (an unknown name would otherwise send aiconfigurator to the Hugging Face hub)."""
    if os.path.isdir(model):
        if not os.path.isfile(os.path.join(model, "config.json")):
            raise BadInput("model", f"{model}: a folder without config.json")
        return
    known = _known_models()
    if model not in known:
        near = difflib.get_close_matches(model, sorted(known), n=5, cutoff=0.4)
        hint = f"; closest: {', '.join(near)}" if near else ""
        raise BadInput("model", f"{model!r} is not a model aiconfigurator {metadata.version(TOOL)} ships a config "
                                f"for ({len(known)} known{hint}), nor a local folder with config.json")


def _check_system(system: str, backend: str, version: str | None) -> str:
    """The backend version to query (``version``, else aiconfigurator's current one)."""
    from aiconfigurator.sdk.perf_database import get_latest_database_version, get_supported_databases

    dbs = get_supported_databases()
    if system not in dbs:
        raise BadInput("system", f"{system!r}: no aiconfigurator performance data for it "
                                 f"(known: {', '.join(sorted(dbs))})")
    versions = list(dbs[system].get(backend) or [])
    if not versions:
        raise BadInput("backend", f"{backend!r}: no data for system {system} "
                                  f"(has: {', '.join(sorted(dbs[system]))})")
    if version is None:
        resolved = get_latest_database_version(system=system, backend=backend)
        if resolved is None:
            raise BadInput("version", f"no current {backend} version for {system} (has: {', '.join(versions)})")
        return str(resolved)
    if version not in versions and version not in ("current", "previous", "next"):
        raise BadInput("version", f"{backend} {version!r} on {system}: not in aiconfigurator's data "
                                  f"(has: {', '.join(versions)})")
    return version


def _estimate(req: dict, version: str, concurrency: int):
    from aiconfigurator.cli.api import cli_estimate

    common = dict(backend_name=req["backend"], backend_version=version, isl=req["isl"], osl=req["osl"],
                  tp_size=req["tp"], pp_size=req["pp"])
    if not req["disaggregated"]:
        return cli_estimate(req["model"], req["system"], mode="agg", batch_size=concurrency, **common)
    workers = req["decode_workers"]
    return cli_estimate(req["model"], req["system"], mode="disagg",
                        prefill_tp_size=req["prefill_tp"], prefill_pp_size=req["prefill_pp"],
                        prefill_batch_size=req["prefill_batch_size"], prefill_num_workers=req["prefill_workers"],
                        decode_tp_size=req["decode_tp"], decode_pp_size=req["decode_pp"],
                        decode_batch_size=concurrency // workers, decode_num_workers=workers, **common)


def _finite(row: dict) -> dict:
    """JSON has no NaN/inf: such values become null."""
    out = {}
    for k, v in row.items():
        if isinstance(v, float) and not math.isfinite(v):
            v = None
        elif not isinstance(v, (str, int, float, bool, type(None), list, dict)):
            v = str(v)
        out[str(k)] = v
    return out


def run(req: dict) -> dict:
    from aiconfigurator.sdk.utils import get_model_config_from_model_path

    _check_model(req["model"])
    version = _check_system(req["system"], req["backend"], req.get("version"))
    rows, failures = [], []
    for c in req["concurrencies"]:
        try:
            result = _estimate(req, version, int(c))
        except (RuntimeError, ValueError) as e:  # OOM, a batch the KV cache cannot hold, no data for an op
            failures.append({"concurrency": c, "error": str(e)})
            continue
        row = _finite(result.get())
        row["kv_cache_warning"] = result.kv_cache_warning
        rows.append(row)
    cfg = get_model_config_from_model_path(req["model"])
    return {"tool": TOOL, "tool_version": metadata.version(TOOL), "backend_version": version,
            "request": req, "model_config": cfg["raw_config"], "architecture": cfg.get("architecture"),
            "rows": rows, "failures": failures}


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(f"usage: {argv[0]} REQUEST.json OUT.json", file=sys.stderr)
        return 2
    with open(argv[1]) as f:
        req = json.load(f)
    code = 0
    # aiconfigurator logs to stdout; the harness reads only OUT, and shows stderr on failure
    with contextlib.redirect_stdout(sys.stderr):
        try:
            if importlib.util.find_spec(TOOL) is None:
                raise BadInput("estimator_python", f"{sys.executable} has no {TOOL} to import")
            out = run(req)
        except BadInput as e:
            out, code = {"error": {"field": e.field, "message": str(e)}}, 2
    tmp = argv[2] + ".tmp"
    with open(tmp, "w") as f:
        json.dump(out, f)
    os.replace(tmp, argv[2])
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
