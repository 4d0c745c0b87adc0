"""Measured or emulated: an emulated engine's numbers (Dynamo's mocker workers, timed by a model)
are never set beside a measured engine's as if they were the same kind of number.

A run's kind comes from its ``summary.json`` (``emulated``, ``timing_source``; a run written
before those keys existed is measured); a group of runs (a config, an experiment) is emulated
when any of its runs is.  A comparison whose groups are of both kinds is refused unless the
caller names the flag that allows it (``refusal``).
"""

from __future__ import annotations

import pyarrow as pa

MEASURED = "measured"


def kind_of(emulated, timing_source) -> str:
    """``measured``, or ``emulated (TIMING_SOURCE)``."""
    if not emulated:
        return MEASURED
    return f"emulated ({timing_source or 'unknown timing'})"


def kind_of_runs(table: pa.Table) -> str:
    """The kind of a group of runs (rows of ``runs.parquet``): emulated if any run is."""
    if "emulated" not in table.column_names:
        return MEASURED
    flags = table.column("emulated").to_pylist()
    has = "timing_source" in table.column_names
    sources = table.column("timing_source").to_pylist() if has else [None] * len(flags)
    emulated = sorted({str(src) for flag, src in zip(flags, sources) if flag})
    return kind_of(bool(emulated), ", ".join(emulated))


def refusal(kinds: dict[str, str], flag: str) -> str | None:
    """The error for groups (name -> kind) that set emulated numbers beside measured ones, naming
    ``flag`` (what allows it); None when they are all of one kind."""
    emulated = {n: k for n, k in kinds.items() if k != MEASURED}
    if not emulated or len(emulated) == len(kinds):
        return None
    lines = [f"  {n}: {k}" for n, k in kinds.items()]
    return ("these configs set emulated numbers beside measured ones:\n" + "\n".join(lines) +
            "\nan emulated engine's timings come from a model, not from a measurement; to compare them anyway, "
            f"say so: {flag}")
