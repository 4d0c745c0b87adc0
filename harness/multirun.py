"""Hydra multirun (``-m``): which overrides a command line sweeps, and each job's folder."""

from __future__ import annotations


def swept_keys(argv: list[str]) -> frozenset[str]:
    """Override keys that a multirun sweeps: a top-level comma in the value, or a sweep function."""
    keys = set()
    for a in argv:
        if "=" not in a or a.startswith("-"):
            continue
        key, val = a.split("=", 1)
        depth = 0
        for ch in val:
            depth += ch in "[{(" and 1 or (-1 if ch in "]})" else 0)
            if ch == "," and depth == 0:
                keys.add(key.lstrip("+~"))
                break
        if val.startswith(("range(", "choice(", "glob(", "interval(")):
            keys.add(key.lstrip("+~"))
    return frozenset(keys)


def job_subdir(swept: frozenset[str]) -> str:
    """Under ``-m``, each job writes its own folder below output_dir, named after its swept values."""
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        hc = HydraConfig.get()
    except (ImportError, ValueError):
        return ""
    if hc.mode != RunMode.MULTIRUN:
        return ""
    parts = [o for o in hc.overrides.task if o.split("=", 1)[0].lstrip("+~") in swept]
    name = ",".join(parts) or "default"
    return f"job{hc.job.num}-" + "".join(c if c.isalnum() or c in "._=,-" else "_" for c in name)[:120]
